//! The audit log's disk (docs/reliability.md, "The audit log's disk"): no answer reaches a
//! client whole without its line, an unavailable log refuses requests (503
//! `audit_log_unavailable`) and is tried again every second (and on SIGHUP), and the first
//! line written again is a `kind: audit` line counting the refusals; a log file removed
//! while open is reopened at its path.
//!
//! The full-disk and read-only cases put the log on a small tmpfs in a mount namespace of
//! the proxy's own (`unshare -rm`, which works for an ordinary user where the kernel allows
//! user namespaces, and as root); the test reaches the file system through
//! `/proc/PID/root` and remounts it with `nsenter`. A kernel that refuses the namespace
//! fails the test, naming what is missing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Proxy, ProxyBuilder, TestPki, Upstream, need, run_bounded, tool};

/// The size of the audit tmpfs.
const TMPFS_SIZE: &str = "128k";

/// Wraps the proxy: mounts a tmpfs at `$AUDITFS` in a new user and mount namespace, then
/// execs the proxy (same process id).
const IN_NAMESPACE: &str = r#"mount -t tmpfs -o size="$AUDITFS_SIZE",mode=0700 tmpfs "$AUDITFS" || exit 97; exec "$0" "$@""#;

/// A proxy whose audit log is on a tmpfs of its own.
struct DiskProxy {
    proxy: Proxy,
    /// The mount point, as the proxy sees it.
    mount: PathBuf,
    /// `unix:PATH` of the admin API.
    admin: PathBuf,
}

impl DiskProxy {
    /// Starts a proxy allowing `GET localhost:PORT/**` to `upstream`, logging to a tmpfs.
    fn start(pki: &TestPki, upstream: &Upstream) -> DiskProxy {
        need("unshare");
        need("nsenter");
        need("mount");
        let probe = run_bounded(
            Command::new("unshare").args(["-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"]),
            Duration::from_secs(10),
        );
        assert!(
            probe.status.is_some_and(|s| s.success()),
            "this test needs a user and mount namespace with a tmpfs (`unshare -rm` then \
             `mount -t tmpfs`), which this kernel or container refuses: allow unprivileged \
             user namespaces (sysctl kernel.unprivileged_userns_clone=1, or \
             user.max_user_namespaces > 0) or run as root; stderr: {}",
            probe.stderr
        );
        let builder = ProxyBuilder::new(pki)
            .resolve_loopback("localhost")
            .allow(&format!("GET localhost:{}/**", upstream.port()));
        let mount = builder.dir().join("auditfs");
        std::fs::create_dir(&mount).expect("mount point");
        let admin = builder.dir().join("admin.sock");
        let log = mount.join("audit.jsonl");
        let proxy = builder
            .log_target(log.to_str().expect("utf-8 path"))
            .arg("--admin")
            .arg(&format!("unix:{}", admin.display()))
            .env("AUDITFS", mount.to_str().expect("utf-8 path"))
            .env("AUDITFS_SIZE", TMPFS_SIZE)
            .wrapped(&["unshare", "-rm", "sh", "-c", IN_NAMESPACE])
            .start();
        DiskProxy {
            proxy,
            mount,
            admin,
        }
    }

    /// `name` in the tmpfs, as this process reaches it.
    fn file(&self, name: &str) -> PathBuf {
        let inside = self.mount.join(name);
        let relative = inside.strip_prefix("/").expect("absolute mount point");
        Path::new(&format!("/proc/{}/root", self.proxy.pid())).join(relative)
    }

    /// Every complete line of the audit log, parsed.
    fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.file("audit.jsonl")).unwrap_or_default();
        text.lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("a partial or broken audit line ({e}): {line:?}"))
            })
            .collect()
    }

    /// Fills the tmpfs but for `left` bytes with a file named `filler`.
    fn fill(&self, left: u64) {
        let path = self.file("filler");
        let mut file = std::fs::File::create(&path).expect("filler");
        let chunk = vec![1u8; 4096];
        for _ in 0..1024 {
            if file.write_all(&chunk).is_err() {
                break;
            }
        }
        let size = file.metadata().expect("filler size").len();
        assert!(size > left, "the tmpfs did not fill ({size} bytes)");
        file.set_len(size - left).expect("shrink the filler");
    }

    /// Makes the log's directory a read-only file system (`true`), or the tmpfs again.
    /// The kernel refuses to remount a file system read-only while a file on it is open
    /// for writing (the log is), so a read-only tmpfs is mounted over the directory: the
    /// path then names no writable file, the writer's reopen fails with `EROFS`, as every
    /// write to a file system remounted read-only by an error does.
    fn read_only(&self, read_only: bool) {
        let pid = self.proxy.pid().to_string();
        let mount = self.mount.to_str().expect("utf-8 path");
        let command: &[&str] = if read_only {
            &["mount", "-t", "tmpfs", "-o", "ro,size=4k", "tmpfs", mount]
        } else {
            &["umount", mount]
        };
        let args = ["-t", &pid, "-U", "-m", "--preserve-credentials"];
        let output = run_bounded(
            tool("nsenter").args(args).args(command),
            Duration::from_secs(10),
        );
        assert!(
            output.status.is_some_and(|s| s.success()),
            "nsenter {command:?}: {}",
            output.stderr
        );
    }

    /// `GET /healthz` on the admin API: (status, body).
    fn health(&self) -> (u16, Value) {
        let output = run_bounded(
            tool("curl")
                .args([
                    "-sS",
                    "--max-time",
                    "10",
                    "-w",
                    "\n%{http_code}",
                    "--unix-socket",
                ])
                .arg(&self.admin)
                .arg("http://admin/healthz"),
            Duration::from_secs(15),
        );
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').expect("curl status line");
        let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (status.trim().parse().expect("status"), body)
    }
}

