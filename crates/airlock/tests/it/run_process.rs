//! Which program made a request (docs/security.md, "Which program asked"; docs/policy.md,
//! "Rules per program"): inside `airlock run` every audit line of a connection carries
//! the process that opened it (pid inside the jail, executable, argv[0], parents up to
//! the command), for curl, git and python; a `process:` rule lets git reach a host that
//! curl is refused. Runs as root and, with `AIRLOCK_TEST_UID`, as an ordinary user.

use serde_json::Value;

use crate::support::run::{RunHome, code, namespaces_available};
use crate::support::{TestPki, Upstream};

/// The system's python (the one an ordinary user can run, whatever the test's PATH says).
const PYTHON: &str = "/usr/bin/python3";

/// `airlock run FLAGS -- sh -c SCRIPT`: the exit status, stdout and stderr.
fn run_script(home: &RunHome, flags: &[String], script: &str) -> (i32, String, String) {
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let output = home.run(&args);
    let status = code(&output);
    (
        status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.stderr,
    )
}

/// The flags that make `allowed.test` the loopback upstream, with `extra` (an `--allow`
/// or a `--policy`).
fn flags(pki: &TestPki, home: &RunHome, extra: &[String]) -> Vec<String> {
    let mut flags = vec![
        "--resolve".into(),
        "allowed.test:127.0.0.1".into(),
        "--upstream-ca".into(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
        "--log".into(),
        home.log_path().to_string_lossy().into_owned(),
    ];
    flags.extend_from_slice(extra);
    flags
}

/// The `http` audit line whose path starts with `prefix`.
fn line_for<'a>(lines: &'a [Value], prefix: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["kind"] == "http" && l["path"].as_str().is_some_and(|p| p.starts_with(prefix)))
        .unwrap_or_else(|| panic!("no http line for {prefix}: {lines:#?}"))
}

/// The executable of `process` (panics with the line when there is none).
fn exe(line: &Value) -> &str {
    line["process"]["exe"]
        .as_str()
        .unwrap_or_else(|| panic!("no process.exe: {line}"))
}

/// Whether a parent of the line's process ran `program` (its argv[0] ends so).
fn has_parent(line: &Value, program: &str) -> bool {
    line["process"]["parents"]
        .as_array()
        .is_some_and(|parents| {
            parents
                .iter()
                .any(|p| p["argv0"].as_str().is_some_and(|a| a.ends_with(program)))
        })
}

/// The `--policy` flags of a policy allowing `allowed.test:PORT` to the programs
/// `processes` (a YAML list's inside) only.
fn process_policy(home: &RunHome, port: u16, processes: &str) -> Vec<String> {
    let policy = home.scratch().join("airlock.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n      ports: [{port}]\n      \
             process: [{processes}]\n"
        ),
    )
    .expect("policy");
    vec!["--policy".to_owned(), policy.to_string_lossy().into_owned()]
}

