//! The server loops: [`answer`] on UDP and TCP sockets, one audit line per answered query.
//!
//! See the [crate documentation](crate) for the failure rules.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use airlock_audit::AuditLog;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout, timeout_at};

use crate::answer::answer;
use crate::map::NameMap;

/// Receive buffer for UDP queries. Larger datagrams are truncated (by the kernel) and so
/// answered `FORMERR`, or dropped by [`serve_handed_udp`].
pub const MAX_UDP_QUERY_LEN: usize = 4096;

/// Largest TCP query accepted; a longer length prefix closes the connection.
pub const MAX_TCP_QUERY_LEN: usize = 4096;

/// TCP connections served at once; further ones wait in the listen backlog.
pub const MAX_TCP_CONNECTIONS: usize = 64;

/// Queries answered on one TCP connection before it is closed.
pub const MAX_TCP_QUERIES: usize = 256;

/// How long a TCP connection may stay silent (before and within a query).
pub const TCP_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a TCP connection may last in all.
pub const TCP_CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Pause after an accept error caused by resource exhaustion (`EMFILE`...).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Answers UDP queries on `socket` until receiving fails, replying from the socket's own
/// address. Inside airlock's jail use [`serve_handed_udp`] instead, which replies from the
/// address each query was sent to.
pub async fn serve_udp(socket: UdpSocket, map: NameMap, audit: AuditLog) -> io::Result<()> {
    let mut buffer = vec![0_u8; MAX_UDP_QUERY_LEN];
    loop {
        let (len, peer) = match socket.recv_from(&mut buffer).await {
            Ok(received) => received,
            Err(error) if is_transient(&error) => continue,
            Err(error) => return Err(error),
        };
        let Some(reply) = respond(&buffer[..len], &map, &audit) else {
            continue;
        };
        // A lost reply is the client's to retry.
        let _ = socket.send_to(&reply, peer).await;
    }
}

/// Answers UDP queries on a socket handed over by `airlock-jail` (bound to the wildcard
/// address, with `IP_PKTINFO`/`IPV6_RECVPKTINFO` enabled) until receiving fails. Each reply
/// is sent from the address its query was sent to (`8.8.8.8` when the command asked
/// `8.8.8.8:53`), with [`airlock_jail::recv_datagram`] and
/// [`airlock_jail::send_datagram_from`]; otherwise the command's resolver would ignore it.
/// The socket is made non-blocking here. Datagrams over [`MAX_UDP_QUERY_LEN`] are dropped.
#[cfg(target_os = "linux")]
pub async fn serve_handed_udp(
    socket: std::net::UdpSocket,
    map: NameMap,
    audit: AuditLog,
) -> io::Result<()> {
    use tokio::io::Interest;

    socket.set_nonblocking(true)?;
    let socket = UdpSocket::from_std(socket)?;
    let mut buffer = vec![0_u8; MAX_UDP_QUERY_LEN];
    loop {
        let received = socket
            .async_io(Interest::READABLE, || {
                airlock_jail::recv_datagram(&socket, &mut buffer)
            })
            .await;
        let datagram = match received {
            Ok(datagram) => datagram,
            // `InvalidData`: an oversize datagram or one without a source; skip it.
            Err(error) if is_transient(&error) || error.kind() == io::ErrorKind::InvalidData => {
                continue;
            }
            Err(error) => return Err(error),
        };
        let Some(query) = buffer.get(..datagram.len) else {
            continue;
        };
        let Some(reply) = respond(query, &map, &audit) else {
            continue;
        };
        // A lost reply is the client's to retry.
        let _ = match datagram.original_destination {
            Some(from) => {
                socket
                    .async_io(Interest::WRITABLE, || {
                        airlock_jail::send_datagram_from(&socket, &reply, datagram.source, from)
                    })
                    .await
            }
            None => socket.send_to(&reply, datagram.source).await,
        };
    }
}

/// Answers DNS-over-TCP queries (RFC 1035 §4.2.2: each message preceded by its 2-byte
/// length) on connections accepted from `listener`, until accepting fails. Bounds: at most
/// [`MAX_TCP_CONNECTIONS`] at once, [`MAX_TCP_QUERIES`] queries of at most
/// [`MAX_TCP_QUERY_LEN`] bytes each per connection, [`TCP_IDLE_TIMEOUT`] of silence and
/// [`TCP_CONNECTION_LIFETIME`] in all. A query that gets no reply closes its connection.
/// Connections still open when the returned future is dropped are closed.
pub async fn serve_tcp(listener: TcpListener, map: NameMap, audit: AuditLog) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_TCP_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let slot = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(io::Error::other)?;
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) if is_transient(&error) => continue,
            Err(error) if is_exhaustion(&error) => {
                sleep(ACCEPT_BACKOFF).await;
                continue;
            }
            Err(error) => return Err(error),
        };
        let map = map.clone();
        let audit = audit.clone();
        connections.spawn(async move {
            // The connection ends on its first error, whichever it is.
            let _ = serve_connection(stream, &map, &audit).await;
            drop(slot);
        });
    }
}

/// One TCP connection: query, reply, until a bound is hit or the client stops.
async fn serve_connection(
    mut stream: TcpStream,
    map: &NameMap,
    audit: &AuditLog,
) -> io::Result<()> {
    let deadline = tokio::time::Instant::now() + TCP_CONNECTION_LIFETIME;
    let mut query = vec![0_u8; MAX_TCP_QUERY_LEN];
    for _ in 0..MAX_TCP_QUERIES {
        let mut prefix = [0_u8; 2];
        match bounded(deadline, stream.read_exact(&mut prefix)).await {
            Ok(_) => {}
            // The client is done.
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        }
        let len = usize::from(u16::from_be_bytes(prefix));
        let Some(query) = query.get_mut(..len) else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "query too long"));
        };
        bounded(deadline, stream.read_exact(query)).await?;
        let Some(reply) = respond(query, map, audit) else {
            return Ok(());
        };
        let reply_len = u16::try_from(reply.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "reply too long"))?;
        let mut framed = Vec::with_capacity(reply.len() + 2);
        framed.extend_from_slice(&reply_len.to_be_bytes());
        framed.extend_from_slice(&reply);
        bounded(deadline, stream.write_all(&framed)).await?;
    }
    Ok(())
}

/// Runs one I/O step within [`TCP_IDLE_TIMEOUT`] and before `deadline`.
async fn bounded<T>(
    deadline: tokio::time::Instant,
    step: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let expired = || io::Error::from(io::ErrorKind::TimedOut);
    timeout_at(deadline, timeout(TCP_IDLE_TIMEOUT, step))
        .await
        .map_err(|_| expired())?
        .map_err(|_| expired())?
}

/// The reply to `query`, after logging it; `None` (nothing sent, nothing logged) when the
/// query gets no reply or the audit log is unhealthy.
fn respond(query: &[u8], map: &NameMap, audit: &AuditLog) -> Option<Vec<u8>> {
    if !audit.healthy() {
        return None;
    }
    let (reply, info) = answer(query, map)?;
    audit.record(info.audit_event());
    Some(reply)
}

/// Errors that concern one datagram or one pending connection, not the socket.
fn is_transient(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Accept errors caused by a temporary lack of resources.
fn is_exhaustion(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
