//! Report mode and `airlock policy suggest` (docs/policy.md "Report mode and suggested
//! rules", docs/contract.md §2 and §5), with the real binary, real curl and loopback TLS
//! upstreams:
//!
//! - `--mode report` lets through what is refused only for host, method or path, and its
//!   audit line says `"decision":"allow","would":"deny"` with the reason;
//! - it still refuses a surrogate sent to the wrong host, a private address, a deny rule
//!   a JSON body guard and an MCP tool rule; a raw TCP tunnel to an unlisted host is relayed with a `tcp`
//!   line that says `"would":"deny"`;
//! - round trip: a report run, `policy suggest` on its log, and an enforce run with the
//!   suggestion pass the same traffic (and the suggestion passes `policy check`); both
//!   with `airlock proxy` and with `airlock run` in its jail; `sandbox create --mode
//!   report` logs would-deny lines too;
//! - `policy suggest` on bad input names `FILE:LINE` and exits 1; an unknown `--mode` is
//!   refused (ask mode: tests/it/ask_mode.rs).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support;
use crate::support::clients::BoundedOutput;
use crate::support::proxy::AIRLOCK;
use crate::support::run;
use crate::support::sandbox;
use crate::support::{
    CurlRequest, Proxy, ProxyBuilder, TestPki, Upstream, curl, curl_get, run_bounded,
};
use serde_json::Value;

const PLACEHOLDER: &str = "PLACEHOLDER_LLM_KEY_7f3a";
const REAL: &str = "sk-bench-REAL-0123456789abcdef";

/// The base policy: `GET /ok` on `allowed.test:PORT` and a deny rule. The test upstream's
/// certificate names `allowed.test` and `other.test`, both resolved to it.
fn base_policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n      ports: [{port}]\n      methods: [GET]\n      paths: [\"/ok\"]\n  deny:\n    - host: denied.example.test\n"
    )
}

/// A proxy with the base policy, both test names resolved to the loopback upstream.
fn proxy<'a>(pki: &'a TestPki, port: u16, mode: Option<&str>) -> ProxyBuilder<'a> {
    let mut builder = ProxyBuilder::new(pki)
        .policy(&base_policy(port))
        .resolve_loopback("allowed.test")
        .resolve_loopback("other.test")
        .resolve_loopback("denied.example.test");
    if let Some(mode) = mode {
        builder = builder.arg("--mode").arg(mode);
    }
    builder
}

/// The traffic of the round trip: (method, host, path) on the upstream's port.
const TRAFFIC: [(&str, &str, &str); 7] = [
    ("GET", "allowed.test", "/ok"),
    ("POST", "allowed.test", "/ok"),
    ("GET", "allowed.test", "/api/v1/items"),
    ("GET", "other.test", "/simple/requests/"),
    ("GET", "other.test", "/simple/idna/"),
    ("GET", "other.test", "/simple/certifi/"),
    ("DELETE", "other.test", "/simple/certifi/"),
];

fn send(proxy: &Proxy, pki: &TestPki, method: &str, url: &str) -> support::clients::CurlResponse {
    curl(
        proxy,
        pki,
        &CurlRequest {
            method: Some(method),
            ..CurlRequest::get(url)
        },
    )
}

fn lines_of(path: &Path) -> Vec<Value> {
    run::read_lines(path)
}

fn airlock(args: &[&str]) -> BoundedOutput {
    let mut command = std::process::Command::new(AIRLOCK);
    command.args(args);
    run_bounded(&mut command, Duration::from_secs(30))
}

fn stdout(output: &BoundedOutput) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn exit(output: &BoundedOutput) -> i32 {
    output.status.and_then(|s| s.code()).unwrap_or(-1)
}

/// `airlock policy suggest --base BASE LOG`, checked to exit 0; the YAML written to
/// `dir/suggested.yaml`, which must pass `policy check`.
fn suggest_into(dir: &Path, base: &Path, log: &Path) -> (PathBuf, String) {
    let output = airlock(&[
        "policy",
        "suggest",
        "--base",
        base.to_str().expect("utf-8"),
        log.to_str().expect("utf-8"),
    ]);
    assert_eq!(exit(&output), 0, "suggest failed: {}", output.stderr);
    let yaml = stdout(&output);
    let path = dir.join("suggested.yaml");
    std::fs::write(&path, &yaml).expect("write suggestion");
    let check = airlock(&["policy", "check", path.to_str().expect("utf-8")]);
    assert_eq!(
        exit(&check),
        0,
        "the suggestion must be valid: {}\n{yaml}",
        check.stderr
    );
    (path, yaml)
}

