//! Original destinations of traffic caught by the handed sockets: the local
//! address of an accepted TCP connection, and the packet-info destination of
//! a UDP datagram (with the matching reply path).

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage, getsockname, recvmsg, sendmsg,
};

/// The address the jailed command connected to, for a TCP connection
/// accepted on a handed listener.
///
/// Inside the jail every address is local, so the kernel delivered the
/// connection to the wildcard listener with the dialled address as the
/// connection's *local* address: this is `getsockname()` of the accepted
/// socket (what `local_addr()` returns). Works with `std::net::TcpStream`
/// and `tokio::net::TcpStream` alike. An IPv4-mapped IPv6 address cannot
/// occur (the IPv6 listeners are `IPV6_V6ONLY`).
pub fn original_destination<S: AsFd>(stream: &S) -> io::Result<SocketAddr> {
    let address: SockaddrStorage = getsockname(stream.as_fd().as_raw_fd())?;
    socket_addr_of(&address)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket"))
}

/// One datagram received on a handed UDP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Number of bytes written to the buffer.
    pub len: usize,
    /// Who sent it (the command, inside the jail).
    pub source: SocketAddr,
    /// The address it was sent to (for example the resolver in
    /// `/etc/resolv.conf`); `None` if the kernel gave no packet info.
    pub original_destination: Option<IpAddr>,
}

/// Receives one datagram on a handed UDP socket, with its original
/// destination. Reply with [`send_datagram_from`] from that address, or the
/// command's resolver will ignore the answer. A datagram larger than `buffer`
/// is an error (`InvalidData`), never silently truncated.
pub fn recv_datagram<S: AsFd>(socket: &S, buffer: &mut [u8]) -> io::Result<Datagram> {
    let mut control = nix::cmsg_space!(libc::in6_pktinfo);
    let mut iov = [IoSliceMut::new(buffer)];
    let message = recvmsg::<SockaddrStorage>(
        socket.as_fd().as_raw_fd(),
        &mut iov,
        Some(&mut control),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    if message.flags.contains(MsgFlags::MSG_TRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "datagram larger than the buffer",
        ));
    }
    let source = message
        .address
        .as_ref()
        .and_then(socket_addr_of)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "datagram without source"))?;
    let mut original_destination = None;
    for control_message in message.cmsgs()? {
        match control_message {
            ControlMessageOwned::Ipv4PacketInfo(info) => {
                original_destination = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    info.ipi_addr.s_addr,
                ))));
            }
            ControlMessageOwned::Ipv6PacketInfo(info) => {
                original_destination = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            }
            _ => {}
        }
    }
    Ok(Datagram {
        len: message.bytes,
        source,
        original_destination,
    })
}

/// Sends `payload` to `to` with `from` as the source address (the original
/// destination of the query being answered).
pub fn send_datagram_from<S: AsFd>(
    socket: &S,
    payload: &[u8],
    to: SocketAddr,
    from: IpAddr,
) -> io::Result<usize> {
    let iov = [IoSlice::new(payload)];
    let destination = SockaddrStorage::from(to);
    let sent = match from {
        IpAddr::V4(source) => {
            let info = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from(source).to_be(),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            sendmsg(
                socket.as_fd().as_raw_fd(),
                &iov,
                &[ControlMessage::Ipv4PacketInfo(&info)],
                MsgFlags::MSG_NOSIGNAL,
                Some(&destination),
            )?
        }
        IpAddr::V6(source) => {
            let info = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: source.octets(),
                },
                ipi6_ifindex: 0,
            };
            sendmsg(
                socket.as_fd().as_raw_fd(),
                &iov,
                &[ControlMessage::Ipv6PacketInfo(&info)],
                MsgFlags::MSG_NOSIGNAL,
                Some(&destination),
            )?
        }
    };
    Ok(sent)
}

/// Converts a socket address from the kernel into a standard one.
fn socket_addr_of(address: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(SocketAddr::from(std::net::SocketAddrV4::from(*v4)));
    }
    if let Some(v6) = address.as_sockaddr_in6() {
        return Some(SocketAddr::from(std::net::SocketAddrV6::from(*v6)));
    }
    None
}
