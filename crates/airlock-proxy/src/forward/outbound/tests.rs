//! Unit tests of the outbound step's pure parts: the upstream target and the headers.

use super::*;

#[test]
fn hop_by_hop_and_proxy_headers_are_removed() {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONNECTION,
        HeaderValue::from_static("close, x-secret-hop"),
    );
    headers.insert("x-secret-hop", HeaderValue::from_static("1"));
    headers.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
    headers.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
    headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    headers.insert(header::TE, HeaderValue::from_static("gzip"));
    headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
    strip_hop_by_hop(&mut headers, false);
    assert_eq!(headers.len(), 1);
    assert!(headers.contains_key(header::ACCEPT));
}

#[test]
fn te_trailers_and_upgrades_survive() {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    strip_hop_by_hop(&mut headers, true);
    assert_eq!(headers[header::UPGRADE], "websocket");
    assert_eq!(headers[header::CONNECTION], "upgrade");
    assert_eq!(headers[header::TE], "trailers");
}

fn destination(scheme: &'static str, host: &str, port: u16) -> Destination {
    Destination {
        scheme,
        host: airlock_policy::Host::Name(host.into()),
        port,
    }
}

#[test]
fn the_upstream_target_names_the_port_only_when_it_is_not_the_default() {
    let uri = |scheme, port, target| upstream_uri(&destination(scheme, "a.example", port), target);
    let https = uri("https", 443, "/x?y=1").unwrap();
    assert_eq!(https.to_string(), "https://a.example/x?y=1");
    assert_eq!(
        uri("http", 80, "/").unwrap().to_string(),
        "http://a.example/"
    );
    assert_eq!(
        uri("https", 8443, "/").unwrap().to_string(),
        "https://a.example:8443/"
    );
    assert_eq!(
        uri("http", 443, "/").unwrap().to_string(),
        "http://a.example:443/"
    );
}

#[test]
fn a_target_that_is_not_origin_form_cannot_be_forwarded() {
    let target = destination("https", "a.example", 443);
    assert!(upstream_uri(&target, "/ok").is_some());
    assert!(upstream_uri(&target, "/a b").is_none());
    assert!(upstream_uri(&target, "/\u{7f}").is_none());
}