#[test]
fn report_mode_lets_host_method_and_path_refusals_through_with_would_deny() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let proxy = proxy(&pki, port, Some("report")).start();
    assert!(
        proxy.stderr().contains("report mode"),
        "airlock says it is in report mode: {}",
        proxy.stderr()
    );
    let cases = [
        ("GET", "other.test", "/simple/x/", "host_not_allowed"),
        ("POST", "allowed.test", "/ok", "method_not_allowed"),
        ("GET", "allowed.test", "/other", "path_not_allowed"),
    ];
    for (method, host, path, reason) in cases {
        let url = format!("https://{host}:{port}{path}");
        let response = send(&proxy, &pki, method, &url);
        assert_eq!(
            response.status, 200,
            "{method} {url} passes in report mode: {response:?}"
        );
        let line = proxy.audit_line_where(&format!("for {method} {host}{path}"), |l| {
            l["method"] == method && l["host"] == host && l["path"] == path
        });
        assert_eq!(line["decision"], "allow", "{line}");
        assert_eq!(line["would"], "deny", "{line}");
        assert_eq!(line["reason"], reason, "{line}");
        assert_eq!(line["status"], 200, "{line}");
        assert!(line["rule"].is_null(), "{line}");
    }
    assert_eq!(upstream.hit_count(), 3, "{:?}", upstream.hits());
    // What the policy allows is logged as before, without `would`.
    let ok = send(
        &proxy,
        &pki,
        "GET",
        &format!("https://allowed.test:{port}/ok"),
    );
    assert_eq!(ok.status, 200, "{ok:?}");
    let line = proxy.audit_line_where("for GET /ok", |l| {
        l["path"] == "/ok" && l["method"] == "GET"
    });
    assert_eq!(line["decision"], "allow", "{line}");
    assert!(line.get("would").is_none(), "{line}");
    assert!(line.get("reason").is_none(), "{line}");

    // The same request under the default mode is refused.
    let enforcing = proxy_enforcing(&pki, port);
    let refused = send(
        &enforcing,
        &pki,
        "GET",
        &format!("https://other.test:{port}/simple/x/"),
    );
    assert!(
        refused.status == 403 || refused.connect_status == 403,
        "enforce mode refuses: {refused:?}"
    );
    assert!(
        !enforcing.stderr().contains("report mode"),
        "{}",
        enforcing.stderr()
    );
}

fn proxy_enforcing(pki: &TestPki, port: u16) -> Proxy {
    proxy(pki, port, None).start()
}

#[test]
fn report_mode_still_refuses_credentials_private_addresses_and_deny_rules() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let proxy = proxy(&pki, port, Some("report"))
        .secret(&format!("LLM_KEY={PLACEHOLDER}={REAL}@allowed.test"))
        .start();

    // A surrogate sent to a host that is not its own: the tripwire, not a would-deny.
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let url = format!("https://other.test:{port}/exfil");
    let response = curl_get(&proxy, &pki, &url, &[&auth]);
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(
        response.json()["reason"],
        "secret_out_of_scope",
        "{response:?}"
    );
    let line = proxy.audit_line_where("for /exfil", |l| l["path"] == "/exfil");
    assert_eq!(line["decision"], "deny", "{line}");
    assert_eq!(line["reason"], "secret_out_of_scope", "{line}");
    assert!(line.get("would").is_none(), "{line}");

    // A private address the operator did not name (an IP literal, no --resolve).
    let url = format!("https://127.0.0.1:{port}/private");
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["reason"], "private_address", "{response:?}");
    let line = proxy.audit_line_where("for /private", |l| l["path"] == "/private");
    assert_eq!(line["decision"], "deny", "{line}");
    assert!(line.get("would").is_none(), "{line}");

    // A deny rule.
    let url = format!("https://denied.example.test:{port}/denied");
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert!(
        response.status == 403 || response.connect_status == 403,
        "{response:?}"
    );
    proxy.audit_line_where("denied_by_rule", |l| {
        l["reason"] == "denied_by_rule" && l["decision"] == "deny"
    });
    upstream.assert_untouched("report mode relaxes no credential, address or deny rule");

    // The surrogate on its own host is still swapped (and the response scrubbed).
    let url = format!("https://allowed.test:{port}/echo/own");
    let response = curl_get(&proxy, &pki, &url, &[&auth]);
    assert_eq!(response.status, 200, "{response:?}");
    let hits = upstream.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].header_values("authorization"),
        vec![format!("Bearer {REAL}")]
    );
    assert!(!String::from_utf8_lossy(&response.body).contains(REAL));
    let line = proxy.audit_line_where("for /echo/own", |l| l["path"] == "/echo/own");
    assert_eq!(
        line["would"], "deny",
        "path_not_allowed, let through: {line}"
    );
    assert_eq!(line["secrets"], serde_json::json!(["LLM_KEY"]), "{line}");
    assert!(!proxy.audit_log_text().contains(REAL));
}

