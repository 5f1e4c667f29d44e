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

use crate::context::{ConnContext, client_alpn};
use crate::head_clock::HeadClock;
use crate::head_tap::{HeadTap, Tapped};
use crate::identity::Origin;
use crate::idle::{self, Activity};
use crate::record::{Line, LineKind};
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
                return raw(context, stream, buffer.freeze(), host, port, tunnel).await;
            }
            Err(_) => {
                let rest = limits
                    .handshake_timeout
                    .saturating_sub(limits.first_bytes_timeout);
                match tokio::time::timeout(rest, stream.read_buf(&mut buffer)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    _ => return refuse_raw(&context, &host, port, &tunnel),
                }
            }
        }
    }
    match sniff(&mut stream, &mut buffer, limits.handshake_timeout).await {
        Sniffed::Tls(sni) => tls(context, stream, buffer.freeze(), host, port, tunnel, sni).await,
        Sniffed::Http => {
            let origin = Origin::Tunnel {
                host,
                port,
                sni: None,
                tls: false,
            };
            serve_http(
                context.with_origin(origin),
                TokioIo::new(Rewind::new(buffer.freeze(), stream)),
                false,
            )
            .await;
        }
        Sniffed::Other => {
            if raw_allowed(&tunnel) {
                raw(context, stream, buffer.freeze(), host, port, tunnel).await;
            } else {
                refuse_raw(&context, &host, port, &tunnel);
            }
        }
        Sniffed::Closed => {}
    }
}

fn raw_allowed(tunnel: &TunnelDecision) -> bool {
    tunnel.decision.is_allow() && tunnel.raw_tcp_allowed
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
        if !tunnel.decision.is_allow() {
            return refuse_raw(&context, &host, port, &tunnel);
        }
        if !matches!(&sni, Some(Ok(name)) if *name == host) {
            let line = Line::tcp_refused(host.to_string(), port, context.id, Reason::HostMismatch);
            line.write(&shared.audit);
            return;
        }
        return raw(context, stream, prefix, host, port, tunnel).await;
    }
    let sni = match sni {
        Some(Ok(name)) => Some(name),
        // An SNI that is no host name cannot be matched to anything: refuse the tunnel.
        Some(Err(())) => {
            let line = Line::tcp_refused(host.to_string(), port, context.id, Reason::HostMismatch);
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
    let head_tap = (!h2).then(HeadTap::default);
    context.head_tap = head_tap.clone();
    let context = Arc::new(context);
    let log_context = context.clone();
    let shared = context.shared.clone();
    let activity = Activity::new();
    let service = idle::service(context, activity.clone());
    if h2 {
        let connection = shared.http_any.serve_connection_with_upgrades(io, service);
        tokio::pin!(connection);
        let serving = idle::serve(connection, |c| c.graceful_shutdown(), &activity, &shared);
        if let Err(e) = serving.await {
            tracing::debug!("tunnel connection: {e}");
        }
    } else {
        let tapped = head_tap.unwrap_or_default().wrap(io.into_inner());
        let timeout = shared.limits.header_read_timeout;
        let io = TokioIo::new(HeadClock::new(tapped, activity.clone(), timeout));
        let connection = shared.http1.serve_connection(io, service).with_upgrades();
        tokio::pin!(connection);
        let serving = idle::serve(connection, |c| c.graceful_shutdown(), &activity, &shared);
        if let Err(e) = serving.await {
            tracing::debug!("tunnel connection: {e}");
            crate::malformed::log_parse_error(&log_context, &e);
        }
    }
}

/// Relays the tunnel as raw bytes to the checked address of `host:port`.
async fn raw(
    context: Arc<ConnContext>,
    stream: TcpStream,
    prefix: Bytes,
    host: Host,
    port: u16,
    tunnel: TunnelDecision,
) {
    let shared = &context.shared;
    if !shared.audit_ok() {
        // Nothing passes unrecorded: raw and passthrough tunnels close like HTTP gets 503.
        return;
    }
    let started = std::time::Instant::now();
    let mut line = Line::new(LineKind::Tcp, host.to_string(), port, context.id);
    line.allow(tunnel.decision.rule.clone(), tunnel.would);
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
    let mut line = Line::tcp_refused(finding.placeholder(), port, context.id, finding.reason);
    line.form = finding.form.as_audit();
    line.credential = finding.kind;
    line.write(&context.shared.audit);
}

/// Closes a tunnel whose bytes may not pass, with its `tcp` audit line.
fn refuse_raw(context: &ConnContext, host: &Host, port: u16, tunnel: &TunnelDecision) {
    let decision = if tunnel.decision.is_allow() {
        // The port is allowed only for HTTP (the rule has methods or paths).
        Decision::deny(Reason::MethodNotAllowed, tunnel.decision.rule.clone())
    } else {
        tunnel.decision.clone()
    };
    let reason = decision.reason.unwrap_or(Reason::HostNotAllowed);
    let mut line = Line::tcp_refused(host.to_string(), port, context.id, reason);
    line.rule = decision.rule;
    line.write(&context.shared.audit);
}
