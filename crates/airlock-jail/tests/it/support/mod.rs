//! Shared by the jail and capture tests: the client that dials addresses
//! from inside a captured network namespace, the listener side that
//! checks each connection and datagram arrived with its original destination,
//! and [`skip_or_fail`] for a test that cannot run here.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use airlock_jail::{
    HandedListener, Protocol, original_destination, recv_datagram, send_datagram_from,
};

pub mod require;
pub use require::skip_or_fail;

/// Upper bound of every wait in these tests.
pub const BOUND: Duration = Duration::from_secs(20);

/// The Python client: run it with `v6` or `v4` inside the captured namespace;
/// it exits 0 once [`expect_any_address_traffic`] has answered everything.
pub const ANY_ADDRESS_CLIENT: &str = include_str!("any_address_client.py");

/// Removes and returns the listener for `proto`, family and `port`.
pub fn take_listener(
    listeners: &mut Vec<HandedListener>,
    proto: Protocol,
    ipv6: bool,
    port: u16,
) -> Option<HandedListener> {
    let position = listeners
        .iter()
        .position(|l| l.proto == proto && l.addr.port() == port && l.addr.is_ipv6() == ipv6)?;
    Some(listeners.swap_remove(position))
}

/// Accepts one connection within [`BOUND`].
pub fn accept_bounded(listener: &std::net::TcpListener) -> std::net::TcpStream {
    listener.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + BOUND;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).expect("blocking");
                stream.set_read_timeout(Some(BOUND)).expect("timeout");
                return stream;
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "no connection within {BOUND:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("accept: {error}"),
        }
    }
}

/// The listener side of [`ANY_ADDRESS_CLIENT`]: takes TCP 443 and UDP 53
/// (and TCP 80 on IPv6 when `ipv6`) from `listeners`, and checks that the
/// client's connections and datagram arrive with the addresses it dialled.
pub fn expect_any_address_traffic(listeners: &mut Vec<HandedListener>, ipv6: bool) {
    let https = take_listener(listeners, Protocol::Tcp, false, 443)
        .expect("tcp 443 listener")
        .into_tcp_listener()
        .expect("tcp");
    let dns = take_listener(listeners, Protocol::Udp, false, 53)
        .expect("udp 53 socket")
        .into_udp_socket()
        .expect("udp");
    let http6 = ipv6.then(|| {
        take_listener(listeners, Protocol::Tcp, true, 80)
            .expect("tcp [::]:80 listener")
            .into_tcp_listener()
            .expect("tcp")
    });

    let mut stream = accept_bounded(&https);
    let mut received = [0u8; 13];
    stream.read_exact(&mut received).expect("read");
    assert_eq!(&received, b"hello-airlock");
    let destination = SocketAddr::from((Ipv4Addr::new(203, 0, 113, 7), 443));
    assert_eq!(
        original_destination(&stream).expect("getsockname"),
        destination
    );
    assert_eq!(stream.local_addr().expect("local_addr"), destination);
    stream.write_all(b"ok").expect("write");
    drop(stream);

    if let Some(http6) = http6 {
        let mut stream = accept_bounded(&http6);
        let mut received = [0u8; 3];
        stream.read_exact(&mut received).expect("read");
        assert_eq!(&received, b"six");
        let destination: SocketAddr = "[2001:db8::7]:80".parse().expect("address");
        assert_eq!(
            original_destination(&stream).expect("getsockname"),
            destination
        );
    }

    dns.set_read_timeout(Some(BOUND)).expect("timeout");
    let mut buffer = [0u8; 512];
    let datagram = recv_datagram(&dns, &mut buffer).expect("datagram");
    assert_eq!(&buffer[..datagram.len], b"dns-query");
    let resolver = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
    assert_eq!(datagram.original_destination, Some(resolver));
    send_datagram_from(&dns, b"dns-answer", datagram.source, resolver).expect("send");
}

/// What a test that cannot build a jail here says (a failure under
/// `AIRLOCK_TEST_REQUIRE`: [`skip_or_fail`]).
pub const NAMESPACES_REFUSED: &str = "the kernel refuses unprivileged namespaces here (allow them: \
     `sysctl kernel.unprivileged_userns_clone=1`, `user.max_user_namespaces` > 0)";

/// Spawns the jail, or returns `None` (after saying why) when the kernel
/// refuses namespaces.
pub fn spawn_or_skip(spec: airlock_jail::JailSpec) -> Option<airlock_jail::RunningJail> {
    match airlock_jail::Jail::spawn(spec) {
        Ok(jail) => Some(jail),
        Err(airlock_jail::JailError::NamespacesUnavailable { why }) => {
            skip_or_fail(&format!("{NAMESPACES_REFUSED}: {why}"));
            None
        }
        Err(error) => panic!("spawning the jail failed: {error}"),
    }
}