#[test]
fn report_then_suggest_then_enforce_passes_the_same_traffic() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let work = tempfile::tempdir().expect("tempdir");
    let base = work.path().join("base.yaml");
    std::fs::write(&base, base_policy(port)).expect("write base");

    let mut report = proxy(&pki, port, Some("report")).start();
    for (method, host, path) in TRAFFIC {
        let response = send(
            &report,
            &pki,
            method,
            &format!("https://{host}:{port}{path}"),
        );
        assert_eq!(
            response.status, 200,
            "report: {method} {host}{path}: {response:?}"
        );
    }
    let private = curl(
        &report,
        &pki,
        &CurlRequest::get(&format!("https://127.0.0.1:{port}/p")),
    );
    assert_eq!(private.status, 403, "{private:?}");
    report.audit(TRAFFIC.len() + 1);
    assert!(
        report.terminate(Duration::from_secs(10)).is_some(),
        "the proxy stops"
    );
    let log = work.path().join("report.jsonl");
    std::fs::copy(report.audit_log_path(), &log).expect("keep the log");
    let would = lines_of(&log)
        .iter()
        .filter(|l| l["would"] == "deny")
        .count();
    assert_eq!(
        would,
        TRAFFIC.len() - 1,
        "every request but GET /ok would be refused"
    );

    let (suggested, yaml) = suggest_into(work.path(), &base, &log);
    assert!(
        yaml.contains("\"/simple/**\""),
        "shared prefix generalised: {yaml}"
    );
    assert!(yaml.contains(&format!("ports: [{port}]")), "{yaml}");
    assert!(
        !yaml.contains("- host: \"127.0.0.1\""),
        "never a private address: {yaml}"
    );
    assert!(yaml.contains("# not suggested: 127.0.0.1"), "{yaml}");
    assert!(
        yaml.contains("request(s): host_not_allowed 4"),
        "counts: {yaml}"
    );

    let mut enforce = ProxyBuilder::new(&pki)
        .policy(&base_policy(port))
        .arg("--policy")
        .arg(suggested.to_str().expect("utf-8"))
        .resolve_loopback("allowed.test")
        .resolve_loopback("other.test")
        .start();
    for (method, host, path) in TRAFFIC {
        let response = send(
            &enforce,
            &pki,
            method,
            &format!("https://{host}:{port}{path}"),
        );
        assert_eq!(
            response.status, 200,
            "enforce: {method} {host}{path}: {response:?}\n{yaml}"
        );
    }
    // The suggestion is narrow: other paths and methods stay refused.
    for (method, path) in [("GET", "/packages/x.whl"), ("PUT", "/simple/x/")] {
        let url = format!("https://other.test:{port}{path}");
        let response = send(&enforce, &pki, method, &url);
        assert_eq!(
            response.status, 403,
            "{method} {path} stays refused: {response:?}\n{yaml}"
        );
    }
    enforce.audit(TRAFFIC.len() + 2);
    assert!(enforce.terminate(Duration::from_secs(10)).is_some());
    let lines = run::read_lines(enforce.audit_log_path());
    let allowed = lines.iter().filter(|l| l["decision"] == "allow").count();
    assert_eq!(allowed, TRAFFIC.len(), "{lines:?}");
    assert!(lines.iter().all(|l| l.get("would").is_none()), "{lines:?}");

    // Suggested again against the base and the suggestion: nothing left.
    let again = airlock(&[
        "policy",
        "suggest",
        "--base",
        base.to_str().expect("utf-8"),
        "--base",
        suggested.to_str().expect("utf-8"),
        log.to_str().expect("utf-8"),
    ]);
    assert_eq!(exit(&again), 0, "{}", again.stderr);
    assert!(
        stdout(&again).contains("nothing to suggest"),
        "{}",
        stdout(&again)
    );
}

