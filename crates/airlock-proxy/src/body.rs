//! The body types of the data plane: [`ProxyBody`] is what the proxy answers with (a
//! refusal built in memory, or the upstream's streamed body whose end writes the audit
//! line), and [`UploadBody`] (module `upload`) is the client's streamed request body on
//! its way upstream, counting bytes for the audit line. Neither buffers: frames pass as
//! they come (a compressed request body is decoded in steps whose bytes and decoder
//! memory are taken from the inspection budget, `crate::metered`; a response from a
//! secret's host is scrubbed on the way, holding back at most the longest encoded real
//! value minus one byte between frames; trailers that end such a body follow the bytes
//! held back and are scrubbed too).

mod upload;

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use airlock_audit::Ack;
use airlock_credentials::{Released, ScrubStream, Scrubber};
use airlock_encoding::Decoder;
use airlock_mcp::SseFilter;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::record::Exchange;
use crate::scrub::scrub_headers;

pub use self::upload::{UploadBody, UploadError};

/// A response body: in-memory, or streamed from upstream and audited when it ends.
pub struct ProxyBody {
    kind: Kind,
}

// The streamed state (with its exchange, 456 bytes) is boxed: one allocation per
// response costs less than moving it with every `Response` hyper and the request path
// move (docs/benchmarks.md, "The h2 CPU per request").
enum Kind {
    Full(Option<Bytes>),
    Upstream(Box<Streamed<Incoming>>),
}

/// The upstream's body (`Incoming`; another body in unit tests) on its way to the client.
struct Streamed<B> {
    inner: B,
    /// Completed (and audited) when the body ends, fails or is dropped.
    exchange: Option<Exchange>,
    /// The rewriting still under way (`None` once it has ended).
    transform: Option<Transform>,
    /// Frames ready to go before anything more is read: what the transform held back,
    /// then the trailers that ended the body.
    queued: VecDeque<Frame<Bytes>>,
    /// The end held until the exchange's line is written: the writer's acknowledgement and
    /// the last frame (the one completing a declared length, or the trailers; `None`: the
    /// end itself) (docs/reliability.md, "The audit log's disk").
    ending: Option<(Ack, Option<Frame<Bytes>>)>,
    /// The length the client was told (`Content-Length`), when the body keeps it.
    declared: Option<u64>,
    /// Data bytes passed on so far.
    relayed: u64,
}

/// One poll of a [`ProxyBody`].
type BodyPoll = Poll<Option<Result<Frame<Bytes>, BodyError>>>;

/// How a streamed response body is rewritten on its way.
enum Transform {
    /// Real secret values become their surrogates (after the body's content codings are
    /// undone, when it has any).
    Scrub(Option<Box<Decoder>>, ScrubStream),
    /// An MCP event stream is filtered (denied tools dropped), then optionally scrubbed.
    Events {
        filter: Box<SseFilter>,
        scrub: Option<ScrubStream>,
    },
}

/// Why a transformed body stops early.
enum Stop {
    /// It ends cleanly here (an MCP event that cannot be inspected is never passed on).
    End,
    /// It is aborted: the client sees a failed transfer (a coded body that does not
    /// decode), never a short body that looks whole.
    Abort,
}

impl Transform {
    /// The rewritten bytes, or why the stream stops here.
    fn push(&mut self, data: Bytes) -> Result<Released, Stop> {
        let rewritten = match self {
            // The bulk case (a download from a secret's host): no copy where nothing is
            // replaced.
            Transform::Scrub(None, stream) => return Ok(stream.push_bytes(data)),
            Transform::Scrub(Some(decoder), stream) => {
                stream.push(&decoder.push(&data).map_err(|_| Stop::Abort)?)
            }
            Transform::Events { filter, scrub } => {
                let filtered = filter.push(&data).map_err(|_| Stop::End)?;
                match scrub {
                    Some(stream) => stream.push(&filtered),
                    None => filtered,
                }
            }
        };
        Ok(Released {
            first: Bytes::from(rewritten),
            second: Bytes::new(),
        })
    }

    /// The scrubber applied after any filtering, if the host is a secret's.
    fn scrubber(&self) -> Option<&Scrubber> {
        match self {
            Transform::Scrub(_, stream) => Some(stream.scrubber()),
            Transform::Events { scrub, .. } => scrub.as_ref().map(ScrubStream::scrubber),
        }
    }

