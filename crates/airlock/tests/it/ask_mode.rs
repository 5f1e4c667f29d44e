//! Ask mode and the run's admin socket (docs/policy.md "Ask mode", docs/contract.md
//! "Admin API"), with the real binary, real curl and loopback upstreams:
//!
//! - a request refused only for its host is held until answered through the admin API:
//!   `once` (the next identical request asks again), `run` (the next one passes without
//!   asking), `deny` (403 with `"asked":true`, in the body and the audit line);
//!   concurrent identical requests share one ask; unknown ids are 404, answered ones 409,
//!   bad bodies 400;
//! - `save` appends the rule to the first `--policy` file keeping its comments; the file
//!   passes `policy check` and an enforce proxy with it passes the request; with only
//!   `--allow` flags `save` is refused (409) and the ask stays pending;
//! - an unanswered ask is refused after `--ask-timeout` with `"asked":true`;
//! - a request refused for a credential reason or a deny rule is never held;
//! - at most 64 asks are pending: one more is refused at once;
//! - (asking at the request rather than at a CONNECT, and raw TCP: `ask_request.rs`);
//! - `airlock run` serves its admin API on a 0600 socket in the user's runtime directory
//!   (answering asks from outside), unreachable from inside the jail, gone after the run.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::clients::{BoundedOutput, CurlResponse};
use crate::support::proxy::AIRLOCK;
use crate::support::run;
use crate::support::{
    CurlRequest, Proxy, ProxyBuilder, TestPki, Upstream, curl, curl_get, run_bounded,
};
use serde_json::Value;

const PLACEHOLDER: &str = "PLACEHOLDER_LLM_KEY_7f3a";
const REAL: &str = "sk-bench-REAL-0123456789abcdef";

/// The base policy, with a comment to keep: `GET /ok` on `allowed.test:PORT`, a deny rule.
pub(crate) fn base_policy(port: u16) -> String {
    format!(
        "# The base policy (this comment must survive a save).\nversion: 1\nnetwork:\n  allow:\n    # only /ok\n    - host: allowed.test\n      ports: [{port}]\n      methods: [GET]\n      paths: [\"/ok\"]\n  deny:\n    - host: denied.test\n"
    )
}

/// An ask-mode proxy with the base policy and the admin API on a socket in its directory.
pub(crate) fn ask_proxy(pki: &TestPki, port: u16, extra: &[&str]) -> (Proxy, String) {
    let mut builder = ProxyBuilder::new(pki)
        .policy(&base_policy(port))
        .resolve_loopback("allowed.test")
        .resolve_loopback("other.test")
        .resolve_loopback("denied.test")
        .arg("--mode")
        .arg("ask");
    let socket = builder.dir().join("admin.sock");
    builder = builder
        .arg("--admin")
        .arg(&format!("unix:{}", socket.display()));
    for arg in extra {
        builder = builder.arg(arg);
    }
    let proxy = builder.start();
    (proxy, socket.display().to_string())
}

/// One admin call with curl over the socket: (status, body).
pub(crate) fn admin(socket: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut command = support::tool("curl");
    command.args([
        "-sS",
        "--max-time",
        "10",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ]);
    command.args(["--unix-socket", socket]);
    if let Some(body) = body {
        command.args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ]);
    }
    command.arg(format!("http://admin{path}"));
    let output = run_bounded(&mut command, Duration::from_secs(15));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("curl status line: {text} {}", output.stderr));
    (status.trim().parse().expect("status"), body.to_owned())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Polls `GET /v1/pending` until it lists at least `count` asks (at most 20 s).
