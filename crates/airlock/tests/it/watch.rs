//! `airlock watch` attached to a real `airlock proxy`'s admin API (unix socket): `--json`
//! prints each audit line as it happens and ends with the proxy; the full-screen view,
//! driven in tmux at 80×24, shows allowed and refused requests with the reason, filters
//! with `/`, and quits with `q`; under `--mode ask` it pins held requests on top and its
//! keys answer them (`a` once, `r` for the run, `d` deny); usage errors are clear.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::tmux::Tmux;
use crate::support::{CurlRequest, Proxy, ProxyBuilder, TestPki, Upstream, curl, run_bounded};
use serde_json::Value;

/// A proxy allowing `localhost/ok/**` on the upstream's port, with its admin API on a
/// unix socket; returns the proxy and `unix:SOCKET`.
fn proxy(pki: &TestPki, upstream: &Upstream) -> (Proxy, String) {
    proxy_with(pki, upstream, &[])
}

/// [`proxy`] with more flags.
fn proxy_with(pki: &TestPki, upstream: &Upstream, flags: &[&str]) -> (Proxy, String) {
    let mut builder = ProxyBuilder::new(pki).resolve_loopback("localhost");
    for flag in flags {
        builder = builder.arg(flag);
    }
    let admin = format!("unix:{}", builder.dir().join("admin.sock").display());
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{}]\n      paths: [\"/ok/**\"]\n",
        upstream.port()
    );
    let proxy = builder.policy(&policy).arg("--admin").arg(&admin).start();
    (proxy, admin)
}

fn get(proxy: &Proxy, pki: &TestPki, upstream: &Upstream, path: &str) -> u16 {
    let url = format!("https://localhost:{}{path}", upstream.port());
    curl(proxy, pki, &CurlRequest::get(&url)).status
}

/// `airlock watch --json ARGS...` with `env` set; its stdout lines arrive on the receiver.
fn watch_json(args: &[&str], env: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut watch = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["watch", "--json"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start airlock watch");
    let (sender, lines) = mpsc::channel::<String>();
    let stdout = watch.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    (watch, lines)
}

/// Requests `/ok/a` until its line comes out of `lines` (the stream is subscribed some
/// time after watch starts); returns that line.
fn first_line(
    proxy: &Proxy,
    pki: &TestPki,
    upstream: &Upstream,
    lines: &mpsc::Receiver<String>,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "no event within 15 s");
        assert_eq!(get(proxy, pki, upstream, "/ok/a"), 200);
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
            return serde_json::from_str(&line).expect("a JSON line");
        }
    }
}

#[test]
fn json_mode_prints_each_decision_and_ends_with_the_proxy() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (mut proxy, admin) = proxy(&pki, &upstream);
    let (mut watch, lines) = watch_json(&["--admin", &admin], &[]);
    let first = first_line(&proxy, &pki, &upstream, &lines);
    assert_eq!(
        (first["decision"].as_str(), first["path"].as_str()),
        (Some("allow"), Some("/ok/a"))
    );
    assert_eq!(get(&proxy, &pki, &upstream, "/no"), 403);
    let refused = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the refusal's line");
        let line: Value = serde_json::from_str(&line).expect("a JSON line");
        if line["path"] == "/no" {
            break line;
        }
    };
    assert_eq!(refused["decision"], "deny");
    assert_eq!(refused["reason"], "path_not_allowed");

    proxy.terminate(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = watch.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "watch still running after the proxy stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

/// Without `--admin`, watch attaches to the newest run socket in this user's runtime
/// directory (`$XDG_RUNTIME_DIR/airlock/run-PID.sock`, where `airlock run` serves it).
#[test]
fn without_admin_watch_attaches_to_the_newest_run() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let xdg = tempfile::tempdir().expect("a runtime dir");
    let sockets = xdg.path().join("airlock");
    std::fs::create_dir(&sockets).expect("airlock dir");
    for dir in [xdg.path(), sockets.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let builder = ProxyBuilder::new(&pki).resolve_loopback("localhost");
    let admin = format!("unix:{}", sockets.join("run-4242.sock").display());
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{}]\n      paths: [\"/ok/**\"]\n",
        upstream.port()
    );
    let proxy = builder.policy(&policy).arg("--admin").arg(&admin).start();
    let xdg_text = xdg.path().display().to_string();
    let (mut watch, lines) = watch_json(&[], &[("XDG_RUNTIME_DIR", &xdg_text)]);
    let first = first_line(&proxy, &pki, &upstream, &lines);
    assert_eq!(first["path"], "/ok/a", "{first}");
    let _ = watch.kill();
    let _ = watch.wait();

    // With no run at all, watch says what to do.
    let empty = tempfile::tempdir().expect("an empty runtime dir");
    std::fs::set_permissions(empty.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let output = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["watch", "--json"])
            .env("XDG_RUNTIME_DIR", empty.path()),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(1));
    assert!(
        output.stderr.contains("no running `airlock run`"),
        "{}",
        output.stderr
    );
}