    /// The end of the body: what was held back, or why it cannot end cleanly (a coded
    /// stream that does not decode to its end).
    fn finish(&mut self) -> Result<Vec<u8>, Stop> {
        Ok(match self {
            Transform::Scrub(None, stream) => stream.finish(),
            Transform::Scrub(Some(decoder), stream) => {
                let mut out = stream.push(&decoder.finish().map_err(|_| Stop::Abort)?);
                out.extend(stream.finish());
                out
            }
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
        })
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
            kind: Kind::Upstream(Box::new(Streamed::new(inner, Some(exchange), None))),
        }
    }

    /// The upstream's body, decoded by `decoder` when it has content codings and
    /// streamed through `scrub` (real secret values become their surrogates), audited as
    /// [`ProxyBody::upstream`] is. A body that stops decoding ends there.
    pub fn scrubbed(
        inner: Incoming,
        exchange: Exchange,
        decoder: Option<Decoder>,
        scrub: ScrubStream,
    ) -> Self {
        ProxyBody {
            kind: Kind::Upstream(Box::new(Streamed::new(
                inner,
                Some(exchange),
                Some(Transform::Scrub(decoder.map(Box::new), scrub)),
            ))),
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
            kind: Kind::Upstream(Box::new(Streamed::new(
                inner,
                Some(exchange),
                Some(Transform::Events {
                    filter: Box::new(filter),
                    scrub,
                }),
            ))),
        }
    }
}

impl ProxyBody {
    /// Whether this is an upstream's streamed body (an allowed answer) rather than one
    /// built in memory.
    pub(crate) fn is_upstream(&self) -> bool {
        matches!(self.kind, Kind::Upstream(_))
    }

    /// The exchange of an upstream body, taken out (its line is then the caller's to
    /// write): always when `all`, otherwise only when the client will not wait for the
    /// body's end, so that its line must be written before the head goes
    /// (the forward step's audit gate).
    pub(crate) fn take_exchange(&mut self, all: bool) -> Option<Exchange> {
        let Kind::Upstream(streamed) = &mut self.kind else {
            return None;
        };
        if all || streamed.ends_at_head() {
            streamed.exchange.take()
        } else {
            None
        }
    }
}

/// The error a [`ProxyBody`] ends with: the upstream's, or airlock's own abort.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// How a stopped transform ends the body.
fn stopped(stop: Stop) -> BodyPoll {
    match stop {
        Stop::End => Poll::Ready(None),
        Stop::Abort => Poll::Ready(Some(Err(
            "the upstream's coded body does not decode; the transfer is aborted".into(),
        ))),
    }
}

impl<B> Streamed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BodyError>,
{
    fn new(inner: B, exchange: Option<Exchange>, transform: Option<Transform>) -> Self {
        // A transform keeps the upstream's length only when it scrubs without decoding
        // and its scrubber preserves lengths (the `Content-Length` then stays).
        let keeps_length = match &transform {
            None => true,
            Some(Transform::Scrub(None, stream)) => stream.scrubber().preserves_length(),
            Some(_) => false,
        };
        Streamed {
            declared: inner.size_hint().exact().filter(|_| keeps_length),
            inner,
            exchange,
            transform,
            queued: VecDeque::new(),
            ending: None,
            relayed: 0,
        }
    }

