//! WebSocket: the upgrade request is decided like any request (method GET and its path)
//! and forwarded over an HTTP/1.1-only upstream connection; when the upstream answers 101
//! both upgraded connections are relayed until either closes, and the exchange becomes
//! one `ws` audit line with the bytes moved each way and the duration (`"phase":"close"`),
//! after the `"phase":"open"` line written when the relay starts.
//!
//! Where `json_deny` guards apply to the upgrade request, the relay is message by message
//! instead of byte for byte (tungstenite frames both sides: server role towards the
//! client, client role towards the upstream): every client message is checked like a
//! request body before it is sent on (the outbound guard also searches the payloads of
//! ping, pong and close frames), and a refused one closes both connections, the
//! client's with code 1008, plus one `ws` deny line. `Sec-WebSocket-Extensions` is
//! stripped from such upgrades, and a 101 naming an extension anyway is not relayed
//! ([`negotiated_extension`]): compressed messages could not be checked.
//!
//! [`check_upgrade`] decides the `Upgrade` header itself before anything is forwarded: only
//! `websocket` is relayed, and nothing at all on a path an `mcp` rule covers (an upgraded
//! connection would carry tool calls past the inspection); both are refused 403
//! `body_uninspectable` (docs/policy.md, "Upgrades").

use airlock_policy::model::{McpRule, Rule};
use airlock_policy::{Decision, Reason};
use futures_util::{SinkExt as _, StreamExt as _};
use http::{HeaderMap, HeaderName, Version, header};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message, error::ProtocolError};

use airlock_credentials::{Finding, GuardStream};

use crate::body_guard;
use crate::budget::{Budget, Held, Overloaded};
use crate::context::Admitted;
use crate::record::{Exchange, LineKind};
use crate::relay::{Counters, relay};

/// How long the closing frames of a refused connection may take to send.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes of a close frame's reason (RFC 6455 §5.5: 125-byte control payloads).
const CLOSE_REASON_LIMIT: usize = 123;

/// The upgrade header that offers or names WebSocket extensions (permessage-deflate).
pub(crate) const EXTENSIONS: HeaderName = HeaderName::from_static("sec-websocket-extensions");