/// What one request got.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// A whole answer with this status.
    Status(u16),
    /// The connection failed or the answer was cut short.
    Broken(String),
}

/// One keep-alive HTTP/1.1 connection to the proxy, sending absolute-form requests.
struct Client {
    proxy_port: u16,
    stream: Option<BufReader<TcpStream>>,
}

impl Client {
    fn new(proxy_port: u16) -> Client {
        Client {
            proxy_port,
            stream: None,
        }
    }

    /// `GET url`, reading the whole answer (its `Content-Length`).
    fn get(&mut self, url: &str) -> Outcome {
        match self.try_get(url) {
            Ok((status, close)) => {
                if close {
                    self.stream = None;
                }
                Outcome::Status(status)
            }
            Err(error) => {
                self.stream = None;
                Outcome::Broken(error.to_string())
            }
        }
    }

    fn try_get(&mut self, url: &str) -> std::io::Result<(u16, bool)> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(("127.0.0.1", self.proxy_port))?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            self.stream = Some(BufReader::new(stream));
        }
        let reader = self.stream.as_mut().expect("connected");
        let host = url.split('/').nth(2).unwrap_or_default();
        let request = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        reader.get_mut().write_all(request.as_bytes())?;
        let (mut status, mut length, mut close) = (0, None, false);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(code) = lower.strip_prefix("http/1.1 ") {
                status = code.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0);
            } else if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().ok();
            } else if lower.starts_with("connection:") && lower.contains("close") {
                close = true;
            }
        }
        let Some(length) = length else {
            return Err(std::io::Error::other("an answer without Content-Length"));
        };
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        Ok((status, close))
    }
}

/// Waits (at most 5 s) until a request through `port` is answered 200.
fn served_again(port: u16, url: &str) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if Client::new(port).get(url) == Outcome::Status(200) {
            return Some(start.elapsed());
        }
        thread::sleep(Duration::from_millis(50));
    }
    None
}

/// The `kind: audit` lines that end an outage.
fn gap_lines(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == "audit" && l["reason"] == "audit_log_unavailable")
        .collect()
}

