//! "One canonical request": the CONNECT target, the SNI, the Host header, an absolute URI
//! and the h2 `:authority` must agree, else the proxy refuses (`host_mismatch`) without
//! reaching the upstream. Duplicate Host headers are malformed: 400 and the connection
//! closes. Each shape has a control that passes with the same harness.

use crate::support;
use crate::support::raw::{self, TunnelOutcome};
use crate::support::{
    ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_refusal, get_request,
};

/// A proxy allowing both `localhost` and `other.test` on the upstream's port, both pinned
/// to 127.0.0.1, so that only the disagreement can cause a refusal.
fn proxy_for_two_names(pki: &TestPki, upstream: &Upstream) -> Proxy {
    ProxyBuilder::new(pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .allow(&format!("other.test:{}", upstream.port()))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .start()
}

fn assert_mismatch_logged(proxy: &Proxy) {
    let line = proxy.audit_line_where("with host_mismatch", |l| {
        l["decision"] == "deny" && l["reason"] == "host_mismatch"
    });
    assert_eq!(line["kind"], "http", "{line}");
}

#[test]
fn agreeing_names_pass() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_two_names(&pki, &upstream);
    for name in ["localhost", "other.test"] {
        let target = format!("{name}:{}", upstream.port());
        let response = raw::connect_tls(
            proxy.port(),
            &pki,
            &target,
            name,
            &get_request("/echo/ok", &target),
        )
        .response();
        assert_eq!(
            response.status,
            200,
            "{}",
            String::from_utf8_lossy(&response.raw)
        );
        assert_eq!(response.json()["authority"], target.as_str());
    }
    // Names compare case-insensitively: a Host in capitals is the same name.
    let target = format!("localhost:{}", upstream.port());
    let shouted = format!("LOCALHOST:{}", upstream.port());
    let response = raw::connect_tls(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        &get_request("/echo/case", &shouted),
    )
    .response();
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.raw)
    );
    assert_eq!(upstream.hit_count(), 3);
}

#[test]
fn absolute_uri_inside_the_tunnel_naming_another_host_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_two_names(&pki, &upstream);
    let port = upstream.port();
    let target = format!("localhost:{port}");
    let other = format!("other.test:{port}");
    // The request-target names other.test while CONNECT, SNI and Host say localhost.
    let request = format!(
        "GET https://{other}/echo/abs HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
    );
    let response =
        raw::connect_tls(proxy.port(), &pki, &target, "localhost", request.as_bytes()).response();
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "host_mismatch",
            method: "GET",
            host: response_host(&response),
            path: Some("/echo/abs"),
        },
    );
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    assert_mismatch_logged(&proxy);
}

#[test]
fn host_header_different_from_sni_and_connect_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_two_names(&pki, &upstream);
    let connect_target = format!("localhost:{}", upstream.port());
    let host_header = format!("other.test:{}", upstream.port());
    let outcome = raw::connect_tls(
        proxy.port(),
        &pki,
        &connect_target,
        "localhost",
        &get_request("/echo/x", &host_header),
    );
    let response = match outcome {
        TunnelOutcome::InsideTls(response) => response,
        other => panic!("the tunnel to an allowed host must open: {other:?}"),
    };
    let body = assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "host_mismatch",
            method: "GET",
            host: response_host(&response),
            path: Some("/echo/x"),
        },
    );
    assert!(
        body["host"] == "localhost" || body["host"] == "other.test",
        "{body}"
    );
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    assert_mismatch_logged(&proxy);
}

/// The host the refusal names (either of the disagreeing names is acceptable).
fn response_host(response: &support::RawResponse) -> &'static str {
    let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
    if body["host"] == "other.test" {
        "other.test"
    } else {
        "localhost"
    }
}

