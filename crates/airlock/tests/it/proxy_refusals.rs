//! Refusals by the real proxy (docs/contract.md §4): host, method and path not allowed, and
//! a deny rule over an allow. Each asserts the exact JSON body, the headers, that nothing
//! reached the upstream, and the `deny` audit line with its reason.

use crate::support::raw::{self, TunnelOutcome};
use crate::support::{
    CurlRequest, ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_http_audit_shape,
    assert_refusal, assert_rule_id, curl, get_request, python_urllib,
};

fn deny_line(proxy: &Proxy, reason: &str) -> serde_json::Value {
    let line = proxy.audit_line_where(&format!("denying with {reason}"), |l| {
        l["decision"] == "deny" && l["reason"] == reason
    });
    assert_http_audit_shape(&line);
    line
}

#[test]
fn host_not_allowed_gets_the_refusal_body_and_never_dials() {
    let pki = TestPki::new();
    let allowed = Upstream::tls(&pki);
    let refused = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", allowed.port()))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .start();
    let target = format!("other.test:{}", refused.port());
    let outcome = raw::connect_tls(
        proxy.port(),
        &pki,
        &target,
        "other.test",
        &get_request("/x", &target),
    );
    let on_connect = matches!(outcome, TunnelOutcome::RefusedOnConnect(_));
    let response = outcome.response();
    let expected = ExpectedRefusal {
        reason: "host_not_allowed",
        method: if on_connect { "CONNECT" } else { "GET" },
        host: "other.test",
        path: if on_connect { None } else { Some("/x") },
    };
    let body = assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &expected,
    );
    assert!(body["rule"].is_null(), "no rule matched: {body}");
    refused.assert_untouched("host not allowed");
    let line = deny_line(&proxy, "host_not_allowed");
    assert_eq!(line["host"], "other.test", "{line}");
    assert_eq!(line["method"], expected.method, "{line}");

    // Real clients see the refusal too.
    let url = format!("https://other.test:{}/y", refused.port());
    let by_curl = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert!(
        by_curl.connect_status == 403 || by_curl.status == 403,
        "curl must see 403: {by_curl:?}"
    );
    let by_python = python_urllib(&proxy, &pki, "GET", &url, &[]);
    let python_text = by_python.to_string();
    assert!(
        by_python["status"] == 403 || python_text.contains("403"),
        "python must see 403: {by_python}"
    );
    refused.assert_untouched("host not allowed (real clients)");
    assert_eq!(allowed.hit_count(), 0);
}

#[test]
fn host_not_allowed_on_plain_http() {
    let pki = TestPki::new();
    let allowed = Upstream::plain();
    let refused = Upstream::plain();
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", allowed.port()))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .start();
    let url = format!("http://other.test:{}/plain", refused.port());
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    let expected = ExpectedRefusal {
        reason: "host_not_allowed",
        method: "GET",
        host: "other.test",
        path: Some("/plain"),
    };
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &expected,
    );
    refused.assert_untouched("plain host not allowed");
    let line = deny_line(&proxy, "host_not_allowed");
    assert_eq!(line["path"], "/plain", "{line}");
    assert_eq!(line["scheme"], "http", "{line}");
}

#[test]
fn method_not_allowed() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET,HEAD localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{}/echo/m", upstream.port());
    let allowed = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert_eq!(allowed.status, 200, "GET is allowed: {allowed:?}");
    let refused = curl(
        &proxy,
        &pki,
        &CurlRequest {
            method: Some("DELETE"),
            ..CurlRequest::get(&url)
        },
    );
    let expected = ExpectedRefusal {
        reason: "method_not_allowed",
        method: "DELETE",
        host: "localhost",
        path: Some("/echo/m"),
    };
    assert_refusal(refused.status, &refused.headers, &refused.body, &expected);
    assert_eq!(upstream.hit_count(), 1, "only the GET reached upstream");
    let line = deny_line(&proxy, "method_not_allowed");
    assert_eq!(line["method"], "DELETE", "{line}");
    assert_eq!(line["path"], "/echo/m", "{line}");
    assert_eq!(line["port"], upstream.port(), "{line}");
}

#[test]
fn path_not_allowed() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}/public/**", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let allowed_url = format!("https://localhost:{}/public/a/b", upstream.port());
    let allowed = curl(&proxy, &pki, &CurlRequest::get(&allowed_url));
    assert_eq!(allowed.status, 200, "{allowed:?}");
    let url = format!("https://localhost:{}/private/x?k=v", upstream.port());
    let refused = curl(&proxy, &pki, &CurlRequest::get(&url));
    let expected = ExpectedRefusal {
        reason: "path_not_allowed",
        method: "GET",
        host: "localhost",
        path: Some("/private/x"),
    };
    assert_refusal(refused.status, &refused.headers, &refused.body, &expected);
    assert_eq!(upstream.hit_count(), 1, "only /public reached upstream");
    let line = deny_line(&proxy, "path_not_allowed");
    assert_eq!(line["path"], "/private/x", "{line}");
    assert_eq!(line["query"], "k=REDACTED", "{line}");
}

#[test]
fn deny_rule_wins_over_allow() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n  deny:\n    - host: localhost\n      paths: [\"/admin/**\"]\n",
        port = upstream.port()
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&policy)
        .resolve_loopback("localhost")
        .start();
    let ok_url = format!("https://localhost:{}/ok", upstream.port());
    let ok = curl(&proxy, &pki, &CurlRequest::get(&ok_url));
    assert_eq!(ok.status, 200, "{ok:?}");
    let url = format!("https://localhost:{}/admin/users", upstream.port());
    let refused = curl(&proxy, &pki, &CurlRequest::get(&url));
    let expected = ExpectedRefusal {
        reason: "denied_by_rule",
        method: "GET",
        host: "localhost",
        path: Some("/admin/users"),
    };
    let body = assert_refusal(refused.status, &refused.headers, &refused.body, &expected);
    assert_rule_id(&body["rule"], "network.deny[0]");
    assert_eq!(upstream.hit_count(), 1, "only /ok reached upstream");
    let line = deny_line(&proxy, "denied_by_rule");
    assert_rule_id(&line["rule"], "network.deny[0]");
    let allow_line = proxy.audit_line_where("allowing /ok", |l| l["path"] == "/ok");
    assert_rule_id(&allow_line["rule"], "network.allow[0]");
}

#[test]
fn no_rule_at_all_refuses_everything() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{}/anything", upstream.port());
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert!(
        response.connect_status == 403 || response.status == 403,
        "default deny: {response:?}"
    );
    upstream.assert_untouched("default deny");
    deny_line(&proxy, "host_not_allowed");
}
