//! JSON body guards (`json_deny` on `network.allow`) end to end: the real `airlock proxy`
//! in front of a body-recording HTTPS server on loopback (tests/fixtures/
//! body_echo_server.py), driven by curl. Guarded values (plain, glob, `\u`-escaped,
//! chunked) are refused `denied_by_rule` and never reach the server; other values pass
//! byte for byte; compressed, malformed, duplicate-key, oversize, BOM and UTF-16 bodies
//! are refused `body_uninspectable`; a host without guards is not buffered at all.

use std::path::Path;

use crate::support;
use crate::support::clients::curl_post_json;
use crate::support::clients::{CurlResponse, HttpVersion};
use crate::support::fixture_server::FixtureServer;
use crate::support::{CurlRequest, ExpectedRefusal, Proxy, ProxyBuilder, TestPki};
use crate::support::{assert_refusal, curl};

struct Setup {
    pki: TestPki,
    server: FixtureServer,
    proxy: Proxy,
    scratch: tempfile::TempDir,
}

/// allowed.test carries the guards; other.test (same server) has none.
fn setup() -> Setup {
    let pki = TestPki::new();
    let server = FixtureServer::body_echo(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .json_deny_guards(server.port)
        .start();
    let scratch = tempfile::tempdir().expect("tempdir");
    Setup {
        pki,
        server,
        proxy,
        scratch,
    }
}

impl Setup {
    /// POSTs `body` (curl `--data-binary`, so `@FILE` reads a file) to `host`'s `/v1/responses`.
    fn post(&self, host: &str, body: &str, headers: &[&str]) -> CurlResponse {
        let url = format!("https://{host}:{}/v1/responses", self.server.port);
        curl_post_json(&self.proxy, &self.pki, &url, body, headers)
    }

    /// Writes `bytes` to a scratch file and gives curl's `@FILE` argument for it.
    fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.scratch.path().join(name);
        std::fs::write(&path, bytes).expect("write body file");
        format!("@{}", Path::new(&path).display())
    }

    fn assert_refused(&self, what: &str, response: &CurlResponse, reason: &str) {
        let refusal = assert_refusal(
            response.status,
            &response.headers,
            &response.body,
            &ExpectedRefusal {
                reason,
                method: "POST",
                host: "allowed.test",
                path: Some("/v1/responses"),
            },
        );
        assert_eq!(refusal["rule"], "network.allow[0]", "{what}: {refusal}");
        assert_eq!(
            self.server.hits(),
            0,
            "{what}: the server saw {:?}",
            self.server.hit_lines()
        );
    }
}

fn text(response: &CurlResponse) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

#[test]
fn guarded_values_never_reach_the_upstream() {
    let s = setup();
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        (
            "plain",
            r#"{"model":"m","tools":[{"type":"web_search"}]}"#,
            vec![],
        ),
        (
            "second tool",
            r#"{"tools":[{"type":"function","name":"f"},{"type":"web_search"}]}"#,
            vec![],
        ),
        (
            "glob",
            r#"{"tools":[{"type":"web_search_preview_2025_03_11"}]}"#,
            vec![],
        ),
        (
            "escaped value",
            r#"{"tools":[{"type":"web\u005fsearch"}]}"#,
            vec![],
        ),
        (
            "escaped key",
            r#"{"t\u006fols":[{"\u0074ype":"web_search"}]}"#,
            vec![],
        ),
        (
            "chunked",
            r#"{"tools":[{"type":"web_search"}]}"#,
            vec!["Transfer-Encoding: chunked"],
        ),
        (
            "explicit identity",
            r#"{"tools":[{"type":"web_search"}]}"#,
            vec!["Content-Encoding: identity"],
        ),
        ("path exists, no values", r#"{"stream":false}"#, vec![]),
    ];
    for (what, body, headers) in cases {
        let response = s.post("allowed.test", body, &headers);
        s.assert_refused(what, &response, "denied_by_rule");
    }
    let line = s.proxy.audit_line_where("json_deny refusal", |l| {
        l["kind"] == "http" && l["reason"] == "denied_by_rule"
    });
    assert_eq!(line["decision"], "deny");
    assert_eq!(line["rule"], "network.allow[0]");
    assert_eq!(line["host"], "allowed.test");
    assert_eq!(line["path"], "/v1/responses");
}

#[test]
fn other_values_pass_unchanged() {
    let s = setup();
    let bodies = [
        r#"{"model":"m","tools":[{"type":"function","name":"web_search"}]}"#,
        r#"{"tools":[{"type":"Web_Search"}]}"#,
        r#"{"tools":[{"type":"web_searc"}],"streams":true}"#,
        r#"{"nested":{"tools":[{"type":"web_search"}]}}"#,
        "",
    ];
    for (index, body) in bodies.iter().enumerate() {
        let response = s.post("allowed.test", body, &[]);
        assert_eq!(response.status, 200, "{body}: {}", text(&response));
        assert_eq!(response.json()["len"], body.len(), "{body}");
        let seen = s.server.hit_lines_at_least(index + 1);
        assert_eq!(seen.len(), index + 1, "{seen:?}");
        assert!(
            seen[index].ends_with(&format!(" {body}")) || body.is_empty(),
            "{body} arrived as {}",
            seen[index]
        );
    }
}

