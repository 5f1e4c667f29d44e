//! `routes:` (docs/policy.md "Routes"): plain-HTTP requests to `airlock.internal` are
//! forwarded to the route's upstream over verified TLS, the route's secret injected with
//! its real value (whatever the client sent in that header), the longest prefix winning; a
//! path matching no route is refused with the 403 body of docs/contract.md §4,
//! canonicalisation happens before prefix matching, the response is scrubbed and the real
//! value never shows in a response or the log. Also: `policy check` accepts routes and
//! locates a route secret without `inject`, and a route works inside `airlock run`
//! (namespace jail).

use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::clients::run_bounded;
use crate::support::run::{RunHome, code, namespaces_available};
use crate::support::{
    CurlRequest, ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_refusal, curl,
    curl_get, raw,
};
use serde_json::Value;

const REAL: &str = "sk-route-REAL-0123456789abcdef";
const SURROGATE: &str = "sk-route-FAKE-fedcba9876543210";

/// Routes to the loopback upstream: `/llm/fake/` with the key, `/llm/` without, `/r/` at
/// the upstream's root with the key. The key's own hosts do not include the upstream: the
/// route is what sends it there.
fn policy(port: u16) -> String {
    format!(
        "version: 1
secrets:
  LLM_KEY:
    value: \"{REAL}\"
    surrogate: \"{SURROGATE}\"
    hosts: [api.example.invalid]
    inject: {{header: Authorization, format: \"Bearer {{value}}\"}}
routes:
  - prefix: /llm/
    upstream: https://other.test:{port}/general/
  - prefix: /llm/fake/
    upstream: https://allowed.test:{port}/api/
    secret: LLM_KEY
  - prefix: /r/
    upstream: https://allowed.test:{port}/
    secret: LLM_KEY
  - prefix: /private/
    upstream: https://127.0.0.1:{port}/
"
    )
}

fn start(pki: &TestPki, upstream: &Upstream) -> Proxy {
    ProxyBuilder::new(pki)
        .policy(&policy(upstream.port()))
        .resolve_loopback("allowed.test")
        .resolve_loopback("other.test")
        .start()
}

fn assert_real_value_never_logged(proxy: &Proxy) {
    let log = proxy.audit_log_text();
    assert!(
        !log.contains(REAL),
        "the real key is in the audit log:\n{log}"
    );
    assert!(!proxy.stderr().contains(REAL), "the real key is on stderr");
}

/// A raw absolute-form GET of `http://airlock.internal{path}` sent to the proxy (curl
/// would resolve dot segments itself).
fn raw_get(proxy: &Proxy, path: &str) -> support::RawResponse {
    let request = format!(
        "GET http://airlock.internal{path} HTTP/1.1\r\nHost: airlock.internal\r\nConnection: close\r\n\r\n"
    );
    raw::plain(proxy.port(), request.as_bytes())
}

#[test]
fn a_route_forwards_to_its_upstream_with_the_real_key() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let port = upstream.port();

    let surrogate_sent = format!("Authorization: Bearer {SURROGATE}");
    let client_sent: [&[&str]; 3] = [
        &[],
        &["Authorization: Bearer someone-elses-key"],
        &[&surrogate_sent],
    ];
    for (index, headers) in client_sent.into_iter().enumerate() {
        let response = curl_get(
            &proxy,
            &pki,
            "http://airlock.internal/llm/fake/v1/chat?stream=1",
            headers,
        );
        assert_eq!(response.status, 200, "{headers:?}: {response:?}");
        let hits = upstream.hits();
        let hit = &hits[index];
        assert_eq!(hit.target, "/api/v1/chat?stream=1", "{hit:?}");
        assert_eq!(hit.authority, format!("allowed.test:{port}"), "{hit:?}");
        assert_eq!(
            hit.header_values("authorization"),
            vec![format!("Bearer {REAL}")],
            "the route's inject replaces whatever the client sent ({headers:?})"
        );
        let body = String::from_utf8_lossy(&response.body);
        assert!(!body.contains(REAL), "the echo is scrubbed: {body}");
        assert!(
            body.contains(SURROGATE),
            "scrubbed to the surrogate: {body}"
        );
    }
    let line = proxy.audit_line_where("for the routed request", |l| {
        l["kind"] == "http" && l["decision"] == "allow"
    });
    support::assert_http_audit_shape(&line);
    assert_eq!(line["rule"], "routes[1]", "{line}");
    assert_eq!(line["host"], "allowed.test", "{line}");
    assert_eq!(line["port"], port, "{line}");
    assert_eq!(line["scheme"], "https", "{line}");
    assert_eq!(line["path"], "/api/v1/chat", "{line}");
    assert_eq!(line["secrets"], serde_json::json!(["LLM_KEY"]), "{line}");

    // The longest prefix wins: `/llm/other` takes the route without a secret.
    let response = curl_get(
        &proxy,
        &pki,
        "http://airlock.internal/llm/other/x",
        &["Authorization: Bearer mine"],
    );
    assert_eq!(response.status, 200, "{response:?}");
    let hits = upstream.hits();
    let hit = hits.last().expect("a hit");
    assert_eq!(hit.target, "/general/other/x", "{hit:?}");
    assert_eq!(hit.authority, format!("other.test:{port}"), "{hit:?}");
    assert_eq!(
        hit.header_values("authorization"),
        vec!["Bearer mine".to_owned()]
    );

    // Reverse-proxy use: an origin-form request sent straight to the listen address.
    let request = format!(
        "POST /llm/fake/v1/chat HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        proxy.port()
    );
    let response = raw::plain(proxy.port(), request.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    let hits = upstream.hits();
    let hit = hits.last().expect("a hit");
    assert_eq!(
        (hit.method.as_str(), hit.target.as_str()),
        ("POST", "/api/v1/chat")
    );
    assert_eq!(
        hit.header_values("authorization"),
        vec![format!("Bearer {REAL}")]
    );
    assert_real_value_never_logged(&proxy);
}

#[test]
fn the_real_key_never_comes_back_in_any_encoding() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let response = curl_get(
        &proxy,
        &pki,
        "http://airlock.internal/r/reflect",
        &[&format!("X-Reflect: {SURROGATE}")],
    );
    assert_eq!(response.status, 200, "{response:?}");
    let hits = upstream.hits();
    assert_eq!(
        hits[0].header_values("x-reflect"),
        vec![REAL.to_owned()],
        "the surrogate is swapped on the route's upstream"
    );
    let everything = format!(
        "{}{}",
        response.header_dump,
        String::from_utf8_lossy(&response.body)
    );
    for (form, encoded) in support::encodings::leak_forms(REAL) {
        assert!(
            !everything.contains(&encoded),
            "the real key came back ({form}): {everything}"
        );
    }
    assert_real_value_never_logged(&proxy);
}

#[test]
fn a_path_matching_no_route_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let response = curl_get(&proxy, &pki, "http://airlock.internal/nope/x?k=v", &[]);
    let body = assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "path_not_allowed",
            method: "GET",
            host: "airlock.internal",
            path: Some("/nope/x"),
        },
    );
    assert!(
        body["hint"].as_str().unwrap_or_default().contains("routes"),
        "{body}"
    );
    let line = proxy.audit_line_where("for the refusal", |l| l["decision"] == "deny");
    support::assert_http_audit_shape(&line);
    assert_eq!(line["host"], "airlock.internal", "{line}");
    assert_eq!(line["reason"], "path_not_allowed", "{line}");
    assert_eq!(line["path"], "/nope/x", "{line}");
    upstream.assert_untouched("a path matching no route");

    // Over TLS the reserved name is never a route.
    let response = curl(
        &proxy,
        &pki,
        &CurlRequest::get("https://airlock.internal/llm/fake/v1/chat"),
    );
    assert_ne!(response.status, 200, "{response:?}");
    upstream.assert_untouched("https://airlock.internal");

    // A route's upstream still passes the private-address guard.
    let response = curl_get(&proxy, &pki, "http://airlock.internal/private/x", &[]);
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "private_address",
            method: "GET",
            host: "127.0.0.1",
            path: Some("/x"),
        },
    );
    upstream.assert_untouched("a route to a private address");
}

