//! Test servers run as python3 subprocesses from tests/fixtures/: a smart-HTTP git server
//! over TLS (`git http-backend` as CGI) with a bare repository to serve, a WebSocket
//! echo server over TLS, a PEP 503 package index over TLS, an MCP server over TLS, and a
//! body-recording server over TLS. Each prints its port on stdout and one `HIT ...` line per request
//! on stderr, which is counted and kept; `RECV ...` lines (WebSocket frames received) are
//! kept apart.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::Duration;

use super::clients::{BoundedOutput, git};
use super::pki::TestPki;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");

/// A fixture server subprocess; killed and reaped on drop.
pub struct FixtureServer {
    child: Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    hits: Arc<AtomicUsize>,
    hit_lines: Arc<Mutex<Vec<String>>>,
    received_lines: Arc<Mutex<Vec<String>>>,
}

impl FixtureServer {
    /// Starts the git server for the repositories under `project_root`.
    pub fn git(pki: &TestPki, project_root: &Path) -> FixtureServer {
        let mut command = crate::support::tool("python3");
        command
            .arg(format!("{FIXTURES}git_https_server.py"))
            .arg(project_root)
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key);
        FixtureServer::start(command)
    }

    /// Starts the git server demanding HTTP Basic auth with `password` (any user name) on
    /// every request: 401 with `WWW-Authenticate: Basic` otherwise. Its `HIT` lines end
    /// with `host=HOST auth=none|ok|wrong|malformed`.
    pub fn git_with_password(pki: &TestPki, project_root: &Path, password: &str) -> FixtureServer {
        let mut command = crate::support::tool("python3");
        command
            .arg(format!("{FIXTURES}git_https_server.py"))
            .arg(project_root)
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key)
            .arg(password);
        FixtureServer::start(command)
    }

    /// Starts a PEP 503 package index serving one wheel of `demo-pkg` 1.0, built under
    /// `root`.
    pub fn package_index(pki: &TestPki, root: &Path) -> FixtureServer {
        let mut command = crate::support::tool("python3");
        command
            .arg(format!("{FIXTURES}package_index.py"))
            .arg(root)
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key);
        FixtureServer::start(command)
    }

    /// Starts the WebSocket echo server.
    pub fn websocket(pki: &TestPki) -> FixtureServer {
        FixtureServer::websocket_at(pki, "127.0.0.1", 0)
    }

    /// The WebSocket echo server listening on `address:port` (port 0: any free port).
    pub fn websocket_at(pki: &TestPki, address: &str, port: u16) -> FixtureServer {
        let mut command = crate::support::tool("python3");
        command
            .arg(format!("{FIXTURES}ws_echo_server.py"))
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key)
            .arg(address)
            .arg(port.to_string());
        FixtureServer::start(command)
    }

    /// Starts the MCP server (Streamable HTTP on `/mcp`, old HTTP+SSE on `/sse`).
    pub fn mcp(pki: &TestPki) -> FixtureServer {
        let mut command = crate::support::tool("python3");
        command
            .arg(format!("{FIXTURES}mcp_server.py"))
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key);
        FixtureServer::start(command)
    }

    /// Starts the body-recording server (any path; `HIT` lines carry length and SHA-256).
    pub fn body_echo(pki: &TestPki) -> FixtureServer {
        FixtureServer::body_echo_at(pki, "127.0.0.1", 0)
    }

    /// The body-recording server listening on `address:port` (port 0: any free port; a
    /// fixed 443 stands in for hosts whose rules use the default ports).
    pub fn body_echo_at(pki: &TestPki, address: &str, port: u16) -> FixtureServer {
        let mut command = crate::support::tool("python3");
        command
            .arg(format!("{FIXTURES}body_echo_server.py"))
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key)
            .arg(address)
            .arg(port.to_string());
        FixtureServer::start(command)
    }

    fn start(mut command: Command) -> FixtureServer {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fixture server");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (sender, receiver) = mpsc::channel();
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        let hit_lines = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&hit_lines);
        let received_lines = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::clone(&received_lines);
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("HIT ") {
                    kept.lock().expect("hit lines lock").push(line);
                    counter.fetch_add(1, Ordering::SeqCst);
                } else if line.starts_with("RECV ") {
                    received.lock().expect("received lines lock").push(line);
                } else {
                    eprintln!("fixture server: {line}");
                }
            }
        });
        let port_line = receiver.recv_timeout(Duration::from_secs(15));
        let port = port_line
            .ok()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| {
                let _ = child.kill();
                let _ = child.wait();
                panic!("fixture server did not print its port");
            });
        FixtureServer {
            child,
            port,
            hits,
            hit_lines,
            received_lines,
        }
    }

    /// Requests received so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// The `HIT ...` lines once there are at least `count` (the server prints a line after
    /// it answered, so the client may see the answer first), waiting at most 5 seconds.
    pub fn hit_lines_at_least(&self, count: usize) -> Vec<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let lines = self.hit_lines();
            if lines.len() >= count || std::time::Instant::now() >= deadline {
                return lines;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// The `HIT ...` lines printed so far, in order.
    pub fn hit_lines(&self) -> Vec<String> {
        self.hit_lines.lock().expect("hit lines lock").clone()
    }

    /// The `RECV ...` lines (WebSocket frames received) printed so far, in order.
    pub fn received_lines(&self) -> Vec<String> {
        self.received_lines
            .lock()
            .expect("received lines lock")
            .clone()
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn must(output: BoundedOutput, what: &str) {
    assert!(
        output.status.is_some_and(|s| s.success()),
        "{what} failed: {}",
        output.stderr
    );
}

/// Creates `root/repo.git` (bare) with two committed files; returns the files.
pub fn make_repository(root: &Path, scratch: &Path) -> Vec<(&'static str, String)> {
    let files = vec![
        ("README.md", "# airlock git test\n".to_string()),
        ("src/data.txt", "line\n".repeat(5000)),
    ];
    let source = scratch.join("source");
    std::fs::create_dir_all(source.join("src")).expect("mkdir source");
    for (name, content) in &files {
        std::fs::write(source.join(name), content).expect("write file");
    }
    must(git(&source, &["init", "-q", "-b", "main"]), "git init");
    must(git(&source, &["add", "."]), "git add");
    must(
        git(&source, &["commit", "-q", "-m", "initial"]),
        "git commit",
    );
    let bare = root.join("repo.git");
    must(
        git(
            scratch,
            &[
                "clone",
                "-q",
                "--bare",
                source.to_str().expect("utf-8 path"),
                bare.to_str().expect("utf-8 path"),
            ],
        ),
        "git clone --bare",
    );
    files
}
