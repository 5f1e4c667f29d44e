//! The body types of the data plane: [`ProxyBody`] is what the proxy answers with (a
//! refusal built in memory, or the upstream's streamed body whose end writes the audit
//! line), and [`UploadBody`] is the client's streamed request body on its way upstream,
//! counting bytes for the audit line. Neither buffers: frames pass as they come (a
//! response from a secret's host is scrubbed on the way, holding back at most the longest
//! encoded real value minus one byte between frames).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use airlock_credentials::{BodySwap, ScrubStream};
use airlock_mcp::SseFilter;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use crate::record::{BodyReport, Exchange};

/// A response body: in-memory, or streamed from upstream and audited when it ends.
pub struct ProxyBody {
    kind: Kind,
}

// Boxing the exchange would cost an allocation per request; a body is created once and
// not moved around in hot loops, so the larger variant is kept inline.
#[allow(clippy::large_enum_variant)]
enum Kind {
    Full(Option<Bytes>),
    Upstream {
        inner: Incoming,
        exchange: Option<Exchange>,
        scrub: Option<Transform>,
    },
}

/// How a streamed response body is rewritten on its way.
enum Transform {
    /// Real secret values become their surrogates.
    Scrub(ScrubStream),
    /// An MCP event stream is filtered (denied tools dropped), then optionally scrubbed.
    Events {
        filter: Box<SseFilter>,
        scrub: Option<ScrubStream>,
    },
}

impl Transform {
    /// The rewritten bytes, or `None` when the stream must end here (an MCP event that
    /// cannot be inspected is never passed on).
    fn push(&mut self, data: &[u8]) -> Option<Vec<u8>> {
        match self {
            Transform::Scrub(stream) => Some(stream.push(data)),
            Transform::Events { filter, scrub } => {
                let filtered = filter.push(data).ok()?;
                Some(match scrub {
                    Some(stream) => stream.push(&filtered),
                    None => filtered,
                })
            }
        }
    }

    fn finish(&mut self) -> Vec<u8> {
        match self {
            Transform::Scrub(stream) => stream.finish(),
            Transform::Events { filter, scrub } => {
                let rest = filter.finish();
                match scrub {
                    Some(stream) => {
                        let mut out = stream.push(&rest);
                        out.extend(stream.finish());
                        out
                    }
                    None => rest,
                }
            }
        }
    }
}

impl ProxyBody {
    /// A body held in memory (refusals, errors).
    pub fn full(bytes: Bytes) -> Self {
        ProxyBody {
            kind: Kind::Full(Some(bytes).filter(|b| !b.is_empty())),
        }
    }

    /// An empty body.
    pub fn empty() -> Self {
        ProxyBody {
            kind: Kind::Full(None),
        }
    }

    /// The upstream's body, streamed; `exchange` is completed (and audited) with the number
    /// of bytes relayed when the body ends, fails, or is dropped by the client.
    pub fn upstream(inner: Incoming, exchange: Exchange) -> Self {
        ProxyBody {
            kind: Kind::Upstream {
                inner,
                exchange: Some(exchange),
                scrub: None,
            },
        }
    }

    /// The upstream's body, streamed through `scrub` (real secret values become their
    /// surrogates), audited as [`ProxyBody::upstream`] is.
    pub fn scrubbed(inner: Incoming, exchange: Exchange, scrub: ScrubStream) -> Self {
        ProxyBody {
            kind: Kind::Upstream {
                inner,
                exchange: Some(exchange),
                scrub: Some(Transform::Scrub(scrub)),
            },
        }
    }

    /// An MCP server's event stream, filtered through `filter` (and `scrub` when the host
    /// is a secret's), audited as [`ProxyBody::upstream`] is. An event the filter refuses
    /// ends the stream there.
    pub fn event_stream(
        inner: Incoming,
        exchange: Exchange,
        filter: SseFilter,
        scrub: Option<ScrubStream>,
    ) -> Self {
        ProxyBody {
            kind: Kind::Upstream {
                inner,
                exchange: Some(exchange),
                scrub: Some(Transform::Events {
                    filter: Box::new(filter),
                    scrub,
                }),
            },
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Upstream {
                inner,
                exchange,
                scrub,
            } => loop {
                let polled = Pin::new(&mut *inner).poll_frame(cx);
                let polled = match (polled, scrub.as_mut()) {
                    (Poll::Ready(Some(Ok(frame))), Some(stream)) => match frame.into_data() {
                        Ok(data) => {
                            let Some(clean) = stream.push(&data) else {
                                // Dropping the upstream body and the exchange writes the
                                // audit line; the client sees the stream end.
                                this.kind = Kind::Full(None);
                                return Poll::Ready(None);
                            };
                            if clean.is_empty() {
                                continue;
                            }
                            Poll::Ready(Some(Ok(Frame::data(Bytes::from(clean)))))
                        }
                        Err(frame) => Poll::Ready(Some(Ok(frame))),
                    },
                    (Poll::Ready(None), Some(stream)) => {
                        let rest = stream.finish();
                        *scrub = None;
                        if rest.is_empty() {
                            Poll::Ready(None)
                        } else {
                            // The end is seen again on the next poll.
                            Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))))
                        }
                    }
                    (polled, _) => polled,
                };
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let (Some(data), Some(exchange)) = (frame.data_ref(), exchange.as_mut())
                        {
                            exchange.add_bytes_down(data.len() as u64);
                        }
                    }
                    Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                        // Dropping completes the exchange and writes its audit line.
                        exchange.take();
                    }
                    Poll::Pending => {}
                }
                return polled;
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Upstream { inner, scrub, .. } => scrub.is_none() && inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Upstream {
                inner, scrub: None, ..
            } => inner.size_hint(),
            Kind::Upstream { .. } => SizeHint::default(),
        }
    }
}

