//! The client's request body on its way upstream ([`UploadBody`]): counted for the audit
//! line, decoded when it has content codings (in steps taken from the inspection budget,
//! `crate::metered`), searched by the outbound guard and rewritten by a body swap, frame by
//! frame, never buffered whole.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use airlock_credentials::{BodySwap, GuardStream};
use airlock_encoding::Decoder;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use crate::budget::Budget;
use crate::metered::{Metered, Stopped};
use crate::record::{BodyReport, Trip};

/// The error an [`UploadBody`] ends with.
pub type UploadError = Box<dyn std::error::Error + Send + Sync>;

/// One poll of an [`UploadBody`].
type UploadPoll = Poll<Option<Result<Frame<Bytes>, UploadError>>>;

/// The client's request body on its way upstream; counts the bytes it relays. When the
/// outbound guard is on, every chunk is searched before any of it is released (a
/// [`GuardStream`] holds back the few bytes that could start a credential); when bodies
/// are swapped, surrogates become real values through a [`BodySwap`]. A refusal by
/// either ends the body with an error (the upstream request is abandoned, nothing of the
/// credential sent) and marks the [`BodyReport`] the caller turns into a refusal.
pub struct UploadBody {
    inner: Either<Incoming, Full<Bytes>>,
    sent: Arc<AtomicU64>,
    /// Undoes the body's content codings so that the guard and the swap see its content
    /// (the body is then forwarded decoded), in steps whose bytes and memory are taken
    /// from the inspection budget (docs/reliability.md, "Compressed bodies").
    decoding: Option<Box<Decoding>>,
    guard: Option<GuardStream>,
    swap: Option<BodySwap>,
    /// Frames ready to go, in order (a chunk released in two pieces, held bytes before
    /// trailers).
    queue: VecDeque<Frame<Bytes>>,
    /// The client's body has ended (its end is passed on once `queue` is empty).
    ended: bool,
    report: Arc<BodyReport>,
}

/// A request body being decoded.
struct Decoding {
    metered: Metered,
    /// The last step wrote nothing: the decoder needs more input.
    starved: bool,
    /// The client's body has ended: the trailers that ended it, if any, follow the rest
    /// of the decoded bytes.
    ended: Option<Option<Frame<Bytes>>>,
}

