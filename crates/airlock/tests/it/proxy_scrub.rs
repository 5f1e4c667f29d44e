//! Response scrubbing beyond headers and body (docs/secrets.md, "Scrub"): an upstream on a
//! secret's host that echoes the real value it received in the status reason phrase, in
//! informational `1xx` heads, in a WebSocket `101` head, in trailers (HTTP/2 and chunked
//! HTTP/1.1, after a body short enough to be held back whole) and under every layer of
//! `Content-Encoding`. Each answer is searched for every encoding of the real value.

use crate::support::encodings::leak_forms;
use crate::support::raw::{RawResponse, connect_h2_request, connect_tls};
use crate::support::scripted::{ScriptedUpstream, head_value};
use crate::support::{Proxy, ProxyBuilder, TestPki, Upstream, curl_get};

const PLACEHOLDER: &str = "PLACEHOLDER_LLM_KEY_7f3a";
const REAL: &str = "sk-bench-REAL-0123456789abcdef";

/// The proxy with the secret on `localhost`, allowed on each of `ports`.
fn start(pki: &TestPki, ports: &[u16]) -> Proxy {
    let mut builder = ProxyBuilder::new(pki).resolve_loopback("localhost");
    for port in ports {
        builder = builder.allow(&format!("localhost:{port}"));
    }
    builder
        .secret(&format!("LLM_KEY={PLACEHOLDER}={REAL}@localhost"))
        .start()
}

/// Panics when `bytes` hold any encoding of the real value.
fn assert_no_leak(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for (form, value) in leak_forms(REAL) {
        assert!(
            !text.contains(&value),
            "{what}: the real value ({form}) reached the client:\n{text}"
        );
    }
}

/// A hand-written HTTP/1.1 request for `path` carrying the surrogate, `extra` headers
/// (each ending in CRLF) before the end of the head.
fn request(path: &str, port: u16, extra: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nAuthorization: Bearer {PLACEHOLDER}\r\n{extra}\r\n"
    )
    .into_bytes()
}

/// Sends `request` through a CONNECT tunnel and TLS (HTTP/1.1) to `localhost:port`.
fn through_tunnel(proxy: &Proxy, pki: &TestPki, port: u16, request: &[u8]) -> RawResponse {
    connect_tls(
        proxy.port(),
        pki,
        &format!("localhost:{port}"),
        "localhost",
        request,
    )
    .response()
}

/// The status lines in the raw bytes of a response.
fn status_lines(raw: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(raw)
        .split("\r\n")
        .filter(|line| line.starts_with("HTTP/"))
        .map(str::to_owned)
        .collect()
}

/// The upstream received the real value: what it echoes is worth scrubbing.
fn assert_upstream_got_the_real_value(upstream: &Upstream) {
    let hits = upstream.hits();
    assert_eq!(
        hits.last().map(|hit| hit.header_values("authorization")),
        Some(vec![format!("Bearer {REAL}")]),
        "{hits:?}"
    );
}

#[test]
fn a_reason_phrase_echoing_the_real_value_is_scrubbed() {
    let pki = TestPki::new();
    let upstream = Upstream::tls_http1(&pki);
    let proxy = start(&pki, &[upstream.port()]);
    let port = upstream.port();
    let response = through_tunnel(
        &proxy,
        &pki,
        port,
        &request("/reason-echo", port, "Connection: close\r\n"),
    );
    assert_upstream_got_the_real_value(&upstream);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        status_lines(&response.raw),
        [format!("HTTP/1.1 200 Echo Bearer {PLACEHOLDER}")],
        "the reason phrase comes back scrubbed"
    );
    assert_no_leak("reason phrase", &response.raw);
}

/// A final answer preceded by `100 Continue` and `103 Early Hints` heads, all three
/// echoing the `Authorization` value.
fn informational_script(head: &str) -> Vec<u8> {
    let echo = head_value(head, "authorization");
    format!(
        "HTTP/1.1 100 Continue\r\nx-echo: {echo}\r\n\r\n\
         HTTP/1.1 103 Early Hints\r\nlink: </{echo}>; rel=preload\r\nx-echo: {echo}\r\n\r\n\
         HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-final: {echo}\r\nconnection: close\r\n\r\nok"
    )
    .into_bytes()
}

