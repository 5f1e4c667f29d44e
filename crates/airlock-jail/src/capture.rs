//! Making a network namespace capture every connection: `lo` up, the routes
//! `local 0.0.0.0/0 dev lo table local` and `local ::/0 dev lo table local`
//! (every address local), and wildcard listeners (TCP 80, 443, the rule
//! ports and 53; UDP 53) bound there.
//!
//! Two users: the jail, inside its freshly forked child and new namespace
//! ([`crate::child`]), and [`capture_network_namespace`], which does the same
//! in an existing namespace (a `docker run --network none` container's)
//! entered from one dedicated thread of airlock's own process.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sched::{CloneFlags, setns};
use nix::sys::socket::{
    AddressFamily, Backlog, SockFlag, SockType, SockaddrIn, SockaddrIn6, bind, listen, setsockopt,
    socket, sockopt,
};

use crate::error::{JailError, SetupStep};
use crate::wire::Family;
use crate::{HandedListener, Protocol};

/// The DNS port, always listened on (UDP and TCP, both families).
pub(crate) const DNS_PORT: u16 = 53;
/// Backlog of the handed TCP listeners.
const LISTEN_BACKLOG: i32 = 1024;
/// The only interface a captured namespace may have.
const LOOPBACK: &str = "lo";
/// Whether IPv6 is switched off on `lo` in the current network namespace
/// (Docker does this for its containers): `/proc/sys/net` shows the sysctls
/// of the calling thread's network namespace.
const LOOPBACK_IPV6_DISABLED: &str = "/proc/sys/net/ipv6/conf/lo/disable_ipv6";

/// Takes over the network namespace `netns` (an open `/proc/PID/ns/net` or
/// `/run/netns/NAME`) so that every connection made in it lands on airlock,
/// and returns the listening sockets, shaped like a jail's
/// [`crate::RunningJail::listeners`]: serve them the same way.
///
/// A dedicated thread enters the namespace (`setns(CLONE_NEWNET)`; the
/// network namespace is per thread, so the rest of the process stays where
/// it is), checks that `lo` is its only interface, brings `lo` up, makes every
/// address local (`local 0.0.0.0/0` and, where IPv6 is enabled on `lo`,
/// `local ::/0`, in table `local`; an existing identical route is replaced,
/// so a namespace can be captured again after the previous listeners were
/// closed), creates the wildcard listeners (TCP on `tcp_ports` and 53, UDP on
/// 53; IPv4, and IPv6 where enabled) and ends. The sockets stay in the
/// namespace they were created in.
///
/// A namespace with any interface besides `lo` is refused
/// ([`JailError::UnexpectedInterfaces`]): with `lo` alone nothing can carry a
/// packet out of the namespace, whatever its routes. Where IPv6 is disabled
/// on `lo`, no IPv6 packet can be sent at all, and only IPv4 is captured.
///
/// Needs `CAP_SYS_ADMIN` over the namespace's owner (root, for a Docker
/// container) and `CAP_NET_ADMIN` in it. Every failure names its step
/// ([`JailError::Capture`]); after one, the namespace may hold the routes
/// but no listener, so connections in it are refused, never forwarded.
pub fn capture_network_namespace(
    netns: &File,
    tcp_ports: &[u16],
) -> Result<Vec<HandedListener>, JailError> {
    let ports = listening_ports(tcp_ports)?;
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("airlock-netns-capture".into())
            .spawn_scoped(scope, || capture_on_this_thread(netns, &ports))
            .map_err(|source| JailError::Launcher {
                what: "starting the network namespace capture thread",
                source,
            })?;
        worker.join().map_err(|_| JailError::Launcher {
            what: "capturing the network namespace",
            source: io::Error::other("the capture thread panicked"),
        })?
    })
}

/// The capture thread's work, after which the thread ends (it never returns
/// to airlock's own network namespace).
fn capture_on_this_thread(netns: &File, ports: &[u16]) -> Result<Vec<HandedListener>, JailError> {
    let captured = |step: SetupStep| move |source: io::Error| JailError::Capture { step, source };
    setns(netns, CloneFlags::CLONE_NEWNET)
        .map_err(io::Error::from)
        .map_err(captured(SetupStep::EnterNetworkNamespace))?;
    let interfaces = interface_names().map_err(captured(SetupStep::ListInterfaces))?;
    let unexpected: Vec<String> = interfaces
        .into_iter()
        .filter(|name| name != LOOPBACK)
        .collect();
    if !unexpected.is_empty() {
        return Err(JailError::UnexpectedInterfaces { names: unexpected });
    }
    let ipv6 = ipv6_available().map_err(captured(SetupStep::CreateListener))?;
    configure_network(ipv6).map_err(|(step, source)| JailError::Capture { step, source })?;
    listener_kinds(ports, ipv6)
        .into_iter()
        .map(|(proto, family, port)| {
            let fd = create_listener(proto, family, port)
                .map_err(io::Error::from)
                .map_err(captured(SetupStep::CreateListener))?;
            Ok(HandedListener {
                proto,
                addr: family.wildcard(port),
                fd,
            })
        })
        .collect()
}

