//! The outbound guard (docs/security.md, "Outbound guard"), tried as an injected agent
//! would: a configured secret's real value, read from a file, sent to another allowed host
//! in a header, the path, the query or the body, raw or encoded, over HTTP/1.1, HTTP/2 and
//! a WebSocket, split across chunk and frame boundaries of a large upload: refused
//! `secret_out_of_scope` (`"form":"real"`) and received nowhere; to its own host it passes
//! untouched; in clear it is refused (`"form":"cleartext"`). Well-known credential formats
//! that nobody configured are refused `credential_outbound` (GitHub only with a valid
//! checksum, AWS documentation keys pass) unless `dlp` logs, ignores or allows them; and
//! ordinary uploads (100 MiB of random bytes) pass. Second audit (issue 31): request
//! trailers (HTTP/1.1 chunked and HTTP/2), WebSocket ping, pong and close payloads, the
//! host name (CONNECT target, `Host`, `:authority`, absolute URI; refused before it is
//! resolved or dialled), header names (lower-cased), base64 wrapped or spaced and a value
//! split over header lines are searched; the real value in `Authorization` to its own
//! host passes unchanged over HTTP/1.1 and HTTP/2.

use std::io::Write as _;

use crate::support;
use crate::support::fixture_server::FixtureServer;
use crate::support::raw::{self, TunnelOutcome, WsStep, WsUpgrade};
use crate::support::{
    CurlRequest, ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_refusal, curl,
    curl_get, python_urllib,
};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::Value;

/// The configured secret's real value: a GitHub token with a valid checksum.
const REAL: &str = "ghp_R3alValueOfTheTokenXYZ0123456789abc";
const SURROGATE: &str = "ghp_SurrogateOfTheTokenXYZ012345678def";

/// A GitHub token nobody configured, with a valid checksum.
fn unknown_github_token() -> String {
    let payload = "k9Jq2mZx7Vb4Nc1Lp8Ws3Df6Gh0TyA";
    format!("ghp_{payload}{}", github_checksum(payload))
}

/// GitHub's checksum: CRC-32 of the payload in base 62, six digits.
fn github_checksum(payload: &str) -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut value = u64::from(crc32(payload.as_bytes()));
    let mut out = [b'0'; 6];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(value % 62) as usize];
        value /= 62;
    }
    String::from_utf8(out.to_vec()).unwrap()
}

/// CRC-32 (IEEE), bit by bit: the test's own reference, independent of the proxy's.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

struct Setup {
    pki: TestPki,
    upstream: Upstream,
    proxy: Proxy,
}

impl Setup {
    /// `localhost` is the secret's host, `other.test` another allowed host; `policy` is
    /// extra YAML (a `dlp` section).
    fn new(policy: &str) -> Setup {
        let pki = TestPki::new();
        let upstream = Upstream::tls(&pki);
        let proxy = Self::proxy(&pki, upstream.port(), policy);
        Setup {
            pki,
            upstream,
            proxy,
        }
    }