#[test]
fn suggest_names_the_file_and_line_of_bad_input() {
    let work = tempfile::tempdir().expect("tempdir");
    let log = work.path().join("audit.jsonl");
    let good = r#"{"ts":"t","kind":"http","decision":"deny","rule":null,"reason":"host_not_allowed","method":"GET","scheme":"https","host":"a.example.test","port":443,"path":"/"}"#;
    std::fs::write(&log, format!("{good}\n{{not json\n")).expect("write log");
    let path = log.to_str().expect("utf-8");
    let output = airlock(&["policy", "suggest", path]);
    assert_eq!(exit(&output), 1, "{}", output.stderr);
    assert!(
        output.stderr.contains(&format!("{path}:2:")),
        "{}",
        output.stderr
    );
    assert!(output.stdout.is_empty(), "no half suggestion on stdout");

    let missing = work.path().join("missing.jsonl");
    let output = airlock(&["policy", "suggest", missing.to_str().expect("utf-8")]);
    assert_eq!(exit(&output), 1, "{}", output.stderr);
    assert!(
        output.stderr.contains("missing.jsonl: cannot read"),
        "{}",
        output.stderr
    );

    let output = airlock(&["policy", "suggest"]);
    assert_eq!(exit(&output), 2, "usage error: {}", output.stderr);

    std::fs::write(&log, format!("{good}\n")).expect("write log");
    let output = airlock(&["policy", "suggest", path]);
    assert_eq!(exit(&output), 0, "{}", output.stderr);
    assert!(
        stdout(&output).contains("- host: \"a.example.test\""),
        "{}",
        stdout(&output)
    );
}

#[test]
fn an_unknown_mode_is_refused_with_a_clear_message() {
    let output = airlock(&["proxy", "--mode", "loud", "--listen", "127.0.0.1:0"]);
    assert_eq!(exit(&output), 2, "{}", output.stderr);
    assert!(output.stderr.contains("`ask`"), "{}", output.stderr);
    let output = airlock(&["run", "--mode", "loud", "--", "true"]);
    assert_eq!(exit(&output), 125, "{}", output.stderr);
    assert!(output.stderr.contains("unknown mode"), "{}", output.stderr);
}

