//! Shared harness for the end-to-end proxy tests: a test PKI, in-process upstream servers,
//! the real `airlock proxy` binary as a child process, and real clients (curl, python3,
//! git, hand-written bytes over TCP/TLS, hyper h2) run with bounded time.

pub mod agents;
pub mod clients;
pub mod credential_refresh;
pub mod encodings;
pub mod fixture_server;
pub mod pki;
pub mod prometheus;
pub mod proxy;
pub mod raw;
pub mod require;
pub mod run;
pub mod sandbox;
pub mod scripted;
pub mod sdk;
pub mod test_user;
pub mod tmux;
pub mod tools;
pub mod upstream;

pub use clients::{CurlRequest, HttpVersion, curl, curl_get, python_urllib, run_bounded};
pub use pki::TestPki;
pub use proxy::{Proxy, ProxyBuilder};
pub use raw::RawResponse;
pub use require::skip_or_fail;
pub use tools::{need, need_all, tool};
pub use upstream::{Upstream, pattern_bytes};

use serde_json::Value;

/// The body fields of a refusal (docs/contract.md §4), as a test expects them.
pub struct ExpectedRefusal<'a> {
    /// One of the reasons of docs/contract.md §4.
    pub reason: &'a str,
    /// The request method the proxy saw.
    pub method: &'a str,
    /// The host the proxy decided on (without port).
    pub host: &'a str,
    /// The path, or `None` when the test does not pin it (e.g. a refusal on CONNECT).
    pub path: Option<&'a str>,
}

/// Asserts a response is a refusal of docs/contract.md §4: status 403,
/// `content-type: application/json`, `x-airlock-decision: deny`, and a body with exactly
/// its keys.
pub fn assert_refusal(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    expected: &ExpectedRefusal<'_>,
) -> Value {
    let body_text = String::from_utf8_lossy(body);
    assert_eq!(status, 403, "expected 403, body: {body_text}");
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    let content_type = header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/json"),
        "content-type of a refusal must be application/json, got {content_type:?}"
    );
    assert_eq!(
        header("x-airlock-decision").as_deref(),
        Some("deny"),
        "a refusal must carry x-airlock-decision: deny (headers: {headers:?})"
    );
    let json: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("refusal body is not JSON ({e}): {body_text}"));
    let object = json
        .as_object()
        .unwrap_or_else(|| panic!("refusal body is not an object: {body_text}"));
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "error", "hint", "host", "id", "message", "method", "path", "reason", "rule"
        ],
        "refusal body keys: {body_text}"
    );
    assert_decision_id(&json["id"], &body_text);
    assert_eq!(json["error"], "blocked_by_policy", "{body_text}");
    assert_eq!(json["reason"], expected.reason, "{body_text}");
    assert_eq!(json["method"], expected.method, "{body_text}");
    assert_eq!(json["host"], expected.host, "{body_text}");
    if let Some(path) = expected.path {
        assert_eq!(json["path"], path, "{body_text}");
    }
    assert!(
        json["rule"].is_null() || json["rule"].is_string(),
        "rule must be null or a rule id: {body_text}"
    );
    assert!(
        json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message must be a non-empty string: {body_text}"
    );
    assert!(
        json["hint"].is_string() || json["hint"].is_null(),
        "{body_text}"
    );
    json
}

/// Asserts `rule` is the id `expected` (e.g. `network.deny[0]`), alone or prefixed by its
/// source (`policy1.yaml:network.deny[0]`) as docs/contract.md §3 allows when sources
/// combine.
pub fn assert_rule_id(rule: &Value, expected: &str) {
    let text = rule
        .as_str()
        .unwrap_or_else(|| panic!("rule id must be a string, got {rule}"));
    assert!(
        text == expected || text.ends_with(&format!(":{expected}")),
        "rule id {text:?} is not {expected:?} (optionally source-prefixed)"
    );
}

/// Asserts the fields every `http` audit line carries (docs/contract.md §5).
pub fn assert_http_audit_shape(line: &Value) {
    let ts = line["ts"].as_str().unwrap_or_default();
    assert!(
        ts.ends_with('Z') && ts.contains('T') && ts.len() >= 20,
        "ts must be RFC 3339 UTC ending in Z: {line}"
    );
    assert_eq!(line["kind"], "http", "{line}");
    assert_decision_id(&line["id"], &line.to_string());
    assert!(
        line["decision"] == "allow" || line["decision"] == "deny",
        "{line}"
    );
    assert!(line["method"].is_string(), "{line}");
    assert!(line["host"].is_string(), "{line}");
    if line["decision"] == "deny" {
        assert!(
            line["reason"].is_string(),
            "a refusal line carries reason: {line}"
        );
    }
}

/// A decision id (docs/contract.md §5): 32 lowercase hex digits.
pub fn assert_decision_id(id: &Value, context: &str) {
    let text = id.as_str().unwrap_or_default();
    assert!(
        text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "a decision id is 32 lowercase hex digits: {context}"
    );
}

/// Request bytes for a hand-written HTTP/1.1 GET with `Connection: close`.
pub fn get_request(path: &str, host_header: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: airlock-test\r\nConnection: close\r\n\r\n")
        .into_bytes()
}
