//! The value where a filter might not look (issue 31's second audit): in compressed bodies,
//! request trailers (HTTP/1.1 and HTTP/2), the host name (refused before it is resolved),
//! header names, base64 wrapped or spaced, and split over header lines.

use std::io::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::support;
use crate::support::raw::{self, TunnelOutcome};
use crate::support::{CurlRequest, ProxyBuilder, TestPki, Upstream, curl};

use super::{
    REAL, SURROGATE, Setup, assert_log_free_of_the_value, assert_refused, holds,
    unknown_github_token,
};

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

/// Writes `request` through a tunnel to `target` (TLS as `other.test`); the answer.
fn through_a_tunnel(setup: &Setup, target: &str, request: &str) -> raw::RawResponse {
    raw::connect_tls(
        setup.proxy.port(),
        &setup.pki,
        target,
        "other.test",
        request.as_bytes(),
    )
    .response()
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
        let response = through_a_tunnel(&setup, &target, &request);
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
    let response = through_a_tunnel(&setup, &target, &request);
    assert_eq!(response.status, 200, "clean: {response:?}");
    assert!(holds(&setup.upstream.received(), b"x-checksum: abc123"));
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
