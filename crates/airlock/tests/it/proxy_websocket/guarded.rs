//! Where `json_deny` guards apply: every client message is checked like a request body
//! (reassembled from fragments first); allowed JSON is echoed, a violating, uninspectable
//! or oversize message closes the connection with 1008 and never reaches the server,
//! permessage-deflate is never negotiated, and without guards the relay is unchanged.

use std::time::{Duration, Instant};

use crate::support::fixture_server::FixtureServer;
use crate::support::raw::{self, ServerFrame, TunnelOutcome, WsStep, WsTranscript, WsUpgrade};
use crate::support::{Proxy, ProxyBuilder, TestPki};

use super::{assert_echoed, echo_then_close, fragment, frames_received, hex};

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
