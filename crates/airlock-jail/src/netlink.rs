//! Network setup inside the jail's fresh network namespace, through rtnetlink:
//! bring `lo` up and make every address local (`local 0.0.0.0/0 dev lo table
//! local`, and `::/0` for IPv6), so listeners on the wildcard address accept
//! connections to any destination.

use std::io;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// The kernel's `local` routing table (`RT_TABLE_LOCAL`).
const LOCAL_TABLE: u8 = 255;
/// Upper bound of netlink messages read while waiting for one acknowledgement.
const MAX_REPLIES: usize = 64;

/// An rtnetlink socket connected to the kernel of the current network namespace.
pub(crate) struct RouteSocket {
    socket: Socket,
    sequence: u32,
}

impl RouteSocket {
    /// Opens an rtnetlink socket.
    pub(crate) fn open() -> io::Result<RouteSocket> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        Ok(RouteSocket {
            socket,
            sequence: 0,
        })
    }

    /// Sets the interface with this index administratively up.
    pub(crate) fn set_link_up(&mut self, index: u32) -> io::Result<()> {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.header.flags = LinkFlags::Up;
        link.header.change_mask = LinkFlags::Up;
        self.request(RouteNetlinkMessage::SetLink(link), 0)
    }

    /// Adds `local <any>/0 dev <index> table local` for IPv4 (`ipv6 == false`) or IPv6,
    /// replacing a route with the same key (a namespace captured a second time).
    pub(crate) fn add_local_default_route(&mut self, index: u32, ipv6: bool) -> io::Result<()> {
        let mut route = RouteMessage::default();
        route.header.address_family = if ipv6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        route.header.destination_prefix_length = 0;
        route.header.table = LOCAL_TABLE;
        route.header.protocol = RouteProtocol::Boot;
        route.header.scope = RouteScope::Host;
        route.header.kind = RouteType::Local;
        let any = if ipv6 {
            RouteAddress::Inet6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            RouteAddress::Inet(std::net::Ipv4Addr::UNSPECIFIED)
        };
        route.attributes = vec![
            RouteAttribute::Destination(any),
            RouteAttribute::Table(u32::from(LOCAL_TABLE)),
            RouteAttribute::Oif(index),
        ];
        self.request(
            RouteNetlinkMessage::NewRoute(route),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Sends one request and waits for the kernel's acknowledgement.
    fn request(&mut self, message: RouteNetlinkMessage, extra_flags: u16) -> io::Result<()> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | extra_flags;
        header.sequence_number = self.sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
        packet.finalize();
        let mut buffer = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buffer);
        self.socket.send(&buffer, 0)?;

        let mut replies_seen = 0usize;
        while replies_seen < MAX_REPLIES {
            let mut receive_buffer = Vec::with_capacity(8192);
            let received = self.socket.recv(&mut receive_buffer, 0)?;
            if received == 0 {
                break;
            }
            let mut offset = 0usize;
            while offset < receive_buffer.len() && replies_seen < MAX_REPLIES {
                replies_seen += 1;
                let reply =
                    NetlinkMessage::<RouteNetlinkMessage>::deserialize(&receive_buffer[offset..])
                        .map_err(|error| {
                        io::Error::new(io::ErrorKind::InvalidData, error.to_string())
                    })?;
                let length = reply.header.length as usize;
                if reply.header.sequence_number == self.sequence
                    && let NetlinkPayload::Error(error) = reply.payload
                {
                    return match error.code {
                        None => Ok(()),
                        Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                    };
                }
                if length == 0 {
                    break;
                }
                offset += (length + 3) & !3;
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no netlink acknowledgement",
        ))
    }
}
