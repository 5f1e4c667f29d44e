//! WebSocket through the proxy (same rules as HTTP): an allowed upgrade echoes frames both
//! ways and leaves one `ws` audit line with bytes and duration; an upgrade to a path the
//! rule does not allow is refused before the server sees it. Where `json_deny` guards
//! apply, each client message is checked like a request body: allowed JSON is echoed, a
//! violating, non-JSON, binary, oversize or malformed message (also fragmented) closes
//! the connection with 1008 and never reaches the server, permessage-deflate is never
//! negotiated; without guards the bytes are relayed as before. The server is
//! tests/fixtures/ws_echo_server.py (RFC 6455 over TLS), which records every frame it
//! receives. No upgrade opens on a path an `mcp` rule covers, in any spelling.

mod guarded;
mod upgrades;

use std::time::{Duration, Instant};

use crate::support::fixture_server::FixtureServer;
use crate::support::raw::{self, TunnelOutcome, WS_ACCEPT, WsStep, WsTranscript};
use crate::support::{ExpectedRefusal, Proxy, ProxyBuilder, TestPki, assert_refusal};

/// The echo server behind a proxy, and `localhost:PORT` to reach it at.
type Relay = (TestPki, FixtureServer, Proxy, String);

/// The setup the plain relay tests share: the echo server behind a proxy allowing
/// `GET localhost:PORT/ws/**`.
fn relay() -> Relay {
    relay_with(|builder, port| builder.allow(&format!("GET localhost:{port}/ws/**")))
}

/// The echo server behind a proxy whose rules `configure` adds (given the server's port),
/// `localhost` resolved to loopback.
fn relay_with(configure: impl FnOnce(ProxyBuilder<'_>, u16) -> ProxyBuilder<'_>) -> Relay {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = configure(ProxyBuilder::new(&pki), server.port)
        .resolve_loopback("localhost")
        .start();
    let target = format!("localhost:{}", server.port);
    (pki, server, proxy, target)
}

/// The echo server's `RECV` lines once it has received `closes` close frames (waiting at
/// most 10 s; then whatever there is): everything sent before those closes is in.
fn frames_received(server: &FixtureServer, closes: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = server.received_lines();
        let seen = lines.iter().filter(|l| l.starts_with("RECV op=8 ")).count();
        if seen >= closes || Instant::now() >= deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn fragment(fin: bool, opcode: u8, payload: &[u8]) -> WsStep {
    WsStep::Send {
        fin,
        opcode,
        payload: payload.to_vec(),
    }
}

/// Steps sending `message` as one text frame, reading its echo, then closing with 1000.
fn echo_then_close(message: &str) -> [WsStep; 4] {
    [
        WsStep::text(message),
        WsStep::Receive,
        WsStep::close(1000),
        WsStep::Receive,
    ]
}

/// Asserts `transcript` received `message` echoed, then a close 1000.
fn assert_echoed(transcript: &WsTranscript, message: &str) {
    let payloads: Vec<(u8, &[u8])> = transcript
        .received
        .iter()
        .map(|frame| (frame.opcode, frame.payload.as_slice()))
        .collect();
    let close: &[u8] = &1000u16.to_be_bytes();
    assert_eq!(
        payloads,
        [(0x1, message.as_bytes()), (0x8, close)],
        "{transcript:?}"
    );
}

#[test]
fn allowed_websocket_echoes_and_is_audited() {
    let (pki, server, proxy, target) = relay();
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
    let line = proxy.audit_line_where("closing the ws", |l| {
        l["kind"] == "ws" && l["phase"] == "close"
    });
    // The connection was logged when it opened too, before any byte was relayed.
    let opened = proxy.audit_line_where("opening the ws", |l| {
        l["kind"] == "ws" && l["phase"] == "open"
    });
    assert_eq!(opened["decision"], "allow", "{opened}");
    assert_eq!(opened["status"], 101, "{opened}");
    assert_eq!(opened["path"], "/ws/echo", "{opened}");
    assert_eq!(opened["conn"], line["conn"], "{opened}");
    assert!(
        opened.get("bytes_up").is_none() && opened.get("ms").is_none(),
        "{opened}"
    );
    let log = proxy.audit_log_text();
    let open_at = log.find("\"phase\":\"open\"").expect("open line");
    assert!(open_at < log.find("\"phase\":\"close\"").expect("close line"));
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
    let (pki, server, proxy, target) = relay();
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
