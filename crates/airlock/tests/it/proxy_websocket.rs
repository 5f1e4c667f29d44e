//! WebSocket through the proxy (same rules as HTTP): an allowed upgrade echoes frames both
//! ways and leaves one `ws` audit line with bytes and duration; an upgrade to a path the
//! rule does not allow is refused before the server sees it. Where `json_deny` guards
//! apply, each client message is checked like a request body: allowed JSON is echoed, a
//! violating, non-JSON, binary, oversize or malformed message (also fragmented) closes
//! the connection with 1008 and never reaches the server, permessage-deflate is never
//! negotiated; without guards the bytes are relayed as before. The server is
//! tests/fixtures/ws_echo_server.py (RFC 6455 over TLS), which records every frame it
//! receives. No upgrade opens on a path an `mcp` rule covers, in any spelling.

use std::time::{Duration, Instant};

use crate::support;
use crate::support::fixture_server::FixtureServer;
use crate::support::raw::{
    self, ServerFrame, TunnelOutcome, WS_ACCEPT, WsStep, WsTranscript, WsUpgrade,
};
use crate::support::{ExpectedRefusal, Proxy, ProxyBuilder, TestPki, assert_refusal};

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

const ALLOWED_JSON: &str = r#"{"type":"response.create","tools":[{"type":"function","name":"f"}]}"#;
const VIOLATING_JSON: &str = r#"{"type":"response.create","tools":[{"type":"web_search"}]}"#;

struct Guarded {
    pki: TestPki,
    server: FixtureServer,
    proxy: Proxy,
}

/// The echo server behind the proxy with [`ProxyBuilder::json_deny_guards`]:
/// `allowed.test` guarded, `other.test` not.
fn guarded() -> Guarded {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .json_deny_guards(server.port)
        .start();
    Guarded { pki, server, proxy }
}

impl Guarded {
    /// Runs `steps` on a WebSocket to `host`'s `/ws/session` (`path` overrides it).
    fn session(
        &self,
        host: &str,
        path: &str,
        extra_headers: &str,
        steps: &[WsStep],
    ) -> WsTranscript {
        let target = format!("{host}:{}", self.server.port);
        let upgrade = WsUpgrade {
            proxy_port: self.proxy.port(),
            pki: &self.pki,
            target: &target,
            sni: host,
            path,
            extra_headers,
        };
        raw::websocket_script(&upgrade, steps)
            .unwrap_or_else(|outcome| panic!("the upgrade to {host}{path} failed: {outcome:?}"))
    }

