//! Every port answered (docs/architecture.md, "`airlock run`: how every byte reaches the
//! proxy"): inside `airlock run` a TCP connection to a port no rule names reaches airlock
//! through the jail's catch-all port, is decided by the policy and audited; report mode
//! lets it through with `would: deny`, `policy suggest` learns it, and the suggestion lets
//! it through. As root, and as the test user when `AIRLOCK_TEST_UID` is set (`.ci/run`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support;
use crate::support::run::{self, RunHome};

/// A raw TCP service on the host's loopback that answers each connection's first bytes
/// with `pong:` and those bytes, for at most `connections` connections and 120 s.
fn pong_server(connections: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut served = 0;
        while served < connections && std::time::Instant::now() < deadline {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            served += 1;
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let mut buffer = [0u8; 64];
            if let Ok(n) = stream.read(&mut buffer) {
                let _ = stream.write_all(&[b"pong:", &buffer[..n]].concat());
                let _ = stream.shutdown(std::net::Shutdown::Write);
            }
        }
    });
    port
}

/// Connects to `db.test:PORT` inside the jail, sends `ping`, prints what came back.
fn probe(port: u16) -> String {
    format!(
        "import socket\n\
         try:\n    s = socket.create_connection(('db.test', {port}), timeout=10)\n    \
         s.sendall(b'ping')\n    got = b''\n    \
         while len(got) < 9:\n        chunk = s.recv(64)\n        if not chunk: break\n        \
         got += chunk\n    print('got=' + got.decode())\n\
         except Exception as e:\n    print('failed=' + type(e).__name__)\n"
    )
}

/// `airlock run` of the probe with `flags`, returning its stdout and stderr.
fn run_probe(home: &RunHome, port: u16, flags: &[&str]) -> (String, String) {
    let script = probe(port);
    let log = home.log_path().display().to_string();
    let mut args: Vec<&str> = vec!["--resolve", "db.test:127.0.0.1", "--log", &log];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "python3", "-c", &script]);
    let output = home.run(&args);
    assert_eq!(run::code(&output), 0, "{}", output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (stdout, output.stderr.clone())
}

/// The audit line of the connection to `db.test:port`.
fn line_for(lines: &[Value], port: u16) -> Value {
    lines
        .iter()
        .find(|l| l["host"] == "db.test" && l["port"] == port)
        .cloned()
        .unwrap_or_else(|| panic!("no audit line for db.test:{port}: {lines:?}"))
}

#[test]
fn an_unlisted_port_is_answered_audited_and_learnable() {
    if !run::namespaces_available("an_unlisted_port_is_answered_audited_and_learnable") {
        return;
    }
    support::need_all(&["python3"]);
    let port = pong_server(2);
    let work = tempfile::tempdir().expect("tempdir");
    let base = work.path().join("base.yaml");
    std::fs::write(
        &base,
        "version: 1\nnetwork:\n  allow:\n    - host: example.com\n",
    )
    .expect("base policy");
    let base_arg = base.display().to_string();

    // Enforcing: refused by airlock (not by the kernel), and audited.
    let enforce = RunHome::new();
    let (stdout, stderr) = run_probe(&enforce, port, &["--policy", &base_arg]);
    assert!(!stdout.contains("got=pong"), "{stdout}\n{stderr}");
    assert!(
        !stderr.contains("catch-all") && !stderr.contains("nft"),
        "{stderr}"
    );
    let line = line_for(&enforce.audit_lines(), port);
    assert_eq!(line["decision"], "deny", "{line}");
    assert_eq!(line["kind"], "tcp", "{line}");

    // Report mode: through, with `would: deny`.
    let report = RunHome::new();
    let (stdout, stderr) = run_probe(&report, port, &["--policy", &base_arg, "--mode", "report"]);
    assert!(stdout.contains("got=pong:ping"), "{stdout}\n{stderr}");
    let line = line_for(&report.audit_lines(), port);
    assert_eq!(
        (line["decision"].clone(), line["would"].clone()),
        ("allow".into(), "deny".into())
    );

    // Learned: the suggestion lets the same connection through.
    let suggested = suggest(work.path(), &base, &report.log_path());
    assert!(
        suggested.contains("db.test") && suggested.contains(&port.to_string()),
        "{suggested}"
    );
    let after = RunHome::new();
    let suggested_path = work.path().join("suggested.yaml").display().to_string();
    let (stdout, stderr) = run_probe(
        &after,
        port,
        &["--policy", &base_arg, "--policy", &suggested_path],
    );
    assert!(
        stdout.contains("got=pong:ping"),
        "{stdout}\n{stderr}\n{suggested}"
    );
    assert_eq!(line_for(&after.audit_lines(), port)["decision"], "allow");
}

/// `airlock policy suggest --base BASE LOG`, written to `dir/suggested.yaml`.
fn suggest(dir: &Path, base: &Path, log: &Path) -> String {
    let output = support::clients::run_bounded(
        std::process::Command::new(env!("CARGO_BIN_EXE_airlock")).args([
            "policy".as_ref(),
            "suggest".as_ref(),
            "--base".as_ref(),
            base.as_os_str(),
            log.as_os_str(),
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(
        output.status.and_then(|s| s.code()),
        Some(0),
        "suggest: {}",
        output.stderr
    );
    let yaml = String::from_utf8_lossy(&output.stdout).into_owned();
    std::fs::write(dir.join("suggested.yaml"), &yaml).expect("write");
    yaml
}