/// Whether the request asks for a protocol upgrade (HTTP/1.1 `Connection: upgrade` with
/// an `Upgrade` header).
fn is_upgrade(version: Version, headers: &HeaderMap) -> bool {
    version == Version::HTTP_11
        && headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Decides a request's `Upgrade` header before it is forwarded: `Ok(true)` for a WebSocket
/// upgrade to relay, `Ok(false)` when nothing is upgraded (no `Upgrade`, or one without
/// `Connection: upgrade` on HTTP/1.1, which is stripped as hop-by-hop). Refused with
/// `body_uninspectable`: any `Upgrade` header on a path the `mcp` rule `mcp` covers (naming
/// that rule), and an upgrade offering any protocol but `websocket` (`h2c`, `foo`, or
/// `websocket, h2c`: the server could pick the other one), naming `rule`.
pub(crate) fn check_upgrade(
    version: Version,
    headers: &HeaderMap,
    mcp: Option<&McpRule>,
    rule: Option<&String>,
) -> Result<bool, Decision> {
    if !headers.contains_key(header::UPGRADE) {
        return Ok(false);
    }
    if let Some(mcp) = mcp {
        return Err(Decision::deny(
            Reason::BodyUninspectable,
            Some(mcp.id.clone()),
        ));
    }
    if !is_upgrade(version, headers) {
        return Ok(false);
    }
    if offers_only_websocket(headers) {
        Ok(true)
    } else {
        Err(Decision::deny(Reason::BodyUninspectable, rule.cloned()))
    }
}

/// Whether every protocol every `Upgrade` header offers is `websocket` (at least one).
fn offers_only_websocket(headers: &HeaderMap) -> bool {
    let mut offered = headers
        .get_all(header::UPGRADE)
        .iter()
        .flat_map(|value| value.as_bytes().split(|byte| *byte == b','))
        .map(<[u8]>::trim_ascii)
        .peekable();
    offered.peek().is_some() && offered.all(|protocol| protocol.eq_ignore_ascii_case(b"websocket"))
}

/// Whether the upstream's 101 names an extension (so messages might be compressed) —
/// refused on a guarded upgrade, whose request offered none.
pub(crate) fn negotiated_extension(headers: &HeaderMap) -> bool {
    headers.contains_key(EXTENSIONS)
}

/// Takes from the inspection budget the most one checked WebSocket's message assembly may
/// hold (a client message is read whole, up to the body limit, before it is checked); kept
/// for the socket's life so that open WebSockets cannot take memory past
/// `limits.buffer_memory` (docs/reliability.md).
pub(crate) async fn reserve(budget: &Budget) -> Result<Held, Overloaded> {
    let mut held = Held::default();
    budget.take(&mut held, airlock_mcp::BODY_LIMIT).await?;
    Ok(held)
}

/// Relays the two upgraded connections in the background; the exchange (now a `ws`
/// line) is written when the relay ends. With `guards` (the `json_deny` rules that apply
/// to the upgrade request, from the policy snapshot that decided it) or the outbound
/// guard, client messages are checked (in the room `held` took for them by [`reserve`]);
/// without, bytes are relayed untouched. `(idle, permit)`: the relay ends after `idle`
/// without a byte, and holds the client connection's `permit` while it runs.
pub(crate) fn relay_upgraded(
    (idle, permit): (Duration, &Arc<Admitted>),
    mut exchange: Exchange,
    (client, upstream): (OnUpgrade, OnUpgrade),
    guards: Vec<Rule>,
    outbound: Option<GuardStream>,
    held: Option<Held>,
) {
    exchange.set_kind(LineKind::Ws);
    // The relay counts as part of the client connection for the cap and the drain.
    let permit = Arc::clone(permit);
    tokio::spawn(async move {
        let _permit = permit;
        let _held = held;
        let (client, upstream) = match tokio::try_join!(client, upstream) {
            Ok(both) => both,
            Err(e) => {
                tracing::debug!("WebSocket upgrade failed: {e}");
                return;
            }
        };
        // No message passes before the open line is written (docs/reliability.md).
        if exchange.write_open().await.is_err() {
            return;
        }
        let relayed = if guards.is_empty() && outbound.is_none() {
            relay(TokioIo::new(client), TokioIo::new(upstream), idle).await
        } else {
            let counters = Counters::default();
            let client = counters.count(TokioIo::new(client));
            let checks = Checks {
                guards: guards.iter().collect(),
                outbound,
            };
            tokio::select! {
                () = relay_checked(client, TokioIo::new(upstream), checks, &exchange) => {}
                () = counters.idle(idle) => {
                    tracing::debug!("WebSocket idle for {idle:?}: closing");
                }
            }
            counters.relayed()
        };
        exchange.add_bytes_up(relayed.up);
        exchange.add_bytes_down(relayed.down);
    });
}

/// What each client message is checked against.
struct Checks<'a> {
    /// The `json_deny` guards of the upgrade request (none: any message passes them).
    guards: Vec<&'a Rule>,
    /// The outbound guard (real values, well-known credentials).
    outbound: Option<GuardStream>,
}

impl Checks<'_> {
    /// Checks one client message: the outbound guard first, then the body guards.
    fn check(&mut self, message: &Message) -> Result<(), Refusal> {
        if let Some(outbound) = self.outbound.as_mut() {
            // Control frames carry up to 125 bytes each: searched like messages.
            let payload: &[u8] = match message {
                Message::Text(text) => text.as_bytes(),
                Message::Binary(data) | Message::Ping(data) | Message::Pong(data) => data,
                Message::Close(Some(frame)) => frame.reason.as_bytes(),
                Message::Close(None) | Message::Frame(_) => &[],
            };
            outbound
                .check_message(payload)
                .map_err(Refusal::Credential)?;
        }
        if self.guards.is_empty() {
            return Ok(());
        }
        check(message, &self.guards).map_err(Refusal::Rule)
    }

    fn uninspectable(&self) -> Refusal {
        Refusal::Rule(uninspectable(&self.guards))
    }
}

