//! The recent bytes of an HTTP/1 client connection, kept for the one smuggling check hyper
//! cannot make for us: a request that carries both `Content-Length` and
//! `Transfer-Encoding`. hyper follows RFC 9112 §6.1 and treats such a request as chunked,
//! drops the `Content-Length` and closes the connection afterwards, which is safe but
//! leaves no trace of the conflict in the parsed request. docs/contract.md §4 promises a
//! 400, so the connection's reads pass through a [`HeadTap`] that keeps the last
//! [`RECENT_BYTES`] read, and a request that arrives with `Transfer-Encoding` has its own
//! head re-read from them (with `httparse`, the parser hyper uses) to see whether it also
//! declared a length.
//!
//! The bytes are kept in a ring, so each read costs one copy of what was read and nothing
//! more; the re-read happens only for requests with `Transfer-Encoding`, which agents
//! rarely send.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http::{Method, Uri};
use tokio::io::{AsyncRead, ReadBuf};

use crate::write_through::write_through;

/// How many of the most recent bytes a connection keeps: the largest request head the
/// proxy accepts (`Limits::max_header_bytes` default) fits.
pub(crate) const RECENT_BYTES: usize = 64 * 1024;

/// The most header fields re-read from a head.
const MAX_FIELDS: usize = 256;

/// A handle on one connection's recent bytes.
#[derive(Clone, Default)]
pub(crate) struct HeadTap {
    recent: Arc<Mutex<VecDeque<u8>>>,
}

impl HeadTap {
    /// `stream`, with every byte read from it also kept by this tap.
    pub(crate) fn wrap<S>(&self, stream: S) -> Tapped<S> {
        Tapped {
            inner: stream,
            tap: self.clone(),
        }
    }

    fn keep(&self, data: &[u8]) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let data = &data[data.len().saturating_sub(RECENT_BYTES)..];
        let overflow = (recent.len() + data.len()).saturating_sub(RECENT_BYTES);
        recent.drain(..overflow);
        recent.extend(data);
    }

    /// Whether the head of the request `method uri` that was just parsed also declared a
    /// `Content-Length`. Looks for the first complete head with that request line in the
    /// recent bytes and forgets everything up to its end, so the next request on the
    /// connection is looked for after it.
    pub(crate) fn declared_length(&self, method: &Method, uri: &Uri) -> bool {
        let mut guard = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let recent = guard.make_contiguous();
        let target = uri.to_string();
        let path_and_query = uri.path_and_query().map(|p| p.as_str());
        let mut start = 0;
        while start < recent.len() {
            let line_start = start == 0 || recent[start - 1] == b'\n';
            if line_start && recent[start..].starts_with(method.as_str().as_bytes()) {
                let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
                let mut head = httparse::Request::new(&mut fields);
                if let Ok(httparse::Status::Complete(end)) = head.parse(&recent[start..])
                    && head.method == Some(method.as_str())
                    && head
                        .path
                        .is_some_and(|p| p == target || Some(p) == path_and_query)
                {
                    let declared = head
                        .headers
                        .iter()
                        .any(|h| h.name.eq_ignore_ascii_case("content-length"));
                    guard.drain(..start + end);
                    return declared;
                }
            }
            start += 1;
        }
        false
    }
}

/// A stream whose reads are kept by a [`HeadTap`].
pub(crate) struct Tapped<S> {
    inner: S,
    tap: HeadTap,
}

impl<S> Tapped<S> {
    /// The stream itself, no longer tapped (after CONNECT the tunnel is not HTTP/1).
    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tapped<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            this.tap.keep(&buf.filled()[before..]);
        }
        result
    }
}

write_through!(Tapped, inner);

#[cfg(test)]
mod tests {
    use super::*;

    fn tap_with(bytes: &[u8]) -> HeadTap {
        let tap = HeadTap::default();
        tap.keep(bytes);
        tap
    }

    #[test]
    fn finds_a_length_next_to_chunked() {
        let tap = tap_with(
            b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        );
        assert!(tap.declared_length(&Method::POST, &Uri::from_static("/x")));
    }

    #[test]
    fn plain_chunked_has_no_length() {
        let tap = tap_with(b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(!tap.declared_length(&Method::POST, &Uri::from_static("/x")));
    }

    #[test]
    fn each_request_is_read_after_the_previous_one() {
        let tap = tap_with(
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        let uri = Uri::from_static("/x");
        assert!(!tap.declared_length(&Method::POST, &uri));
        assert!(tap.declared_length(&Method::POST, &uri));
    }

    #[test]
    fn absolute_form_targets_are_found() {
        let tap = tap_with(
            b"PUT http://h.test/u HTTP/1.1\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        assert!(tap.declared_length(&Method::PUT, &Uri::from_static("http://h.test/u")));
    }

    #[test]
    fn keeps_only_the_most_recent_bytes() {
        let tap = HeadTap::default();
        tap.keep(&vec![b'a'; RECENT_BYTES]);
        tap.keep(b"tail");
        let recent = tap.recent.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(recent.len(), RECENT_BYTES);
        assert!(recent.iter().rev().take(4).eq(b"liat".iter()));
    }
}