#[test]
fn informational_heads_from_upstream_never_reach_the_client() {
    let pki = TestPki::new();
    let upstream = ScriptedUpstream::tls(&pki, informational_script);
    let port = upstream.port();
    let proxy = start(&pki, &[port]);
    let response = through_tunnel(
        &proxy,
        &pki,
        port,
        &request("/early-hints", port, "Connection: close\r\n"),
    );
    let heads = upstream.heads();
    assert!(
        heads.len() == 1 && heads[0].contains(REAL),
        "the upstream received the real value: {heads:?}"
    );
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        status_lines(&response.raw),
        ["HTTP/1.1 200 OK"],
        "hyper's client reads past 1xx heads; none is relayed"
    );
    assert_eq!(response.body, b"ok");
    assert_eq!(
        response.header("x-final"),
        Some(format!("Bearer {PLACEHOLDER}").as_str()),
        "the final head is scrubbed"
    );
    assert_no_leak("1xx heads", &response.raw);
}

#[test]
fn a_websocket_101_head_echoing_the_real_value_is_scrubbed() {
    let pki = TestPki::new();
    let upstream = Upstream::tls_http1(&pki);
    let port = upstream.port();
    let proxy = start(&pki, &[port]);
    let upgrade = "Connection: Upgrade\r\nUpgrade: websocket\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    let response = through_tunnel(&proxy, &pki, port, &request("/ws-echo", port, upgrade));
    assert_upstream_got_the_real_value(&upstream);
    assert_eq!(response.status, 101, "{response:?}");
    assert_eq!(
        response.header("x-echo"),
        Some(format!("Bearer {PLACEHOLDER}").as_str()),
        "the 101's headers are scrubbed: {response:?}"
    );
    assert_eq!(
        status_lines(&response.raw),
        [format!("HTTP/1.1 101 Switching Bearer {PLACEHOLDER}")],
        "the 101's reason phrase is scrubbed"
    );
    assert_no_leak("101 head", &response.raw);
}

#[test]
fn http2_trailers_follow_the_held_bytes_and_are_scrubbed() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let proxy = start(&pki, &[port]);
    let request = hyper::Request::get(format!("https://localhost:{port}/trailers-echo"))
        .header("authorization", format!("Bearer {PLACEHOLDER}"))
        .header("te", "trailers")
        .body(http_body_util::Empty::new())
        .expect("request");
    let response = connect_h2_request(
        proxy.port(),
        &pki,
        &format!("localhost:{port}"),
        "localhost",
        request,
    )
    .response();
    assert_upstream_got_the_real_value(&upstream);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        String::from_utf8_lossy(&response.body),
        "end-of-body",
        "the bytes held back for scrubbing come before the trailers: {response:?}"
    );
    assert_eq!(
        response.trailers,
        [("x-echo".to_owned(), format!("Bearer {PLACEHOLDER}"))],
        "the trailers are scrubbed"
    );
    let trailers = format!("{:?}", response.trailers);
    assert_no_leak("h2 trailers", trailers.as_bytes());
    assert_no_leak("h2 body", &response.body);
}

#[test]
fn chunked_http1_trailers_follow_the_held_bytes_and_are_scrubbed() {
    let pki = TestPki::new();
    let upstream = Upstream::tls_http1(&pki);
    let port = upstream.port();
    let proxy = start(&pki, &[port]);
    let response = through_tunnel(
        &proxy,
        &pki,
        port,
        &request(
            "/trailers-echo",
            port,
            "TE: trailers\r\nConnection: close\r\n",
        ),
    );
    assert_upstream_got_the_real_value(&upstream);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        String::from_utf8_lossy(&response.body),
        "end-of-body",
        "the bytes held back for scrubbing come before the trailers: {response:?}"
    );
    let raw = String::from_utf8_lossy(&response.raw);
    let trailer = format!("\r\n0\r\nx-echo: Bearer {PLACEHOLDER}\r\n\r\n");
    assert!(
        raw.contains(&trailer),
        "scrubbed trailer after the last chunk:\n{raw}"
    );
    assert_no_leak("chunked trailers", &response.raw);
}

#[test]
fn every_content_coding_layer_is_undone_before_scrubbing() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let proxy = start(&pki, &[port]);
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    for query in ["list=gzip,br", "lines=gzip,zstd", "lines=identity,gzip"] {
        let url = format!("https://localhost:{port}/coded-echo?{query}");
        let response = curl_get(&proxy, &pki, &url, &[&auth]);
        assert_eq!(response.status, 200, "{query}: {response:?}");
        assert_upstream_got_the_real_value(&upstream);
        assert!(
            !response
                .headers
                .iter()
                .any(|(name, _)| name == "content-encoding"),
            "{query}: passed on decoded: {response:?}"
        );
        let body = String::from_utf8_lossy(&response.body);
        assert!(
            body.contains(&format!("Bearer {PLACEHOLDER}")),
            "{query}: decoded and scrubbed: {body}"
        );
        assert_no_leak(query, &response.body);
    }
}