/// The error an [`UploadBody`] ends with.
pub type UploadError = Box<dyn std::error::Error + Send + Sync>;

/// The client's request body on its way upstream; counts the bytes it relays and, when
/// bodies are scanned, swaps surrogates through a [`BodySwap`]. An out-of-scope surrogate
/// ends the body with an error (the upstream request is abandoned, nothing of the
/// surrogate sent) and marks the [`BodyReport`] the caller turns into a refusal.
pub struct UploadBody {
    inner: Either<Incoming, Full<Bytes>>,
    sent: Arc<AtomicU64>,
    swap: Option<BodySwap>,
    report: Arc<BodyReport>,
}

impl UploadBody {
    /// Wraps `inner`, adding every relayed data byte to `sent`.
    pub fn new(inner: Incoming, sent: Arc<AtomicU64>) -> Self {
        Self::from_source(Either::Left(inner), sent)
    }

    /// A body already read into memory (an inspected MCP request), counted as
    /// [`UploadBody::new`] counts.
    pub fn buffered(bytes: Bytes, sent: Arc<AtomicU64>) -> Self {
        Self::from_source(Either::Right(Full::new(bytes)), sent)
    }

    fn from_source(inner: Either<Incoming, Full<Bytes>>, sent: Arc<AtomicU64>) -> Self {
        UploadBody {
            inner,
            sent,
            swap: None,
            report: Arc::default(),
        }
    }

    /// Also rewrites the body through `swap`; returns the report it fills.
    pub fn swapping(mut self, swap: BodySwap) -> (Self, Arc<BodyReport>) {
        self.swap = Some(swap);
        let report = self.report.clone();
        (self, report)
    }

    fn finished(&self, swap: &BodySwap) {
        self.report.set_swapped(swap.swapped());
    }

    fn trip(&self) -> Poll<Option<Result<Frame<Bytes>, UploadError>>> {
        self.report.trip();
        Poll::Ready(Some(Err(
            "the request body carries a credential surrogate for another host".into(),
        )))
    }
}

impl Body for UploadBody {
    type Data = Bytes;
    type Error = UploadError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UploadError>>> {
        let this = self.get_mut();
        loop {
            let polled = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match (frame.into_data(), this.swap.as_mut()) {
                    (Ok(data), Some(swap)) => match swap.push(&data) {
                        Ok(clean) if clean.is_empty() => continue,
                        Ok(clean) => Frame::data(Bytes::from(clean)),
                        Err(_) => return this.trip(),
                    },
                    (Ok(data), None) => Frame::data(data),
                    (Err(frame), _) => frame,
                },
                Poll::Ready(None) => {
                    let Some(mut swap) = this.swap.take() else {
                        return Poll::Ready(None);
                    };
                    let rest = swap.finish();
                    this.finished(&swap);
                    match rest {
                        Err(_) => return this.trip(),
                        Ok(rest) if rest.is_empty() => return Poll::Ready(None),
                        Ok(rest) => Frame::data(Bytes::from(rest)),
                    }
                }
            };
            if let Some(data) = polled.data_ref() {
                this.sent.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            return Poll::Ready(Some(Ok(polled)));
        }
    }

    fn is_end_stream(&self) -> bool {
        self.swap.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.swap {
            None => self.inner.size_hint(),
            Some(_) => SizeHint::default(),
        }
    }
}

/// Whether `headers` declare a content coding other than identity (the body then cannot
/// be scanned or scrubbed).
pub(crate) fn is_encoded(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|encoding| !encoding.as_bytes().eq_ignore_ascii_case(b"identity"))
}
