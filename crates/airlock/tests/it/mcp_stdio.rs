//! `airlock mcp` with a real stdio MCP server (tests/fixtures/mcp_stdio_server.py) in the
//! jail: JSON-RPC lines piped through the real binary; the fixture logs every line it
//! receives, so a refused call is shown never to reach it. Covers tool and argument
//! refusals, `tools/list` filtering, invalid and over-long lines (bounded memory on both
//! sides), audit lines with `"server"`, the server's network going through the policy,
//! and exit statuses.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::support;
use crate::support::run;
use crate::support::run::{RunHome, namespaces_available, read_lines};
use crate::support::{TestPki, Upstream};
use serde_json::{Value, json};

/// How long one answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

const POLICY: &str = r#"version: 1
mcp:
  - stdio: fs
    tools:
      deny: [exec]
      args:
        read_file: {path: ["/workspace/**"]}
"#;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_stdio_server.py")
}

/// A running `airlock mcp` with its pipes.
pub(crate) struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    home: RunHome,
}

impl Mcp {
    /// `airlock mcp --policy P --log L EXTRA... -- python3 FIXTURE LOG [EXIT]`.
    fn start(extra: &[String], exit_code: Option<&str>) -> Mcp {
        let mut server: Vec<OsString> =
            vec!["python3".into(), fixture().into(), "received.jsonl".into()];
        server.extend(exit_code.map(OsString::from));
        Mcp::spawn(POLICY, "fs", extra, &server)
    }

    /// `airlock mcp --policy P --log L EXTRA... --name NAME -- SERVER...` in a fresh
    /// home, run from its scratch directory, with `policy` as P.
    pub(crate) fn spawn(policy: &str, name: &str, extra: &[String], server: &[OsString]) -> Mcp {
        let home = RunHome::new();
        let policy_path = home.scratch().join("policy.yaml");
        std::fs::write(&policy_path, policy).expect("policy");
        let mut command = home.command();
        command
            .arg("mcp")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--log")
            .arg(home.log_path())
            .args(extra)
            .arg("--name")
            .arg(name)
            .arg("--")
            .args(server)
            .env("AIRLOCK_HOME", home.airlock_home())
            .current_dir(home.scratch())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("airlock mcp");
        let stdin = child.stdin.take();
        let lines = reader(child.stdout.take().expect("stdout"));
        let stderr = reader(child.stderr.take().expect("stderr"));
        Mcp {
            child,
            stdin,
            lines,
            stderr,
            home,
        }
    }

    /// Writes `line` and a newline to airlock's standard input.
    pub(crate) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
        stdin.flush().expect("flush");
    }

    /// The next line airlock writes, as JSON.
    pub(crate) fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(ANSWER_TIMEOUT)
            .unwrap_or_else(|_| panic!("no answer; stderr: {}", self.stderr_text()));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Sends `message` and returns the next line airlock writes.
    pub(crate) fn request(&mut self, message: Value) -> Value {
        self.send(&message.to_string());
        self.next()
    }

    /// A `tools/call` of `tool` and its answer.
    pub(crate) fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Value {
        self.request(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}))
    }

    fn initialize(&mut self) {
        let answer = self.request(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}}));
        assert_eq!(
            answer["result"]["serverInfo"]["name"], "fixture",
            "{answer}"
        );
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    fn stderr_text(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }

    /// Closes airlock's stdin and returns its exit code.
    pub(crate) fn finish(mut self) -> (i32, RunHome) {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                let code = status.code().expect("exit code");
                return (code, self.home);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "airlock mcp did not exit"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Peak resident memory of the airlock process, in KiB.
    fn peak_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .expect("VmHWM")
    }
}