pub(crate) fn wait_pending(socket: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = admin(socket, "GET", "/v1/pending", None);
        assert_eq!(status, 200, "{body}");
        let items = json(&body).as_array().expect("an array").clone();
        if items.len() >= count {
            return items;
        }
        assert!(
            Instant::now() < deadline,
            "{count} asks never pending: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn answer(socket: &str, id: &Value, decision: &str, scope: &str) -> (u16, String) {
    let id = id.as_str().expect("string id");
    let body = format!(r#"{{"decision":"{decision}","scope":"{scope}"}}"#);
    admin(socket, "POST", &format!("/v1/pending/{id}"), Some(&body))
}

pub(crate) fn get(proxy: &Proxy, pki: &TestPki, url: &str) -> CurlResponse {
    curl(proxy, pki, &CurlRequest::get(url))
}

/// The last audit line for `path` (waits for it, bounded).
pub(crate) fn line_for(proxy: &Proxy, path: &str, count: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<Value> = proxy
            .audit_log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["path"] == path)
            .collect();
        if lines.len() >= count {
            return lines[count - 1].clone();
        }
        assert!(Instant::now() < deadline, "no line {count} for {path}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unknown ids are 404, bodies that are not an answer 400, other methods 405.
fn assert_bad_answers_are_refused(socket: &str) {
    assert_eq!(
        admin(
            socket,
            "POST",
            "/v1/pending/9999",
            Some(r#"{"decision":"allow"}"#)
        )
        .0,
        404
    );
    assert_eq!(
        admin(
            socket,
            "POST",
            "/v1/pending/x",
            Some(r#"{"decision":"allow"}"#)
        )
        .0,
        404
    );
    assert_eq!(
        admin(
            socket,
            "POST",
            "/v1/pending/1",
            Some(r#"{"decision":"perhaps"}"#)
        )
        .0,
        400
    );
    assert_eq!(admin(socket, "POST", "/v1/pending/1", Some("{")).0, 400);
    assert_eq!(admin(socket, "PUT", "/v1/pending/1", Some("{}")).0, 405);
}

#[test]
fn asks_answered_once_for_the_run_and_denied() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &[]);
    assert!(proxy.stderr().contains("ask mode"), "{}", proxy.stderr());
    let url = |path: &str| format!("http://other.test:{port}{path}");

    // once: passes, and the next identical request asks again.
    for round in 1..=2 {
        std::thread::scope(|scope| {
            let request = scope.spawn(|| get(&proxy, &pki, &url("/once")));
            let pending = wait_pending(&socket, 1);
            assert_eq!(pending.len(), 1, "{pending:?}");
            let ask = &pending[0];
            assert_eq!(ask["method"], "GET", "{ask}");
            assert_eq!(ask["host"], "other.test", "{ask}");
            assert_eq!(ask["path"], "/once", "{ask}");
            assert_eq!(ask["reason"], "host_not_allowed", "{ask}");
            assert_eq!(
                ask["suggestion"],
                format!("GET other.test:{port}/once"),
                "{ask}"
            );
            assert!(ask["since"].as_str().unwrap().ends_with('Z'), "{ask}");
            let (status, body) = answer(&socket, &ask["id"], "allow", "once");
            assert_eq!(status, 200, "{body}");
            // Answered already: 409.
            assert_eq!(answer(&socket, &ask["id"], "deny", "once").0, 409);
            let response = request.join().expect("request");
            assert_eq!(response.status, 200, "{response:?}");
        });
        let line = line_for(&proxy, "/once", round);
        assert_eq!(line["decision"], "allow", "{line}");
        assert_eq!(line["asked"], true, "{line}");
        assert_eq!(line["rule"], "ask.once", "{line}");
    }
    assert_eq!(upstream.hit_count(), 2);

    assert_bad_answers_are_refused(&socket);

    // deny: 403 with "asked":true, in the body and the audit line.
    std::thread::scope(|scope| {
        let request = scope.spawn(|| get(&proxy, &pki, &url("/deny")));
        let pending = wait_pending(&socket, 1);
        assert_eq!(answer(&socket, &pending[0]["id"], "deny", "once").0, 200);
        let response = request.join().expect("request");
        assert_eq!(response.status, 403, "{response:?}");
        let body = response.json();
        assert_eq!(body["asked"], true, "{body}");
        assert_eq!(body["reason"], "host_not_allowed", "{body}");
    });
    let line = line_for(&proxy, "/deny", 1);
    assert_eq!(line["decision"], "deny", "{line}");
    assert_eq!(line["asked"], true, "{line}");
    let text = proxy.audit_log_text();
    let raw = text
        .lines()
        .find(|l| l.contains("\"/deny\""))
        .expect("raw line");
    assert!(
        raw.contains(r#""decision":"deny","asked":true,"rule":"#),
        "key order: {raw}"
    );

    // run: two concurrent identical requests share one ask; later ones pass unasked.
    std::thread::scope(|scope| {
        let first = scope.spawn(|| get(&proxy, &pki, &url("/run")));
        let second = scope.spawn(|| get(&proxy, &pki, &url("/run")));
        let pending = wait_pending(&socket, 1);
        // Give the second request time to join the same ask.
        std::thread::sleep(Duration::from_millis(300));
        let (_, body) = admin(&socket, "GET", "/v1/pending", None);
        assert_eq!(json(&body).as_array().unwrap().len(), 1, "{body}");
        assert_eq!(answer(&socket, &pending[0]["id"], "allow", "run").0, 200);
        assert_eq!(first.join().expect("first").status, 200);
        assert_eq!(second.join().expect("second").status, 200);
    });
    let started = Instant::now();
    let response = get(&proxy, &pki, &url("/run"));
    assert_eq!(response.status, 200, "{response:?}");
    println!(
        "measured: a request admitted by a run answer took {:?}",
        started.elapsed()
    );
    let line = line_for(&proxy, "/run", 3);
    assert_eq!(line["rule"], "ask.run", "{line}");
    assert!(line.get("asked").is_none(), "{line}");
    let (_, body) = admin(&socket, "GET", "/v1/pending", None);
    assert_eq!(body, "[]");
    // Another path on the same host still asks (the rule is for identical requests).
    let (_, body) = admin(&socket, "GET", "/v1/pending", None);
    assert_eq!(json(&body).as_array().unwrap().len(), 0, "{body}");
}

#[test]
fn the_event_stream_says_when_an_ask_opens_and_is_answered() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &[]);
    let stream = support::tool("curl")
        .args(["-sS", "-N", "--max-time", "8", "--unix-socket", &socket])
        .arg("http://admin/v1/events")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl");
    std::thread::sleep(Duration::from_millis(700));
    std::thread::scope(|scope| {
        let request = scope.spawn(|| get(&proxy, &pki, &format!("http://other.test:{port}/e")));
        let pending = wait_pending(&socket, 1);
        assert_eq!(answer(&socket, &pending[0]["id"], "allow", "run").0, 200);
        assert_eq!(request.join().expect("request").status, 200);
    });
    let output = stream.wait_with_output().expect("curl output");
    let text = String::from_utf8_lossy(&output.stdout);
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(json)
        .collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(kinds, ["ask", "answered", "http"], "{text}");
    assert_eq!(events[0]["path"], "/e", "{text}");
    assert_eq!(
        events[0]["suggestion"],
        format!("GET other.test:{port}/e"),
        "{text}"
    );
    assert_eq!(events[1]["id"], events[0]["id"], "{text}");
    assert_eq!(events[1]["decision"], "allow", "{text}");
    assert_eq!(events[1]["scope"], "run", "{text}");
    assert_eq!(events[2]["asked"], true, "{text}");
}

#[test]
fn save_appends_the_rule_keeping_comments_and_the_file_still_loads() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &[]);
    let policy_file = proxy.dir().join("policy1.yaml");
    let before = std::fs::read_to_string(&policy_file).expect("policy");
    let url = format!("http://other.test:{port}/saved/x");
    std::thread::scope(|scope| {
        let request = scope.spawn(|| get(&proxy, &pki, &url));
        let pending = wait_pending(&socket, 1);
        let (status, body) = answer(&socket, &pending[0]["id"], "allow", "save");
        assert_eq!(status, 200, "{body}");
        assert_eq!(request.join().expect("request").status, 200);
    });
    let after = std::fs::read_to_string(&policy_file).expect("policy");
    println!("saved policy:\n{after}");
    assert!(
        after.starts_with(&before.replace("  deny:\n    - host: denied.test\n", "")),
        "{after}"
    );
    assert!(
        after.contains("# The base policy (this comment must survive a save)."),
        "{after}"
    );
    assert!(after.contains("    # only /ok\n"), "{after}");
    assert!(after.contains("    - host: \"other.test\"\n"), "{after}");
    assert!(after.contains("      paths: [\"/saved/x\"]\n"), "{after}");
    assert!(
        after.ends_with("  deny:\n    - host: denied.test\n"),
        "{after}"
    );
    let check = run_bounded(
        std::process::Command::new(AIRLOCK)
            .args(["policy", "check"])
            .arg(&policy_file),
        Duration::from_secs(30),
    );
    assert_eq!(
        check.status.and_then(|s| s.code()),
        Some(0),
        "{}",
        check.stderr
    );
    // The rule applies for the rest of the run.
    assert_eq!(get(&proxy, &pki, &url).status, 200);
    assert_eq!(admin(&socket, "GET", "/v1/pending", None).1, "[]");

    // A fresh enforce proxy with the saved file passes the request.
    let enforce = ProxyBuilder::new(&pki)
        .resolve_loopback("other.test")
        .arg("--policy")
        .arg(policy_file.to_str().expect("utf-8"))
        .start();
    assert_eq!(get(&enforce, &pki, &url).status, 200);
    assert_eq!(
        get(&enforce, &pki, &format!("http://other.test:{port}/else")).status,
        403
    );
}

#[test]
fn save_without_a_policy_file_is_refused_and_the_ask_stays() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let dir = tempfile::tempdir().expect("dir");
    let socket = dir.path().join("admin.sock").display().to_string();
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("allowed.test:{port}"))
        .resolve_loopback("other.test")
        .arg("--mode")
        .arg("ask")
        .arg("--admin")
        .arg(&format!("unix:{socket}"))
        .start();
    std::thread::scope(|scope| {
        let request = scope.spawn(|| get(&proxy, &pki, &format!("http://other.test:{port}/x")));
        let pending = wait_pending(&socket, 1);
        let (status, body) = answer(&socket, &pending[0]["id"], "allow", "save");
        assert_eq!(status, 409, "{body}");
        assert!(body.contains("--policy"), "{body}");
        assert_eq!(wait_pending(&socket, 1).len(), 1, "the ask stays pending");
        assert_eq!(answer(&socket, &pending[0]["id"], "allow", "once").0, 200);
        assert_eq!(request.join().expect("request").status, 200);
    });
}

