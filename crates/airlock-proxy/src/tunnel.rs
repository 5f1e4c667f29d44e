//! What travels inside an established tunnel, told apart by its first bytes:
//!
//! * a TLS ClientHello: the server name is read (rustls' own parser); a `tls_passthrough`
//!   host is relayed raw to its checked address when the SNI names the CONNECT host,
//!   every other host is intercepted with a leaf minted by the CA and served as HTTP/1.1
//!   or h2 (the request service refuses inside TLS whatever the policy refuses);
//! * an HTTP/1 request line: served as plain HTTP;
//! * anything else (or silence, for server-speaks-first protocols): relayed as raw TCP if
//!   a destination-only rule allows the port, else closed; either way one `tcp` line.
//!
//! In ask mode a tunnel refused only for its host is served all the same: its TLS is
//! intercepted and each request inside is asked about at the request step; bytes that are
//! not HTTP (or a `tls_passthrough` host) are asked about here, once per connection, as
//! `CONNECT host:port` (docs/policy.md "Ask mode"), before anything is dialled. Such an
//! ask is raw (`"raw":true`): its answer lets raw bytes through, never an HTTP request. A
//! client that was silent when asked is sniffed again after the answer (up to the
//! handshake timeout): a late ClientHello or request line is intercepted and asked about
//! per request; only other bytes, or lasting silence, are relayed raw.
//!
//! Before any of this, the tunnel's host (a CONNECT target, or the name a transparent
//! capture was addressed to) and then the SNI are searched by the outbound guard
//! ([`crate::name_guard::guard_name`]): a name carrying a credential closes the tunnel, never
//! resolved nor dialled.

use std::sync::Arc;

use airlock_policy::canonical::Host;
use airlock_policy::matcher::TunnelDecision;
use airlock_policy::{Decision, Reason};
use bytes::{Bytes, BytesMut};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::ask::Asked;
use crate::context::{ConnContext, client_alpn};
use crate::head_clock::HeadClock;
use crate::head_tap::{HeadTap, Tapped};
use crate::identity::Origin;
use crate::idle::{self, Activity};
use crate::record::LineKind;
use crate::relay::relay;
use crate::rewind::Rewind;
use crate::upstream::DialError;
use crate::wire::{Sniffed, Sniffer};

/// Serves the tunnel opened by CONNECT once hyper hands the connection over.
pub(crate) async fn run(
    context: Arc<ConnContext>,
    on_upgrade: OnUpgrade,
    host: Host,
    port: u16,
    tunnel: TunnelDecision,
) {
    let Ok(upgraded) = on_upgrade.await else {
        return;
    };
    let Ok(parts) = upgraded.downcast::<TokioIo<HeadClock<Tapped<TcpStream>>>>() else {
        tracing::warn!("tunnel: unexpected connection type after CONNECT");
        return;
    };
    let stream = parts.io.into_inner().into_inner().into_inner();
    serve(
        context,
        stream,
        BytesMut::from(&parts.read_buf[..]),
        host,
        port,
        tunnel,
    )
    .await;
}

/// Serves a tunnel to `host:port` whose first bytes (if any) are in `buffer`.
pub(crate) async fn serve(
    context: Arc<ConnContext>,
    mut stream: TcpStream,
    mut buffer: BytesMut,
    host: Host,
    port: u16,
    tunnel: TunnelDecision,
) {
    if let Err(finding) = crate::name_guard::guard_host(&context, &host) {
        return refuse_name(&context, &finding, port);
    }
    let limits = &context.shared.limits;
    if buffer.is_empty() {
        match tokio::time::timeout(limits.first_bytes_timeout, stream.read_buf(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(_)) => {}
            Err(_) if raw_allowed(&tunnel) => {
                // The client waits for the server to speak first (SMTP, MySQL...).
                return raw_or_ask(context, stream, buffer.freeze(), host, port, tunnel).await;
            }
            Err(_) if askable(&context, &host, &tunnel) => {
                return silent_ask(context, stream, buffer, (host, port), tunnel).await;
            }
            Err(_) => {
                let rest = limits
                    .handshake_timeout
                    .saturating_sub(limits.first_bytes_timeout);
                match tokio::time::timeout(rest, stream.read_buf(&mut buffer)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return refuse_raw(&context, &host, port, &tunnel, false),
                }
            }
        }
    }
    match sniff(&mut stream, &mut buffer, limits.handshake_timeout).await {
        Sniffed::Tls(sni) => tls(context, stream, buffer.freeze(), host, port, tunnel, sni).await,
        Sniffed::Http => plain_http(context, stream, buffer.freeze(), host, port).await,
        Sniffed::Other => raw_or_ask(context, stream, buffer.freeze(), host, port, tunnel).await,
        Sniffed::Closed => {}
    }
}