/// Runs `clients` threads sending distinct requests until each saw 20 non-200 answers in a
/// row (or 300 requests, or 60 s); returns (path, outcome) of every request.
fn hammer(port: u16, upstream_port: u16, clients: usize) -> Vec<(String, Outcome)> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let threads: Vec<_> = (0..clients)
        .map(|w| {
            let seen = Arc::clone(&seen);
            thread::spawn(move || {
                let mut client = Client::new(port);
                let mut refused_in_row = 0;
                for i in 0..300 {
                    if refused_in_row >= 20 || Instant::now() > deadline {
                        break;
                    }
                    let path = format!("/ok/{w}/{i}");
                    let outcome = client.get(&format!("http://localhost:{upstream_port}{path}"));
                    refused_in_row = if outcome == Outcome::Status(200) {
                        0
                    } else {
                        refused_in_row + 1
                    };
                    seen.lock().unwrap().push((path, outcome));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("client thread");
    }
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

#[test]
fn a_full_disk_answers_nothing_unlogged_and_service_returns_with_space() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let disk = DiskProxy::start(&pki, &upstream);
    let port = disk.proxy.port();
    let url = |path: &str| format!("http://localhost:{}{path}", upstream.port());
    assert_eq!(Client::new(port).get(&url("/first")), Outcome::Status(200));
    disk.fill(8 * 1024);
    let seen = hammer(port, upstream.port(), 8);
    let refused = seen
        .iter()
        .filter(|(_, o)| *o == Outcome::Status(503))
        .count();
    assert!(refused > 0, "the full disk refused nothing: {seen:?}");
    // Refusing now, and saying so.
    let (code, health) = disk.health();
    assert_eq!(code, 503, "{health}");
    assert_eq!(health["audit"]["available"], false, "{health}");
    assert!(health["audit"]["unavailable_since"].is_string(), "{health}");
    assert!(health["audit"]["refused"].as_u64() >= Some(1), "{health}");
    std::fs::remove_file(disk.file("filler")).expect("free the space");
    let back = served_again(port, &url("/after"));
    assert!(
        back.is_some(),
        "not served again within 5 s of freeing space; stderr:\n{}",
        disk.proxy.stderr()
    );
    let lines = disk.lines();
    // Every 200 a client saw has its line.
    for (path, outcome) in &seen {
        if *outcome == Outcome::Status(200) {
            assert!(
                lines
                    .iter()
                    .any(|l| l["path"] == *path && l["status"] == 200),
                "{path} was answered 200 without its audit line"
            );
        }
    }
    let gaps = gap_lines(&lines);
    assert!(!gaps.is_empty(), "no line ends the outage: {lines:?}");
    let counted: u64 = gaps.iter().filter_map(|l| l["refused"].as_u64()).sum();
    assert!(
        counted >= refused as u64,
        "the gap lines count {counted} refusals, the clients saw {refused}: {gaps:?}"
    );
    for gap in &gaps {
        assert_eq!(gap["decision"], "deny", "{gap}");
        assert!(gap["ms"].as_f64().is_some_and(|ms| ms > 0.0), "{gap}");
        assert!(gap["lost"].is_u64(), "{gap}");
    }
    assert!(lines.iter().any(|l| l["path"] == "/after"), "{lines:?}");
    let (code, health) = disk.health();
    assert_eq!(code, 200, "{health}");
    assert_eq!(health["audit"]["available"], true, "{health}");
    assert!(health["audit"]["outages"].as_u64() >= Some(1), "{health}");
    assert!(health["audit"]["refused_total"].as_u64() >= Some(refused as u64));
    assert!(disk.proxy.stderr().contains("audit log written again"));
}

#[test]
fn a_read_only_file_system_refuses_until_writable_and_sighup_keeps_reloading() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let disk = DiskProxy::start(&pki, &upstream);
    let port = disk.proxy.port();
    let url = |path: &str| format!("http://localhost:{}{path}", upstream.port());
    assert_eq!(Client::new(port).get(&url("/first")), Outcome::Status(200));
    disk.read_only(true);
    let outcomes: Vec<Outcome> = (0..6)
        .map(|i| Client::new(port).get(&url(&format!("/ro/{i}"))))
        .collect();
    assert!(
        !outcomes.contains(&Outcome::Status(200)),
        "answered 200 on a read-only log: {outcomes:?}"
    );
    assert!(outcomes.contains(&Outcome::Status(503)), "{outcomes:?}");
    disk.read_only(false);
    // SIGHUP: an immediate retry, and the policy reload it always did.
    let pid = disk.proxy.pid().to_string();
    let kill = run_bounded(tool("kill").args(["-HUP", &pid]), Duration::from_secs(5));
    assert!(kill.status.is_some_and(|s| s.success()));
    assert!(
        served_again(port, &url("/after")).is_some(),
        "not served again once writable; stderr:\n{}",
        disk.proxy.stderr()
    );
    let lines = disk.lines();
    assert!(!gap_lines(&lines).is_empty(), "{lines:?}");
    assert!(
        !lines.iter().any(
            |l| l["path"].as_str().is_some_and(|p| p.starts_with("/ro/")) && l["status"] == 200
        ),
        "{lines:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !disk.proxy.stderr().contains("(sighup)") && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        disk.proxy.stderr().contains("(sighup)"),
        "SIGHUP no longer reloads the policy:\n{}",
        disk.proxy.stderr()
    );
}

#[test]
fn a_removed_log_file_is_reopened_at_its_path() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let proxy = ProxyBuilder::new(&pki)
        .resolve_loopback("localhost")
        .allow(&format!("GET localhost:{}/**", upstream.port()))
        .start();
    let url = |path: &str| format!("http://localhost:{}{path}", upstream.port());
    let mut client = Client::new(proxy.port());
    assert_eq!(client.get(&url("/before")), Outcome::Status(200));
    proxy.audit(1);
    std::fs::remove_file(proxy.audit_log_path()).expect("remove the log");
    assert_eq!(client.get(&url("/after")), Outcome::Status(200));
    let lines = proxy.audit(2);
    let reopened = lines
        .iter()
        .find(|l| l["kind"] == "audit")
        .unwrap_or_else(|| panic!("no line says the file was reopened: {lines:?}"));
    assert!(
        reopened["message"]
            .as_str()
            .is_some_and(|m| m.contains("reopened")),
        "{reopened}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/after" && l["status"] == 200)
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(proxy.audit_log_path())
        .expect("the log is back")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}
