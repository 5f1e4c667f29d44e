//! Private destinations: IP-literal spellings of loopback and metadata addresses, as
//! CONNECT targets, as Host headers and as absolute URIs, are refused (`host_not_allowed`
//! or `private_address`) and reach nothing; a name that resolves to loopback without the
//! operator naming it is `private_address`; an operator-named IP literal passes.

use std::time::Duration;

use crate::support;
use crate::support::raw::{self, Sni, TunnelOutcome};
use crate::support::{
    ExpectedRefusal, ProxyBuilder, TestPki, Upstream, assert_refusal, get_request,
};

/// Spellings of 127.0.0.1 / ::1 / metadata that no rule below names (port appended).
const LOOPBACK_SPELLINGS: &[&str] = &[
    "127.0.0.1",
    "2130706433",
    "0x7f.1",
    "0x7f000001",
    "0177.0.0.1",
    "127.1",
    "127.000.000.001",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::1]",
    "169.254.169.254",
    "[::ffff:169.254.169.254]",
];

fn reason_of(response: &support::RawResponse) -> String {
    let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
    body["reason"].as_str().unwrap_or_default().to_string()
}

fn host_of(response: &support::RawResponse) -> String {
    let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
    body["host"].as_str().unwrap_or_default().to_string()
}

/// Asserts a refusal (docs/contract.md §4) whose reason is one of `reasons`, naming any
/// host.
fn assert_refused_with(
    response: &support::RawResponse,
    reasons: &[&str],
    method: &str,
    what: &str,
) {
    let reason = reason_of(response);
    assert!(
        reasons.contains(&reason.as_str()),
        "{what}: reason {reason:?} not in {reasons:?}: {}",
        String::from_utf8_lossy(&response.raw)
    );
    let reason_static = reasons
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or_default();
    let host = host_of(response);
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: reason_static,
            method,
            host: &host,
            path: None,
        },
    );
}

#[test]
fn ip_literal_connect_targets_are_refused_and_reach_nothing() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let port = upstream.port();
    for spelling in LOOPBACK_SPELLINGS {
        let target = format!("{spelling}:{port}");
        let outcome = raw::tunnel_exchange(
            proxy.port(),
            &pki,
            &target,
            Sni::NoneUnverified,
            &get_request("/echo/ip", &target),
            Duration::ZERO,
        );
        match outcome {
            TunnelOutcome::RefusedOnConnect(response) => assert_refused_with(
                &response,
                &["host_not_allowed", "private_address"],
                "CONNECT",
                &target,
            ),
            TunnelOutcome::InsideTls(response) => assert_refused_with(
                &response,
                &["host_not_allowed", "private_address"],
                "GET",
                &target,
            ),
            TunnelOutcome::TlsFailed(e) => {
                panic!("{target}: neither refused on CONNECT nor answered inside TLS: {e}")
            }
        }
    }
    upstream.assert_untouched("IP-literal CONNECT targets");
    let lines = proxy.audit(LOOPBACK_SPELLINGS.len());
    let denials = lines
        .iter()
        .filter(|l| {
            l["decision"] == "deny"
                && (l["reason"] == "host_not_allowed" || l["reason"] == "private_address")
        })
        .count();
    assert_eq!(
        denials,
        LOOPBACK_SPELLINGS.len(),
        "one line per refusal: {lines:?}"
    );
}

#[test]
fn ip_literal_host_headers_are_refused_and_reach_nothing() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let plain_upstream = Upstream::plain();
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .allow(&format!("localhost:{}", plain_upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let port = upstream.port();
    let plain_port = plain_upstream.port();
    let connect_target = format!("localhost:{port}");
    for spelling in LOOPBACK_SPELLINGS {
        let host_header = format!("{spelling}:{port}");
        let response = raw::connect_tls(
            proxy.port(),
            &pki,
            &connect_target,
            "localhost",
            &get_request("/echo/host", &host_header),
        )
        .response();
        assert_refused_with(
            &response,
            &["host_mismatch", "host_not_allowed", "private_address"],
            "GET",
            &host_header,
        );

        let absolute = format!("{spelling}:{plain_port}");
        let response = raw::plain(
            proxy.port(),
            format!(
                "GET http://{absolute}/echo/abs HTTP/1.1\r\nHost: {absolute}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        assert_refused_with(
            &response,
            &["host_not_allowed", "private_address"],
            "GET",
            &absolute,
        );
    }
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    plain_upstream.assert_untouched("IP-literal absolute URIs");
    proxy.audit(2 * LOOPBACK_SPELLINGS.len());
}

#[test]
fn name_resolving_to_loopback_without_operator_consent_is_private_address() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let plain_upstream = Upstream::plain();
    // `localhost` is allowed by a pattern (a host regex), which is no consent to the
    // loopback: no --resolve, cidr, IP literal or exact `localhost` rule names 127.0.0.1.
    let proxy = ProxyBuilder::new(&pki)
        .policy(&format!(
            "version: 1\nnetwork:\n  allow:\n    - host_regex: \"local(host)?\"\n      ports: [{}, {}]\n",
            upstream.port(),
            plain_upstream.port()
        ))
        .start();
    let target = format!("localhost:{}", upstream.port());
    let outcome = raw::connect_tls(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        &get_request("/echo/private", &target),
    );
    let on_connect = matches!(outcome, TunnelOutcome::RefusedOnConnect(_));
    let response = outcome.response();
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "private_address",
            method: if on_connect { "CONNECT" } else { "GET" },
            host: "localhost",
            path: if on_connect {
                None
            } else {
                Some("/echo/private")
            },
        },
    );
    upstream.assert_untouched("loopback by resolution");

    let plain_target = format!("localhost:{}", plain_upstream.port());
    let response = raw::plain(
        proxy.port(),
        format!(
            "GET http://{plain_target}/echo/private HTTP/1.1\r\nHost: {plain_target}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "private_address",
            method: "GET",
            host: "localhost",
            path: Some("/echo/private"),
        },
    );
    plain_upstream.assert_untouched("loopback by resolution, plain HTTP");
    let line = proxy.audit_line_where("with private_address", |l| {
        l["decision"] == "deny" && l["reason"] == "private_address"
    });
    assert_eq!(line["host"], "localhost", "{line}");
}

#[test]
fn operator_named_ip_literal_passes() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("127.0.0.1:{}", upstream.port()))
        .start();
    let target = format!("127.0.0.1:{}", upstream.port());
    let response = raw::connect_tls(
        proxy.port(),
        &pki,
        &target,
        "127.0.0.1",
        &get_request("/echo/named", &target),
    )
    .response();
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.raw)
    );
    assert_eq!(upstream.hit_count(), 1);
}