impl UploadBody {
    /// Wraps the client's streamed body, adding every relayed data byte to `sent`.
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
            decoding: None,
            guard: None,
            swap: None,
            queue: VecDeque::new(),
            ended: false,
            report: Arc::default(),
        }
    }

    /// Also decodes the body with `decoder` (its bytes and memory taken from `budget`),
    /// searches it with `guard` and rewrites it through `swap`; returns the report they
    /// fill.
    pub(crate) fn inspecting(
        mut self,
        (decoder, budget): (Option<Decoder>, &Budget),
        guard: Option<GuardStream>,
        swap: Option<BodySwap>,
    ) -> (Self, Arc<BodyReport>) {
        self.decoding = decoder.map(|decoder| {
            Box::new(Decoding {
                metered: Metered::new(decoder, budget.clone()),
                starved: true,
                ended: None,
            })
        });
        self.guard = guard;
        self.swap = swap;
        let report = self.report.clone();
        (self, report)
    }

    /// Takes one chunk of the client's body: to the decoder, or searched and rewritten.
    fn pass(&mut self, data: Bytes) -> Result<(), Trip> {
        match self.decoding.as_mut() {
            Some(decoding) => {
                decoding.metered.decoder().feed(&data);
                decoding.starved = false;
                Ok(())
            }
            None => self.inspect(data),
        }
    }

    /// The client's body has ended (with `trailers`, if any): the end passes once the
    /// decoder has written all it holds.
    fn end_input(&mut self, trailers: Option<Frame<Bytes>>) -> Result<(), Trip> {
        match self.decoding.as_mut() {
            Some(decoding) => {
                decoding.metered.decoder().end_input();
                decoding.starved = false;
                decoding.ended = Some(trailers);
                Ok(())
            }
            None => self.end_with(trailers),
        }
    }

    /// Runs the decoder one step when it can go on without more input: `None` when it
    /// needs input (the caller reads the client's body), or what to return at once.
    fn decode_step(&mut self, cx: &mut Context<'_>) -> Option<UploadPoll> {
        let decoding = self.decoding.as_mut()?;
        if decoding.metered.is_finished() {
            let trailers = decoding.ended.take().flatten();
            self.decoding = None;
            return self
                .end_with(trailers)
                .err()
                .map(|tripped| self.trip(tripped));
        }
        if decoding.starved {
            // Input ended and still nothing comes out: the coded stream is cut short.
            return decoding
                .ended
                .is_some()
                .then(|| self.trip(Trip::Undecodable));
        }
        let step = match decoding.metered.poll_step(cx) {
            Poll::Pending => return Some(Poll::Pending),
            Poll::Ready(Err(Stopped::Overloaded)) => return Some(self.trip(Trip::Overloaded)),
            Poll::Ready(Err(Stopped::Undecodable)) => return Some(self.trip(Trip::Undecodable)),
            Poll::Ready(Ok(step)) => step,
        };
        if step.is_empty() {
            decoding.starved = true;
            return None;
        }
        self.inspect(step).err().map(|tripped| self.trip(tripped))
    }

    /// Searches and rewrites one decoded chunk, queueing what may go.
    fn inspect(&mut self, data: Bytes) -> Result<(), Trip> {
        let (first, second) = match self.guard.as_mut() {
            Some(guard) => {
                let released = guard.push(data).map_err(Trip::Credential)?;
                (released.first, released.second)
            }
            None => (data, Bytes::new()),
        };
        let Some(swap) = self.swap.as_mut() else {
            self.queue_data(first);
            self.queue_data(second);
            return Ok(());
        };
        let mut out = swap.push(&first).map_err(|_| Trip::Surrogate)?;
        out.extend(swap.push(&second).map_err(|_| Trip::Surrogate)?);
        self.queue_data(Bytes::from(out));
        Ok(())
    }

    /// The outbound guard on the trailers that end the body, before anything held back
    /// is released: refused, the upstream never receives them.
    fn check_trailers(&mut self, frame: &Frame<Bytes>) -> Result<(), Trip> {
        match (self.guard.as_mut(), frame.trailers_ref()) {
            (Some(guard), Some(trailers)) => {
                guard.check_trailers(trailers).map_err(Trip::Credential)
            }
            _ => Ok(()),
        }
    }

    /// Ends the search: queues what was held back, then the `trailers` that ended the
    /// body, and records what was found.
    fn end_with(&mut self, trailers: Option<Frame<Bytes>>) -> Result<(), Trip> {
        self.end()?;
        self.ended = true;
        self.queue.extend(trailers);
        Ok(())
    }

    /// Ends the search: queues what was held back and records what was found.
    fn end(&mut self) -> Result<(), Trip> {
        let rest = match self.guard.take() {
            Some(mut guard) => {
                let rest = guard.finish().map_err(Trip::Credential)?;
                self.report.set_logged(guard.logged());
                rest
            }
            None => Bytes::new(),
        };
        let Some(mut swap) = self.swap.take() else {
            self.queue_data(rest);
            return Ok(());
        };
        let mut out = swap.push(&rest).map_err(|_| Trip::Surrogate)?;
        out.extend(swap.finish().map_err(|_| Trip::Surrogate)?);
        self.report.set_swapped(swap.swapped());
        self.queue_data(Bytes::from(out));
        Ok(())
    }

    fn queue_data(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.queue.push_back(Frame::data(data));
        }
    }

    fn trip(&mut self, tripped: Trip) -> UploadPoll {
        self.queue.clear();
        self.decoding = None;
        self.guard = None;
        self.swap = None;
        self.ended = true;
        let message = match tripped {
            Trip::Credential(_) => {
                "the request body carries a credential that may not go to this host"
            }
            Trip::Surrogate => "the request body carries a credential surrogate for another host",
            Trip::Undecodable => {
                "the request body's content coding cannot be undone within the bounds"
            }
            Trip::Overloaded => {
                "the decoded request body did not fit in limits.buffer_memory in time"
            }
        };
        self.report.trip(tripped);
        Poll::Ready(Some(Err(message.into())))
    }

    /// Takes one frame from the client's body into the queue; `Some` when there is
    /// something to return at once instead.
    fn take_frame(&mut self, cx: &mut Context<'_>) -> Option<UploadPoll> {
        let result = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Pending => return Some(Poll::Pending),
            Poll::Ready(Some(Err(e))) => return Some(Poll::Ready(Some(Err(e)))),
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => self.pass(data),
                // Trailers end the body: searched like headers, then what was held back
                // goes first (docs/security.md, "Outbound guard").
                Err(trailers) => self
                    .check_trailers(&trailers)
                    .and_then(|()| self.end_input(Some(trailers))),
            },
            Poll::Ready(None) => self.end_input(None),
        };
        result.err().map(|tripped| self.trip(tripped))
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
            if let Some(frame) = this.queue.pop_front() {
                if let Some(data) = frame.data_ref() {
                    this.sent.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            if let Some(answer) = this.decode_step(cx) {
                return answer;
            }
            if this
                .decoding
                .as_ref()
                .is_some_and(|d| d.ended.is_some() || !d.starved)
            {
                // Decoding goes on (the queue or the end has something now).
                continue;
            }
            if let Some(answer) = this.take_frame(cx) {
                return answer;
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.queue.is_empty()
            && (self.ended
                || (self.decoding.is_none()
                    && self.guard.is_none()
                    && self.swap.is_none()
                    && self.inner.is_end_stream()))
    }

    fn size_hint(&self) -> SizeHint {
        // The guard holds bytes back but never changes them; decoding and a swap may.
        match (&self.decoding, &self.swap) {
            (None, None) if !self.ended => self.inner.size_hint(),
            _ => SizeHint::default(),
        }
    }
}