/// Serves a tunnel's plain HTTP, its first bytes in `prefix`.
async fn plain_http(
    context: Arc<ConnContext>,
    stream: TcpStream,
    prefix: Bytes,
    host: Host,
    port: u16,
) {
    let origin = Origin::Tunnel {
        host,
        port,
        sni: None,
        tls: false,
    };
    serve_http(
        context.with_origin(origin),
        TokioIo::new(Rewind::new(prefix, stream)),
        false,
    )
    .await;
}

/// Ask mode, a client silent past `first_bytes_timeout` to a host refused only for its
/// host: asks about it as raw; once allowed, keeps sniffing up to `handshake_timeout`. A
/// late ClientHello or HTTP request is intercepted under the tunnel's own (refused)
/// decision, so each request inside is asked about; other bytes or lasting silence
/// (server speaks first) are relayed raw as the answer allows (docs/policy.md "Ask mode").
async fn silent_ask(
    context: Arc<ConnContext>,
    mut stream: TcpStream,
    mut buffer: BytesMut,
    (host, port): (Host, u16),
    tunnel: TunnelDecision,
) {
    let (allowed, asked) = ask_raw(&context, &host, port, tunnel.clone()).await;
    if !raw_allowed(&allowed) {
        return refuse_raw(&context, &host, port, &allowed, asked);
    }
    let wait = context.shared.limits.handshake_timeout;
    match tokio::time::timeout(wait, stream.read_buf(&mut buffer)).await {
        Ok(Ok(0)) | Ok(Err(_)) => return,
        Ok(Ok(_)) => {}
        Err(_) => return raw(context, stream, Bytes::new(), (host, port), allowed, asked).await,
    }
    match sniff(&mut stream, &mut buffer, wait).await {
        Sniffed::Tls(sni) => {
            // A passthrough host is relayed raw anyway: as the raw answer allows.
            let tunnel = if tunnel.passthrough { allowed } else { tunnel };
            tls(context, stream, buffer.freeze(), host, port, tunnel, sni).await;
        }
        Sniffed::Http => plain_http(context, stream, buffer.freeze(), host, port).await,
        Sniffed::Other => {
            raw(
                context,
                stream,
                buffer.freeze(),
                (host, port),
                allowed,
                asked,
            )
            .await
        }
        Sniffed::Closed => {}
    }
}

fn raw_allowed(tunnel: &TunnelDecision) -> bool {
    tunnel.decision.is_allow() && tunnel.raw_tcp_allowed
}

/// Whether ask mode asks about this refused tunnel's raw bytes: never where an `mcp`
/// rule must see the bodies (an answer could not let raw bytes pass there; a late
/// ClientHello is still intercepted).
fn askable(context: &ConnContext, host: &Host, tunnel: &TunnelDecision) -> bool {
    let shared = &context.shared;
    shared.mode.askable(host, &tunnel.decision).is_some()
        && !shared.policy.load().has_mcp_rule(host)
}

/// Ask mode: holds a tunnel refused only for its host until its ask (`CONNECT host:port`,
/// no path) is answered; the tunnel to go on with (allowed by the answer: raw TCP too, as
/// the suggested `HOST:PORT` rule allows, except where an `mcp` rule must see the bodies)
/// and whether it was asked about. Any other tunnel is returned as it is.
async fn ask_raw(
    context: &ConnContext,
    host: &Host,
    port: u16,
    mut tunnel: TunnelDecision,
) -> (TunnelDecision, bool) {
    let shared = &context.shared;
    let Some(reason) = shared.mode.askable(host, &tunnel.decision) else {
        return (tunnel, false);
    };
    if !askable(context, host, &tunnel) {
        return (tunnel, false);
    }
    let key = crate::ask::request_key("CONNECT", host.to_string(), port, None);
    let process = context
        .caller
        .as_ref()
        .and_then(|caller| serde_json::to_value(&caller.process).ok());
    match Box::pin(shared.asks.hold_from(key, reason, process)).await {
        Asked::Allowed { rule, asked } => {
            tunnel.decision = Decision::allow(rule);
            tunnel.raw_tcp_allowed = !shared.policy.load().has_mcp_rule(host);
            (tunnel, asked)
        }
        Asked::Refused => (tunnel, true),
    }
}