/// The canonical path of the system's python (`/usr/bin/python3` is a link).
fn python_exe() -> String {
    std::fs::canonicalize(PYTHON)
        .unwrap_or_else(|e| panic!("{PYTHON} is needed for these tests: {e}"))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn curl_git_and_python_are_named_on_their_lines() {
    if !namespaces_available("curl_git_and_python_are_named_on_their_lines") {
        return;
    }
    crate::support::need_all(&["curl", "git", "python3"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let port = upstream.port();
    let script = format!(
        "curl -sS --max-time 20 -o /dev/null https://allowed.test:{port}/by/curl; \
         {PYTHON} -c 'import urllib.request; \
         urllib.request.urlopen(\"https://allowed.test:{port}/by/python\", timeout=20).read()'; \
         git ls-remote https://allowed.test:{port}/by/git.git >/dev/null 2>&1; \
         curl -sS --max-time 20 -o /dev/null https://refused.example/by/curl-refused; true"
    );
    let allow = vec!["--allow".to_owned(), format!("allowed.test:{port}")];
    let (status, stdout, stderr) = run_script(&home, &flags(&pki, &home, &allow), &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    let lines = home.audit_lines();

    let curl = line_for(&lines, "/by/curl");
    assert_eq!(curl["decision"], "allow", "{curl}");
    assert!(exe(curl).ends_with("/curl"), "{curl}");
    assert_eq!(curl["process"]["argv0"], "curl", "{curl}");
    let pid = curl["process"]["pid"].as_u64().expect("pid");
    // Inside the jail: the init is 1, the shell 2 or so; never a host pid of this size.
    assert!((2..10_000).contains(&pid), "pid inside the jail: {curl}");
    assert!(has_parent(curl, "sh"), "the shell is curl's parent: {curl}");

    let python = line_for(&lines, "/by/python");
    assert_eq!(exe(python), python_exe(), "{python}");
    assert_eq!(python["process"]["argv0"], PYTHON, "{python}");

    let git = line_for(&lines, "/by/git.git");
    assert!(
        exe(git).contains("git-remote-http"),
        "git's https transport is its remote helper: {git}"
    );
    assert!(has_parent(git, "git"), "git is the helper's parent: {git}");

    let refused = line_for(&lines, "/by/curl-refused");
    assert_eq!(refused["decision"], "deny", "{refused}");
    assert!(
        exe(refused).ends_with("/curl"),
        "refusals carry it too: {refused}"
    );
    // DNS lines are not connections: no process key.
    assert!(
        lines
            .iter()
            .filter(|l| l["kind"] == "dns")
            .all(|l| l.get("process").is_none()),
        "{lines:#?}"
    );
}

#[test]
fn a_process_rule_lets_git_through_and_refuses_curl() {
    if !namespaces_available("a_process_rule_lets_git_through_and_refuses_curl") {
        return;
    }
    crate::support::need_all(&["curl", "git"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let port = upstream.port();
    let extra = process_policy(&home, port, "git");
    let script = format!(
        "echo CURL; curl -sS --max-time 20 https://allowed.test:{port}/as/curl; echo; \
         git ls-remote https://allowed.test:{port}/as/git.git >/dev/null 2>&1; true"
    );
    let (status, stdout, stderr) = run_script(&home, &flags(&pki, &home, &extra), &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    let body = crate::support::run::json_after(&stdout, "CURL");
    assert_eq!(
        body["reason"], "host_not_allowed",
        "curl is refused: {body}"
    );
    let hits: Vec<String> = upstream.hits().into_iter().map(|h| h.target).collect();
    assert!(
        hits.iter().all(|t| t.starts_with("/as/git.git")) && !hits.is_empty(),
        "only git reached the upstream: {hits:?}"
    );
    let lines = home.audit_lines();
    let curl = line_for(&lines, "/as/curl");
    assert_eq!(curl["decision"], "deny", "{curl}");
    assert!(exe(curl).ends_with("/curl"), "{curl}");
    let git = line_for(&lines, "/as/git.git");
    assert_eq!(git["decision"], "allow", "{git}");
    assert_eq!(git["rule"], "network.allow[0]", "{git}");
}

#[test]
fn an_mcp_servers_requests_name_its_program() {
    if !namespaces_available("an_mcp_servers_requests_name_its_program") {
        return;
    }
    crate::support::need("python3");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let mut extra = flags(&pki, &RunHome::new(), &[]);
    // `Mcp::spawn` gives its own `--log`: keep only the resolve and trust flags.
    extra.truncate(4);
    extra.extend(["--allow".to_owned(), format!("allowed.test:{port}")]);
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp_stdio_server.py");
    let server = [PYTHON.into(), fixture.into(), "received.jsonl".into()];
    let policy = "version: 1\nmcp:\n  - stdio: fs\n    tools:\n      deny: [exec]\n";
    let mut mcp = crate::mcp_stdio::Mcp::spawn(policy, "fs", &extra, &server);
    let initialized = mcp.request(serde_json::json!({"jsonrpc": "2.0", "id": 0,
        "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}));
    assert!(initialized["result"].is_object(), "{initialized}");
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let url = format!("https://allowed.test:{port}/from/mcp");
    let fetched = mcp.call(1, "fetch", serde_json::json!({ "url": url }));
    assert!(fetched.to_string().contains("status 200"), "{fetched}");
    let (code, home) = mcp.finish();
    assert_eq!(code, 0);
    let lines = home.audit_lines();
    let line = line_for(&lines, "/from/mcp");
    assert_eq!(exe(line), python_exe(), "{line}");
    assert_eq!(line["process"]["argv0"], PYTHON, "{line}");
}

#[test]
fn a_local_sandboxs_commands_name_their_program() {
    if !namespaces_available("a_local_sandboxs_commands_name_their_program") {
        return;
    }
    crate::support::need("curl");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let home = crate::support::sandbox::SandboxHome::new();
    let upstream_ca = pki.upstream_ca_cert.to_string_lossy().into_owned();
    let allow = format!("allowed.test:{port}");
    let created = home.run(&[
        "create",
        "who",
        "--resolve",
        "allowed.test:127.0.0.1",
        "--upstream-ca",
        &upstream_ca,
        "--allow",
        &allow,
    ]);
    assert_eq!(
        crate::support::sandbox::status(&created),
        0,
        "{}",
        created.stderr
    );
    let script =
        format!("curl -sS --max-time 20 -o /dev/null https://allowed.test:{port}/from/sandbox");
    let run = home.exec_json("who", &script);
    assert_eq!(run.report["exit"], 0, "{run:?}");
    // The daemon writes its line at once; the log goes with the sandbox at `rm`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !home.audit_text("who").contains("/from/sandbox") && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines: Vec<Value> = home
        .audit_text("who")
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    home.must(&["rm", "who"]);
    let line = line_for(&lines, "/from/sandbox");
    assert!(exe(line).ends_with("/curl"), "{line}");
    assert_eq!(line["process"]["argv0"], "curl", "{line}");
}

/// A socket made before a `fork`, whose parent then `exec`s `sleep` while the child uses
/// it: two holders, two programs.
const SHARED_SOCKET: &str = r#"
import os, socket, ssl, sys, time
port = int(sys.argv[1])
address = socket.getaddrinfo("allowed.test", port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.set_inheritable(True)
if os.fork() == 0:
    time.sleep(1.0)
    try:
        s.settimeout(20)
        s.connect(address)
        t = ssl.create_default_context().wrap_socket(s, server_hostname="allowed.test")
        t.sendall(b"GET /shared HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        data = b""
        for _ in range(1000):
            chunk = t.recv(65536)
            if not chunk:
                break
            data += chunk
        print("SHARED", data.split(b"\r\n")[0].decode(), flush=True)
    except Exception as e:
        print("SHARED error", e, flush=True)
    os._exit(0)
os.execv("/usr/bin/sleep", ["sleep", "3"])
"#;

#[test]
fn a_shared_socket_or_a_preloaded_library_is_no_program() {
    if !namespaces_available("a_shared_socket_or_a_preloaded_library_is_no_program") {
        return;
    }
    crate::support::need_all(&["python3", "sleep"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let port = upstream.port();
    let extra = process_policy(&home, port, &format!("/usr/bin/sleep, {PYTHON}"));
    let fetch = |path: &str| {
        format!(
            "{PYTHON} -c 'import urllib.request; \
             urllib.request.urlopen(\"https://allowed.test:{port}{path}\", timeout=20).read()' \
             >/dev/null 2>&1"
        )
    };
    let script = format!(
        "{}; {PYTHON} - {port} <<'EOF'\n{SHARED_SOCKET}\nEOF\nLD_PRELOAD=/nonexistent.so {}; true",
        fetch("/plain"),
        fetch("/preload")
    );
    let (status, stdout, stderr) = run_script(&home, &flags(&pki, &home, &extra), &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("SHARED HTTP/1.1 403"), "{stdout}\n{stderr}");
    let hits: Vec<String> = upstream.hits().into_iter().map(|h| h.target).collect();
    assert_eq!(
        hits,
        ["/plain"],
        "only the plain python reached the upstream"
    );
    let lines = home.audit_lines();
    let plain = line_for(&lines, "/plain");
    assert_eq!(plain["decision"], "allow", "{plain}");
    assert!(plain["process"].get("unverified").is_none(), "{plain}");
    // Each holder alone would be allowed; together they are no known program.
    let shared = line_for(&lines, "/shared");
    assert_eq!(shared["decision"], "deny", "{shared}");
    assert_eq!(shared["process"]["unverified"], "shared_socket", "{shared}");
    let preload = line_for(&lines, "/preload");
    assert_eq!(preload["decision"], "deny", "{preload}");
    assert_eq!(preload["process"]["unverified"], "loader_env", "{preload}");
    assert_eq!(exe(preload), python_exe(), "{preload}");
}