#[test]
fn a_path_cannot_escape_its_prefix() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    // Refused: out of every prefix, or unsafe.
    for (path, reason) in [
        ("/llm/fake/../../x", "path_not_allowed"),
        ("/llm/fake/%2e%2e/%2E%2E/x", "path_not_allowed"),
        ("/llm/fake/a%2fb", "path_unsafe"),
        ("/llm/fake/%252e%252e/x", "path_unsafe"),
        ("/llm/fake/a%5cb", "path_unsafe"),
    ] {
        let response = raw_get(&proxy, path);
        assert_eq!(response.status, 403, "{path}: {response:?}");
        assert_eq!(response.json()["reason"], reason, "{path}");
    }
    upstream.assert_untouched("escape attempts");
    // Kept inside a prefix: resolved first, then matched.
    for (path, target, authority, keyed) in [
        ("/llm/fake/v1/../v2", "/api/v2", "allowed.test", true),
        (
            "/llm/fake/./v1/%2e/chat",
            "/api/v1/chat",
            "allowed.test",
            true,
        ),
        ("/llm/fake/..", "/general/", "other.test", false),
        ("/llm/fake/%2e%2e/x", "/general/x", "other.test", false),
        ("/llm/fake/a%20b", "/api/a%20b", "allowed.test", true),
    ] {
        let response = raw_get(&proxy, path);
        assert_eq!(response.status, 200, "{path}: {response:?}");
        let hits = upstream.hits();
        let hit = hits.last().expect("a hit");
        assert_eq!(hit.target, target, "{path}");
        assert_eq!(
            hit.authority,
            format!("{authority}:{}", upstream.port()),
            "{path}"
        );
        assert_eq!(
            hit.header_values("authorization")
                .contains(&format!("Bearer {REAL}")),
            keyed,
            "{path}: the key goes only where its route points"
        );
    }
    assert_real_value_never_logged(&proxy);
}

