//! A byte stream with some already-read bytes put back in front: after CONNECT the first
//! bytes are read to tell TLS, HTTP and other protocols apart, and the chosen handler must
//! still see them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, ReadBuf};

use crate::write_through::write_through;

/// `inner`, reading `prefix` first.
pub struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    /// A stream that yields `prefix` and then what `inner` yields.
    pub fn new(prefix: Bytes, inner: S) -> Self {
        Rewind { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

write_through!(Rewind, inner);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn prefix_comes_first() {
        let mut stream = Rewind::new(Bytes::from_static(b"hello "), &b"world"[..]);
        let mut out = String::new();
        let read = stream.read_to_string(&mut out).await;
        assert!(read.is_ok());
        assert_eq!(out, "hello world");
    }
}
