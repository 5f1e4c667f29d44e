//! The configured secret's real value: refused towards another allowed host in every form
//! and place (also split across chunks and frames, also from Python), refused in clear,
//! and passed untouched to its own host.

use std::io::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::Value;

use crate::support;
use crate::support::{CurlRequest, TestPki, Upstream, curl, curl_get, python_urllib};

use super::{REAL, SURROGATE, Setup, assert_refused, assert_refused_on, unknown_github_token};

#[test]
fn the_real_value_in_every_form_and_place_is_refused_towards_another_host() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let urlsafe = URL_SAFE_NO_PAD.encode(format!("xy{REAL}"));
    let header = format!("X-Data: {REAL}");
    let header_b64 = format!("X-Data: {}", STANDARD.encode(REAL));
    let basic = format!(
        "Authorization: Basic {}",
        STANDARD.encode(format!("me:{REAL}"))
    );
    let body_json = format!("{{\"token\":\"{REAL}\"}}");
    let body_b64 = format!("{{\"blob\":\"{urlsafe}\"}}");
    let cases: [(&str, Vec<&str>, Option<&str>); 6] = [
        ("/h/raw", vec![&header], None),
        ("/h/base64", vec![&header_b64], None),
        ("/h/basic", vec![&basic], None),
        (
            "/b/json",
            vec!["Content-Type: application/json"],
            Some(&body_json),
        ),
        ("/b/base64url", vec![], Some(&body_b64)),
        (
            "/b/form",
            vec![],
            Some("a=1&token=ghp_R3alValueOfTheTokenXYZ0123456789abc"),
        ),
    ];
    for (path, headers, body) in cases {
        let response = setup.send("other.test", path, &headers, body);
        assert_refused(&response, "secret_out_of_scope", path);
        let line = setup.line(path);
        assert_eq!(line["form"], "real", "{path}: {line}");
        assert_eq!(line["decision"], "deny", "{path}: {line}");
    }
    // In the request target: the path and the query, raw and percent-encoded.
    let in_path = format!("/p/{REAL}");
    let response = setup.send("other.test", &in_path, &[], None);
    assert_eq!(response.status, 403, "{response:?}");
    let shown: Value = response.json();
    assert!(
        !shown.to_string().contains(REAL),
        "the refusal echoes the value: {shown}"
    );
    for query in [
        format!("t={REAL}"),
        format!("t={}", REAL.replace('_', "%5F")),
    ] {
        let response = setup.send("other.test", &format!("/q?{query}"), &[], None);
        assert_refused(&response, "secret_out_of_scope", "/q");
    }
    setup.assert_never_received(
        "every refused request",
        &[REAL.as_bytes(), urlsafe.as_bytes()],
    );
    setup.assert_real_value_never_logged();
}

#[test]
fn the_real_value_goes_to_its_own_host_untouched() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let header = format!("X-Data: {REAL}");
    let body = format!("{{\"token\":\"{REAL}\"}}");
    let response = setup.send("localhost", "/echo/home", &[&header], Some(&body));
    assert_eq!(response.status, 200, "{response:?}");
    assert!(
        setup
            .upstream
            .received()
            .windows(REAL.len())
            .any(|w| w == REAL.as_bytes()),
        "the body reached its own host whole"
    );
    assert_eq!(
        setup.upstream.hits()[0].header_values("x-data"),
        vec![REAL.to_owned()]
    );
    assert_eq!(setup.line("/echo/home")["decision"], "allow");
}

#[test]
fn in_clear_neither_the_real_value_nor_the_surrogate_is_sent() {
    crate::support::need_all(&["curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let proxy = Setup::proxy(&pki, upstream.port(), "");
    for (path, value) in [("/clear/real", REAL), ("/clear/surrogate", SURROGATE)] {
        let url = format!("http://localhost:{}{path}", upstream.port());
        let header = format!("Authorization: Bearer {value}");
        let response = curl_get(&proxy, &pki, &url, &[&header]);
        assert_eq!(response.status, 403, "{path}: {response:?}");
        assert_eq!(response.json()["reason"], "secret_out_of_scope");
        let line = proxy.audit_line_where(path, |l| l["path"] == path);
        assert_eq!(line["form"], "cleartext", "{line}");
    }
    upstream.assert_untouched("cleartext credentials");
}

/// An 8 MiB upload holding the real value across the 64 KiB boundary.
fn large_body_with_value(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("upload.bin");
    let mut file = std::fs::File::create(&path).unwrap();
    let boundary = 64 * 1024;
    let start = boundary - REAL.len() / 2;
    let mut data = vec![b'a'; 8 * 1024 * 1024];
    data[start..start + REAL.len()].copy_from_slice(REAL.as_bytes());
    file.write_all(&data).unwrap();
    path
}

#[test]
fn a_value_split_across_chunks_and_frames_never_leaves() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let dir = tempfile::tempdir().unwrap();
    let file = format!("@{}", large_body_with_value(dir.path()).display());
    for (path, version) in [
        ("/big/h1", support::HttpVersion::Http1),
        ("/big/h2", support::HttpVersion::Http2),
    ] {
        let response = setup.upload("other.test", path, &file, version);
        // The client may read the 403 or, still uploading, see the connection end.
        assert!(response.status != 200, "{path}: {response:?}");
        let line = setup.line(path);
        assert_eq!(line["decision"], "deny", "{path}: {line}");
        assert_eq!(line["reason"], "secret_out_of_scope", "{path}: {line}");
        assert_eq!(line["form"], "real", "{path}: {line}");
    }
    // Not even the value's first bytes arrived.
    setup.assert_never_received("the split value", &[&REAL.as_bytes()[..6]]);
}

#[test]
fn python_urllib_is_refused_like_curl() {
    crate::support::need_all(&["python3"]);
    let setup = Setup::new("");
    let url = setup.url("other.test", "/py");
    let result = python_urllib(&setup.proxy, &setup.pki, "GET", &url, &[("X-Token", REAL)]);
    assert_eq!(result["status"], 403, "{result}");
    let body: Value = serde_json::from_str(result["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["reason"], "secret_out_of_scope");
    setup.assert_never_received("python", &[REAL.as_bytes()]);
}

#[test]
fn the_real_value_in_a_credential_header_reaches_its_own_host_unchanged() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let authorization = format!("Authorization: token {REAL}");
    for (path, version) in [
        ("/own/h1", support::HttpVersion::Http1),
        ("/own/h2", support::HttpVersion::Http2),
    ] {
        let url = setup.url("localhost", path);
        let response = curl(
            &setup.proxy,
            &setup.pki,
            &CurlRequest {
                headers: &[&authorization],
                version,
                ..CurlRequest::get(&url)
            },
        );
        assert_eq!(response.status, 200, "{path}: {response:?}");
        let hit = setup
            .upstream
            .hits()
            .into_iter()
            .find(|hit| hit.target == path)
            .expect("the request reached its host");
        assert_eq!(
            hit.header_values("authorization"),
            vec![format!("token {REAL}")]
        );
        assert_eq!(setup.line(path)["decision"], "allow");
    }
    // Another account's token of the same format on that host is still refused.
    let other = format!("Authorization: token {}", unknown_github_token());
    let response = setup.send("localhost", "/own/other", &[&other], None);
    assert_refused_on(&response, "foreign_credential", "localhost", "/own/other");
    setup.assert_never_received("another token", &[unknown_github_token().as_bytes()]);
}
