//! Process life of `airlock proxy`: SIGTERM ends it promptly with status 0, idle or after
//! serving; `--threads` sets its worker threads, and a count out of range is a usage error.

use std::time::{Duration, Instant};

use crate::support::{CurlRequest, ProxyBuilder, TestPki, Upstream, curl};

const PROMPT: Duration = Duration::from_secs(5);

#[test]
fn sigterm_while_idle_exits_zero_promptly() {
    let pki = TestPki::new();
    let mut proxy = ProxyBuilder::new(&pki).allow("localhost:443").start();
    assert!(proxy.is_running());
    let started = Instant::now();
    let status = proxy
        .terminate(PROMPT)
        .unwrap_or_else(|| panic!("still running {PROMPT:?} after SIGTERM"));
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
    eprintln!("exited {:?} after SIGTERM", started.elapsed());
}

#[test]
fn sigterm_after_serving_exits_zero_promptly() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let mut proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{}/echo/x", upstream.port());
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert_eq!(response.status, 200, "{response:?}");
    proxy.audit(1);
    let status = proxy
        .terminate(PROMPT)
        .unwrap_or_else(|| panic!("still running {PROMPT:?} after SIGTERM"));
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}

#[test]
fn one_worker_thread_serves() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let mut proxy = ProxyBuilder::new(&pki)
        .arg("--threads")
        .arg("1")
        .allow(&format!("localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{}/echo/x", upstream.port());
    for _ in 0..3 {
        let response = curl(&proxy, &pki, &CurlRequest::get(&url));
        assert_eq!(response.status, 200, "{response:?}");
    }
    proxy.audit(3);
    let status = proxy.terminate(PROMPT);
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

/// `--threads N` is the runtime's worker count: eight workers show as at least eight tokio
/// threads, one worker as fewer (tokio's few blocking-pool threads share the name). Either
/// assertion fails if the flag is ignored, whatever the machine's default. A new thread
/// takes its name itself, once it runs, so the count is read until it reaches eight (at
/// most 10 s), and never before a 300 ms pause.
#[test]
fn threads_sets_the_runtime_workers() {
    let pki = TestPki::new();
    let count_with = |threads: &str, enough: usize| {
        let mut proxy = ProxyBuilder::new(&pki)
            .arg("--threads")
            .arg(threads)
            .allow("localhost:443")
            .start();
        // Settles for at least 300 ms; reads on while fewer than `enough` show.
        let settled = Instant::now() + Duration::from_millis(300);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut count = tokio_threads(proxy.pid());
        while (count < enough || Instant::now() < settled) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            count = tokio_threads(proxy.pid());
        }
        proxy.terminate(PROMPT);
        count
    };
    let eight = count_with("8", 8);
    assert!(eight >= 8, "--threads 8: {eight} tokio threads");
    let one = count_with("1", 0);
    assert!(one < 8, "--threads 1: {one} tokio threads");
}

/// The process's threads named as tokio names its runtime threads.
fn tokio_threads(pid: u32) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("read /proc/PID/task");
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.starts_with("tokio"))
        })
        .count()
}

#[test]
fn a_thread_count_out_of_range_is_a_usage_error() {
    let pki = TestPki::new();
    for count in ["0", "1025", "many"] {
        let (status, stderr) = ProxyBuilder::new(&pki)
            .arg("--threads")
            .arg(count)
            .allow("localhost:443")
            .start_expecting_exit(PROMPT);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "--threads {count}: {stderr}"
        );
        assert!(stderr.contains("--threads"), "--threads {count}: {stderr}");
    }
}
