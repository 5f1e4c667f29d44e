//! Byte relaying between two streams (raw TCP, TLS passthrough, upgraded WebSockets):
//! both directions until either side closes or nothing moves for the idle timeout,
//! counting the bytes each way for the audit line. The counters and idle watchdog also
//! serve the WebSocket relay that checks messages.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes moved by a relay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relayed {
    /// From the client to the upstream.
    pub up: u64,
    /// From the upstream to the client.
    pub down: u64,
}

/// Relays `client` ⇄ `upstream` until either side closes, an error occurs, or no byte
/// moves for `idle`. Returns the bytes moved each way, whatever ended the relay.
pub async fn relay<C, U>(client: C, mut upstream: U, idle: Duration) -> Relayed
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let counters = Counters::default();
    let mut counted = counters.count(client);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut counted, &mut upstream) => {}
        () = counters.idle(idle) => {
            tracing::debug!("relay idle for {idle:?}: closing");
        }
    }
    counters.relayed()
}

/// The byte counters of one relayed connection, shared with its [`Counted`] client side.
#[derive(Default)]
pub(crate) struct Counters {
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

impl Counters {
    /// `client`, counting bytes read from it (up) and written to it (down).
    pub(crate) fn count<S>(&self, client: S) -> Counted<S> {
        Counted {
            inner: client,
            up: self.up.clone(),
            down: self.down.clone(),
        }
    }

    /// Completes once neither counter has changed for a whole `idle` period.
    pub(crate) async fn idle(&self, idle: Duration) {
        let mut last = (u64::MAX, u64::MAX);
        loop {
            let now = (
                self.up.load(Ordering::Relaxed),
                self.down.load(Ordering::Relaxed),
            );
            if now == last {
                return;
            }
            last = now;
            tokio::time::sleep(idle).await;
        }
    }

    /// The bytes counted so far.
    pub(crate) fn relayed(&self) -> Relayed {
        Relayed {
            up: self.up.load(Ordering::Relaxed),
            down: self.down.load(Ordering::Relaxed),
        }
    }
}

/// The client side of a relay, counting bytes read from it (up) and written to it (down).
pub(crate) struct Counted<S> {
    inner: S,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        this.up.fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            this.down.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn relays_both_ways_and_counts() {
        let (client, mut client_peer) = tokio::io::duplex(1024);
        let (upstream, mut upstream_peer) = tokio::io::duplex(1024);
        let task = tokio::spawn(relay(client, upstream, Duration::from_secs(5)));
        let mut buf = [0u8; 5];
        assert!(client_peer.write_all(b"hello").await.is_ok());
        assert!(upstream_peer.read_exact(&mut buf).await.is_ok());
        assert_eq!(&buf, b"hello");
        assert!(upstream_peer.write_all(b"hi").await.is_ok());
        let mut two = [0u8; 2];
        assert!(client_peer.read_exact(&mut two).await.is_ok());
        drop(client_peer);
        drop(upstream_peer);
        let relayed = tokio::time::timeout(Duration::from_secs(5), task).await;
        assert!(matches!(relayed, Ok(Ok(Relayed { up: 5, down: 2 }))));
    }

    #[tokio::test]
    async fn idle_relays_end() {
        let (client, _client_peer) = tokio::io::duplex(64);
        let (upstream, _upstream_peer) = tokio::io::duplex(64);
        let relayed = tokio::time::timeout(
            Duration::from_secs(5),
            relay(client, upstream, Duration::from_millis(50)),
        )
        .await;
        assert_eq!(relayed.ok(), Some(Relayed::default()));
    }
}