    fn proxy(pki: &TestPki, port: u16, policy: &str) -> Proxy {
        let mut builder = ProxyBuilder::new(pki)
            .allow(&format!("localhost:{port}"))
            .allow(&format!("other.test:{port}"))
            .resolve_loopback("localhost")
            .resolve_loopback("other.test")
            .secret(&format!("GH_TOKEN={SURROGATE}={REAL}@localhost"));
        if !policy.is_empty() {
            builder = builder.policy(&format!("version: 1\n{policy}"));
        }
        builder.start()
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.upstream.port())
    }

    fn send(
        &self,
        host: &str,
        path: &str,
        headers: &[&str],
        body: Option<&str>,
    ) -> support::clients::CurlResponse {
        let url = self.url(host, path);
        curl(
            &self.proxy,
            &self.pki,
            &CurlRequest {
                method: body.map(|_| "POST"),
                headers,
                body,
                ..CurlRequest::get(&url)
            },
        )
    }

    /// The audit line of the request to `path`.
    fn line(&self, path: &str) -> Value {
        self.proxy
            .audit_line_where(&format!("for {path}"), |l| l["path"] == path)
    }

    fn assert_never_received(&self, what: &str, needles: &[&[u8]]) {
        let received = self.upstream.received();
        let heads = format!("{:?}", self.upstream.hits());
        for needle in needles {
            assert!(
                !received.windows(needle.len()).any(|w| w == *needle),
                "{what}: the upstream received {}",
                String::from_utf8_lossy(needle)
            );
            assert!(
                !heads.contains(&*String::from_utf8_lossy(needle)),
                "{what}: a request head carried {}",
                String::from_utf8_lossy(needle)
            );
        }
    }

    fn assert_real_value_never_logged(&self) {
        let log = self.proxy.audit_log_text();
        for needle in [
            REAL.to_owned(),
            STANDARD.encode(REAL),
            unknown_github_token(),
        ] {
            assert!(
                !log.contains(&needle),
                "the audit log holds {needle}:\n{log}"
            );
        }
        assert!(
            !self.proxy.stderr().contains(REAL),
            "stderr holds the real value"
        );
    }
}

/// Asserts a refusal for `reason` of the request to `path` on `other.test` (any method).
fn assert_refused(response: &support::clients::CurlResponse, reason: &str, path: &str) -> Value {
    assert_refused_on(response, reason, "other.test", path)
}

fn assert_refused_on(
    response: &support::clients::CurlResponse,
    reason: &str,
    host: &str,
    path: &str,
) -> Value {
    let method = if response.status == 403 {
        response.json()["method"]
            .as_str()
            .unwrap_or("GET")
            .to_owned()
    } else {
        "GET".to_owned()
    };
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason,
            method: &method,
            host,
            path: Some(path),
        },
    )
}

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
        let url = setup.url("other.test", path);
        let response = curl(
            &setup.proxy,
            &setup.pki,
            &CurlRequest {
                method: Some("PUT"),
                body: Some(&file),
                version,
                ..CurlRequest::get(&url)
            },
        );
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
fn well_known_formats_are_refused_unless_they_are_examples_or_bad_checksums() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let token = unknown_github_token();
    let mut bad = token.clone().into_bytes();
    let last = bad.len() - 1;
    bad[last] = if bad[last] == b'A' { b'B' } else { b'A' };
    let bad = String::from_utf8(bad).unwrap();
    let github = format!("Authorization: token {token}");
    let bad_github = format!("Authorization: token {bad}");
    let pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    let anthropic = format!("/llm?key=sk-ant-api03-{}AA", "Zx9_".repeat(23));
    let refused: [(&str, Vec<&str>, Option<&str>, &str); 4] = [
        ("/f/github", vec![&github], None, "github"),
        ("/f/aws", vec!["X-Aws: AKIAQWERTYUIOPASDFGH"], None, "aws"),
        ("/f/pem", vec![], Some(pem), "private_key"),
        (
            "/f/slack",
            vec![],
            Some("{\"t\":\"xoxb-1234567890-abcdefghijkl\"}"),
            "slack",
        ),
    ];
    for (path, headers, body, kind) in refused {
        let response = setup.send("other.test", path, &headers, body);
        assert_refused(&response, "credential_outbound", path);
        assert_eq!(setup.line(path)["credential"], kind);
    }
    let response = setup.send("other.test", &anthropic, &[], None);
    assert_refused(&response, "credential_outbound", "/llm");
    let passed: [(&str, Vec<&str>); 3] = [
        ("/ok/bad-checksum", vec![&bad_github]),
        ("/ok/aws-example", vec!["X-Aws: AKIAIOSFODNN7EXAMPLE"]),
        ("/ok/surrogate", vec![]),
    ];
    for (path, headers) in passed {
        let response = setup.send("other.test", path, &headers, Some(SURROGATE));
        assert_eq!(response.status, 200, "{path}: {response:?}");
    }
    setup.assert_never_received("formats", &[token.as_bytes(), b"OPENSSH PRIVATE"]);
    setup.assert_real_value_never_logged();
}