#[test]
fn sni_different_from_connect_target_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_two_names(&pki, &upstream);
    let connect_target = format!("localhost:{}", upstream.port());
    let other = format!("other.test:{}", upstream.port());
    // SNI and Host agree with each other but not with the CONNECT target.
    let outcome = raw::connect_tls(
        proxy.port(),
        &pki,
        &connect_target,
        "other.test",
        &get_request("/echo/y", &other),
    );
    match outcome {
        TunnelOutcome::InsideTls(response) => {
            assert_refusal(
                response.status,
                &response.headers,
                &response.body,
                &ExpectedRefusal {
                    reason: "host_mismatch",
                    method: "GET",
                    host: response_host(&response),
                    path: Some("/echo/y"),
                },
            );
        }
        // Refusing the handshake itself also keeps the request from leaving.
        TunnelOutcome::TlsFailed(_) => {}
        TunnelOutcome::RefusedOnConnect(response) => {
            panic!("CONNECT to an allowed host was refused: {response:?}")
        }
    }
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    assert_mismatch_logged(&proxy);
}

#[test]
fn absolute_uri_host_different_from_host_header_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let proxy = proxy_for_two_names(&pki, &upstream);
    let port = upstream.port();
    let control = raw::plain(
        proxy.port(),
        format!(
            "GET http://localhost:{port}/echo/abs HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(
        control.status,
        200,
        "{}",
        String::from_utf8_lossy(&control.raw)
    );
    assert_eq!(upstream.hit_count(), 1);

    let response = raw::plain(
        proxy.port(),
        format!(
            "GET http://localhost:{port}/echo/abs HTTP/1.1\r\nHost: other.test:{port}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "host_mismatch",
            method: "GET",
            host: response_host(&response),
            path: Some("/echo/abs"),
        },
    );
    assert_eq!(upstream.hit_count(), 1, "refused request reached upstream");
    assert_mismatch_logged(&proxy);
}

#[test]
fn duplicate_host_headers_get_400_and_close() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let plain_upstream = Upstream::plain();
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .allow(&format!("other.test:{}", upstream.port()))
        .allow(&format!("localhost:{}", plain_upstream.port()))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .start();
    let port = upstream.port();
    let target = format!("localhost:{port}");
    for second in [format!("other.test:{port}"), target.clone()] {
        let request = format!(
            "GET /echo/dup HTTP/1.1\r\nHost: {target}\r\nHost: {second}\r\nConnection: keep-alive\r\n\r\n"
        );
        let response = raw::connect_tls_expect_close(
            proxy.port(),
            &pki,
            &target,
            "localhost",
            request.as_bytes(),
        )
        .response();
        assert_eq!(
            response.status,
            400,
            "duplicate Host ({second}): {}",
            String::from_utf8_lossy(&response.raw)
        );
        assert!(response.closed, "the connection must close after the 400");
    }
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());

    let plain_port = plain_upstream.port();
    let response = raw::plain_expect_close(
        proxy.port(),
        format!(
            "GET http://localhost:{plain_port}/echo/dup HTTP/1.1\r\nHost: localhost:{plain_port}\r\nHost: other.test:{plain_port}\r\nConnection: keep-alive\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(
        response.status,
        400,
        "{}",
        String::from_utf8_lossy(&response.raw)
    );
    assert!(response.closed, "the connection must close after the 400");
    plain_upstream.assert_untouched("duplicate Host on plain HTTP");
    let lines = proxy.audit(3);
    assert!(
        lines.iter().filter(|l| l["decision"] == "deny").count() >= 3,
        "every refused request is logged: {lines:?}"
    );
}

#[test]
fn h2_authority_different_from_sni_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for_two_names(&pki, &upstream);
    let port = upstream.port();
    let target = format!("localhost:{port}");
    let control = raw::connect_h2(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        &format!("https://localhost:{port}/echo/h2"),
    )
    .response();
    assert_eq!(
        control.status,
        200,
        "{}",
        String::from_utf8_lossy(&control.body)
    );
    assert_eq!(upstream.hit_count(), 1);

    let response = raw::connect_h2(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        &format!("https://other.test:{port}/echo/h2"),
    )
    .response();
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "host_mismatch",
            method: "GET",
            host: response_host(&response),
            path: Some("/echo/h2"),
        },
    );
    assert_eq!(
        upstream.hit_count(),
        1,
        "refused h2 request reached upstream"
    );
    assert_mismatch_logged(&proxy);
}
