use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{Joint, ROUNDS};

/// A task waker that counts its wakes.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Wake for Counting {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn task() -> (Arc<Counting>, Waker) {
    let counting = Arc::new(Counting::default());
    (counting.clone(), Waker::from(counting))
}

fn poll<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

type Leg = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A runtime with two workers, so that wakes come from other threads.
fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn a_hand_off_inside_the_poll_does_not_wake_the_task() {
    let (to_leg, from_connection) = oneshot::channel::<u32>();
    let (to_connection, from_leg) = oneshot::channel::<u32>();
    let leg: Leg = Box::pin(async move {
        let request = from_connection.await.unwrap();
        to_connection.send(request + 1).unwrap();
    });
    let connection = async move {
        to_leg.send(41).unwrap();
        from_leg.await.unwrap()
    };
    tokio::pin!(connection);
    let mut joint = Joint::new(leg, connection);
    let (wakes, waker) = task();
    // Request to the leg and response back, both within the one poll.
    assert_eq!(poll(&mut joint, &waker), Poll::Ready(42));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
}

#[test]
fn a_wake_from_outside_the_poll_wakes_the_task() {
    let (sender, receiver) = oneshot::channel::<&str>();
    let leg: Leg = Box::pin(std::future::pending());
    let connection = async move { receiver.await.unwrap() };
    tokio::pin!(connection);
    let mut joint = Joint::new(leg, connection);
    let (wakes, waker) = task();
    assert_eq!(poll(&mut joint, &waker), Poll::Pending);
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    std::thread::spawn(move || sender.send("answer").unwrap())
        .join()
        .unwrap();
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(poll(&mut joint, &waker), Poll::Ready("answer"));
}

#[test]
fn a_connection_that_keeps_waking_itself_yields_after_the_rounds() {
    let polls = AtomicUsize::new(0);
    let connection = std::future::poll_fn(|cx| {
        polls.fetch_add(1, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::<()>::Pending
    });
    tokio::pin!(connection);
    let leg: Leg = Box::pin(std::future::pending());
    let mut joint = Joint::new(leg, connection);
    let (wakes, waker) = task();
    assert_eq!(poll(&mut joint, &waker), Poll::Pending);
    assert_eq!(polls.load(Ordering::SeqCst), ROUNDS);
    // Yielded: the task is woken once, to be polled after the others.
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1);
    assert_eq!(poll(&mut joint, &waker), Poll::Pending);
    assert_eq!(polls.load(Ordering::SeqCst), 2 * ROUNDS);
}

#[test]
fn an_ended_leg_is_not_polled_again() {
    let kept = Arc::new(std::sync::Mutex::new(None::<Waker>));
    let polls = Arc::new(AtomicUsize::new(0));
    let leg = {
        let (kept, polls) = (kept.clone(), polls.clone());
        std::future::poll_fn(move |cx| {
            assert_eq!(
                polls.fetch_add(1, Ordering::SeqCst),
                0,
                "polled after its end"
            );
            *kept.lock().unwrap() = Some(cx.waker().clone());
            Poll::Ready(())
        })
    };
    let (sender, receiver) = oneshot::channel::<()>();
    let connection = async move { receiver.await.unwrap() };
    tokio::pin!(connection);
    let mut joint = Joint::new(Box::pin(leg), connection);
    let (_, waker) = task();
    assert_eq!(poll(&mut joint, &waker), Poll::Pending);
    kept.lock().unwrap().take().unwrap().wake();
    sender.send(()).unwrap();
    assert_eq!(poll(&mut joint, &waker), Poll::Ready(()));
    assert_eq!(polls.load(Ordering::SeqCst), 1);
}

/// Pending until told to stop, and registers no waker: only a poll finds it stopped.
struct Stoppable {
    stopped: bool,
}

impl Future for Stoppable {
    type Output = &'static str;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<&'static str> {
        if self.stopped {
            Poll::Ready("stopped")
        } else {
            Poll::Pending
        }
    }
}

#[test]
fn the_connection_is_polled_after_it_is_handed_out() {
    let mut connection = Stoppable { stopped: false };
    let leg: Leg = Box::pin(std::future::pending());
    let mut joint = Joint::new(leg, Pin::new(&mut connection));
    let (_, waker) = task();
    assert_eq!(poll(&mut joint, &waker), Poll::Pending);
    assert_eq!(poll(&mut joint, &waker), Poll::Pending);
    joint.connection().stopped = true;
    assert_eq!(poll(&mut joint, &waker), Poll::Ready("stopped"));
}