#[test]
fn uninspectable_bodies_are_refused() {
    let s = setup();
    let guarded = r#"{"tools":[{"type":"web_search"}]}"#;
    let oversize = s.file(
        "oversize",
        format!(
            r#"{{"tools":[{{"type":"function"}}],"pad":"{}"}}"#,
            "x".repeat(1 << 20)
        )
        .as_bytes(),
    );
    let utf16: Vec<u8> = guarded.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let utf16 = s.file("utf16", &utf16);
    let latin1 = s.file("latin1", b"{\"tools\":[{\"type\":\"caf\xe9\"}]}");
    let bom = format!("\u{feff}{guarded}");
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        ("gzip", guarded.to_owned(), vec!["Content-Encoding: gzip"]),
        ("br", guarded.to_owned(), vec!["Content-Encoding: br"]),
        ("malformed", r#"{"tools":[{"type":"#.to_owned(), vec![]),
        (
            "duplicate key",
            r#"{"tools":[{"type":"function","type":"web_search"}]}"#.to_owned(),
            vec![],
        ),
        (
            "duplicate outer key",
            r#"{"tools":[],"tools":[{"type":"web_search"}]}"#.to_owned(),
            vec![],
        ),
        ("two documents", format!("{guarded} {{}}"), vec![]),
        ("over 1 MiB", oversize, vec![]),
        ("utf-16", utf16, vec![]),
        ("not utf-8", latin1, vec![]),
        ("bom", bom, vec![]),
        ("form", "tools[0][type]=web_search".to_owned(), vec![]),
    ];
    for (what, body, headers) in cases {
        let response = s.post("allowed.test", &body, &headers);
        s.assert_refused(what, &response, "body_uninspectable");
    }
}

#[test]
fn a_host_without_guards_is_not_buffered() {
    let s = setup();
    // Over the 1 MiB inspection limit, labelled gzip and with a duplicate key: any of
    // these would be refused had the body been buffered for inspection.
    let body = format!(
        r#"{{"tools":[{{"type":"web_search"}}],"tools":[],"pad":"{}"}}"#,
        "x".repeat(3 << 20)
    );
    let arg = s.file("big", body.as_bytes());
    let response = s.post("other.test", &arg, &["Content-Encoding: gzip"]);
    assert_eq!(response.status, 200, "{}", text(&response));
    assert_eq!(response.json()["len"], body.len());
    assert_eq!(s.server.hits(), 1);
    let line = s.proxy.audit_line_where("unguarded allow", |l| {
        l["kind"] == "http" && l["host"] == "other.test"
    });
    assert_eq!(line["decision"], "allow");
    assert_eq!(line["rule"], "network.allow[1]");
}

#[test]
fn http2_bodies_are_guarded_too() {
    let s = setup();
    let url = format!("https://allowed.test:{}/v1/responses", s.server.port);
    let send = |body: &str| {
        curl(
            &s.proxy,
            &s.pki,
            &CurlRequest {
                method: Some("POST"),
                headers: &["Content-Type: application/json"],
                body: Some(body),
                version: HttpVersion::Http2,
                ..CurlRequest::get(&url)
            },
        )
    };
    let refused = send(r#"{"tools":[{"type":"web\u005fsearch"}]}"#);
    assert_eq!(refused.http_version, "2", "{}", refused.stderr);
    s.assert_refused("h2", &refused, "denied_by_rule");
    let fine = r#"{"tools":[{"type":"function"}]}"#;
    let passed = send(fine);
    assert_eq!(passed.status, 200, "{}", text(&passed));
    assert_eq!(passed.json()["len"], fine.len());
}

#[test]
fn policy_explain_names_the_guards_and_the_mcp_rule_a_body_goes_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.yaml");
    std::fs::write(
        &file,
        "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n      json_deny:\n        \
         - path: /tools/*/type\n          values: [web_search]\n    - host: mcp.test\n    \
         - host: plain.test\nmcp:\n  - host: mcp.test\n    path: /mcp\n    tools: {deny: [run]}\n",
    )
    .expect("write policy");
    let explain = |url: &str| {
        let mut command = std::process::Command::new(support::proxy::AIRLOCK);
        command
            .args(["policy", "explain", "--policy"])
            .arg(&file)
            .args(["POST", url]);
        let output = support::run_bounded(&mut command, std::time::Duration::from_secs(20));
        assert_eq!(
            output.status.and_then(|s| s.code()),
            Some(0),
            "{}",
            output.stderr
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let guarded = explain("https://allowed.test/v1/responses");
    assert!(
        guarded.contains("body:    checked against json_deny of network.allow[0]"),
        "{guarded}"
    );
    let mcp = explain("https://mcp.test/mcp");
    assert!(
        mcp.contains("mcp:     tools/call decided by mcp[0]"),
        "{mcp}"
    );
    let plain = explain("https://plain.test/x");
    assert!(
        !plain.contains("body:") && !plain.contains("mcp:"),
        "{plain}"
    );
}