/// Why a client message was refused.
enum Refusal {
    /// A body guard refused it (or it could not be inspected).
    Rule(Decision),
    /// The outbound guard found a credential in it.
    Credential(Finding),
}

impl Refusal {
    fn decision(&self) -> Decision {
        match self {
            Refusal::Rule(decision) => decision.clone(),
            Refusal::Credential(finding) => Decision::deny(finding.reason, None),
        }
    }
}

/// Relays messages between `client` and `upstream`, checking each client message, until
/// either side closes or a message is refused. A refusal is written to the audit log as a
/// `ws` deny line of `exchange`, then closes the client with 1008 (reason and rule in the
/// close reason) and the upstream with 1001.
async fn relay_checked<C, U>(client: C, upstream: U, mut checks: Checks<'_>, exchange: &Exchange)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let limits = WebSocketConfig::default()
        .max_message_size(Some(airlock_mcp::BODY_LIMIT))
        .max_frame_size(Some(airlock_mcp::BODY_LIMIT));
    let client = WebSocketStream::from_raw_socket(client, Role::Server, Some(limits)).await;
    let upstream = WebSocketStream::from_raw_socket(upstream, Role::Client, None).await;
    let (mut to_client, mut from_client) = client.split();
    let (mut to_upstream, mut from_upstream) = upstream.split();
    let refusal = tokio::select! {
        refusal = async {
            while let Some(received) = from_client.next().await {
                let message = match received {
                    Ok(message) => message,
                    Err(error) if ended(&error) => return None,
                    Err(_) => return Some(checks.uninspectable()),
                };
                if let Err(refusal) = checks.check(&message) {
                    return Some(refusal);
                }
                if to_upstream.send(message).await.is_err() {
                    return None;
                }
            }
            None
        } => refusal,
        () = async {
            while let Some(Ok(message)) = from_upstream.next().await {
                if to_client.send(message).await.is_err() {
                    return;
                }
            }
        } => None,
    };
    let Some(refusal) = refusal else {
        return;
    };
    let to_client_close = CloseFrame {
        code: CloseCode::Policy,
        reason: close_reason(&refusal.decision()).into(),
    };
    let to_upstream_close = CloseFrame {
        code: CloseCode::Away,
        reason: "".into(),
    };
    let closing = async {
        let _ = to_client.send(Message::Close(Some(to_client_close))).await;
        let _ = to_upstream
            .send(Message::Close(Some(to_upstream_close)))
            .await;
    };
    match &refusal {
        Refusal::Rule(decision) => exchange.write_refusal(decision.clone(), None),
        Refusal::Credential(finding) => {
            exchange.write_refusal(refusal.decision(), Some(finding));
        }
    }
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, closing).await;
}

/// Whether a read error just means the client went away (a close handshake, a reset),
/// rather than a frame that could not be read.
fn ended(error: &WsError) -> bool {
    matches!(
        error,
        WsError::ConnectionClosed
            | WsError::AlreadyClosed
            | WsError::Io(_)
            | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake)
    )
}

/// Checks one client message like a request body: a text message must be non-empty
/// strict JSON passing every guard; control messages pass; anything else (binary) is
/// `body_uninspectable`.
fn check(message: &Message, guards: &[&Rule]) -> Result<(), Decision> {
    match message {
        Message::Text(text) if !text.is_empty() => body_guard::check(text.as_bytes(), guards),
        Message::Ping(_) | Message::Pong(_) | Message::Close(_) => Ok(()),
        Message::Text(_) | Message::Binary(_) | Message::Frame(_) => Err(uninspectable(guards)),
    }
}

/// `body_uninspectable`, naming the first guarded rule (as for an HTTP body).
fn uninspectable(guards: &[&Rule]) -> Decision {
    Decision::deny(
        Reason::BodyUninspectable,
        guards.first().map(|rule| rule.id.clone()),
    )
}