/// `airlock run` flags reaching the loopback upstream as `allowed.test` and
/// `other.test`, with the base policy file and the given extra flags.
fn run_flags(
    pki: &TestPki,
    home: &run::RunHome,
    policies: &[&Path],
    extra: &[&str],
) -> Vec<String> {
    let mut flags: Vec<String> = vec![
        "--resolve".into(),
        "allowed.test:127.0.0.1".into(),
        "--resolve".into(),
        "other.test:127.0.0.1".into(),
        "--upstream-ca".into(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
        "--log".into(),
        home.log_path().to_string_lossy().into_owned(),
    ];
    for policy in policies {
        flags.push("--policy".into());
        flags.push(policy.to_string_lossy().into_owned());
    }
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags
}

/// A shell script sending TRAFFIC with curl, printing each status on its own line.
fn traffic_script(port: u16) -> String {
    TRAFFIC
        .iter()
        .map(|(method, host, path)| {
            format!("curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 -X {method} https://{host}:{port}{path}; ")
        })
        .collect()
}

fn run_traffic(home: &run::RunHome, flags: &[String], port: u16) -> (Vec<String>, String) {
    let script = traffic_script(port);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let output = home.run(&args);
    assert_eq!(run::code(&output), 0, "{}", output.stderr);
    let statuses = stdout(&output).lines().map(str::to_owned).collect();
    (statuses, output.stderr)
}

#[test]
fn a_report_run_in_the_jail_suggests_a_policy_that_an_enforce_run_passes_with() {
    if !run::namespaces_available(
        "a_report_run_in_the_jail_suggests_a_policy_that_an_enforce_run_passes_with",
    ) {
        return;
    }
    support::need_all(&["curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let work = tempfile::tempdir().expect("tempdir");
    let base = work.path().join("base.yaml");
    std::fs::write(&base, base_policy(port)).expect("write base");

    let enforce_home = run::RunHome::new();
    let (statuses, _) = run_traffic(
        &enforce_home,
        &run_flags(&pki, &enforce_home, &[&base], &[]),
        port,
    );
    assert_eq!(
        statuses.iter().filter(|s| *s == "403").count(),
        TRAFFIC.len() - 1,
        "{statuses:?}"
    );

    let report_home = run::RunHome::new();
    let flags = run_flags(&pki, &report_home, &[&base], &["--mode", "report"]);
    let (statuses, stderr) = run_traffic(&report_home, &flags, port);
    assert!(
        statuses.iter().all(|s| s == "200"),
        "report run: {statuses:?}\n{stderr}"
    );
    assert!(stderr.contains("airlock: report mode:"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} requests would have been refused",
            TRAFFIC.len() - 1
        )),
        "summary: {stderr}"
    );
    let lines = report_home.audit_lines();
    assert!(
        lines.iter().any(|l| l["would"] == "deny"
            && l["decision"] == "allow"
            && l["host"] == "other.test"
            && l["reason"] == "host_not_allowed"),
        "{lines:?}"
    );

    let (suggested, yaml) = suggest_into(work.path(), &base, &report_home.log_path());
    let after_home = run::RunHome::new();
    let flags = run_flags(&pki, &after_home, &[&base, &suggested], &[]);
    let (statuses, stderr) = run_traffic(&after_home, &flags, port);
    assert!(
        statuses.iter().all(|s| s == "200"),
        "enforce with the suggestion: {statuses:?}\n{stderr}\n{yaml}"
    );
    assert!(!stderr.contains("refused"), "{stderr}");
}

#[test]
fn report_mode_keeps_json_body_guards() {
    support::need_all(&["python3"]);
    let pki = TestPki::new();
    let server = support::fixture_server::FixtureServer::body_echo(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .json_deny_guards(server.port)
        .resolve_loopback("localhost")
        .arg("--mode")
        .arg("report")
        .start();
    let body = r#"{"tools":[{"type":"web_search"}]}"#;
    let guarded = format!("https://allowed.test:{}/v1/responses", server.port);
    let response = support::clients::curl_post_json(&proxy, &pki, &guarded, body, &[]);
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["reason"], "denied_by_rule", "{response:?}");
    assert_eq!(server.hits(), 0, "{:?}", server.hit_lines());
    // A host the policy does not list has no guard: report mode lets it through.
    let unlisted = format!("https://localhost:{}/v1/responses", server.port);
    let response = support::clients::curl_post_json(&proxy, &pki, &unlisted, body, &[]);
    assert_eq!(response.status, 200, "{response:?}");
    let line = proxy.audit_line_where("for localhost", |l| l["host"] == "localhost");
    assert_eq!(line["would"], "deny", "{line}");
    assert_eq!(line["reason"], "host_not_allowed", "{line}");
}

/// Opens a CONNECT tunnel to `target` through `proxy` and returns the proxy's answer line;
/// on 200, sends `bytes` through it and waits (bounded) for the tunnel to end.
pub(crate) fn raw_tunnel(proxy: &Proxy, target: &str, bytes: &[u8]) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    )
    .expect("send CONNECT");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut status = String::new();
    reader.read_line(&mut status).expect("status line");
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    if status.contains(" 200") {
        stream.write_all(bytes).expect("send bytes");
        let mut rest = Vec::new();
        let _ = reader.read_to_end(&mut rest);
    }
    status
}