#[test]
fn an_unanswered_ask_times_out_with_asked_true() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &["--ask-timeout", "2s"]);
    let started = Instant::now();
    let response = get(&proxy, &pki, &format!("http://allowed.test:{port}/other"));
    let waited = started.elapsed();
    println!("measured: an unanswered ask was refused after {waited:?} (--ask-timeout 2s)");
    assert_eq!(response.status, 403, "{response:?}");
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let body = response.json();
    assert_eq!(body["asked"], true, "{body}");
    assert_eq!(body["reason"], "path_not_allowed", "{body}");
    let line = line_for(&proxy, "/other", 1);
    assert_eq!(line["decision"], "deny", "{line}");
    assert_eq!(line["asked"], true, "{line}");
    assert_eq!(line["reason"], "path_not_allowed", "{line}");
    assert_eq!(admin(&socket, "GET", "/v1/pending", None).1, "[]");
    upstream.assert_untouched("a timed-out ask");
}

#[test]
fn credential_and_deny_rule_refusals_are_never_held() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let secret = format!("LLM_KEY={PLACEHOLDER}={REAL}@allowed.test");
    let (proxy, socket) = ask_proxy(&pki, port, &["--secret", &secret]);
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    // The surrogate to a host that is not its own (and not listed): refused at once.
    let started = Instant::now();
    let response = curl_get(
        &proxy,
        &pki,
        &format!("http://other.test:{port}/exfil"),
        &[&auth],
    );
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(
        response.json()["reason"],
        "secret_out_of_scope",
        "{response:?}"
    );
    assert!(response.json().get("asked").is_none(), "{response:?}");
    // A deny rule.
    let response = get(&proxy, &pki, &format!("http://denied.test:{port}/x"));
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["reason"], "denied_by_rule", "{response:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "held: {:?}",
        started.elapsed()
    );
    assert_eq!(admin(&socket, "GET", "/v1/pending", None).1, "[]");
    let line = line_for(&proxy, "/exfil", 1);
    assert!(line.get("asked").is_none(), "{line}");
    upstream.assert_untouched("credential and deny refusals");
}