    /// [`Streamed::poll_next`] with the end held back until the exchange's line is
    /// written: the frame that completes a declared length, the trailers or the end
    /// itself wait for the writer's acknowledgement, and a line that cannot be written
    /// aborts the transfer, so that no client has the whole answer without its line.
    fn poll_audited(&mut self, cx: &mut Context<'_>) -> Result<BodyPoll, Stop> {
        if let Some((ack, _)) = &mut self.ending {
            let Poll::Ready(written) = Pin::new(ack).poll(cx) else {
                return Ok(Poll::Pending);
            };
            let held = self.ending.take().and_then(|(_, held)| held);
            return Ok(Poll::Ready(match written {
                Ok(()) => held.map(Ok),
                Err(unavailable) => Some(Err(unavailable.into())),
            }));
        }
        let polled = match self.poll_next(cx) {
            // An event stream ends cleanly here: its end is held as any other.
            Err(Stop::End) if self.exchange.is_some() => Poll::Ready(None),
            other => other?,
        };
        self.record(&polled);
        let ends = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(frame))) => {
                frame.is_trailers() || self.declared.is_some_and(|n| self.relayed >= n)
            }
            _ => false,
        };
        if !ends {
            return Ok(polled);
        }
        let Some(exchange) = self.exchange.take() else {
            return Ok(polled);
        };
        let held = match polled {
            Poll::Ready(Some(Ok(frame))) => Some(frame),
            _ => None,
        };
        self.ending = Some((exchange.finish(), held));
        self.poll_audited(cx)
    }

    /// The next frame for the client, or why the transform stops the body.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Result<BodyPoll, Stop> {
        loop {
            if let Some(frame) = self.queued.pop_front() {
                return Ok(Poll::Ready(Some(Ok(frame))));
            }
            let polled = Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into);
            let Some(transform) = self.transform.as_mut() else {
                return Ok(polled);
            };
            match polled {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let clean = transform.push(data)?;
                        self.queue_bytes(clean.first);
                        self.queue_bytes(clean.second);
                    }
                    Err(trailers) => self.end_transform(Some(trailers))?,
                },
                // The end is seen again on the next poll, once the queue is empty.
                Poll::Ready(None) => self.end_transform(None)?,
                other => return Ok(other),
            }
        }
    }

    /// Ends the transform: what it held back is queued first, then the `trailers` that
    /// ended the body (their values scrubbed when the host is a secret's).
    fn end_transform(&mut self, trailers: Option<Frame<Bytes>>) -> Result<(), Stop> {
        let Some(mut transform) = self.transform.take() else {
            return Ok(());
        };
        let rest = transform.finish()?;
        self.queue_data(rest);
        if let Some(frame) = trailers {
            let frame = match (frame.into_trailers(), transform.scrubber()) {
                (Ok(mut trailers), Some(scrubber)) => {
                    scrub_headers(scrubber, &mut trailers);
                    Frame::trailers(trailers)
                }
                (Ok(trailers), None) => Frame::trailers(trailers),
                (Err(other), _) => other,
            };
            self.queued.push_back(frame);
        }
        Ok(())
    }

    fn queue_data(&mut self, data: Vec<u8>) {
        self.queue_bytes(Bytes::from(data));
    }

    fn queue_bytes(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.queued.push_back(Frame::data(data));
        }
    }

    /// Counts the bytes of a frame on its way; on a failure drops the exchange, which
    /// writes its audit line (the end is [`Streamed::poll_audited`]'s).
    fn record(&mut self, polled: &BodyPoll) {
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.relayed += data.len() as u64;
                    if let Some(exchange) = self.exchange.as_mut() {
                        exchange.add_bytes_down(data.len() as u64);
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => {
                self.exchange.take();
            }
            Poll::Ready(None) | Poll::Pending => {}
        }
    }

    /// Whether nothing is left to send: never while the exchange's line is still to be
    /// written, so that the end is polled for (and held until it is).
    fn is_end_stream(&self) -> bool {
        self.exchange.is_none()
            && self.ending.is_none()
            && self.transform.is_none()
            && self.queued.is_empty()
            && self.inner.is_end_stream()
    }

    /// Whether the client will not wait for this body's end: it is already over, or the
    /// answer has no body (`HEAD`, 204, 304).
    fn ends_at_head(&self) -> bool {
        self.exchange.as_ref().is_some_and(Exchange::bodiless)
            || (self.transform.is_none() && self.queued.is_empty() && self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if self.transform.is_none() && self.queued.is_empty() {
            self.inner.size_hint()
        } else {
            SizeHint::default()
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> BodyPoll {
        let this = self.get_mut();
        match &mut this.kind {
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::Upstream(streamed) => match streamed.poll_audited(cx) {
                Ok(polled) => polled,
                Err(stop) => {
                    // Dropping the upstream body and the exchange writes the audit line.
                    this.kind = Kind::Full(None);
                    stopped(stop)
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(bytes) => bytes.is_none(),
            Kind::Upstream(streamed) => streamed.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Upstream(streamed) => streamed.size_hint(),
        }
    }
}

/// Whether `headers` declare a content coding other than identity in any of their
/// `Content-Encoding` values (the body then cannot be scanned or scrubbed as it is):
/// `identity` on one line and `gzip` on the next is a gzip body.
pub(crate) fn is_encoded(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|encoding| !encoding.as_bytes().eq_ignore_ascii_case(b"identity"))
}

/// The decoder for a body that must be inspected (`inspected`) and has a
/// `Content-Encoding`: its codings are undone on the way and the body forwarded decoded, so
/// the header and `Content-Length` go. `Err` for a coding airlock cannot undo (the caller's
/// `body_uninspectable` or 502). Shared by streamed bodies, bodies read whole and responses
/// from a secret's host (docs/policy.md, "Compressed bodies").
pub(crate) fn content_decoder(
    headers: &mut http::HeaderMap,
    inspected: bool,
    limits: airlock_encoding::Limits,
) -> Result<Option<Decoder>, ()> {
    if !inspected || !is_encoded(headers) {
        return Ok(None);
    }
    let values = headers.get_all(http::header::CONTENT_ENCODING);
    let codings = airlock_encoding::codings(values.iter().map(http::HeaderValue::as_bytes))
        .map_err(|_| ())?;
    if codings.is_empty() {
        return Ok(None);
    }
    let decoder = Decoder::new(&codings, limits).map_err(|_| ())?;
    headers.remove(http::header::CONTENT_ENCODING);
    headers.remove(http::header::CONTENT_LENGTH);
    Ok(Some(decoder))
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_credentials::Credentials;
    use airlock_policy::model::{Secret, SecretSource};
    use http::header::CONTENT_ENCODING;
    use http::{HeaderMap, HeaderValue};
    use http_body_util::{Full, StreamBody};
    use std::convert::Infallible;
    use std::vec::IntoIter;

    const REAL: &str = "sk-unit-REAL-0123456789abcdef";
    const SURROGATE: &str = "surrogate-unit-0123456789abcd";

    fn scrubber() -> Scrubber {
        let secret = Secret {
            surrogate: Some(SURROGATE.to_owned()),
            ..Secret::new("KEY", SecretSource::Env("KEY".to_owned()))
        };
        Credentials::new(vec![(secret, REAL.to_owned())])
            .expect("credentials")
            .scrubber()
    }

    /// Every frame `streamed` gives until its end (the test bodies are always ready).
    fn drain<B>(mut streamed: Streamed<B>) -> Vec<Frame<Bytes>>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<BodyError>,
    {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut frames = Vec::new();
        loop {
            match streamed.poll_next(&mut cx) {
                Ok(Poll::Ready(Some(Ok(frame)))) => frames.push(frame),
                Ok(Poll::Ready(None)) => return frames,
                _ => panic!("the test body failed or stalled"),
            }
        }
    }

    #[test]
    fn held_bytes_go_before_the_trailers_which_are_scrubbed() {
        let mut trailers = HeaderMap::new();
        let echoed = HeaderValue::from_str(&format!("Bearer {REAL}")).unwrap();
        trailers.insert("x-echo", echoed);
        let (head, tail) = REAL.split_at(10);
        let frames = [
            Frame::data(Bytes::from(format!("the value is {head}"))),
            Frame::data(Bytes::from(format!("{tail}."))),
            Frame::trailers(trailers),
        ];
        let body = StreamBody::new(futures_util::stream::iter(
            frames.into_iter().map(Ok::<_, Infallible>),
        ));
        let transform = Transform::Scrub(None, scrubber().stream());
        let out = drain(Streamed::new(body, None, Some(transform)));
        let (last, data) = out.split_last().expect("frames");
        let text: Vec<u8> = data
            .iter()
            .flat_map(|frame| frame.data_ref().expect("data before trailers").to_vec())
            .collect();
        assert_eq!(text, format!("the value is {SURROGATE}.").as_bytes());
        let trailers = last.trailers_ref().expect("the trailers come last");
        assert_eq!(trailers["x-echo"], format!("Bearer {SURROGATE}").as_str());
    }

    #[test]
    fn trailers_of_an_unscrubbed_body_pass_as_they_are() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let frames = [Frame::data(Bytes::from("x")), Frame::trailers(trailers)];
        let body = StreamBody::new(futures_util::stream::iter(
            frames.into_iter().map(Ok::<_, Infallible>),
        ));
        let out = drain(Streamed::new(body, None, None));
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].trailers_ref().expect("trailers")["grpc-status"], "0");
    }

    #[test]
    fn every_content_encoding_line_counts() {
        let mut headers = http::HeaderMap::new();
        assert!(!is_encoded(&headers));
        headers.append(CONTENT_ENCODING, HeaderValue::from_static("identity"));
        assert!(!is_encoded(&headers));
        headers.append(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert!(is_encoded(&headers), "a coding on the second line");
        let mut listed = http::HeaderMap::new();
        listed.insert(CONTENT_ENCODING, HeaderValue::from_static("identity, br"));
        assert!(is_encoded(&listed));
    }

    /// A body of `chunks`, each a data frame (no length known).
    fn chunked(chunks: &[&[u8]]) -> StreamBody<futures_util::stream::Iter<IntoIter<FrameResult>>> {
        let frames: Vec<FrameResult> = chunks
            .iter()
            .map(|chunk| Ok(Frame::data(Bytes::copy_from_slice(chunk))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    type FrameResult = Result<Frame<Bytes>, Infallible>;

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn gzip_decoder() -> Decoder {
        let codings = [airlock_encoding::Coding::Gzip];
        Decoder::new(&codings, airlock_encoding::Limits::default()).unwrap()
    }

    fn text_of(frames: &[Frame<Bytes>]) -> Vec<u8> {
        frames
            .iter()
            .flat_map(|frame| frame.data_ref().expect("data").to_vec())
            .collect()
    }

    #[test]
    fn a_coded_body_is_decoded_then_scrubbed_across_frames() {
        let coded = gzip(format!("a {REAL} b {REAL}").as_bytes());
        let (first, rest) = coded.split_at(coded.len() / 3);
        let body = chunked(&[first, rest]);
        let transform = Transform::Scrub(Some(Box::new(gzip_decoder())), scrubber().stream());
        let streamed = Streamed::new(body, None, Some(transform));
        assert_eq!(
            streamed.declared, None,
            "a decoded body has no declared length"
        );
        let out = drain(streamed);
        assert_eq!(
            text_of(&out),
            format!("a {SURROGATE} b {SURROGATE}").as_bytes()
        );
    }

    #[test]
    fn a_coded_body_that_does_not_decode_is_aborted_not_cut_short() {
        let coded = gzip(b"the whole answer");
        let cut = &coded[..coded.len() - 6];
        let transform = Transform::Scrub(Some(Box::new(gzip_decoder())), scrubber().stream());
        let mut streamed = Streamed::new(chunked(&[cut]), None, Some(transform));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut polls = 0;
        let stop = loop {
            polls += 1;
            assert!(polls < 16, "the body never stopped");
            match streamed.poll_next(&mut cx) {
                Ok(Poll::Ready(Some(Ok(_)))) => {}
                Ok(other) => panic!("the body ended without its abort: {:?}", other.is_ready()),
                Err(stop) => break stop,
            }
        };
        assert!(matches!(stop, Stop::Abort));
        let Poll::Ready(Some(Err(error))) = stopped(stop) else {
            panic!("an abort is an error for the client");
        };
        assert!(error.to_string().contains("does not decode"));
        assert!(matches!(stopped(Stop::End), Poll::Ready(None)));
    }

    #[test]
    fn only_a_length_keeping_scrub_keeps_the_declared_length() {
        let sized = || Full::new(Bytes::from_static(b"twelve bytes"));
        let plain = Streamed::new(sized(), None, None);
        assert_eq!(plain.declared, Some(12));
        let kept = Streamed::new(
            sized(),
            None,
            Some(Transform::Scrub(None, scrubber().stream())),
        );
        assert_eq!(kept.declared, Some(12), "same-length surrogates");
        let secret = Secret {
            surrogate: Some("short".to_owned()),
            ..Secret::new("KEY", SecretSource::Env("KEY".to_owned()))
        };
        let shorter = Credentials::new(vec![(secret, REAL.to_owned())])
            .unwrap()
            .scrubber();
        let changed = Streamed::new(
            sized(),
            None,
            Some(Transform::Scrub(None, shorter.stream())),
        );
        assert_eq!(changed.declared, None);
        assert_eq!(changed.size_hint().exact(), None, "no length is promised");
    }

    #[test]
    fn a_real_value_split_over_many_frames_is_still_scrubbed() {
        let text = format!("[{REAL}]");
        let bytes: Vec<&[u8]> = text.as_bytes().chunks(1).collect();
        let transform = Transform::Scrub(None, scrubber().stream());
        let out = drain(Streamed::new(chunked(&bytes), None, Some(transform)));
        assert_eq!(text_of(&out), format!("[{SURROGATE}]").as_bytes());
    }

    #[test]
    fn a_body_built_in_memory_is_one_frame_then_its_end() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut body = ProxyBody::full(Bytes::from_static(b"403"));
        assert!(!body.is_upstream());
        assert_eq!(body.size_hint().exact(), Some(3));
        let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) else {
            panic!("one frame");
        };
        assert_eq!(frame.into_data().unwrap(), "403");
        assert!(body.is_end_stream());
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(None)
        ));
        let mut empty = ProxyBody::full(Bytes::new());
        assert!(empty.is_end_stream(), "an empty body is over at once");
        assert!(empty.take_exchange(true).is_none());
    }
}