/// Wakes from other threads racing the poll on a runtime with two workers: every message
/// arrives, none is left waiting for a wake that was only recorded.
#[test]
fn no_wake_is_lost_to_other_threads() {
    const MESSAGES: u32 = 20_000;
    let runtime = two_workers();
    let (to_leg, mut leg_inbox) = mpsc::unbounded_channel::<u32>();
    let (to_connection, mut connection_inbox) = mpsc::unbounded_channel::<u32>();
    let (leg_done, leg_total) = oneshot::channel::<u64>();
    let leg: Leg = Box::pin(async move {
        let mut total = 0u64;
        for _ in 0..MESSAGES {
            total += u64::from(leg_inbox.recv().await.unwrap());
        }
        let _ = leg_done.send(total);
    });
    let feeders = [to_leg, to_connection].map(|sender| {
        std::thread::spawn(move || {
            for n in 0..MESSAGES {
                sender.send(n).unwrap();
                if n % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        })
    });
    let served = runtime.spawn(async move {
        let connection = async move {
            let mut total = 0u64;
            for _ in 0..MESSAGES {
                total += u64::from(connection_inbox.recv().await.unwrap());
            }
            // The leg's end reaches the connection through the joint too.
            (total, leg_total.await.unwrap())
        };
        tokio::pin!(connection);
        Joint::new(leg, connection).await
    });
    let totals = runtime.block_on(async move {
        tokio::time::timeout(Duration::from_secs(20), served)
            .await
            .expect("a wake was lost: the joint never finished")
            .unwrap()
    });
    for feeder in feeders {
        feeder.join().unwrap();
    }
    let expected = u64::from(MESSAGES) * u64::from(MESSAGES - 1) / 2;
    assert_eq!(totals, (expected, expected));
}

#[test]
fn a_wake_from_another_thread_during_the_poll_is_taken_in_it() {
    let kept = Arc::new(Mutex::new(None::<Waker>));
    let leg_polls = Arc::new(AtomicUsize::new(0));
    let leg = {
        let (kept, leg_polls) = (kept.clone(), leg_polls.clone());
        std::future::poll_fn(move |cx| {
            leg_polls.fetch_add(1, Ordering::SeqCst);
            *kept.lock().unwrap() = Some(cx.waker().clone());
            Poll::<()>::Pending
        })
    };
    let connection = std::future::poll_fn(|_| {
        // The leg is woken by another thread while the joint is polling.
        if let Some(waker) = kept.lock().unwrap().take() {
            std::thread::spawn(move || waker.wake()).join().unwrap();
        }
        Poll::<()>::Pending
    });
    tokio::pin!(connection);
    let mut joint = Joint::new(Box::pin(leg), connection);
    let (wakes, waker) = task();
    assert_eq!(poll(&mut joint, &waker), Poll::Pending);
    assert_eq!(
        leg_polls.load(Ordering::SeqCst),
        2,
        "polled again in the same poll"
    );
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
}

#[test]
fn a_wake_goes_to_the_latest_task_waker() {
    let (sender, receiver) = oneshot::channel::<()>();
    let leg: Leg = Box::pin(std::future::pending());
    let connection = async move { receiver.await.unwrap() };
    tokio::pin!(connection);
    let mut joint = Joint::new(leg, connection);
    let ((first, first_waker), (second, second_waker)) = (task(), task());
    assert_eq!(poll(&mut joint, &first_waker), Poll::Pending);
    assert_eq!(poll(&mut joint, &second_waker), Poll::Pending);
    sender.send(()).unwrap();
    assert_eq!(first.0.load(Ordering::SeqCst), 0);
    assert_eq!(second.0.load(Ordering::SeqCst), 1);
}

#[test]
fn wakes_after_a_part_panicked_still_wake_the_task() {
    let (sender, receiver) = oneshot::channel::<()>();
    let leg: Leg = Box::pin(async move { receiver.await.unwrap() });
    let connection = std::future::poll_fn(|_| -> Poll<()> { panic!("a part's panic") });
    tokio::pin!(connection);
    let mut joint = Joint::new(leg, connection);
    let (wakes, waker) = task();
    let polled = catch_unwind(AssertUnwindSafe(|| poll(&mut joint, &waker)));
    assert!(polled.is_err());
    sender.send(()).unwrap();
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        1,
        "the wake was only recorded"
    );
}

/// One message in flight at a time between the connection and another thread, so that
/// no later wake can make up for a lost one: a lost wake stops the exchange.
#[test]
fn one_message_at_a_time_never_stalls() {
    const ROUND_TRIPS: usize = 5_000;
    let runtime = two_workers();
    let (to_echo, echo_inbox) = std::sync::mpsc::channel::<usize>();
    let (to_connection, mut connection_inbox) = mpsc::unbounded_channel::<usize>();
    let echo = std::thread::spawn(move || {
        while let Ok(n) = echo_inbox.recv() {
            if to_connection.send(n).is_err() {
                break;
            }
        }
    });
    let served = runtime.spawn(async move {
        let connection = async move {
            for n in 0..ROUND_TRIPS {
                to_echo.send(n).unwrap();
                assert_eq!(connection_inbox.recv().await, Some(n));
            }
            ROUND_TRIPS
        };
        tokio::pin!(connection);
        let leg: Leg = Box::pin(std::future::pending());
        Joint::new(leg, connection).await
    });
    let done = runtime.block_on(async move {
        tokio::time::timeout(Duration::from_secs(20), served)
            .await
            .expect("a wake was lost: the exchange stalled")
            .unwrap()
    });
    assert_eq!(done, ROUND_TRIPS);
    echo.join().unwrap();
}