#[test]
fn at_most_64_asks_are_pending() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &["--ask-timeout", "30s"]);
    let held: Vec<std::process::Child> = (0..64)
        .map(|i| {
            support::tool("curl")
                .args([
                    "-sS",
                    "-o",
                    "/dev/null",
                    "--max-time",
                    "40",
                    "--noproxy",
                    "",
                    "-x",
                ])
                .arg(proxy.url())
                .arg(format!("http://other.test:{port}/held/{i}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("curl")
        })
        .collect();
    let pending = wait_pending(&socket, 64);
    assert_eq!(pending.len(), 64);
    let started = Instant::now();
    let response = get(&proxy, &pki, &format!("http://other.test:{port}/one-more"));
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["asked"], true, "{response:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    for ask in &pending {
        assert_eq!(answer(&socket, &ask["id"], "deny", "once").0, 200);
    }
    for mut child in held {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert_eq!(admin(&socket, "GET", "/v1/pending", None).1, "[]");
}

#[test]
fn a_proxy_in_ask_mode_needs_an_admin_api() {
    let output = run_bounded(
        std::process::Command::new(AIRLOCK).args([
            "proxy",
            "--mode",
            "ask",
            "--listen",
            "127.0.0.1:0",
            "--allow",
            "a.example.test",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(
        output.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("--mode ask needs --admin"),
        "{}",
        output.stderr
    );
}

#[test]
fn sandbox_create_refuses_ask_mode_clearly() {
    let output = run_bounded(
        std::process::Command::new(AIRLOCK).args(["sandbox", "create", "x", "--mode", "ask"]),
        Duration::from_secs(30),
    );
    assert_eq!(
        output.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        output.stderr
    );
    assert!(
        output.stderr.contains("not available here"),
        "{}",
        output.stderr
    );
}

/// A private runtime directory for one run (mode 0700, owned by the run's user).
fn runtime_dir(home: &run::RunHome) -> PathBuf {
    let dir = home.airlock_home().parent().expect("parent").join("xdg");
    std::fs::create_dir_all(&dir).expect("xdg dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    if let Some(uid) = support::test_user::uid() {
        support::test_user::chown_tree(&dir, uid);
    }
    dir
}

/// The run's socket once it exists (at most 20 s).
fn wait_socket(dir: &Path) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(dir).ok().and_then(|entries| {
            entries.flatten().map(|e| e.path()).find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("run-") && n.ends_with(".sock"))
            })
        });
        if let Some(path) = found {
            return path;
        }
        assert!(
            Instant::now() < deadline,
            "no run socket in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_run_serves_its_admin_api_outside_the_jail_only() {
    if !run::namespaces_available("a_run_serves_its_admin_api_outside_the_jail_only") {
        return;
    }
    support::need_all(&["curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let home = run::RunHome::new();
    let xdg = runtime_dir(&home);
    let sockets = xdg.join("airlock");
    let curl_line = format!(
        "curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 30 https://other.test:{port}/a"
    );
    let script = format!(
        "{curl_line}; {curl_line}; echo inside:; ls {dir} 2>&1 | head -3; \
         curl -sS --max-time 5 --unix-socket {dir}/run-*.sock http://admin/v1/pending; \
         echo inside-exit=$?",
        dir = sockets.display()
    );
    let policy = base_policy(port);
    let policy_file = home.scratch().join("policy.yaml");
    std::fs::write(&policy_file, policy).expect("policy");
    let log = home.log_path();
    let args: Vec<String> = ["--resolve", "other.test:127.0.0.1", "--upstream-ca"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            pki.upstream_ca_cert.display().to_string(),
            "--log".into(),
            log.display().to_string(),
            "--policy".into(),
            policy_file.display().to_string(),
            "--mode".into(),
            "ask".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            script,
        ])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let xdg_text = xdg.display().to_string();
    let output: BoundedOutput = std::thread::scope(|scope| {
        let running =
            scope.spawn(|| home.run_with_env(&args, &[("XDG_RUNTIME_DIR", xdg_text.as_str())]));
        let socket = wait_socket(&sockets);
        let dir_mode = std::fs::metadata(&sockets).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700, "runtime directory mode");
        let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "socket mode");
        let socket = socket.display().to_string();
        let pending = wait_pending(&socket, 1);
        assert_eq!(pending.len(), 1, "one ask, at the request: {pending:?}");
        assert_eq!(pending[0]["method"], "GET", "{pending:?}");
        assert_eq!(pending[0]["host"], "other.test", "{pending:?}");
        assert_eq!(pending[0]["path"], "/a", "{pending:?}");
        assert_eq!(answer(&socket, &pending[0]["id"], "allow", "run").0, 200);
        running.join().expect("run")
    });
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(run::code(&output), 0, "{stdout}\n{}", output.stderr);
    assert!(
        stdout.starts_with("200\n200\ninside:\n"),
        "{stdout}\n{}",
        output.stderr
    );
    let inside = stdout.split("inside:").nth(1).unwrap_or_default();
    assert!(
        !inside.contains("run-"),
        "the socket is visible inside: {inside}"
    );
    assert!(
        !inside.contains("\"id\""),
        "the socket answered inside: {inside}"
    );
    assert!(
        !inside.contains("inside-exit=0"),
        "reached from inside: {inside}"
    );
    assert!(
        output.stderr.contains("admin API listening on unix:"),
        "{}",
        output.stderr
    );
    let leftover: Vec<_> = std::fs::read_dir(&sockets)
        .expect("dir")
        .flatten()
        .collect();
    assert!(
        leftover.is_empty(),
        "the socket outlived the run: {leftover:?}"
    );
    let lines = home.audit_lines();
    let for_a: Vec<&Value> = lines.iter().filter(|l| l["path"] == "/a").collect();
    assert_eq!(for_a.len(), 2, "{lines:?}");
    assert_eq!(for_a[0]["asked"], true, "{lines:?}");
    assert_eq!(for_a[1]["rule"], "ask.run", "{lines:?}");
    assert!(for_a[1].get("asked").is_none(), "{lines:?}");
}