#[test]
fn dlp_log_off_and_allow_change_only_the_formats() {
    crate::support::need_all(&["curl"]);
    let token = unknown_github_token();
    let github = format!("Authorization: token {token}");
    let real = format!("X-Data: {REAL}");
    let log = Setup::new("dlp: {credentials: log}\n");
    let response = log.send("other.test", "/log", &[&github], None);
    assert_eq!(response.status, 200, "{response:?}");
    // A token in the path passes too, but never into the log.
    let response = log.send("other.test", &format!("/log/{token}"), &[], None);
    assert_eq!(response.status, 200, "{response:?}");
    assert!(log.line("/log/[REDACTED:github]")["credential"] == "github");
    assert!(
        !log.proxy.audit_log_text().contains(&token),
        "the log holds the token"
    );
    let line = log.line("/log");
    assert_eq!(
        (&line["decision"], &line["credential"]),
        (&"allow".into(), &"github".into())
    );
    let response = log.send("other.test", "/log/real", &[&real], None);
    assert_eq!(
        response.status, 403,
        "a real value is refused whatever dlp says"
    );

    let off = Setup::new("dlp: {credentials: off}\n");
    let response = off.send("other.test", "/off", &[&github], None);
    assert_eq!(response.status, 200, "{response:?}");
    assert!(off.line("/off").get("credential").is_none());
    let response = off.send("other.test", "/off/real", &[&real], None);
    assert_eq!(
        response.status, 403,
        "a real value is refused whatever dlp says"
    );

    let allow = Setup::new("dlp:\n  allow:\n    - {host: other.test, kinds: [github]}\n");
    let response = allow.send("other.test", "/allowed", &[&github], None);
    assert_eq!(response.status, 200, "{response:?}");
    let response = allow.send("other.test", "/aws", &["X-Aws: AKIAQWERTYUIOPASDFGH"], None);
    assert_refused(&response, "credential_outbound", "/aws");
    // (In a header that is no credential header of the secret there: in `Authorization`
    // it would be another account's key, refused `foreign_credential` first.)
    let in_note = format!("X-Note: {token}");
    let response = allow.send("localhost", "/elsewhere", &[&in_note], None);
    assert_refused_on(&response, "credential_outbound", "localhost", "/elsewhere");
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
fn a_hundred_mib_of_random_upload_passes_whole() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("random.bin");
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut data = vec![0u8; 100 * 1024 * 1024];
    for chunk in data.chunks_mut(8) {
        // xorshift64: fast, deterministic, no pattern a format could match by design.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&path, &data).unwrap();
    let file = format!("@{}", path.display());
    let url = setup.url("other.test", "/sink");
    let response = curl(
        &setup.proxy,
        &setup.pki,
        &CurlRequest {
            method: Some("PUT"),
            body: Some(&file),
            ..CurlRequest::get(&url)
        },
    );
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json()["body_len"], data.len());
}

