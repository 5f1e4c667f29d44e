//! The writer's acknowledgement of one line ([`crate::AuditLog::record_acked`]): an
//! [`Ack`] is a future that resolves once the writer has written the batch holding the
//! line (`Ok`), or could not (`Err`: the log is unavailable, the line is not in it).
//!
//! The writer resolves every acknowledgement of a batch after writing it, so that many
//! waiting requests cost one write (docs/benchmarks.md, "Audit acknowledgements"). An
//! acknowledgement the writer drops unresolved (it stopped) resolves as a failure: a
//! caller never takes a lost line for a written one.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// The audit line could not be written: the log is unavailable (docs/contract.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the audit log is unavailable: the line was not written")]
pub struct Unavailable;

#[derive(Default)]
struct State {
    /// `Some(true)`: written; `Some(false)`: not.
    result: Option<bool>,
    waker: Option<Waker>,
}

#[derive(Default)]
struct Slot(Mutex<State>);

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Resolves once the line is written (`Ok`) or cannot be (`Err`).
#[must_use = "an acknowledgement does nothing unless awaited"]
pub struct Ack(Inner);

enum Inner {
    /// Known at once (no log, or a line that could not even be queued).
    Ready(bool),
    Waiting(Arc<Slot>),
}

impl Ack {
    /// An acknowledgement already resolved: `written` or not.
    pub(crate) fn ready(written: bool) -> Self {
        Ack(Inner::Ready(written))
    }

    /// A pending acknowledgement and the writer's end of it.
    pub(crate) fn pending() -> (Self, Acker) {
        let slot = Arc::new(Slot::default());
        (Ack(Inner::Waiting(Arc::clone(&slot))), Acker(Some(slot)))
    }
}

impl std::fmt::Debug for Ack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ack")
    }
}

impl Future for Ack {
    type Output = Result<(), Unavailable>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let written = match &self.get_mut().0 {
            Inner::Ready(written) => *written,
            Inner::Waiting(slot) => {
                let mut state = slot.lock();
                match state.result {
                    Some(written) => written,
                    None => {
                        match &mut state.waker {
                            Some(waker) => waker.clone_from(cx.waker()),
                            None => state.waker = Some(cx.waker().clone()),
                        }
                        return Poll::Pending;
                    }
                }
            }
        };
        Poll::Ready(if written { Ok(()) } else { Err(Unavailable) })
    }
}

/// The writer's end of an [`Ack`]: resolved once; dropped unresolved, it resolves as not
/// written.
pub(crate) struct Acker(Option<Arc<Slot>>);

impl Acker {
    /// Resolves the acknowledgement and wakes its waiter.
    pub(crate) fn resolve(mut self, written: bool) {
        self.settle(written);
    }

    fn settle(&mut self, written: bool) {
        let Some(slot) = self.0.take() else {
            return;
        };
        let waker = {
            let mut state = slot.lock();
            state.result = Some(written);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Drop for Acker {
    fn drop(&mut self) {
        self.settle(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(ack: &mut Ack) -> Poll<Result<(), Unavailable>> {
        Pin::new(ack).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn an_ack_resolves_once_the_writer_says() {
        let (mut ack, acker) = Ack::pending();
        assert!(poll(&mut ack).is_pending());
        acker.resolve(true);
        assert_eq!(poll(&mut ack), Poll::Ready(Ok(())));
        let (mut ack, acker) = Ack::pending();
        acker.resolve(false);
        assert_eq!(poll(&mut ack), Poll::Ready(Err(Unavailable)));
    }

    #[test]
    fn an_ack_the_writer_drops_is_a_failure() {
        let (mut ack, acker) = Ack::pending();
        drop(acker);
        assert_eq!(poll(&mut ack), Poll::Ready(Err(Unavailable)));
        assert_eq!(poll(&mut Ack::ready(true)), Poll::Ready(Ok(())));
    }
}
