//! The value in a WebSocket message, or in a ping, pong or close payload: the connection
//! is closed 1008 and the server never receives it.

use crate::support::fixture_server::FixtureServer;
use crate::support::raw::{self, WsStep, WsUpgrade};
use crate::support::{Proxy, ProxyBuilder, TestPki};

use super::{REAL, SURROGATE};

/// The setup both tests share: the WebSocket echo server behind the proxy, with
/// `GET other.test:PORT/ws/**` allowed and the secret configured for `localhost` only; the
/// last item is `other.test:PORT` (allowed, but not the secret's host).
fn echo_behind_the_guard() -> (TestPki, FixtureServer, Proxy, String) {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET other.test:{}/ws/**", server.port))
        .resolve_loopback("other.test")
        .secret(&format!("GH_TOKEN={SURROGATE}={REAL}@localhost"))
        .start();
    let target = format!("other.test:{}", server.port);
    (pki, server, proxy, target)
}

/// The frames the server received (its `RECV` lines), asserted free of the value's first
/// 8 bytes.
fn received_without_the_value(server: &FixtureServer) -> String {
    let received = server.received_lines().join("\n");
    let hex: String = REAL.bytes().take(8).map(|b| format!("{b:02x}")).collect();
    assert!(
        !received.contains(&hex),
        "the server received the value: {received}"
    );
    received
}

#[test]
fn a_websocket_message_with_the_value_closes_the_connection() {
    let (pki, server, proxy, target) = echo_behind_the_guard();
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
    received_without_the_value(&server);
    let line = proxy.audit_line_where("the ws refusal", |l| {
        l["kind"] == "ws" && l["decision"] == "deny"
    });
    assert_eq!(line["form"], "real", "{line}");
}

#[test]
fn websocket_control_frames_carrying_the_value_close_the_connection() {
    let (pki, server, proxy, target) = echo_behind_the_guard();
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
    let received = received_without_the_value(&server);
    assert!(
        received.contains("RECV op=1"),
        "the messages before went: {received}"
    );
}