#[test]
fn report_mode_relays_raw_tcp_to_an_unlisted_host_with_a_would_deny_line() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let target = format!("other.test:{port}");
    let enforcing = proxy(&pki, port, None).start();
    let status = raw_tunnel(&enforcing, &target, b"");
    assert!(
        status.contains(" 403"),
        "enforce refuses the CONNECT: {status}"
    );
    upstream.assert_untouched("enforce mode");

    let report = proxy(&pki, port, Some("report")).start();
    let status = raw_tunnel(&report, &target, b"\x00\x01not http, not tls\r\n");
    assert!(
        status.contains(" 200"),
        "report mode opens the tunnel: {status}"
    );
    let line = report.audit_line_where("tcp to other.test", |l| {
        l["kind"] == "tcp" && l["host"] == "other.test"
    });
    assert_eq!(line["decision"], "allow", "{line}");
    assert_eq!(line["would"], "deny", "{line}");
    assert_eq!(line["reason"], "host_not_allowed", "{line}");
    assert!(
        upstream.connections() >= 1,
        "the bytes were relayed to the upstream"
    );
}

#[test]
fn a_sandbox_created_in_report_mode_lets_an_unlisted_host_through() {
    if !run::namespaces_available("a_sandbox_created_in_report_mode_lets_an_unlisted_host_through")
    {
        return;
    }
    support::need_all(&["curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let home = sandbox::SandboxHome::new();
    let ca = pki.upstream_ca_cert.to_string_lossy().into_owned();
    let allow = format!("allowed.test:{port}");
    let output = home.run(&[
        "create",
        "learn",
        "--resolve",
        "other.test:127.0.0.1",
        "--upstream-ca",
        &ca,
        "--allow",
        &allow,
        "--mode",
        "report",
    ]);
    assert_eq!(sandbox::status(&output), 0, "create: {}", output.stderr);
    assert!(output.stderr.contains("report mode"), "{}", output.stderr);
    let script = format!(
        "curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 https://other.test:{port}/learned"
    );
    let exec = home.exec_json("learn", &script);
    assert_eq!(exec.stdout, ["200"], "{exec:?}");
    let audit = home.audit_text("learn");
    let line = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["path"] == "/learned")
        .unwrap_or_else(|| panic!("no line for /learned: {audit}"));
    assert_eq!(line["decision"], "allow", "{line}");
    assert_eq!(line["would"], "deny", "{line}");
    assert_eq!(line["reason"], "host_not_allowed", "{line}");
    home.must(&["rm", "learn"]);
}

fn tool_call(id: u32, name: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{}}}}}}"#
    )
}

#[test]
fn report_mode_keeps_mcp_tool_rules_on_a_relaxed_request() {
    support::need_all(&["python3"]);
    let pki = TestPki::new();
    let server = support::fixture_server::FixtureServer::mcp(&pki);
    // POST is not allowed on the MCP host: report mode lets it through, the tool rule
    // still decides each call.
    let yaml = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n      methods: [GET]\n\
         mcp:\n  - host: localhost\n    path: /mcp\n    tools: {{deny: [run_command]}}\n",
        port = server.port
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&yaml)
        .resolve_loopback("localhost")
        .arg("--mode")
        .arg("report")
        .start();
    let url = format!("https://localhost:{}/mcp", server.port);
    let post = |body: &str| support::clients::curl_post_json(&proxy, &pki, &url, body, &[]);

    let denied = post(&tool_call(1, "run_command"));
    assert_eq!(denied.status, 200, "{denied:?}");
    let answer = denied.json();
    assert_eq!(
        answer["error"]["data"]["reason"], "mcp_tool_denied",
        "{answer}"
    );
    assert!(
        !server.hit_lines().join("\n").contains("run_command"),
        "a denied call never reaches the server: {:?}",
        server.hit_lines()
    );
    let line = proxy.audit_line_where("mcp deny", |l| l["kind"] == "mcp");
    assert_eq!(line["decision"], "deny", "{line}");
    assert_eq!(line["reason"], "mcp_tool_denied", "{line}");

    let allowed = post(&tool_call(2, "read_file"));
    assert_eq!(allowed.status, 200, "{allowed:?}");
    assert!(
        allowed.json().get("error").is_none(),
        "{:?}",
        allowed.json()
    );
    let line = proxy.audit_line_where("the relaxed POST", |l| {
        l["kind"] == "http" && l["method"] == "POST" && l["status"] == 200
    });
    assert_eq!(line["would"], "deny", "{line}");
    assert_eq!(line["reason"], "method_not_allowed", "{line}");
}
