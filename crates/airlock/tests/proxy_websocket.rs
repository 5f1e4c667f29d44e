//! WebSocket through the proxy (same rules as HTTP): an allowed upgrade echoes frames both
//! ways and leaves one `ws` audit line with bytes and duration; an upgrade to a path the
//! rule does not allow is refused before the server sees it. The server is
//! tests/fixtures/ws_echo_server.py (RFC 6455 over TLS).

mod support;

use support::fixture_server::FixtureServer;
use support::raw::{self, TunnelOutcome, WS_ACCEPT};
use support::{ExpectedRefusal, ProxyBuilder, TestPki, assert_refusal};

#[test]
fn allowed_websocket_echoes_and_is_audited() {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET localhost:{}/ws/**", server.port))
        .resolve_loopback("localhost")
        .start();
    let target = format!("localhost:{}", server.port);
    let big = vec![b'w'; 4000];
    let messages: [&[u8]; 3] = [b"hello airlock", b"second frame", &big];
    let session = raw::websocket_echo(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        "/ws/echo",
        &messages,
    )
    .unwrap_or_else(|outcome| panic!("the upgrade did not go through: {outcome:?}"));
    assert_eq!(
        session.handshake.header("sec-websocket-accept"),
        Some(WS_ACCEPT),
        "{:?}",
        session.handshake
    );
    assert_eq!(
        session.echoes,
        messages.iter().map(|m| m.to_vec()).collect::<Vec<_>>()
    );
    assert!(
        session.close_answered,
        "the close frame is relayed both ways"
    );
    assert_eq!(server.hits(), 1);
    let line = proxy.audit_line_where("of kind ws", |l| l["kind"] == "ws");
    assert_eq!(line["decision"], "allow", "{line}");
    assert_eq!(line["host"], "localhost", "{line}");
    assert_eq!(line["path"], "/ws/echo", "{line}");
    let sent: u64 = messages.iter().map(|m| m.len() as u64).sum();
    assert!(
        line["bytes_up"].as_u64().is_some_and(|b| b >= sent),
        "bytes_up counts the frames sent: {line}"
    );
    assert!(
        line["bytes_down"].as_u64().is_some_and(|b| b >= sent),
        "bytes_down counts the frames echoed: {line}"
    );
    assert!(line["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{line}");
}

#[test]
fn websocket_to_a_path_not_allowed_is_refused() {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET localhost:{}/ws/**", server.port))
        .resolve_loopback("localhost")
        .start();
    let target = format!("localhost:{}", server.port);
    let outcome = raw::websocket_echo(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        "/admin/socket",
        &[b"x"],
    );
    let response = match outcome {
        Err(TunnelOutcome::InsideTls(response)) => response,
        other => panic!("expected a refusal inside TLS: {other:?}"),
    };
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "path_not_allowed",
            method: "GET",
            host: "localhost",
            path: Some("/admin/socket"),
        },
    );
    assert_eq!(server.hits(), 0, "the refused upgrade reached the server");
    let line = proxy.audit_line_where("refusing the upgrade", |l| l["decision"] == "deny");
    assert_eq!(line["reason"], "path_not_allowed", "{line}");
}
