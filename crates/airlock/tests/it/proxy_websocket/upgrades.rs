//! Upgrades refused before the server sees them: any upgrade on a path an `mcp` rule covers
//! (in any spelling), protocols other than WebSocket, h2c over plain HTTP, and a checked
//! WebSocket whose message room the memory budget cannot hold.

use std::time::Duration;

use crate::support;
use crate::support::fixture_server::FixtureServer;
use crate::support::raw::{self, TunnelOutcome, WsUpgrade};
use crate::support::{ExpectedRefusal, Proxy, ProxyBuilder, TestPki, assert_refusal};

use super::{Relay, assert_echoed, echo_then_close, relay, relay_with};

/// The echo server behind a proxy allowing `localhost:PORT`, with one `mcp` rule on `path`
/// denying a tool.
fn behind_an_mcp_rule(path: &str) -> Relay {
    relay_with(|builder, port| {
        builder.policy(&format!(
            "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
             mcp:\n  - host: localhost\n    path: {path}\n    tools: {{deny: [run_command]}}\n"
        ))
    })
}

/// Sends `request` through a tunnel to `target` (TLS verified as `localhost`); the answer.
fn exchange(proxy: &Proxy, pki: &TestPki, target: &str, request: &str) -> raw::RawResponse {
    raw::tunnel_exchange(
        proxy.port(),
        pki,
        target,
        raw::Sni::Verified("localhost"),
        request.as_bytes(),
        Duration::ZERO,
    )
    .response()
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
    let (pki, server, proxy, target) = behind_an_mcp_rule("/mcp/**");
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
        let response = exchange(&proxy, &pki, &target, &request);
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
    let (pki, server, proxy, target) = behind_an_mcp_rule("/mcp");
    for path in crate::proxy_mcp::MCP_SPELLINGS {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {}\r\n\r\n",
            raw::WS_KEY
        );
        let response = exchange(&proxy, &pki, &target, &request);
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
    // This server answers 101 to any upgrade: whatever it switched to would be relayed raw.
    let (pki, server, proxy, target) = relay();
    for offered in ["h2c", "foo", "websocket, h2c", "TLS/1.0"] {
        let request = format!(
            "GET /ws/x HTTP/1.1\r\nHost: {target}\r\nConnection: Upgrade, HTTP2-Settings\r\n\
             Upgrade: {offered}\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {}\r\n\r\n",
            raw::WS_KEY
        );
        let response = exchange(&proxy, &pki, &target, &request);
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