/// Relays the bytes raw where the tunnel allows it (after asking, in ask mode), or closes
/// the tunnel with its `tcp` line.
async fn raw_or_ask(
    context: Arc<ConnContext>,
    stream: TcpStream,
    prefix: Bytes,
    host: Host,
    port: u16,
    tunnel: TunnelDecision,
) {
    let (tunnel, asked) = ask_raw(&context, &host, port, tunnel).await;
    if raw_allowed(&tunnel) {
        raw(context, stream, prefix, (host, port), tunnel, asked).await;
    } else {
        refuse_raw(&context, &host, port, &tunnel, asked);
    }
}

/// Reads until the first bytes can be told apart ([`Sniffer`]), leaving every byte read
/// in `buffer`; [`Sniffed::Closed`] when that takes longer than `timeout`.
pub(crate) async fn sniff(
    stream: &mut TcpStream,
    buffer: &mut BytesMut,
    timeout: std::time::Duration,
) -> Sniffed {
    let sniffing = async {
        let mut sniffer = Sniffer::default();
        loop {
            if let Some(answer) = sniffer.classify(buffer) {
                return answer;
            }
            match stream.read_buf(buffer).await {
                Ok(0) | Err(_) => return sniffer.at_end(),
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(timeout, sniffing)
        .await
        .unwrap_or(Sniffed::Closed)
}

async fn tls(
    context: Arc<ConnContext>,
    stream: TcpStream,
    prefix: Bytes,
    host: Host,
    port: u16,
    tunnel: TunnelDecision,
    sni: Option<Result<Host, ()>>,
) {
    let shared = &context.shared;
    if let Some(Ok(name)) = &sni
        && let Err(finding) = crate::name_guard::guard_host(&context, name)
    {
        return refuse_name(&context, &finding, port);
    }
    if tunnel.passthrough {
        if !tunnel.decision.is_allow() && !askable(&context, &host, &tunnel) {
            return refuse_raw(&context, &host, port, &tunnel, false);
        }
        if !matches!(&sni, Some(Ok(name)) if *name == host) {
            let line = context.tcp_refused(host.to_string(), port, Reason::HostMismatch);
            line.write(&shared.audit);
            return;
        }
        let (tunnel, asked) = ask_raw(&context, &host, port, tunnel).await;
        if !tunnel.decision.is_allow() {
            return refuse_raw(&context, &host, port, &tunnel, asked);
        }
        return raw(context, stream, prefix, (host, port), tunnel, asked).await;
    }
    let sni = match sni {
        Some(Ok(name)) => Some(name),
        // An SNI that is no host name cannot be matched to anything: refuse the tunnel.
        Some(Err(())) => {
            let line = context.tcp_refused(host.to_string(), port, Reason::HostMismatch);
            line.write(&shared.audit);
            return;
        }
        None => None,
    };
    let config = if sni.is_some() {
        shared.intercept_tls.clone()
    } else {
        match shared.ca.server_config_for_host(&host, client_alpn()) {
            Ok(config) => config,
            Err(e) => {
                tracing::warn!("cannot mint a certificate for {host}: {e}");
                return;
            }
        }
    };
    let accepting = TlsAcceptor::from(config).accept(Rewind::new(prefix, stream));
    let tls_stream = match tokio::time::timeout(shared.limits.handshake_timeout, accepting).await {
        Ok(Ok(tls_stream)) => tls_stream,
        Ok(Err(e)) => {
            tracing::debug!("TLS handshake with the client for {host} failed: {e}");
            return;
        }
        Err(_) => return,
    };
    let h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let origin = Origin::Tunnel {
        host,
        port,
        sni,
        tls: true,
    };
    serve_http(context.with_origin(origin), TokioIo::new(tls_stream), h2).await;
}

/// Serves HTTP (HTTP/1.1, or h2 when `h2` was negotiated) on a tunnel's stream.
async fn serve_http<I>(mut context: ConnContext, io: TokioIo<I>, h2: bool)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if !h2 {
        context.head_tap = Some(HeadTap::default());
        context.leg = Some(Arc::default());
        return serve_http1(Arc::new(context), io.into_inner(), "tunnel connection").await;
    }
    let context = Arc::new(context);
    let shared = context.shared.clone();
    let activity = Activity::new();
    let service = idle::service(context, activity.clone());
    let connection = shared.http_any.serve_connection_with_upgrades(io, service);
    tokio::pin!(connection);
    let serving = idle::serve(
        connection,
        |c| c.graceful_shutdown(),
        &activity,
        &shared,
        None,
    );
    if let Err(e) = serving.await {
        tracing::debug!("tunnel connection: {e}");
    }
}

/// Serves HTTP/1.1 on `stream` (a tunnel's, or a client connection to the proxy port):
/// through the connection's head tap (the CL+TE check) and head deadline, with its
/// upstream leg driven on this task; a parse error is logged (`what` names the
/// connection in the debug line).
pub(crate) async fn serve_http1<S>(context: Arc<ConnContext>, stream: S, what: &str)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let shared = context.shared.clone();
    let activity = Activity::new();
    let tapped = context.head_tap.clone().unwrap_or_default().wrap(stream);
    let timeout = shared.limits.header_read_timeout;
    let io = TokioIo::new(HeadClock::new(tapped, activity.clone(), timeout));
    let service = idle::service(context.clone(), activity.clone());
    let connection = shared.http1.serve_connection(io, service).with_upgrades();
    tokio::pin!(connection);
    let leg = context.leg.as_deref();
    let serving = idle::serve_with_leg(
        connection,
        |c| c.graceful_shutdown(),
        &activity,
        &shared,
        leg,
    );
    if let Err(e) = serving.await {
        tracing::debug!("{what}: {e}");
        crate::malformed::log_parse_error(&context, &e);
    }
}

/// Relays the tunnel as raw bytes to the checked address of `host:port` (`asked`: ask
/// mode asked about it, written on its lines).
async fn raw(
    context: Arc<ConnContext>,
    stream: TcpStream,
    prefix: Bytes,
    (host, port): (Host, u16),
    tunnel: TunnelDecision,
    asked: bool,
) {
    let shared = &context.shared;
    if !shared.audit_ok() {
        // Nothing passes unrecorded: raw and passthrough tunnels close like HTTP gets 503.
        return;
    }
    let started = std::time::Instant::now();
    let mut line = context.line(LineKind::Tcp, host.to_string(), port);
    line.allow(tunnel.decision.rule.clone(), tunnel.would);
    line.asked = asked;
    let mut upstream = match shared.upstream.connect_tcp(&host, port).await {
        Ok(upstream) => upstream,
        Err(DialError::Denied(decision)) => {
            let reason = decision.reason.unwrap_or(Reason::PrivateAddress);
            line.refuse(decision.rule, reason);
            line.write(&shared.audit);
            return;
        }
        Err(e) => {
            tracing::debug!("tunnel to {host}:{port}: {e}");
            line.ms = Some(started.elapsed().as_secs_f64() * 1000.0);
            line.write(&shared.audit);
            return;
        }
    };
    // Not a byte passes before the open line is written (docs/reliability.md).
    if line.write_open(&shared.audit).await.is_err() {
        return;
    }
    if !prefix.is_empty() && upstream.write_all(&prefix).await.is_err() {
        line.ms = Some(started.elapsed().as_secs_f64() * 1000.0);
        line.write(&shared.audit);
        return;
    }
    let relayed = relay(stream, upstream, shared.limits.relay_idle_timeout).await;
    line.bytes_up = relayed.up + prefix.len() as u64;
    line.bytes_down = relayed.down;
    line.ms = Some(started.elapsed().as_secs_f64() * 1000.0);
    line.write(&shared.audit);
}

/// Closes a tunnel whose host name or SNI carried a credential, with its `tcp` audit
/// line (the name shown as [`airlock_credentials::Finding::placeholder`]).
fn refuse_name(context: &ConnContext, finding: &airlock_credentials::Finding, port: u16) {
    let mut line = context.tcp_refused(finding.placeholder(), port, finding.reason);
    line.form = finding.form.as_audit();
    line.credential = finding.kind;
    line.write(&context.shared.audit);
}

/// Closes a tunnel whose bytes may not pass, with its `tcp` audit line (`asked`: ask mode
/// asked about it and nobody allowed it).
fn refuse_raw(context: &ConnContext, host: &Host, port: u16, tunnel: &TunnelDecision, asked: bool) {
    let decision = if tunnel.decision.is_allow() {
        // The port is allowed only for HTTP (the rule has methods or paths).
        Decision::deny(Reason::MethodNotAllowed, tunnel.decision.rule.clone())
    } else {
        tunnel.decision.clone()
    };
    let reason = decision.reason.unwrap_or(Reason::HostNotAllowed);
    let mut line = context.tcp_refused(host.to_string(), port, reason);
    line.rule = decision.rule;
    line.asked = asked;
    line.write(&context.shared.audit);
}
