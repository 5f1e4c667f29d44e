//! Transparent capture: connections that reached one of the proxy's listeners without
//! asking (inside `airlock run`'s network namespace every address is local, so a socket
//! listening on port 443 accepts a connection to *any* address on 443). The original
//! destination is the accepted socket's local address; its port is the destination port,
//! and its address gives the host: the name the sandbox's DNS handed that address out for
//! (a [`NameLookup`]), or the address itself when the client dialled an IP literal.
//!
//! From there a captured connection is served exactly like a CONNECT tunnel to that
//! host and port ([`crate::tunnel`]): TLS is intercepted and its SNI must name the same
//! host, plain HTTP's `Host` must agree, other bytes pass only where a rule allows raw TCP.
//! Refusals are always given inside the session (there is no CONNECT to answer).
//!
//! In gateway mode ([`Capture::Gateway`], `airlock proxy --transparent`) the proxy runs in
//! its own namespace or host and connections reach it two ways: REDIRECTed by
//! iptables/nftables (the original destination is read with `SO_ORIGINAL_DST` /
//! `IP6T_SO_ORIGINAL_DST`, then mapped as above), or routed to the proxy's own address
//! (no NAT entry, or one whose original destination is the accepted socket's own local
//! address): the name is then the TLS SNI or the plain-HTTP `Host` and the port is the
//! listener's. A connection to the proxy's own address that names no host is refused and
//! logged (`host_mismatch`); it is never dialled.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use airlock_policy::Reason;
use airlock_policy::canonical::{Host, canonical_host};
use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::context::ConnContext;
use crate::tunnel;
use crate::wire::{Sniffed, request_host};

/// How a captured connection's original destination is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capture {
    /// `airlock run`'s jail: every address is local, the accepted socket's local address
    /// is the destination (`SO_ORIGINAL_DST` on the catch-all port).
    Jail,
    /// `airlock proxy --transparent`: `SO_ORIGINAL_DST` for REDIRECTed connections, SNI or
    /// `Host` for connections to the proxy's own address.
    Gateway,
}

/// Maps an address the sandbox's DNS handed out back to the name it was handed out for;
/// `None` for any other address.
pub type NameLookup = Arc<dyn Fn(IpAddr) -> Option<String> + Send + Sync>;

/// The host a captured connection to `address` is for.
pub fn destination_host(address: IpAddr, names: &NameLookup) -> Host {
    let address = address.to_canonical();
    names(address)
        .and_then(|name| canonical_host(&name).ok())
        .unwrap_or(Host::Ip(address))
}

/// Serves one captured connection.
pub(crate) async fn serve(
    context: Arc<ConnContext>,
    mut stream: TcpStream,
    names: NameLookup,
    capture: Capture,
) {
    let Ok(local) = stream.local_addr() else {
        return;
    };
    let redirected = match capture {
        // A connection to a port without a listener in the jail was REDIRECTed to the
        // catch-all port by the jail's own nftables rule (no capability inside can change
        // it): the NAT table has where it was going.
        Capture::Jail => Some(original_destination(&stream).unwrap_or(local)),
        Capture::Gateway => original_destination(&stream).filter(|original| *original != local),
    };
    let mut buffer = BytesMut::new();
    let host = match redirected {
        Some(original) => destination_host(original.ip(), &names),
        None => {
            let timeout = context.shared.limits.handshake_timeout;
            match named_host(&mut stream, &mut buffer, timeout).await {
                Some(host) => host,
                None => {
                    let host = local.ip().to_string();
                    let reason = Reason::HostMismatch;
                    let line = context.tcp_refused(host, local.port(), reason);
                    line.write(&context.shared.audit);
                    return;
                }
            }
        }
    };
    let port = redirected.unwrap_or(local).port();
    let shared = &context.shared;
    let policy = shared.policy.load();
    let decision = policy.decide_tunnel_as(&host, port, context.program());
    let decision = shared.mode.apply_tunnel(&host, decision);
    drop(policy);
    tunnel::serve(context, stream, buffer, host, port, decision).await;
}

/// The destination a REDIRECTed connection was addressed to, from the NAT table
/// (`SO_ORIGINAL_DST`, or `IP6T_SO_ORIGINAL_DST` on an IPv6 socket); `None` when the
/// kernel has no NAT entry for it (or is not Linux).
pub fn original_destination(stream: &TcpStream) -> Option<SocketAddr> {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{getsockopt, sockopt};
        match stream.local_addr().ok()? {
            SocketAddr::V4(_) => {
                let raw = getsockopt(stream, sockopt::OriginalDst).ok()?;
                let ip = Ipv4Addr::from(u32::from_be(raw.sin_addr.s_addr));
                Some(SocketAddr::from((ip, u16::from_be(raw.sin_port))))
            }
            SocketAddr::V6(_) => {
                let raw = getsockopt(stream, sockopt::Ip6tOriginalDst).ok()?;
                let ip = Ipv6Addr::from(raw.sin6_addr.s6_addr);
                Some(SocketAddr::from((ip, u16::from_be(raw.sin6_port))))
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = stream;
        None
    }
}

/// The host a connection to the gateway's own address names in its first bytes: the TLS
/// SNI, or the plain-HTTP `Host` header (its port dropped). Every byte read stays in
/// `buffer`. `None` when it names none (or an invalid one) within `timeout`.
async fn named_host(
    stream: &mut TcpStream,
    buffer: &mut BytesMut,
    timeout: std::time::Duration,
) -> Option<Host> {
    let reading = async {
        if stream.read_buf(buffer).await.ok()? == 0 {
            return None;
        }
        match tunnel::sniff(stream, buffer, timeout).await {
            Sniffed::Tls(Some(Ok(name))) => Some(name),
            Sniffed::Http => http_host(stream, buffer).await,
            Sniffed::Tls(_) | Sniffed::Other | Sniffed::Closed => None,
        }
    };
    tokio::time::timeout(timeout, reading).await.ok().flatten()
}

/// Reads a plain-HTTP request head (at most [`crate::wire::MAX_HEAD_BYTES`]) and returns its `Host`.
async fn http_host(stream: &mut TcpStream, buffer: &mut BytesMut) -> Option<Host> {
    loop {
        if let Some(found) = request_host(buffer) {
            return found;
        }
        if stream.read_buf(buffer).await.ok()? == 0 {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn pool_lookup() -> NameLookup {
        Arc::new(|address| {
            (address == IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))).then(|| "API.Example.".to_owned())
        })
    }

    #[test]
    fn pool_addresses_give_their_canonical_name() {
        let host = destination_host(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), &pool_lookup());
        assert_eq!(host, Host::Name("api.example".to_owned()));
    }

    #[test]
    fn other_addresses_are_ip_literals() {
        let host = destination_host(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)), &pool_lookup());
        assert_eq!(host, Host::Ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9))));
    }

    #[test]
    fn v4_mapped_addresses_are_read_as_ipv4() {
        let mapped = IpAddr::V6(Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped());
        assert_eq!(
            destination_host(mapped, &pool_lookup()),
            Host::Name("api.example".to_owned())
        );
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(destination_host(v6, &pool_lookup()), Host::Ip(v6));
    }
}
