//! One poll for a client connection and its upstream leg (docs/benchmarks.md, "Wakes
//! inside the task"): [`Joint`] polls both on the client connection's task, each with a
//! waker of its own that, while the joint is polling, only records the wake, so that the
//! request handed to the leg and the response handed back are picked up in the same poll.
//!
//! Without it every such hand-off is a task waking itself while it runs, which tokio
//! treats as a yield: the task goes to the back of the run queue and a parked worker is
//! unparked to steal it (a `futex` and a context switch per hand-off). A wake from outside
//! the poll (the I/O driver, another task) still wakes the task. The rounds of one poll are
//! bounded by [`ROUNDS`]; past them the task yields as before, so a connection that keeps
//! waking itself cannot hold its worker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// How many times one poll of a [`Joint`] polls its parts again for wakes they gave each
/// other before yielding to the scheduler.
pub(crate) const ROUNDS: usize = 8;

/// The leg's bit in [`Hub::state`]: woken since last polled.
const LEG: u8 = 1;
/// The client connection's bit in [`Hub::state`]: woken since last polled.
const CONNECTION: u8 = 2;
/// Set in [`Hub::state`] while the joint polls its parts: a wake then is only recorded.
const POLLING: u8 = 4;

/// What the two wakers of a [`Joint`] share. One word holds the woken bits and
/// [`POLLING`], so that a wake and the end of a poll are ordered by the word alone: a
/// wake that finds [`POLLING`] set makes the poll's closing compare-exchange fail (and
/// the poll go round again); one that finds it clear wakes the task.
struct Hub {
    state: AtomicU8,
    /// The task's waker, for wakes from outside the poll.
    task: AtomicWaker,
}

impl Hub {
    /// Starts a round: sets [`POLLING`] and takes the woken bits.
    fn start_round(&self) -> u8 {
        self.state.swap(POLLING, Ordering::AcqRel) & !POLLING
    }

    /// Ends the poll if nothing was woken during the round (`true`); else [`POLLING`]
    /// stays set and the woken bits are left for the next round.
    fn try_end(&self) -> bool {
        self.state
            .compare_exchange(POLLING, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Ends the poll whatever was woken (the bits stay for the next poll).
    fn end(&self) -> u8 {
        self.state.fetch_and(!POLLING, Ordering::AcqRel) & !POLLING
    }
}

/// Clears [`POLLING`] if a part panics mid-round, and wakes the task for what the round
/// recorded, so that wakes after the panic are not only recorded.
struct Unwinding<'a>(&'a Hub);

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && self.0.end() != 0 {
            self.0.task.wake();
        }
    }
}

/// The waker of one part: records its bit, and wakes the task unless the joint is polling.
struct Part {
    hub: Arc<Hub>,
    bit: u8,
}

impl Wake for Part {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.hub.state.fetch_or(self.bit, Ordering::AcqRel) & POLLING == 0 {
            self.hub.task.wake();
        }
    }
}

/// A client connection and its leg's driver (a [`crate::leg::Drive`], which never ends),
/// polled together; ready with the connection's output. A part is polled only when its
/// own waker was woken (or, for the connection, after [`Joint::connection`]): whatever
/// changes a part from outside its poll must wake it, as `leg::DriveSlot` does.
pub(crate) struct Joint<'a, L, C> {
    parts: Parts<'a, L, C>,
    hub: Arc<Hub>,
}

/// The two parts of a [`Joint`] and their wakers.
struct Parts<'a, L, C> {
    leg: L,
    leg_done: bool,
    connection: Pin<&'a mut C>,
    leg_waker: Waker,
    connection_waker: Waker,
}

impl<'a, L, C> Joint<'a, L, C>
where
    L: Future<Output = ()> + Unpin,
    C: Future,
{
    /// Polls `connection` with `leg`, the leg first in every round (a response the leg
    /// has read is handed over before the connection is polled).
    pub(crate) fn new(leg: L, connection: Pin<&'a mut C>) -> Self {
        let hub = Arc::new(Hub {
            state: AtomicU8::new(LEG | CONNECTION),
            task: AtomicWaker::new(),
        });
        let part = |bit| {
            Waker::from(Arc::new(Part {
                hub: hub.clone(),
                bit,
            }))
        };
        let parts = Parts {
            leg_waker: part(LEG),
            connection_waker: part(CONNECTION),
            leg,
            leg_done: false,
            connection,
        };
        Joint { parts, hub }
    }

    /// The client connection (to start its graceful shutdown). The connection is polled
    /// again on the joint's next poll.
    pub(crate) fn connection(&mut self) -> Pin<&mut C> {
        self.hub.state.fetch_or(CONNECTION, Ordering::AcqRel);
        self.parts.connection.as_mut()
    }
}

impl<L, C> Parts<'_, L, C>
where
    L: Future<Output = ()> + Unpin,
    C: Future,
{
    /// Polls the parts woken since their last poll, once each.
    fn round(&mut self, woken: u8) -> Poll<C::Output> {
        if woken & LEG != 0 && !self.leg_done {
            let mut cx = Context::from_waker(&self.leg_waker);
            self.leg_done = Pin::new(&mut self.leg).poll(&mut cx).is_ready();
        }
        if woken & CONNECTION != 0 {
            let mut cx = Context::from_waker(&self.connection_waker);
            return self.connection.as_mut().poll(&mut cx);
        }
        Poll::Pending
    }
}

impl<L, C> Future for Joint<'_, L, C>
where
    L: Future<Output = ()> + Unpin,
    C: Future,
{
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let Joint { parts, hub } = self.get_mut();
        hub.task.register(cx.waker());
        let _unwinding = Unwinding(hub);
        for _ in 0..ROUNDS {
            let woken = hub.start_round();
            if let Poll::Ready(output) = parts.round(woken) {
                hub.end();
                return Poll::Ready(output);
            }
            if hub.try_end() {
                return Poll::Pending;
            }
        }
        // Still woken after every round: yield, and be polled again after other tasks.
        hub.end();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