/// `REASON RULE` (`denied_by_rule network.allow[0]`), cut to fit a close frame.
fn close_reason(refusal: &Decision) -> String {
    let mut text = refusal.reason.map_or("denied", Reason::as_str).to_owned();
    if let Some(rule) = &refusal.rule {
        text.push(' ');
        text.push_str(rule);
    }
    let mut end = text.len().min(CLOSE_REASON_LIMIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::load::load_str;

    fn guarded_rules() -> Vec<Rule> {
        let text = "version: 1\nnetwork:\n  allow:\n    - host: a.com\n      json_deny: [{path: /stream}]\n";
        load_str("p.yaml", text).unwrap().network.allow
    }

    #[test]
    fn messages_are_checked_like_bodies_and_control_frames_pass() {
        let rules = guarded_rules();
        let guards: Vec<&Rule> = rules.iter().collect();
        let reason = |message: Message| check(&message, &guards).err().and_then(|d| d.reason);
        assert_eq!(reason(Message::text(r#"{"model":"m"}"#)), None);
        assert_eq!(
            reason(Message::text(r#"{"stream":true}"#)),
            Some(Reason::DeniedByRule)
        );
        for uninspectable in [
            Message::text(""),
            Message::text("not json"),
            Message::text(r#"{"a":1,"a":2}"#),
            Message::binary(b"{}".to_vec()),
        ] {
            assert_eq!(reason(uninspectable), Some(Reason::BodyUninspectable));
        }
        for control in [
            Message::Ping(b"p".to_vec().into()),
            Message::Pong(Vec::new().into()),
            Message::Close(None),
        ] {
            assert_eq!(reason(control), None);
        }
    }

    #[test]
    fn only_websocket_upgrades_pass_and_none_on_mcp_paths() {
        let headers = |pairs: &[(&str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            map
        };
        let upgrade = |value: &str| headers(&[("connection", "Upgrade"), ("upgrade", value)]);
        let rule = Some("network.allow[0]".to_owned());
        let check = |map: &HeaderMap, mcp: Option<&McpRule>| {
            check_upgrade(Version::HTTP_11, map, mcp, rule.as_ref())
        };
        assert_eq!(check(&upgrade("websocket"), None), Ok(true));
        assert_eq!(check(&upgrade("WebSocket"), None), Ok(true));
        assert_eq!(check(&headers(&[]), None), Ok(false));
        // Without `Connection: upgrade` the header is stripped, nothing is upgraded.
        assert_eq!(check(&headers(&[("upgrade", "h2c")]), None), Ok(false));
        let refused = Err(Decision::deny(Reason::BodyUninspectable, rule.clone()));
        for offered in ["h2c", "foo", "websocket, h2c", "websocket/13", ""] {
            assert_eq!(check(&upgrade(offered), None), refused, "{offered}");
        }
        let mcp = McpRule {
            id: "mcp[0]".to_owned(),
            host: airlock_policy::model::HostPattern::Exact("a.com".to_owned()),
            path: "/mcp".to_owned(),
            allow: Vec::new(),
            deny: Vec::new(),
            args: Vec::new(),
        };
        let on_mcp = Err(Decision::deny(
            Reason::BodyUninspectable,
            Some("mcp[0]".to_owned()),
        ));
        assert_eq!(check(&upgrade("websocket"), Some(&mcp)), on_mcp);
        assert_eq!(
            check(&headers(&[("upgrade", "websocket")]), Some(&mcp)),
            on_mcp
        );
        assert_eq!(check(&headers(&[]), Some(&mcp)), Ok(false));
    }

    #[test]
    fn close_reasons_fit_a_close_frame() {
        let short = Decision::deny(Reason::DeniedByRule, Some("network.allow[0]".into()));
        assert_eq!(close_reason(&short), "denied_by_rule network.allow[0]");
        let long = Decision::deny(Reason::BodyUninspectable, Some("é".repeat(100)));
        let text = close_reason(&long);
        assert!(text.len() <= CLOSE_REASON_LIMIT && text.starts_with("body_uninspectable é"));
    }
}
