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

use std::net::IpAddr;
use std::sync::Arc;

use airlock_policy::canonical::{Host, canonical_host};
use bytes::BytesMut;
use tokio::net::TcpStream;

use crate::server::ConnContext;
use crate::tunnel;

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
pub(crate) async fn serve(context: Arc<ConnContext>, stream: TcpStream, names: NameLookup) {
    let Ok(original) = stream.local_addr() else {
        return;
    };
    let host = destination_host(original.ip(), &names);
    let port = original.port();
    let decision = context.shared.policy.load().decide_tunnel(&host, port);
    tunnel::serve(context, stream, BytesMut::new(), host, port, decision).await;
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
