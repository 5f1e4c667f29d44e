//! Path canonicalisation against a rule with `paths` and a deny glob (docs/contract.md §3,
//! docs/policy.md "Matching"): one percent-decode and dot-segment removal, then `..`,
//! backslash, NUL or an encoded slash that still hides in the path is `path_unsafe`. Every
//! encoding trick is refused, logged and never reaches the upstream; the plain forms pass.

use crate::support;
use crate::support::raw;
use crate::support::{
    ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_refusal, get_request,
};

fn start(pki: &TestPki, upstream: &Upstream) -> Proxy {
    let policy = format!(
        "version: 1
network:
  allow:
    - host: localhost
      ports: [{port}]
      paths: [\"/public/**\"]
  deny:
    - host: localhost
      paths: [\"/public/private/**\"]
",
        port = upstream.port()
    );
    ProxyBuilder::new(pki)
        .policy(&policy)
        .resolve_loopback("localhost")
        .start()
}

fn send(proxy: &Proxy, pki: &TestPki, upstream: &Upstream, path: &str) -> support::RawResponse {
    let target = format!("localhost:{}", upstream.port());
    raw::connect_tls(
        proxy.port(),
        pki,
        &target,
        "localhost",
        &get_request(path, &target),
    )
    .response()
}

#[test]
fn plain_and_dot_segment_paths_inside_the_allow_pass() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    for path in [
        "/public/a",
        "/public/a/b/c",
        "/public/a/../b",
        "/public/./c",
    ] {
        let response = send(&proxy, &pki, &upstream, path);
        assert_eq!(
            response.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&response.raw)
        );
    }
    assert_eq!(upstream.hit_count(), 4);
}

/// Each case: the raw request path and the reasons the contract admits for it.
const REFUSED: &[(&str, &[&str])] = &[
    // Dot segments and their encodings leaving the allowed prefix.
    ("/public/../secret", &["path_not_allowed", "path_unsafe"]),
    (
        "/public/%2e%2e/secret",
        &["path_not_allowed", "path_unsafe"],
    ),
    (
        "/public/%2E%2E/secret",
        &["path_not_allowed", "path_unsafe"],
    ),
    ("/public/.%2e/secret", &["path_not_allowed", "path_unsafe"]),
    // Still hides a `..` after one decode.
    ("/public/%252e%252e/secret", &["path_unsafe"]),
    ("/public/%252e%252e/%252e%252e/secret", &["path_unsafe"]),
    // Encoded slashes.
    ("/public/a%2fb", &["path_unsafe"]),
    ("/public/a%2Fb", &["path_unsafe"]),
    (
        "/public%2f..%2fsecret",
        &["path_unsafe", "path_not_allowed"],
    ),
    (
        "/public/%2e%2e%2fsecret",
        &["path_unsafe", "path_not_allowed"],
    ),
    // Backslashes, encoded.
    ("/public/a%5c..%5csecret", &["path_unsafe"]),
    ("/public/a%5Cb", &["path_unsafe"]),
    // NUL.
    ("/public/a%00b", &["path_unsafe"]),
    (
        "/public/a%00/../../secret",
        &["path_unsafe", "path_not_allowed"],
    ),
    // Tricks against the deny glob.
    ("/public/private/x", &["denied_by_rule"]),
    ("/public/./private/x", &["denied_by_rule"]),
    ("/public/x/../private/y", &["denied_by_rule"]),
    ("/public/%70rivate/x", &["denied_by_rule"]),
    ("/public/%2e/private/x", &["denied_by_rule", "path_unsafe"]),
    ("/public/private%2fx", &["path_unsafe"]),
    ("/public/private%2f..%2fx", &["path_unsafe"]),
    (
        "/public//private/x",
        &["denied_by_rule", "path_unsafe", "path_not_allowed"],
    ),
    (
        "//public/private/x",
        &["denied_by_rule", "path_unsafe", "path_not_allowed"],
    ),
    (
        "/public/private//x",
        &["denied_by_rule", "path_unsafe", "path_not_allowed"],
    ),
    ("/public/%2fprivate/x", &["path_unsafe"]),
    // Outside the allow entirely.
    ("/secret", &["path_not_allowed"]),
];

#[test]
fn every_encoding_trick_is_refused_logged_and_never_forwarded() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let mut failures = Vec::new();
    for (index, (path, reasons)) in REFUSED.iter().enumerate() {
        let response = send(&proxy, &pki, &upstream, path);
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
        let reason = body["reason"].as_str().unwrap_or_default();
        if response.status != 403 || !reasons.contains(&reason) {
            failures.push(format!(
                "{path}: status {} reason {reason:?} (want 403 {reasons:?}); {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            ));
            continue;
        }
        let reason_static = reasons
            .iter()
            .find(|r| **r == reason)
            .copied()
            .unwrap_or_default();
        assert_refusal(
            response.status,
            &response.headers,
            &response.body,
            &ExpectedRefusal {
                reason: reason_static,
                method: "GET",
                host: "localhost",
                path: None,
            },
        );
        // This refusal's own audit line: same canonical path and reason.
        let expected_path = body["path"].clone();
        proxy.audit(index + 1);
        let found = proxy
            .audit_log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|l| {
                l["decision"] == "deny" && l["reason"] == reason && l["path"] == expected_path
            });
        if !found {
            failures.push(format!(
                "{path}: no deny line with reason {reason} and path {expected_path}"
            ));
        }
    }
    let denials = proxy
        .audit(REFUSED.len())
        .iter()
        .filter(|l| l["decision"] == "deny")
        .count();
    assert_eq!(denials, REFUSED.len(), "one deny line per refusal");
    let hits = upstream.hits();
    assert!(
        failures.is_empty() && hits.is_empty(),
        "{} of {} path tricks not refused as the contract says:\n{}\nreached upstream: {:?}",
        failures.len(),
        REFUSED.len(),
        failures.join("\n"),
        hits.iter().map(|h| h.target.as_str()).collect::<Vec<_>>()
    );
}

#[test]
fn raw_backslash_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    for path in [
        "/public/a\\..\\..\\secret",
        "/public\\private\\x",
        "/public/private\\x",
    ] {
        let response = send(&proxy, &pki, &upstream, path);
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
        // A raw backslash is not valid in a request-target: a 400 is a refusal too.
        assert!(
            response.status == 400
                || (response.status == 403
                    && (body["reason"] == "path_unsafe" || body["reason"] == "denied_by_rule")),
            "{path}: {}",
            String::from_utf8_lossy(&response.raw)
        );
    }
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
}