fn reader(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

fn tools_called(received: &[Value]) -> Vec<String> {
    received
        .iter()
        .filter(|l| l["method"] == "tools/call")
        .map(|l| l["tool"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The `kind: mcp` audit lines of a finished run.
pub(crate) fn mcp_lines(home: &RunHome) -> Vec<Value> {
    home.audit_lines()
        .into_iter()
        .filter(|l| l["kind"] == "mcp")
        .collect()
}

#[test]
fn calls_are_decided_and_tools_list_filtered() {
    if !namespaces_available("calls_are_decided_and_tools_list_filtered") {
        return;
    }
    support::need("python3");
    let mut mcp = Mcp::start(&[], None);
    mcp.initialize();
    let list = mcp.request(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["read_file", "write_file", "fetch", "flood"],
        "{list}"
    );

    let allowed = mcp.call(2, "read_file", json!({"path": "/workspace/a.txt"}));
    let text = allowed["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("read_file "), "{allowed}");

    let denied = mcp.call(3, "exec", json!({"cmd": "id"}));
    assert_eq!(denied["id"], 3, "{denied}");
    assert_eq!(denied["error"]["code"], -32602, "{denied}");
    assert_eq!(
        denied["error"]["data"]["reason"], "mcp_tool_denied",
        "{denied}"
    );

    let guarded = mcp.call(4, "read_file", json!({"path": "/etc/shadow"}));
    assert_eq!(guarded["id"], 4, "{guarded}");
    assert_eq!(
        guarded["error"]["data"]["reason"], "mcp_argument_denied",
        "{guarded}"
    );
    assert_eq!(guarded["error"]["data"]["argument"], "path", "{guarded}");

    // A batch: the allowed call goes to the server, the denied one is answered at once.
    mcp.send(
        &json!([
            {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
             "params": {"name": "exec", "arguments": {}}},
            {"jsonrpc": "2.0", "id": 6, "method": "tools/call",
             "params": {"name": "write_file", "arguments": {"path": "/workspace/b"}}}
        ])
        .to_string(),
    );
    let mut ids = Vec::new();
    for _ in 0..2 {
        let answer = mcp.next();
        for one in answer.as_array().expect("batch answer") {
            ids.push(one["id"].as_u64().expect("id"));
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, [5, 6]);

    let (code, home) = mcp.finish();
    assert_eq!(code, 0);
    let received = read_lines(&home.scratch().join("received.jsonl"));
    assert_eq!(
        tools_called(&received),
        ["read_file", "write_file"],
        "refused calls never reach the server: {received:?}"
    );
    let lines = mcp_lines(&home);
    // Sorted: the second identical `exec` refusal is folded and written after the others.
    let mut decided: Vec<(&str, &str, &str)> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["server"], "fs", "{l}");
            assert_eq!(l["rule"], "mcp[0]", "{l}");
            (
                l["decision"].as_str().unwrap_or_default(),
                l["tool"].as_str().unwrap_or_default(),
                l["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    decided.sort_unstable();
    assert_eq!(
        decided,
        [
            ("allow", "read_file", ""),
            ("allow", "write_file", ""),
            ("deny", "exec", "mcp_tool_denied"),
            ("deny", "exec", "mcp_tool_denied"),
            ("deny", "read_file", "mcp_argument_denied"),
        ],
        "{lines:?}"
    );
    assert_eq!(lines[2]["argument"], "path", "{:?}", lines[2]);
    let log = std::fs::read_to_string(home.log_path()).expect("log");
    assert!(
        !log.contains("/etc/shadow"),
        "argument values are never logged"
    );
}

#[test]
fn invalid_and_overlong_lines_fail_closed_with_bounded_memory() {
    if !namespaces_available("invalid_and_overlong_lines_fail_closed_with_bounded_memory") {
        return;
    }
    support::need("python3");
    let mut mcp = Mcp::start(&[], None);
    mcp.initialize();
    // Not JSON: dropped. A case-folded twin key: refused, answered with its id.
    mcp.send("this is not json");
    let twin = mcp.request(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "Method": "ping", "params": {"name": "exec"}}));
    assert_eq!(twin["id"], 7, "{twin}");
    assert_eq!(twin["error"]["code"], -32600, "{twin}");
    // A 24 MiB line (with an id airlock never reads): not forwarded, not held.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"write_file","arguments":{{"content":"{}"}}}}}}"#,
        "y".repeat(24 << 20)
    );
    mcp.send(&huge);
    let after = mcp.call(9, "write_file", json!({"path": "/workspace/c"}));
    assert_eq!(
        after["id"], 9,
        "the relay goes on after an over-long line: {after}"
    );
    // The server floods 64 MiB without a newline: dropped, not held.
    let flood = mcp.call(10, "flood", json!({"bytes": 64 << 20}));
    assert_eq!(flood["id"], 10, "{flood}");
    assert_eq!(flood["result"]["content"][0]["text"], "flooded", "{flood}");
    let peak = mcp.peak_kib();
    eprintln!("airlock mcp peak resident memory: {peak} KiB");
    assert!(peak < 48 * 1024, "airlock's peak memory grew to {peak} KiB");
    let (code, home) = mcp.finish();
    assert_eq!(code, 0);
    let received = read_lines(&home.scratch().join("received.jsonl"));
    assert!(
        received
            .iter()
            .all(|l| l["len"].as_u64().unwrap_or(0) < 1 << 20),
        "no over-long or refused line reached the server: {received:?}"
    );
    assert!(
        received.iter().all(|l| l["invalid"].is_null()),
        "{received:?}"
    );
    assert_eq!(tools_called(&received), ["write_file", "flood"]);
    let refused: Vec<Value> = mcp_lines(&home)
        .into_iter()
        .filter(|l| l["reason"] == "body_uninspectable")
        .collect();
    assert_eq!(refused.len(), 4, "{refused:?}");
    assert!(refused.iter().all(|l| l["server"] == "fs"), "{refused:?}");
}

#[test]
fn the_servers_network_goes_through_the_policy() {
    if !namespaces_available("the_servers_network_goes_through_the_policy") {
        return;
    }
    support::need("python3");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let flags = [
        "--resolve".to_owned(),
        "allowed.test:127.0.0.1".to_owned(),
        "--upstream-ca".to_owned(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
        "--allow".to_owned(),
        format!("allowed.test:{port}"),
    ];
    let mut mcp = Mcp::start(&flags, None);
    mcp.initialize();
    let allowed = mcp.call(
        1,
        "fetch",
        json!({"url": format!("https://allowed.test:{port}/echo/mcp")}),
    );
    let text = allowed["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("status 200"), "{allowed}");
    let hits = upstream.hit_count();
    let refused = mcp.call(
        2,
        "fetch",
        json!({"url": format!("https://127.0.0.1:{port}/echo/direct")}),
    );
    let text = refused["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(!text.starts_with("status 200"), "{refused}");
    let named = mcp.call(3, "fetch", json!({"url": "https://refused.example/x"}));
    let text = named["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("status 403") && text.contains("blocked_by_policy"),
        "{named}"
    );
    assert_eq!(
        upstream.hit_count(),
        hits,
        "refused requests never reach the upstream"
    );
    let (code, home) = mcp.finish();
    assert_eq!(code, 0);
    let lines = home.audit_lines();
    assert!(
        lines.iter().any(|l| l["kind"] == "http"
            && l["decision"] == "deny"
            && l["host"] == "refused.example"),
        "{lines:?}"
    );
}

#[test]
fn the_exit_status_is_the_servers() {
    if !namespaces_available("the_exit_status_is_the_servers") {
        return;
    }
    support::need("python3");
    let mut mcp = Mcp::start(&[], Some("7"));
    mcp.initialize();
    let (code, _home) = mcp.finish();
    assert_eq!(code, 7);

    let home = RunHome::new();
    let policy = home.scratch().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let policy = policy.to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        let mut command = home.command();
        command
            .arg("mcp")
            .args(args)
            .env("AIRLOCK_HOME", home.airlock_home())
            .current_dir(home.scratch())
            .stdin(Stdio::null());
        support::run_bounded(&mut command, run::RUN_TIMEOUT)
    };
    let missing = run(&[
        "--policy",
        &policy,
        "--name",
        "fs",
        "--",
        "/nonexistent/server",
    ]);
    assert_eq!(run::code(&missing), 127, "{}", missing.stderr);
    let unnamed = run(&["--policy", &policy, "--", "python3", "-c", "pass"]);
    assert_eq!(run::code(&unnamed), 125, "{}", unnamed.stderr);
    assert!(
        unnamed.stderr.contains("stdio: python3"),
        "{}",
        unnamed.stderr
    );
    let stdout_log = run(&[
        "--policy", &policy, "--log", "-", "--name", "fs", "--", "true",
    ]);
    assert_eq!(run::code(&stdout_log), 125, "{}", stdout_log.stderr);
}

#[test]
fn jail_env_relays_the_same_way() {
    support::need("python3");
    let mut mcp = Mcp::start(&["--jail".to_owned(), "env".to_owned()], Some("3"));
    mcp.initialize();
    let denied = mcp.call(1, "exec", json!({"cmd": "id"}));
    assert_eq!(
        denied["error"]["data"]["reason"], "mcp_tool_denied",
        "{denied}"
    );
    let allowed = mcp.call(2, "write_file", json!({"path": "/workspace/d"}));
    assert_eq!(allowed["id"], 2, "{allowed}");
    assert!(allowed["result"].is_object(), "{allowed}");
    let (code, home) = mcp.finish();
    assert_eq!(code, 3);
    let received = read_lines(&home.scratch().join("received.jsonl"));
    assert_eq!(tools_called(&received), ["write_file"]);
}