#[test]
fn the_terminal_view_shows_refusals_filters_and_quits() {
    support::need("tmux");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (proxy, admin) = proxy(&pki, &upstream);
    let line = format!("{} watch --admin {admin}", env!("CARGO_BIN_EXE_airlock"));
    let tmux = Tmux::start("watch", proxy.dir(), (80, 24), &line);
    tmux.expect("airlock watch");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !tmux.screen().contains("localhost/ok/a") {
        assert!(
            Instant::now() < deadline,
            "no decision shown:\n{}",
            tmux.screen()
        );
        assert_eq!(get(&proxy, &pki, &upstream, "/ok/a"), 200);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(get(&proxy, &pki, &upstream, "/no/x"), 403);
    tmux.expect("path_not_allowed");
    tmux.expect_that("DENY on the refused line", |screen| {
        screen
            .lines()
            .any(|l| l.contains("DENY") && l.contains("localhost/no/x"))
    });

    tmux.keys(&["/", "no/x", "Enter"]);
    tmux.expect("[no/x]");
    tmux.expect_that("only the refusal left", |screen| {
        screen.contains("localhost/no/x") && !screen.contains("localhost/ok/a")
    });
    tmux.keys(&["Escape"]);
    tmux.expect("localhost/ok/a");

    tmux.keys(&["q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux.running() {
        assert!(
            Instant::now() < deadline,
            "q did not quit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn held_requests_are_pinned_on_top_and_answered_with_keys() {
    support::need("tmux");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let flags = ["--mode", "ask", "--ask-timeout", "30s"];
    let (proxy, admin) = proxy_with(&pki, &upstream, &flags);
    let line = format!("{} watch --admin {admin}", env!("CARGO_BIN_EXE_airlock"));
    let tmux = Tmux::start("watch-ask", proxy.dir(), (80, 24), &line);
    tmux.expect("airlock watch");
    let held = |path: &'static str, key: &str| {
        std::thread::scope(|scope| {
            let request = scope.spawn(|| get(&proxy, &pki, &upstream, path));
            tmux.expect_that("the held request on top", |screen| {
                screen.contains("1 waiting") && screen.contains(path)
            });
            tmux.keys(&[key]);
            request.join().expect("the request thread")
        })
    };
    assert_eq!(held("/held/once", "a"), 200, "a: allowed once");
    tmux.expect("answered 1: allow once");
    assert_eq!(held("/held/run", "r"), 200, "r: allowed for the run");
    tmux.expect("allow run");
    // Allowed for the run: the same request now passes without being held.
    assert_eq!(get(&proxy, &pki, &upstream, "/held/run"), 200);
    assert_eq!(held("/held/denied", "d"), 403, "d: denied");
    tmux.expect_that("no ask left", |screen| {
        !screen.contains("waiting for an answer")
    });
    tmux.keys(&["q"]);
}

#[test]
fn without_an_api_or_a_terminal_watch_says_what_to_do() {
    let airlock = env!("CARGO_BIN_EXE_airlock");
    let output = run_bounded(
        Command::new(airlock).args([
            "watch",
            "--admin",
            "unix:/nonexistent/airlock.sock",
            "--json",
        ]),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(1));
    assert!(
        output
            .stderr
            .contains("cannot reach the admin API at unix:/nonexistent/airlock.sock"),
        "{}",
        output.stderr
    );

    let output = run_bounded(
        Command::new(airlock).args(["watch", "--admin", "unix:/nonexistent/airlock.sock"]),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(1));
    assert!(
        output.stderr.contains("not a terminal: use --json"),
        "{}",
        output.stderr
    );

    let output = run_bounded(
        Command::new(airlock).args(["watch", "--admin", "nowhere"]),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(2));
}
