//! The deadline of a request head on an HTTP/1 client connection (`limits.body_timeout`,
//! docs/reliability.md): from the first byte of a head to its request reaching the
//! service. A head not complete by then is answered **408** `request_timeout` and the
//! connection is closed.
//!
//! hyper has a header timer of its own, but it closes without an answer and it also runs
//! while a keep-alive connection waits for its next request, which made an idle
//! connection close after `body_timeout` instead of `idle_timeout`. This clock starts only
//! when a head has begun: a read brings bytes while no request is in flight on the
//! connection (its [`Activity`]). It stops when a request starts (the activity's count of
//! started requests moves). Waiting between requests is left to the idle timeout
//! ([`crate::idle`]).
//!
//! The answer is written straight to the connection by the read side: while a head is
//! being read hyper has nothing of its own to write.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

use crate::idle::Activity;
use crate::write_through::write_through;

/// What a client whose head ran out of time reads before the connection closes (the
/// body of docs/contract.md §4).
const ANSWER: &[u8] = b"HTTP/1.1 408 Request Timeout\r\n\
content-type: application/json\r\n\
content-length: 100\r\n\
connection: close\r\n\
\r\n\
{\"error\":\"request_timeout\",\"message\":\"the request head was not complete within limits.body_timeout\"}";

/// A client connection's stream with the head deadline.
pub(crate) struct HeadClock<S> {
    inner: S,
    activity: Arc<Activity>,
    timeout: Duration,
    state: State,
}

enum State {
    /// No head begun (or a request in flight).
    Waiting,
    /// A head has begun; `started` is the activity's request count then.
    Head {
        started: u64,
        deadline: Pin<Box<Sleep>>,
    },
    /// The deadline passed: `written` bytes of [`ANSWER`] are out.
    Answering { written: usize },
    /// The answer is out (or could not be written): reads end.
    Closed,
}

impl<S> HeadClock<S> {
    /// `inner`, whose heads must be complete within `timeout` of their first byte.
    pub(crate) fn new(inner: S, activity: Arc<Activity>, timeout: Duration) -> Self {
        HeadClock {
            inner,
            activity,
            timeout,
            state: State::Waiting,
        }
    }

    /// The stream itself, without the clock (after CONNECT the tunnel is not HTTP/1).
    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> HeadClock<S> {
    /// Writes what is left of the answer, then shuts the write side.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while let State::Answering { written } = &mut self.state {
            if *written == ANSWER.len() {
                let _ = ready!(Pin::new(&mut self.inner).poll_shutdown(cx));
                self.state = State::Closed;
                break;
            }
            match ready!(Pin::new(&mut self.inner).poll_write(cx, &ANSWER[*written..])) {
                Ok(n) if n > 0 => *written += n,
                _ => self.state = State::Closed,
            }
        }
        Poll::Ready(())
    }

    /// Moves the clock on after a read: stops it once a request started, starts it on a
    /// head's first bytes, and turns an expired clock into the answer, but only when the
    /// read found nothing (bytes that just arrived may complete the head).
    fn tick(&mut self, cx: &mut Context<'_>, got_bytes: bool, waiting: bool) {
        let started = self.activity.started();
        if matches!(&self.state, State::Head { started: then, .. } if *then != started) {
            self.state = State::Waiting;
        }
        if matches!(self.state, State::Waiting) && got_bytes && self.activity.idle() {
            self.state = State::Head {
                started,
                deadline: Box::pin(tokio::time::sleep(self.timeout)),
            };
        }
        if let State::Head { deadline, .. } = &mut self.state
            && waiting
            // Polled on every read that waits, so that the deadline wakes the connection.
            && deadline.as_mut().poll(cx).is_ready()
        {
            self.state = State::Answering { written: 0 };
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeadClock<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.state, State::Answering { .. } | State::Closed) {
            ready!(this.poll_answer(cx));
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let got_bytes = matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        this.tick(cx, got_bytes, polled.is_pending());
        if matches!(this.state, State::Answering { .. }) && polled.is_pending() {
            ready!(this.poll_answer(cx));
            return Poll::Ready(Ok(()));
        }
        polled
    }
}

write_through!(HeadClock, inner);

#[cfg(test)]
mod tests;