    /// The `RECV` lines of the echo server whose payload is `payload`, once it has
    /// received `closes` close frames (the last frame of each session).
    fn received(&self, closes: usize, payload: &[u8]) -> Vec<String> {
        let hex = format!("hex={}", hex(payload));
        frames_received(&self.server, closes)
            .into_iter()
            .filter(|line| line.ends_with(&hex))
            .collect()
    }
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

/// Asserts the last frame received is a close 1008 naming `reason` and the guarded rule,
/// and that the proxy then ended the stream.
fn assert_closed_1008(what: &str, transcript: &WsTranscript, reason: &str) {
    let close = transcript.received.last();
    assert_eq!(
        close.and_then(ServerFrame::close_code),
        Some(1008),
        "{what}: {transcript:?}"
    );
    assert_eq!(
        close.map(ServerFrame::close_reason).as_deref(),
        Some(format!("{reason} network.allow[0]").as_str()),
        "{what}: {transcript:?}"
    );
    assert!(transcript.ended, "{what}: the proxy kept the stream open");
}

/// Asserts the echo server received nothing but `sessions` close frames with code 1001
/// (going away: the proxy closing the upstream side of a refused connection).
fn assert_only_going_away(server: &FixtureServer, sessions: usize) {
    let going_away = format!("RECV op=8 fin=1 hex={}", hex(&1001u16.to_be_bytes()));
    let received = frames_received(server, sessions);
    assert!(
        received.len() == sessions && received.iter().all(|line| *line == going_away),
        "the server received {received:?}"
    );
}

/// The `ws` deny lines, once there are `expected` of them (waiting at most 10 s; then
/// whatever there is).
fn ws_denials(proxy: &Proxy, expected: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let denials: Vec<serde_json::Value> = proxy
            .audit_log_text()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|line| line["kind"] == "ws" && line["decision"] == "deny")
            .collect();
        if denials.len() >= expected || Instant::now() >= deadline {
            return denials;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn guarded_websocket_echoes_allowed_json_and_closes_1008_on_a_violation() {
    let setup = guarded();
    let transcript = setup.session(
        "allowed.test",
        "/ws/session?client=1",
        "",
        &[
            WsStep::text(ALLOWED_JSON),
            WsStep::Receive,
            WsStep::Send {
                fin: true,
                opcode: 0x9,
                payload: b"still there?".to_vec(),
            },
            WsStep::Receive,
            WsStep::text(VIOLATING_JSON),
            WsStep::Receive,
        ],
    );
    assert_eq!(
        transcript.received.first(),
        Some(&ServerFrame {
            opcode: 0x1,
            payload: ALLOWED_JSON.as_bytes().to_vec()
        }),
        "{transcript:?}"
    );
    assert!(
        transcript.received.contains(&ServerFrame {
            opcode: 0xA,
            payload: b"still there?".to_vec()
        }),
        "a ping is answered: {transcript:?}"
    );
    assert_closed_1008("violation", &transcript, "denied_by_rule");
    assert_eq!(setup.received(1, ALLOWED_JSON.as_bytes()).len(), 1);
    // The server echoes the ping as a ping of its own, which the proxy may answer too.
    let ping = format!("RECV op=9 fin=1 hex={}", hex(b"still there?"));
    assert!(
        setup.received(1, b"still there?").contains(&ping),
        "pings pass: {:?}",
        setup.server.received_lines()
    );
    assert!(
        setup.received(1, VIOLATING_JSON.as_bytes()).is_empty(),
        "the violating message reached the server: {:?}",
        setup.server.received_lines()
    );
    let denial = setup.proxy.audit_line_where("denying the message", |line| {
        line["kind"] == "ws" && line["decision"] == "deny"
    });
    assert_eq!(denial["reason"], "denied_by_rule", "{denial}");
    assert_eq!(denial["rule"], "network.allow[0]", "{denial}");
    assert_eq!(denial["method"], "GET", "{denial}");
    assert_eq!(denial["host"], "allowed.test", "{denial}");
    assert_eq!(denial["path"], "/ws/session", "{denial}");
    let connection = setup.proxy.audit_line_where("for the connection", |line| {
        line["kind"] == "ws" && line["decision"] == "allow" && line["phase"] == "close"
    });
    assert_eq!(connection["status"], 101, "{connection}");
    assert!(
        connection["bytes_up"]
            .as_u64()
            .is_some_and(|bytes| bytes >= (ALLOWED_JSON.len() + VIOLATING_JSON.len()) as u64),
        "{connection}"
    );
    assert_eq!(ws_denials(&setup.proxy, 1).len(), 1);
    assert!(
        !setup.proxy.audit_log_text().contains("web_search"),
        "message contents are not logged"
    );
}

#[test]
fn fragmented_messages_are_reassembled_before_the_check() {
    let setup = guarded();
    let (head, tail) = ALLOWED_JSON.split_at(20);
    let allowed = setup.session(
        "allowed.test",
        "/ws/session",
        "",
        &[
            fragment(false, 0x1, head.as_bytes()),
            fragment(true, 0x0, tail.as_bytes()),
            WsStep::Receive,
            WsStep::close(1000),
            WsStep::Receive,
        ],
    );
    assert_echoed(&allowed, ALLOWED_JSON);
    assert_eq!(
        setup.received(1, ALLOWED_JSON.as_bytes()),
        vec![format!(
            "RECV op=1 fin=1 hex={}",
            hex(ALLOWED_JSON.as_bytes())
        )],
        "the server gets the message whole"
    );

    // `web_search` is split across three fragments, a ping between them.
    let (first, rest) = VIOLATING_JSON.split_at(45);
    let (second, third) = rest.split_at(3);
    let refused = setup.session(
        "allowed.test",
        "/ws/session",
        "",
        &[
            fragment(false, 0x1, first.as_bytes()),
            fragment(true, 0x9, b"ping"),
            fragment(false, 0x0, second.as_bytes()),
            fragment(true, 0x0, third.as_bytes()),
            WsStep::Receive,
            WsStep::Receive,
        ],
    );
    assert_closed_1008("fragmented violation", &refused, "denied_by_rule");
    for part in [first, second, third] {
        assert!(
            setup.received(2, part.as_bytes()).is_empty(),
            "a fragment reached the server: {:?}",
            setup.server.received_lines()
        );
    }
}

#[test]
fn uninspectable_messages_close_the_connection() {
    let setup = guarded();
    let cases: [(&str, WsStep); 6] = [
        ("binary", fragment(true, 0x2, br#"{"tools":[]}"#)),
        ("not JSON", WsStep::text("hello, upstream")),
        ("empty text", WsStep::text("")),
        (
            "duplicate key",
            WsStep::text(r#"{"tools":[{"type":"function","type":"web_search"}]}"#),
        ),
        ("trailing data", WsStep::text(r#"{"a":1} {"b":2}"#)),
        ("unknown opcode", fragment(true, 0x3, b"{}")),
    ];
    for (what, step) in cases {
        let transcript = setup.session("allowed.test", "/ws/session", "", &[step, WsStep::Receive]);
        assert_closed_1008(what, &transcript, "body_uninspectable");
    }
    // Not UTF-8: the frame itself is invalid text.
    let transcript = setup.session(
        "allowed.test",
        "/ws/session",
        "",
        &[fragment(true, 0x1, b"{\"a\":\"\xff\"}"), WsStep::Receive],
    );
    assert_closed_1008("not UTF-8", &transcript, "body_uninspectable");
    assert_only_going_away(&setup.server, 7);
    let denials = ws_denials(&setup.proxy, 7);
    assert_eq!(denials.len(), 7, "{denials:?}");
    assert!(
        denials.iter().all(
            |line| line["reason"] == "body_uninspectable" && line["rule"] == "network.allow[0]"
        ),
        "{denials:?}"
    );
}

#[test]
fn messages_over_the_body_limit_close_the_connection() {
    let setup = guarded();
    let padding = "x".repeat(1024 * 1024);
    let whole = format!(r#"{{"pad":"{padding}"}}"#);
    let third = whole.len() / 3;
    for (what, steps) in [
        ("one frame", vec![WsStep::text(&whole), WsStep::Receive]),
        (
            "fragments",
            vec![
                fragment(false, 0x1, &whole.as_bytes()[..third]),
                fragment(false, 0x0, &whole.as_bytes()[third..2 * third]),
                fragment(true, 0x0, &whole.as_bytes()[2 * third..]),
                WsStep::Receive,
            ],
        ),
    ] {
        let transcript = setup.session("allowed.test", "/ws/session", "", &steps);
        // The proxy stops reading at the limit, so its close frame may be lost to a reset.
        if let Some(close) = transcript.received.last() {
            assert_eq!(close.close_code(), Some(1008), "{what}: {transcript:?}");
        }
        assert!(transcript.ended, "{what}: the proxy kept the stream open");
    }
    assert_only_going_away(&setup.server, 2);
    let denials = ws_denials(&setup.proxy, 2);
    assert_eq!(denials.len(), 2, "{denials:?}");
    assert!(
        denials
            .iter()
            .all(|line| line["reason"] == "body_uninspectable"),
        "{denials:?}"
    );
}

#[test]
fn permessage_deflate_is_never_negotiated_on_guarded_hosts() {
    let setup = guarded();
    let transcript = setup.session(
        "allowed.test",
        "/ws/session",
        "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n",
        &echo_then_close(ALLOWED_JSON),
    );
    assert_eq!(
        transcript.handshake.header("sec-websocket-extensions"),
        None
    );
    assert_echoed(&transcript, ALLOWED_JSON);
    assert_eq!(
        setup.server.hit_lines(),
        vec!["HIT GET /ws/session HTTP/1.1 extensions=-".to_string()],
        "the offer is stripped"
    );

    // An upstream that answers with an extension anyway is not relayed.
    let target = format!("allowed.test:{}", setup.server.port);
    let upgrade = WsUpgrade {
        proxy_port: setup.proxy.port(),
        pki: &setup.pki,
        target: &target,
        sni: "allowed.test",
        path: "/ws/with-deflate",
        extra_headers: "",
    };
    let outcome = raw::websocket_script(&upgrade, &[WsStep::text(ALLOWED_JSON)]);
    match outcome {
        Err(TunnelOutcome::InsideTls(response)) => {
            assert_eq!(response.status, 502, "{response:?}")
        }
        other => panic!("expected a 502 instead of the upgrade: {other:?}"),
    }
    // The server counts a request once it has answered it, maybe after the client saw
    // the answer: wait (bounded) for the second.
    assert_eq!(setup.server.hit_lines_at_least(2).len(), 2);
    assert_eq!(setup.received(1, ALLOWED_JSON.as_bytes()).len(), 1);
    let line = setup
        .proxy
        .audit_line_where("for the refused upgrade", |line| {
            line["path"] == "/ws/with-deflate"
        });
    assert_eq!(line["status"], 502, "{line}");
}

#[test]
fn without_guards_the_relay_is_unchanged() {
    let setup = guarded();
    let steps = [
        WsStep::text(VIOLATING_JSON),
        WsStep::Receive,
        fragment(true, 0x2, b"\x00\x01binary"),
        WsStep::Receive,
        fragment(false, 0x1, b"not "),
        fragment(true, 0x0, b"json"),
        WsStep::Receive,
        WsStep::Receive,
        WsStep::close(1000),
        WsStep::Receive,
    ];
    let transcript = setup.session(
        "other.test",
        "/ws/session",
        "Sec-WebSocket-Extensions: permessage-deflate\r\n",
        &steps,
    );
    let opcodes: Vec<u8> = transcript.received.iter().map(|f| f.opcode).collect();
    assert_eq!(opcodes, [0x1, 0x2, 0x1, 0x0, 0x8], "{transcript:?}");
    assert_eq!(transcript.received[0].payload, VIOLATING_JSON.as_bytes());
    assert_eq!(
        setup.server.hit_lines(),
        vec!["HIT GET /ws/session HTTP/1.1 extensions=permessage-deflate".to_string()],
        "the offer is forwarded"
    );
    assert_eq!(
        setup.received(1, b"not "),
        vec![format!("RECV op=1 fin=0 hex={}", hex(b"not "))],
        "fragments are relayed as sent"
    );
    assert!(ws_denials(&setup.proxy, 0).is_empty());
}

#[test]
fn provider_bundle_guards_apply_to_websocket_messages() {
    let address = "127.77.1.1";
    match std::net::TcpListener::bind((address, 443)) {
        Ok(listener) => drop(listener),
        Err(error) => {
            crate::support::skip_or_fail(&format!(
                "binding {address}:443 was refused ({error}); provider bundles use the default \
                 port 443: run as root (or grant CAP_NET_BIND_SERVICE)"
            ));
            return;
        }
    }
    let pki = TestPki::new();
    let server = FixtureServer::websocket_at(&pki, address, 443);
    let proxy = ProxyBuilder::new(&pki)
        .policy(
            "version: 1\nsecrets:\n  OPENAI_API_KEY:\n    value: sk-proj-real-openai-key-4f1c2a9e7b\n    hosts: [api.openai.com]\nproviders:\n  openai: true\n",
        )
        .arg("--resolve")
        .arg(&format!("chatgpt.com:{address}"))
        .start();
    let session = |steps: &[WsStep]| {
        let upgrade = WsUpgrade {
            proxy_port: proxy.port(),
            pki: &pki,
            target: "chatgpt.com:443",
            sni: "chatgpt.com",
            path: "/backend-api/codex/responses",
            extra_headers: "",
        };
        raw::websocket_script(&upgrade, steps)
            .unwrap_or_else(|outcome| panic!("the upgrade failed: {outcome:?}"))
    };
    assert_echoed(&session(&echo_then_close(ALLOWED_JSON)), ALLOWED_JSON);
    let refused = session(&[WsStep::text(VIOLATING_JSON), WsStep::Receive]);
    let close = refused.received.last();
    assert_eq!(
        close.and_then(ServerFrame::close_code),
        Some(1008),
        "{refused:?}"
    );
    assert_eq!(
        close.map(ServerFrame::close_reason).as_deref(),
        Some("denied_by_rule providers.openai[2]"),
        "{refused:?}"
    );
    let hex_violating = hex(VIOLATING_JSON.as_bytes());
    assert!(
        !frames_received(&server, 2)
            .iter()
            .any(|line| line.ends_with(&hex_violating)),
        "the web tool reached the provider"
    );
    let denial = proxy.audit_line_where("denying the web tool", |line| {
        line["kind"] == "ws" && line["decision"] == "deny"
    });
    assert_eq!(denial["rule"], "providers.openai[2]", "{denial}");
    assert_eq!(denial["reason"], "denied_by_rule", "{denial}");
}

/// The refusal of an upgrade: 403 `body_uninspectable` with the given rule, never relayed.
fn assert_upgrade_refused(response: &raw::RawResponse, path: &str, rule: &str) {
    let json = assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "body_uninspectable",
            method: "GET",
            host: "localhost",
            path: Some(path),
        },
    );
    support::assert_rule_id(&json["rule"], rule);
}

#[test]
fn an_upgrade_on_an_mcp_path_is_refused_before_the_server() {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let yaml = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
         mcp:\n  - host: localhost\n    path: /mcp/**\n    tools: {{deny: [run_command]}}\n",
        port = server.port
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&yaml)
        .resolve_loopback("localhost")
        .start();
    let target = format!("localhost:{}", server.port);
    // A WebSocket on the MCP path would carry tool calls past the inspection.
    let outcome = raw::websocket_echo(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        "/mcp/ws",
        &[b"{}"],
    );
    let response = match outcome {
        Err(TunnelOutcome::InsideTls(response)) => response,
        other => panic!("expected a refusal inside TLS: {other:?}"),
    };
    assert_upgrade_refused(&response, "/mcp/ws", "mcp[0]");
    // Any other protocol too, even without `Connection: upgrade`.
    for extra in [
        "Connection: Upgrade\r\nUpgrade: h2c\r\n",
        "Upgrade: websocket\r\n",
    ] {
        let request = format!("GET /mcp/x HTTP/1.1\r\nHost: {target}\r\n{extra}\r\n");
        let response = raw::tunnel_exchange(
            proxy.port(),
            &pki,
            &target,
            raw::Sni::Verified("localhost"),
            request.as_bytes(),
            Duration::ZERO,
        )
        .response();
        assert_upgrade_refused(&response, "/mcp/x", "mcp[0]");
    }
    assert_eq!(
        server.hits(),
        0,
        "an upgrade on the MCP path reached the server"
    );
    let line = proxy.audit_line_where("refusing the upgrade", |l| l["decision"] == "deny");
    assert_eq!(line["reason"], "body_uninspectable", "{line}");
    assert_eq!(line["kind"], "http", "{line}");
    // Off the MCP path the same server still gets its WebSocket.
    raw::websocket_echo(
        proxy.port(),
        &pki,
        &target,
        "localhost",
        "/ws/echo",
        &[b"hi"],
    )
    .unwrap_or_else(|outcome| panic!("the upgrade did not go through: {outcome:?}"));
}

/// The rule names `/mcp` exactly; every spelling a router serves as `/mcp`
/// ([`crate::proxy_mcp::MCP_SPELLINGS`]) is covered too, so no WebSocket opens on it.
#[test]
fn an_upgrade_on_any_spelling_of_an_mcp_path_is_refused() {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let yaml = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
         mcp:\n  - host: localhost\n    path: /mcp\n    tools: {{deny: [run_command]}}\n",
        port = server.port
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&yaml)
        .resolve_loopback("localhost")
        .start();
    let target = format!("localhost:{}", server.port);
    for path in crate::proxy_mcp::MCP_SPELLINGS {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {}\r\n\r\n",
            raw::WS_KEY
        );
        let response = raw::tunnel_exchange(
            proxy.port(),
            &pki,
            &target,
            raw::Sni::Verified("localhost"),
            request.as_bytes(),
            Duration::ZERO,
        )
        .response();
        assert_ne!(response.status, 101, "{path}: {response:?}");
        let json = assert_refusal(
            response.status,
            &response.headers,
            &response.body,
            &ExpectedRefusal {
                reason: "body_uninspectable",
                method: "GET",
                host: "localhost",
                path: None,
            },
        );
        support::assert_rule_id(&json["rule"], "mcp[0]");
    }
    assert_eq!(
        server.hits(),
        0,
        "an upgrade on a spelling of the MCP path reached the server"
    );
}

#[test]
fn upgrades_other_than_websocket_are_refused() {
    let pki = TestPki::new();
    // This server answers 101 to any upgrade: whatever it switched to would be relayed raw.
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET localhost:{}/ws/**", server.port))
        .resolve_loopback("localhost")
        .start();
    let target = format!("localhost:{}", server.port);
    for offered in ["h2c", "foo", "websocket, h2c", "TLS/1.0"] {
        let request = format!(
            "GET /ws/x HTTP/1.1\r\nHost: {target}\r\nConnection: Upgrade, HTTP2-Settings\r\n\
             Upgrade: {offered}\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {}\r\n\r\n",
            raw::WS_KEY
        );
        let response = raw::tunnel_exchange(
            proxy.port(),
            &pki,
            &target,
            raw::Sni::Verified("localhost"),
            request.as_bytes(),
            Duration::ZERO,
        )
        .response();
        assert_ne!(response.status, 101, "{offered}: {response:?}");
        assert_upgrade_refused(&response, "/ws/x", "--allow[0]");
    }
    assert_eq!(
        server.hits(),
        0,
        "a non-WebSocket upgrade reached the server"
    );
}

#[test]
fn an_h2c_upgrade_over_plain_http_is_refused() {
    // What `curl --http2 http://...` sends: HTTP/1.1 asking to switch to cleartext h2.
    let upstream = support::Upstream::plain();
    let pki = TestPki::new();
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let request = format!(
        "GET http://localhost:{port}/h2c HTTP/1.1\r\nHost: localhost:{port}\r\n\
         Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
         HTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
        port = upstream.port()
    );
    let response = raw::plain(proxy.port(), request.as_bytes());
    assert_upgrade_refused(&response, "/h2c", "--allow[0]");
    upstream.assert_untouched("an h2c upgrade");
}

/// A checked WebSocket takes the most its message assembly may hold (the 1 MiB body
/// limit) from `limits.buffer_memory` for its whole life: with a budget smaller than that,
/// a guarded upgrade is refused 503 `overloaded` before the server sees it, while an
/// unguarded one still passes (its bytes are relayed, never assembled).
#[test]
fn a_checked_websocket_needs_its_message_room_in_the_budget() {
    let pki = TestPki::new();
    let server = FixtureServer::websocket(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .json_deny_guards(server.port)
        .policy("version: 1\nlimits: {buffer_memory: 512KiB}\n")
        .start();
    let upgrade = |host: &'static str, target: &str| {
        let upgrade = WsUpgrade {
            proxy_port: proxy.port(),
            pki: &pki,
            target,
            sni: host,
            path: "/ws/session",
            extra_headers: "",
        };
        raw::websocket_script(&upgrade, &echo_then_close("{}"))
    };
    let guarded_target = format!("allowed.test:{}", server.port);
    let refused = match upgrade("allowed.test", &guarded_target) {
        Ok(transcript) => panic!("the guarded upgrade went through: {transcript:?}"),
        Err(outcome) => outcome.response(),
    };
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.json()["error"], "overloaded", "{refused:?}");
    let line = proxy.audit_line_where("the refused upgrade", |l| l["reason"] == "overloaded");
    assert_eq!(line["host"], "allowed.test", "{line}");
    assert_eq!(server.hits(), 0, "the server saw the refused upgrade");

    let unguarded_target = format!("other.test:{}", server.port);
    let transcript = upgrade("other.test", &unguarded_target)
        .unwrap_or_else(|outcome| panic!("the unguarded upgrade failed: {outcome:?}"));
    assert_echoed(&transcript, "{}");
}
