//! WebSocket: the upgrade request is decided like any request (method GET and its path)
//! and forwarded over an HTTP/1.1-only upstream connection; when the upstream answers 101
//! both upgraded connections are relayed until either closes, and the exchange becomes
//! one `ws` audit line with the bytes moved each way and the duration.

use http::{HeaderMap, Version, header};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use crate::record::{Exchange, LineKind};
use crate::relay::relay;
use crate::server::ConnContext;

/// Whether the request asks for a protocol upgrade (HTTP/1.1 `Connection: upgrade` with
/// an `Upgrade` header).
pub(crate) fn is_upgrade(version: Version, headers: &HeaderMap) -> bool {
    version == Version::HTTP_11
        && headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Relays the two upgraded connections in the background; the exchange (now a `ws`
/// line) is written when the relay ends.
pub(crate) fn relay_upgraded(
    context: &ConnContext,
    mut exchange: Exchange,
    client: OnUpgrade,
    upstream: OnUpgrade,
) {
    exchange.set_kind(LineKind::Ws);
    let idle = context.shared.limits.relay_idle_timeout;
    // The relay counts as part of the client connection for the cap and the drain.
    let permit = context._permit.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let (client, upstream) = match tokio::try_join!(client, upstream) {
            Ok(both) => both,
            Err(e) => {
                tracing::debug!("WebSocket upgrade failed: {e}");
                return;
            }
        };
        let relayed = relay(TokioIo::new(client), TokioIo::new(upstream), idle).await;
        exchange.add_bytes_up(relayed.up);
        exchange.add_bytes_down(relayed.down);
    });
}