#[test]
fn a_websocket_message_with_the_value_closes_the_connection() {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET other.test:{}/ws/**", server.port))
        .resolve_loopback("other.test")
        .secret(&format!("GH_TOKEN={SURROGATE}={REAL}@localhost"))
        .start();
    let target = format!("other.test:{}", server.port);
    let upgrade = WsUpgrade {
        proxy_port: proxy.port(),
        pki: &pki,
        target: &target,
        sni: "other.test",
        path: "/ws/session",
        extra_headers: "",
    };
    let leak = format!("{{\"note\":\"{REAL}\"}}");
    let steps = [
        WsStep::text("hello"),
        WsStep::Receive,
        WsStep::text(&leak),
        WsStep::Receive,
    ];
    let transcript = raw::websocket_script(&upgrade, &steps).expect("the upgrade");
    let close = transcript.received.last().expect("a close frame");
    assert_eq!(close.close_code(), Some(1008), "{transcript:?}");
    assert!(
        close.close_reason().starts_with("secret_out_of_scope"),
        "{transcript:?}"
    );
    assert_eq!(transcript.received[0].payload, b"hello");
    let received = server.received_lines().join("\n");
    let hex: String = REAL.bytes().take(8).map(|b| format!("{b:02x}")).collect();
    assert!(
        !received.contains(&hex),
        "the server received the value: {received}"
    );
    let line = proxy.audit_line_where("the ws refusal", |l| {
        l["kind"] == "ws" && l["decision"] == "deny"
    });
    assert_eq!(line["form"], "real", "{line}");
}

/// `data` in `coding` (`gzip`, `deflate`, `br` or `zstd`).
fn encode(coding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap();
        }
        "deflate" => {
            let mut e = flate2::write::ZlibEncoder::new(&mut out, flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap();
        }
        "br" => {
            let mut e = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
            e.write_all(data).unwrap();
        }
        _ => out = zstd::stream::encode_all(data, 3).unwrap(),
    }
    out
}

#[test]
fn compressed_request_bodies_are_searched_decoded() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let dir = tempfile::tempdir().unwrap();
    let mut leak = b"{\"pad\":\"".to_vec();
    leak.extend(vec![b'x'; 200_000]);
    leak.extend_from_slice(format!("\",\"token\":\"{REAL}\"}}").as_bytes());
    for coding in ["gzip", "deflate", "br", "zstd"] {
        let file = dir.path().join(format!("leak.{coding}"));
        std::fs::write(&file, encode(coding, &leak)).unwrap();
        let body = format!("@{}", file.display());
        let header = format!("Content-Encoding: {coding}");
        let path = format!("/coded/{coding}");
        let response = setup.send("other.test", &path, &[&header], Some(&body));
        assert!(response.status != 200, "{coding}: {response:?}");
        let line = setup.line(&path);
        assert_eq!(line["reason"], "secret_out_of_scope", "{coding}: {line}");
    }
    // `identity` on one line and `gzip` on the next is a gzip body, searched decoded.
    let file = dir.path().join("leak.lines");
    std::fs::write(&file, encode("gzip", &leak)).unwrap();
    let body = format!("@{}", file.display());
    let lines = ["Content-Encoding: identity", "Content-Encoding: gzip"];
    let response = setup.send("other.test", "/coded/lines", &lines, Some(&body));
    assert!(response.status != 200, "two lines: {response:?}");
    let line = setup.line("/coded/lines");
    assert_eq!(line["reason"], "secret_out_of_scope", "two lines: {line}");
    setup.assert_never_received("coded bodies", &[&REAL.as_bytes()[..6]]);
    // A clean coded body reaches the upstream decoded, without its coding.
    let clean = dir.path().join("clean.gz");
    std::fs::write(&clean, encode("gzip", b"{\"ok\":true}")).unwrap();
    let body = format!("@{}", clean.display());
    let response = setup.send(
        "other.test",
        "/coded/clean",
        &["Content-Encoding: gzip"],
        Some(&body),
    );
    assert_eq!(response.status, 200, "{response:?}");
    let echo = response.json();
    assert_eq!(echo["body"], "{\"ok\":true}", "{echo}");
    assert!(
        setup
            .upstream
            .hits()
            .last()
            .unwrap()
            .header_values("content-encoding")
            .is_empty()
    );
    // A coding airlock cannot undo is refused rather than passed unread.
    let response = setup.send(
        "other.test",
        "/coded/unknown",
        &["Content-Encoding: compress"],
        Some("abc"),
    );
    assert_refused(&response, "body_uninspectable", "/coded/unknown");
}

/// Whether `haystack` holds `needle`.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Asserts the audit log holds the value in no case (a host name is lower-cased).
fn assert_log_free_of_the_value(proxy: &Proxy) {
    let log = proxy.audit_log_text().to_ascii_lowercase();
    assert!(
        !log.contains(&REAL.to_ascii_lowercase()),
        "the audit log holds the value:\n{log}"
    );
    let stderr = proxy.stderr().to_ascii_lowercase();
    assert!(
        !stderr.contains(&REAL.to_ascii_lowercase()),
        "stderr holds the value"
    );
}

#[test]
fn trailers_carrying_a_credential_never_reach_the_upstream() {
    let setup = Setup::new("");
    let port = setup.upstream.port();
    let target = format!("other.test:{port}");
    // HTTP/1.1: a chunked body whose trailer carries the real value, then a GitHub token.
    for (path, trailer, reason) in [
        ("/trailer/h1-real", REAL.to_owned(), "secret_out_of_scope"),
        (
            "/trailer/h1-token",
            format!("token {}", unknown_github_token()),
            "credential_outbound",
        ),
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {target}\r\nTransfer-Encoding: chunked\r\n\
             Trailer: x-leak\r\nTE: trailers\r\nConnection: close\r\n\r\n\
             b\r\nhello world\r\n0\r\nx-leak: {trailer}\r\n\r\n"
        );
        let response = raw::connect_tls(
            setup.proxy.port(),
            &setup.pki,
            &target,
            "other.test",
            request.as_bytes(),
        )
        .response();
        assert_eq!(response.status, 403, "{path}: {response:?}");
        assert_eq!(response.json()["reason"], reason, "{path}");
        let line = setup.line(path);
        assert_eq!(line["reason"], reason, "{path}: {line}");
    }
    // HTTP/2: DATA, then a HEADERS frame of trailers.
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-leak", http::HeaderValue::from_static(REAL));
    let body = support::upstream::FramesBody::new([
        hyper::body::Frame::data(bytes::Bytes::from_static(b"hello world")),
        hyper::body::Frame::trailers(trailers),
    ]);
    let request = hyper::Request::post(format!("https://{target}/trailer/h2"))
        .header("trailer", "x-leak")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    let response = raw::connect_h2_request(
        setup.proxy.port(),
        &setup.pki,
        &target,
        "other.test",
        request,
    )
    .response();
    assert_eq!(response.status, 403, "h2: {response:?}");
    assert_eq!(setup.line("/trailer/h2")["reason"], "secret_out_of_scope");
    assert_eq!(setup.line("/trailer/h2")["form"], "real");
    // The body before the trailers may have gone; no trailer did.
    let token = unknown_github_token();
    setup.assert_never_received("trailers", &[REAL.as_bytes(), token.as_bytes()]);
    assert!(
        !holds(&setup.upstream.received(), b"x-leak:"),
        "a trailer went"
    );
    setup.assert_real_value_never_logged();
    // Control: clean trailers pass to the upstream.
    let request = format!(
        "POST /trailer/clean HTTP/1.1\r\nHost: {target}\r\nTransfer-Encoding: chunked\r\n\
         Trailer: x-checksum\r\nTE: trailers\r\nConnection: close\r\n\r\n\
         5\r\nhello\r\n0\r\nx-checksum: abc123\r\n\r\n"
    );
    let response = raw::connect_tls(
        setup.proxy.port(),
        &setup.pki,
        &target,
        "other.test",
        request.as_bytes(),
    )
    .response();
    assert_eq!(response.status, 200, "clean: {response:?}");
    assert!(holds(&setup.upstream.received(), b"x-checksum: abc123"));
}

#[test]
fn websocket_control_frames_carrying_the_value_close_the_connection() {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET other.test:{}/ws/**", server.port))
        .resolve_loopback("other.test")
        .secret(&format!("GH_TOKEN={SURROGATE}={REAL}@localhost"))
        .start();
    let target = format!("other.test:{}", server.port);
    let mut close_with_reason = 1000u16.to_be_bytes().to_vec();
    close_with_reason.extend_from_slice(REAL.as_bytes());
    for (path, opcode, payload) in [
        ("/ws/ping", 0x9u8, REAL.as_bytes().to_vec()),
        ("/ws/pong", 0xA, REAL.as_bytes().to_vec()),
        ("/ws/close", 0x8, close_with_reason),
    ] {
        let upgrade = WsUpgrade {
            proxy_port: proxy.port(),
            pki: &pki,
            target: &target,
            sni: "other.test",
            path,
            extra_headers: "",
        };
        let steps = [
            WsStep::text("hello"),
            WsStep::Receive,
            WsStep::Send {
                fin: true,
                opcode,
                payload,
            },
            WsStep::Receive,
        ];
        let transcript = raw::websocket_script(&upgrade, &steps).expect("the upgrade");
        assert_eq!(transcript.received[0].payload, b"hello", "{path}");
        if opcode != 0x8 {
            // (tungstenite answers a ping with a pong: the close may come first.)
            assert!(
                transcript
                    .received
                    .iter()
                    .any(|frame| frame.close_code() == Some(1008)),
                "{path}: {transcript:?}"
            );
        }
        proxy.audit_line_where(&format!("the ws refusal of {path}"), |l| {
            l["kind"] == "ws" && l["decision"] == "deny" && l["path"] == path
        });
    }
    let received = server.received_lines().join("\n");
    let hex: String = REAL.bytes().take(8).map(|b| format!("{b:02x}")).collect();
    assert!(
        !received.contains(&hex),
        "the server received the value: {received}"
    );
    assert!(
        received.contains("RECV op=1"),
        "the messages before went: {received}"
    );
}

#[test]
fn a_value_in_the_host_name_is_refused_before_it_is_resolved() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let plain = Upstream::plain();
    let lower = REAL.to_ascii_lowercase();
    let label = format!("{lower}.other.test");
    // `--resolve` pins the names so that the old code would have dialled them at once.
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("*.other.test:{}", upstream.port()))
        .allow(&format!("*.other.test:{}", plain.port()))
        .allow(&format!("other.test:{}", upstream.port()))
        .resolve_loopback("other.test")
        .resolve_loopback(&label)
        .secret(&format!("GH_TOKEN={SURROGATE}={REAL}@localhost"))
        .start();
    let port = upstream.port();
    // The CONNECT target, as written (mixed case) and lower-cased.
    for name in [format!("{REAL}.other.test"), label.clone()] {
        let target = format!("{name}:{port}");
        let outcome = raw::connect_tls(
            proxy.port(),
            &pki,
            &target,
            &label,
            b"GET / HTTP/1.1\r\n\r\n",
        );
        let TunnelOutcome::RefusedOnConnect(refusal) = outcome else {
            panic!("{name}: not refused on CONNECT: {outcome:?}");
        };
        assert_eq!(refusal.status, 403, "{refusal:?}");
        assert_eq!(refusal.json()["reason"], "secret_out_of_scope");
        assert_eq!(refusal.json()["host"], "[REDACTED:GH_TOKEN]");
    }
    // A well-known token as the label.
    let token = format!("{}.other.test:{port}", unknown_github_token());
    let outcome = raw::connect_tls(
        proxy.port(),
        &pki,
        &token,
        "other.test",
        b"GET / HTTP/1.1\r\n\r\n",
    );
    let TunnelOutcome::RefusedOnConnect(refusal) = outcome else {
        panic!("token label: not refused on CONNECT: {outcome:?}");
    };
    assert_eq!(refusal.json()["reason"], "credential_outbound");
    // `Host` over HTTP/1.1 and `:authority` over h2 inside a clean tunnel.
    let clean = format!("other.test:{port}");
    let request = format!("GET /host/h1 HTTP/1.1\r\nHost: {REAL}.other.test:{port}\r\n\r\n");
    let response =
        raw::connect_tls(proxy.port(), &pki, &clean, "other.test", request.as_bytes()).response();
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["reason"], "secret_out_of_scope");
    let uri = format!("https://{label}:{port}/host/h2");
    let response = raw::connect_h2(proxy.port(), &pki, &clean, "other.test", &uri).response();
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["reason"], "secret_out_of_scope");
    // An absolute URI on a plain proxy connection.
    let request = format!(
        "GET http://{label}:{}/host/absolute HTTP/1.1\r\nHost: {label}:{}\r\n\r\n",
        plain.port(),
        plain.port()
    );
    let response = raw::plain(proxy.port(), request.as_bytes());
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["reason"], "secret_out_of_scope");
    let line = proxy.audit_line_where("an absolute-URI refusal", |l| l["path"] == "/host/absolute");
    assert_eq!(line["form"], "real", "{line}");
    assert_eq!(line["host"], "[REDACTED:GH_TOKEN]", "{line}");
    upstream.assert_untouched("a value in the host name");
    plain.assert_untouched("a value in the host name");
    assert_log_free_of_the_value(&proxy);
    // Control: an ordinary label under the wildcard goes.
    let ok = format!("GET /ok HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n");
    let response =
        raw::connect_tls(proxy.port(), &pki, &clean, "other.test", ok.as_bytes()).response();
    assert_eq!(response.status, 200, "{response:?}");
}

#[test]
fn header_names_wrapped_base64_and_split_headers_are_searched() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let name_header = format!("{REAL}: 1");
    let (first, second) = REAL.split_at(REAL.len() / 2);
    let first = format!("X-Part: {first}");
    let second = format!("X-Part: {second}");
    let encoded = STANDARD.encode(format!("attachment text {REAL} and more text after it"));
    let mime: Vec<&str> = encoded
        .as_bytes()
        .chunks(76)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect();
    let mime_body = format!(
        "--b\r\nContent-Transfer-Encoding: base64\r\n\r\n{}\r\n--b--\r\n",
        mime.join("\r\n")
    );
    let spaced: Vec<&str> = encoded
        .as_bytes()
        .chunks(4)
        .map(|group| std::str::from_utf8(group).unwrap())
        .collect();
    let spaced_header = format!("X-Blob: {}", spaced.join(" "));
    let cases: [(&str, Vec<&str>, Option<&str>, support::HttpVersion); 6] = [
        (
            "/name/h1",
            vec![&name_header],
            None,
            support::HttpVersion::Http1,
        ),
        (
            "/name/h2",
            vec![&name_header],
            None,
            support::HttpVersion::Http2,
        ),
        (
            "/split",
            vec![&first, &second],
            None,
            support::HttpVersion::Http1,
        ),
        (
            "/mime/h1",
            vec!["Content-Type: multipart/mixed; boundary=b"],
            Some(&mime_body),
            support::HttpVersion::Http1,
        ),
        (
            "/mime/h2",
            vec!["Content-Type: multipart/mixed; boundary=b"],
            Some(&mime_body),
            support::HttpVersion::Http2,
        ),
        (
            "/spaced",
            vec![&spaced_header],
            None,
            support::HttpVersion::Http1,
        ),
    ];
    for (path, headers, body, version) in cases {
        let url = setup.url("other.test", path);
        let response = curl(
            &setup.proxy,
            &setup.pki,
            &CurlRequest {
                method: body.map(|_| "POST"),
                headers: &headers,
                body,
                version,
                ..CurlRequest::get(&url)
            },
        );
        assert_refused(&response, "secret_out_of_scope", path);
        assert_eq!(setup.line(path)["form"], "real", "{path}");
    }
    let hits = setup.upstream.hits();
    assert!(
        hits.iter().all(|hit| hit.target.starts_with("/mime")),
        "a refused head reached the upstream: {hits:?}"
    );
    let lower = REAL.to_ascii_lowercase();
    assert!(!format!("{hits:?}").to_ascii_lowercase().contains(&lower));
    assert!(
        !holds(&setup.upstream.received(), mime[1].as_bytes()),
        "the wrapped value went"
    );
    setup.assert_real_value_never_logged();
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