/// A tunnel to an unlisted host an `mcp` rule names stays an intercepted tunnel in ask
/// mode: a client that waits out the first-bytes timeout before its ClientHello (which
/// turns a tunnel that may carry raw TCP into a raw relay, or a raw ask) still meets
/// airlock's certificate, so the MCP rule sees its calls; nothing is asked at the CONNECT.
#[test]
fn a_tunnel_to_an_mcp_host_in_ask_mode_never_becomes_a_raw_relay() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let dir = tempfile::tempdir().expect("dir");
    let mcp_policy = dir.path().join("mcp.yaml");
    let mcp = "version: 1\nmcp:\n  - host: mcp.test\n    path: /mcp\n    tools:\n      deny: [run_command]\n";
    std::fs::write(&mcp_policy, mcp).expect("policy");
    let mcp_policy = mcp_policy.display().to_string();
    let extra = ["--policy", &mcp_policy, "--resolve", "mcp.test:127.0.0.1"];
    let (proxy, socket) = ask_proxy(&pki, port, &extra);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let handshake: Result<(), String> = runtime.block_on(async {
        let target = format!("mcp.test:{port}");
        let stream = support::raw::open_tunnel(proxy.port(), &target).await?;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let config = pki.client_config_trusting_proxy(&[b"http/1.1"]);
        let name = rustls::pki_types::ServerName::try_from("mcp.test".to_owned())
            .map_err(|e| e.to_string())?;
        let connecting = tokio_rustls::TlsConnector::from(config).connect(name, stream);
        tokio::time::timeout(Duration::from_secs(10), connecting)
            .await
            .map_err(|_| "TLS handshake timed out".to_owned())?
            .map_err(|e| format!("TLS handshake (not intercepted?): {e}"))?;
        Ok(())
    });
    handshake.expect("the tunnel is intercepted by airlock");
    assert_eq!(admin(&socket, "GET", "/v1/pending", None).1, "[]");
}
