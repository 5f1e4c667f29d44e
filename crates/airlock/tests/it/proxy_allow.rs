//! Allowed requests through the real `airlock proxy` with real clients: curl over HTTP/1.1
//! and h2 inside CONNECT+TLS, python3 urllib, absolute-form plain HTTP; bytes arrive
//! unchanged and every request leaves one `allow` audit line.

use crate::support::{
    CurlRequest, HttpVersion, Proxy, ProxyBuilder, TestPki, Upstream, assert_http_audit_shape,
    assert_rule_id, curl, pattern_bytes, python_urllib,
};

fn proxy_for_localhost(pki: &TestPki, upstream: &Upstream) -> Proxy {
    ProxyBuilder::new(pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
        .start()
}

fn assert_allow_line(proxy: &Proxy, scheme: &str, port: u16, method: &str, path: &str) {
    let line = proxy.audit_line_where(&format!("allowing {method} {path}"), |l| {
        l["decision"] == "allow" && l["path"] == path && l["method"] == method
    });
    assert_http_audit_shape(&line);
    assert_rule_id(&line["rule"], "--allow[0]");
    assert_eq!(line["scheme"], scheme, "{line}");
    assert_eq!(line["host"], "localhost", "{line}");
    assert_eq!(line["port"], port, "{line}");
    assert_eq!(line["status"], 200, "{line}");
    assert!(line["bytes_down"].as_u64().is_some_and(|b| b > 0), "{line}");
    assert!(line["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{line}");
    assert!(line.get("reason").is_none_or(|r| r.is_null()), "{line}");
}

#[test]
fn curl_http1_through_connect_reaches_upstream() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_localhost(&pki, &upstream);
    let url = format!("https://localhost:{}/echo/h1?x=1", upstream.port());
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.connect_status, 200, "{response:?}");
    assert_eq!(response.http_version, "1.1");
    let echo = response.json();
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["path"], "/echo/h1");
    assert_eq!(echo["query"], "x=1");
    assert_eq!(echo["authority"], format!("localhost:{}", upstream.port()));
    assert_eq!(upstream.hit_count(), 1);
    assert_allow_line(&proxy, "https", upstream.port(), "GET", "/echo/h1");
}

#[test]
fn curl_http2_through_connect_reaches_upstream() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_localhost(&pki, &upstream);
    let url = format!("https://localhost:{}/echo/h2", upstream.port());
    let request = CurlRequest {
        version: HttpVersion::Http2,
        ..CurlRequest::get(&url)
    };
    let response = curl(&proxy, &pki, &request);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        response.http_version, "2",
        "the proxy should offer h2 to an h2 client"
    );
    let echo = response.json();
    assert_eq!(echo["path"], "/echo/h2");
    assert_eq!(echo["authority"], format!("localhost:{}", upstream.port()));
    assert_allow_line(&proxy, "https", upstream.port(), "GET", "/echo/h2");
}

#[test]
fn curl_post_body_arrives_whole() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_localhost(&pki, &upstream);
    let url = format!("https://localhost:{}/echo/post", upstream.port());
    let body = "hello airlock ".repeat(1000);
    for version in [HttpVersion::Http1, HttpVersion::Http2] {
        let request = CurlRequest {
            method: Some("POST"),
            body: Some(&body),
            headers: &["Content-Type: text/plain"],
            version,
            ..CurlRequest::get(&url)
        };
        let response = curl(&proxy, &pki, &request);
        assert_eq!(response.status, 200, "{version:?}: {response:?}");
        let echo = response.json();
        assert_eq!(echo["method"], "POST");
        assert_eq!(echo["body_len"], body.len());
        assert_eq!(echo["body"], body.as_str());
    }
    let line = proxy.audit_line_where("for the POST", |l| l["method"] == "POST");
    assert_eq!(line["decision"], "allow", "{line}");
    assert!(
        line["bytes_up"]
            .as_u64()
            .is_some_and(|b| b >= body.len() as u64),
        "bytes_up counts the request body: {line}"
    );
}

#[test]
fn python_urllib_through_connect_reaches_upstream() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_localhost(&pki, &upstream);
    let url = format!("https://localhost:{}/echo/python", upstream.port());
    let answer = python_urllib(&proxy, &pki, "GET", &url, &[("X-Test", "urllib")]);
    assert_eq!(answer["status"], 200, "{answer}");
    let echo: serde_json::Value =
        serde_json::from_str(answer["body"].as_str().unwrap_or_default()).expect("echo JSON");
    assert_eq!(echo["path"], "/echo/python");
    let headers = echo["headers"].as_array().expect("headers");
    assert!(
        headers.iter().any(|h| h[0] == "x-test" && h[1] == "urllib"),
        "request header must arrive: {echo}"
    );
    assert_allow_line(&proxy, "https", upstream.port(), "GET", "/echo/python");
}

#[test]
fn plain_http_absolute_form_reaches_upstream() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let proxy = proxy_for_localhost(&pki, &upstream);
    let url = format!("http://localhost:{}/echo/plain?q=2", upstream.port());
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.connect_status, 0, "plain HTTP must not CONNECT");
    let echo = response.json();
    assert_eq!(echo["path"], "/echo/plain");
    assert_eq!(echo["query"], "q=2");
    assert_eq!(echo["authority"], format!("localhost:{}", upstream.port()));
    assert_allow_line(&proxy, "http", upstream.port(), "GET", "/echo/plain");
}

#[test]
fn one_mebibyte_download_is_byte_identical() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_localhost(&pki, &upstream);
    let size = 1_048_576;
    let url = format!("https://localhost:{}/bytes/{size}", upstream.port());
    let expected = pattern_bytes(size);
    for version in [HttpVersion::Http1, HttpVersion::Http2] {
        let request = CurlRequest {
            version,
            ..CurlRequest::get(&url)
        };
        let response = curl(&proxy, &pki, &request);
        assert_eq!(response.status, 200, "{version:?}: {}", response.stderr);
        assert_eq!(response.body.len(), size, "{version:?}");
        assert!(response.body == expected, "{version:?}: bytes differ");
    }
    let lines = proxy.audit(2);
    let downloads: Vec<_> = lines
        .iter()
        .filter(|l| l["path"] == format!("/bytes/{size}"))
        .collect();
    assert_eq!(downloads.len(), 2, "one line per request: {lines:?}");
    for line in downloads {
        assert_eq!(line["decision"], "allow", "{line}");
        assert!(
            line["bytes_down"]
                .as_u64()
                .is_some_and(|b| b >= size as u64),
            "bytes_down counts the body: {line}"
        );
    }
}