/// Names of every network interface of the current thread's namespace.
fn interface_names() -> io::Result<Vec<String>> {
    let interfaces = nix::net::if_::if_nameindex()?;
    Ok(interfaces
        .iter()
        .map(|interface| interface.name().to_string_lossy().into_owned())
        .collect())
}

/// The TCP ports to listen on: the requested ones and DNS, sorted, without
/// duplicates. Port 0 cannot be listened on.
pub(crate) fn listening_ports(requested: &[u16]) -> Result<Vec<u16>, JailError> {
    if requested.contains(&0) {
        return Err(JailError::InvalidSpec(
            "port 0 cannot be listened on".into(),
        ));
    }
    let mut ports = requested.to_vec();
    ports.push(DNS_PORT);
    ports.sort_unstable();
    ports.dedup();
    Ok(ports)
}

/// Every socket to create, in order: per family, TCP on each port, then UDP 53.
pub(crate) fn listener_kinds(tcp_ports: &[u16], ipv6: bool) -> Vec<(Protocol, Family, u16)> {
    let families: &[Family] = if ipv6 {
        &[Family::V4, Family::V6]
    } else {
        &[Family::V4]
    };
    let mut kinds = Vec::with_capacity(families.len() * (tcp_ports.len() + 1));
    for family in families {
        for port in tcp_ports {
            kinds.push((Protocol::Tcp, *family, *port));
        }
        kinds.push((Protocol::Udp, *family, DNS_PORT));
    }
    kinds
}

/// Whether IPv6 can carry packets in the current network namespace: the
/// kernel supports IPv6 sockets and IPv6 is not disabled on `lo`.
pub(crate) fn ipv6_available() -> io::Result<bool> {
    match socket(
        AddressFamily::Inet6,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    ) {
        Ok(_) => {}
        Err(nix::errno::Errno::EAFNOSUPPORT) => return Ok(false),
        Err(errno) => return Err(errno.into()),
    }
    match std::fs::read(LOOPBACK_IPV6_DISABLED) {
        Ok(value) => Ok(value.trim_ascii() == b"0"),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(error),
    }
}

/// Brings `lo` up and makes every address local; the error names the step.
pub(crate) fn configure_network(ipv6: bool) -> Result<(), (SetupStep, io::Error)> {
    let at = |step: SetupStep| move |error: io::Error| (step, error);
    let loopback = nix::net::if_::if_nametoindex(LOOPBACK)
        .map_err(io::Error::from)
        .map_err(at(SetupStep::LoopbackUp))?;
    let mut netlink = crate::netlink::RouteSocket::open().map_err(at(SetupStep::LoopbackUp))?;
    netlink
        .set_link_up(loopback)
        .map_err(at(SetupStep::LoopbackUp))?;
    netlink
        .add_local_default_route(loopback, false)
        .map_err(at(SetupStep::LocalRouteIpv4))?;
    if ipv6 {
        netlink
            .add_local_default_route(loopback, true)
            .map_err(at(SetupStep::LocalRouteIpv6))?;
    }
    Ok(())
}

/// One wildcard socket: TCP listening, or UDP with packet-info enabled so
/// airlock can learn each datagram's original destination.
pub(crate) fn create_listener(proto: Protocol, family: Family, port: u16) -> nix::Result<OwnedFd> {
    let address_family = match family {
        Family::V4 => AddressFamily::Inet,
        Family::V6 => AddressFamily::Inet6,
    };
    let kind = match proto {
        Protocol::Tcp => SockType::Stream,
        Protocol::Udp => SockType::Datagram,
    };
    let socket = socket(address_family, kind, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&socket, sockopt::ReuseAddr, &true)?;
    match family {
        Family::V4 => {
            if proto == Protocol::Udp {
                setsockopt(&socket, sockopt::Ipv4PacketInfo, &true)?;
            }
            bind(
                socket.as_raw_fd(),
                &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)),
            )?;
        }
        Family::V6 => {
            setsockopt(&socket, sockopt::Ipv6V6Only, &true)?;
            if proto == Protocol::Udp {
                setsockopt(&socket, sockopt::Ipv6RecvPacketInfo, &true)?;
            }
            bind(
                socket.as_raw_fd(),
                &SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)),
            )?;
        }
    }
    if proto == Protocol::Tcp {
        listen(&socket, Backlog::new(LISTEN_BACKLOG)?)?;
    }
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_always_include_dns_once_and_never_zero() {
        assert!(matches!(listening_ports(&[443, 80, 443]), Ok(ports) if ports == [53, 80, 443]));
        assert!(matches!(listening_ports(&[53]), Ok(ports) if ports == [53]));
        assert!(matches!(
            listening_ports(&[80, 0]),
            Err(JailError::InvalidSpec(_))
        ));
    }

    #[test]
    fn every_family_gets_every_tcp_port_and_udp_dns() {
        let kinds = listener_kinds(&[53, 443], true);
        assert_eq!(
            kinds,
            [
                (Protocol::Tcp, Family::V4, 53),
                (Protocol::Tcp, Family::V4, 443),
                (Protocol::Udp, Family::V4, 53),
                (Protocol::Tcp, Family::V6, 53),
                (Protocol::Tcp, Family::V6, 443),
                (Protocol::Udp, Family::V6, 53),
            ]
        );
        assert_eq!(listener_kinds(&[53], false).len(), 2);
    }
}
