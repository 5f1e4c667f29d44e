//! The audit log (docs/contract.md §5): one JSON line per decision, query values redacted
//! (the raw value appears nowhere in the file), and a log that cannot be opened stops the
//! proxy from starting.

mod support;

use std::time::Duration;

use support::{CurlRequest, ProxyBuilder, TestPki, Upstream, assert_http_audit_shape, curl};

#[test]
fn one_line_per_decision() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET localhost:{}/ok/**", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let base = format!("https://localhost:{}", upstream.port());
    let requests = [
        ("GET", "/ok/1", 200),
        ("GET", "/ok/2", 200),
        ("GET", "/nope", 403),
        ("POST", "/ok/3", 403),
        ("GET", "/ok/4", 200),
    ];
    for (method, path, status) in requests {
        let url = format!("{base}{path}");
        let response = curl(
            &proxy,
            &pki,
            &CurlRequest {
                method: Some(method),
                ..CurlRequest::get(&url)
            },
        );
        assert_eq!(response.status, status, "{method} {path}: {response:?}");
    }
    let lines = proxy.audit(requests.len());
    std::thread::sleep(Duration::from_millis(300));
    let lines_later = proxy.audit(requests.len());
    assert_eq!(
        lines.len(),
        requests.len(),
        "exactly one line per decision: {lines:?}"
    );
    assert_eq!(
        lines_later.len(),
        requests.len(),
        "no late extra lines: {lines_later:?}"
    );
    for (method, path, status) in requests {
        let matching: Vec<_> = lines.iter().filter(|l| l["path"] == path).collect();
        assert_eq!(matching.len(), 1, "one line for {path}: {lines:?}");
        let line = matching[0];
        assert_http_audit_shape(line);
        assert_eq!(line["method"], method, "{line}");
        assert_eq!(line["host"], "localhost", "{line}");
        assert_eq!(line["port"], upstream.port(), "{line}");
        assert_eq!(line["scheme"], "https", "{line}");
        if status == 200 {
            assert_eq!(line["decision"], "allow", "{line}");
            assert_eq!(line["status"], 200, "{line}");
        } else {
            assert_eq!(line["decision"], "deny", "{line}");
        }
    }
    let reason_for = |path: &str| {
        lines
            .iter()
            .find(|l| l["path"] == path)
            .map(|l| l["reason"].clone())
            .unwrap_or_default()
    };
    assert_eq!(reason_for("/nope"), "path_not_allowed");
    assert_eq!(reason_for("/ok/3"), "method_not_allowed");
    assert_eq!(upstream.hit_count(), 3);
}

#[test]
fn query_values_are_redacted_everywhere_in_the_log() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}/echo/**", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let secret_value = "tok-abc-93f1e";
    let url = format!(
        "https://localhost:{}/echo/q?token={secret_value}&x=1",
        upstream.port()
    );
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        response.json()["query"],
        format!("token={secret_value}&x=1"),
        "the upstream gets the query unchanged"
    );
    let refused_url = format!(
        "https://localhost:{}/other?token={secret_value}&x=1",
        upstream.port()
    );
    let refused = curl(&proxy, &pki, &CurlRequest::get(&refused_url));
    assert_eq!(refused.status, 403, "{refused:?}");

    let lines = proxy.audit(2);
    let allowed = lines
        .iter()
        .find(|l| l["path"] == "/echo/q")
        .unwrap_or_else(|| panic!("no line for /echo/q: {lines:?}"));
    assert_eq!(allowed["query"], "token=REDACTED&x=REDACTED", "{allowed}");
    let denied = lines
        .iter()
        .find(|l| l["path"] == "/other")
        .unwrap_or_else(|| panic!("no line for /other: {lines:?}"));
    assert_eq!(denied["query"], "token=REDACTED&x=REDACTED", "{denied}");
    let text = proxy.audit_log_text();
    assert!(
        !text.contains(secret_value) && !text.contains("abc-93f1e"),
        "a query value leaked into the audit log:\n{text}"
    );
    assert!(
        !proxy.stderr().contains(secret_value),
        "a query value leaked onto stderr"
    );
}

#[test]
fn an_unopenable_log_stops_the_proxy_at_start() {
    let pki = TestPki::new();
    let target = "/nonexistent-dir-airlock-test/audit.jsonl";
    let (status, stderr) = ProxyBuilder::new(&pki)
        .allow("localhost:443")
        .log_target(target)
        .start_expecting_exit(Duration::from_secs(10));
    let status = status.unwrap_or_else(|| {
        panic!("the proxy kept running with an unopenable log; stderr:\n{stderr}")
    });
    assert!(!status.success(), "must exit non-zero: {status:?}");
    assert!(
        !stderr.contains("proxy listening on"),
        "must not start listening: {stderr}"
    );
    assert!(
        stderr.contains("nonexistent-dir-airlock-test"),
        "the message names the log file: {stderr}"
    );
}