/// `airlock policy SUBCOMMAND --policy FILE ARGS...` (`check FILE ARGS...` for `check`)
/// with `text` as FILE: exit status, stdout, stderr.
fn airlock_policy(subcommand: &str, text: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, text).expect("write policy");
    let mut command = Command::new(support::proxy::AIRLOCK);
    command.args(["policy", subcommand]);
    if subcommand != "check" {
        command.arg("--policy");
    }
    command.arg(&file).args(args);
    let output = run_bounded(&mut command, Duration::from_secs(20));
    (
        output.status.and_then(|s| s.code()).unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.stderr,
    )
}

#[test]
fn policy_check_and_explain_know_routes() {
    let (status, stdout, stderr) = airlock_policy("check", &policy(8443), &[]);
    assert_eq!(status, 0, "{stdout}{stderr}");
    assert!(stdout.contains("4 routes"), "{stdout}");

    for (url, status, expected) in [
        (
            "http://airlock.internal/llm/fake/../fake/v1",
            0,
            r#"{"decision":"allow","rule":"routes[1]","reason":null,"secrets":["LLM_KEY"]}"#,
        ),
        (
            "http://airlock.internal/llm/x",
            0,
            r#"{"decision":"allow","rule":"routes[0]","reason":null,"secrets":[]}"#,
        ),
        (
            "http://airlock.internal/nope",
            1,
            r#"{"decision":"deny","rule":null,"reason":"path_not_allowed","secrets":[]}"#,
        ),
        (
            "https://airlock.internal/llm/fake/v1",
            1,
            r#"{"decision":"deny","rule":null,"reason":"host_not_allowed","secrets":[]}"#,
        ),
        (
            "http://airlock.internal/private/x",
            1,
            r#"{"decision":"deny","rule":null,"reason":"private_address","secrets":[]}"#,
        ),
    ] {
        let (code, stdout, stderr) =
            airlock_policy("explain", &policy(8443), &["--json", "GET", url]);
        assert_eq!((code, stdout.trim()), (status, expected), "{url}: {stderr}");
    }

    let without_inject = "version: 1
secrets:
  K:
    env: K
    hosts: [a.example]
routes:
  - prefix: /a/
    upstream: https://a.example/
    secret: K
";
    let (status, stdout, stderr) = airlock_policy("check", without_inject, &[]);
    assert_eq!(status, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("p.yaml:9:13") && stderr.contains("has no `inject`"),
        "{stderr}"
    );
}

#[test]
fn a_route_works_inside_airlock_run() {
    if !namespaces_available("a_route_works_inside_airlock_run") {
        return;
    }
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let policy_file = home.scratch().join("routes.yaml");
    std::fs::write(&policy_file, policy(upstream.port())).expect("write policy");
    let log = home.log_path();
    let script = "curl -sS --max-time 20 -H \"Authorization: Bearer $LLM_KEY\" \
                  http://airlock.internal/llm/fake/v1/chat; echo; \
                  curl -sS --max-time 20 -o /dev/null -w '%{http_code}\\n' \
                  http://airlock.internal/nope";
    let output = home.run(&[
        "--policy",
        &policy_file.to_string_lossy(),
        "--resolve",
        "allowed.test:127.0.0.1",
        "--upstream-ca",
        &pki.upstream_ca_cert.to_string_lossy(),
        "--log",
        &log.to_string_lossy(),
        "--",
        "sh",
        "-c",
        script,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(code(&output), 0, "{stdout}\n{}", output.stderr);
    let mut lines = stdout.lines();
    let echo: Value = serde_json::from_str(lines.next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    assert_eq!(echo["path"], "/api/v1/chat", "{stdout}");
    assert!(!stdout.contains(REAL), "{stdout}");
    assert_eq!(lines.next(), Some("403"), "{stdout}");
    let hits = upstream.hits();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(
        hits[0].header_values("authorization"),
        vec![format!("Bearer {REAL}")]
    );
    let audit = home.audit_lines();
    assert!(
        audit
            .iter()
            .any(|l| l["decision"] == "allow" && l["rule"] == "routes[1]"),
        "{audit:?}"
    );
    assert!(
        audit.iter().any(|l| l["decision"] == "deny"
            && l["host"] == "airlock.internal"
            && l["reason"] == "path_not_allowed"),
        "{audit:?}"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!text.contains(REAL), "the real key is in the log");
}
