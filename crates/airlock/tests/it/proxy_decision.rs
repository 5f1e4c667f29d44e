//! One decision, however it is asked (issue 32): a refusal's body quotes the id of its audit
//! line (docs/contract.md §4, §5), and `localhost` is decided alike by `airlock proxy` and
//! `airlock policy explain` (`airlock run`: `run_network::localhost_*`).

use std::process::Command;

use crate::support::proxy::AIRLOCK;
use crate::support::{ProxyBuilder, TestPki, Upstream, raw};

/// `airlock policy explain --json --allow RULE METHOD URL`: exit status and answer.
fn explain(allow: &str, method: &str, url: &str) -> (i32, serde_json::Value) {
    let output = Command::new(AIRLOCK)
        .args(["policy", "explain", "--json", "--allow", allow, method, url])
        .output()
        .expect("run airlock policy explain");
    let text = String::from_utf8_lossy(&output.stdout);
    let answer = serde_json::from_str(text.trim()).unwrap_or_default();
    (output.status.code().unwrap_or(-1), answer)
}

#[test]
fn a_refusal_body_quotes_the_id_of_its_audit_line() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .start();
    let mut ids = Vec::new();
    for n in 0..2 {
        let request = format!(
            "GET http://refused.example/x{n} HTTP/1.1\r\nHost: refused.example\r\nConnection: close\r\n\r\n"
        );
        let response = raw::plain(proxy.port(), request.as_bytes());
        assert_eq!(response.status, 403, "{response:?}");
        let body: serde_json::Value = serde_json::from_slice(&response.body).expect("json");
        let id = body["id"]
            .as_str()
            .expect("an id in the refusal body")
            .to_owned();
        crate::support::assert_decision_id(&body["id"], &body.to_string());
        let path = format!("/x{n}");
        let line = proxy.audit_line_where("the refusal", |l| l["path"] == path.as_str());
        assert_eq!(line["id"], id.as_str(), "{line}");
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1], "each decision has its own id");
    upstream.assert_untouched("refused");
}

#[test]
fn localhost_is_decided_alike_by_the_proxy_and_explain() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let allow = format!("localhost:{port}");
    let proxy = ProxyBuilder::new(&pki)
        .allow(&allow)
        .resolve_loopback("localhost")
        .start();
    let url = format!("http://localhost:{port}/echo/loop");
    let request =
        format!("GET {url} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n");
    let response = raw::plain(proxy.port(), request.as_bytes());
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(upstream.hit_count(), 1);
    let (status, answer) = explain(&allow, "GET", &url);
    assert_eq!(
        (status, &answer["decision"]),
        (0, &"allow".into()),
        "{answer}"
    );
    crate::support::assert_rule_id(&answer["rule"], "--allow[0]");
    assert_eq!(answer["secrets"], serde_json::json!([]), "{answer}");

    // The loopback address by number is another host for both.
    let by_number = format!("http://127.0.0.1:{port}/echo/number");
    let request =
        format!("GET {by_number} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    let response = raw::plain(proxy.port(), request.as_bytes());
    assert_eq!(response.status, 403, "{response:?}");
    let refused: serde_json::Value = serde_json::from_slice(&response.body).expect("json");
    let (status, answer) = explain(&allow, "GET", &by_number);
    assert_eq!(status, 1, "{answer}");
    assert_eq!(answer["reason"], refused["reason"], "{answer} / {refused}");
    assert_eq!(
        upstream.hit_count(),
        1,
        "the refused request reached nothing"
    );
}
