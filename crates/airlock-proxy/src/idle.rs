//! The idle timeout of client connections (`limits.idle_timeout`): an HTTP/1.1 keep-alive
//! connection or an HTTP/2 connection with no request in flight for that long is shut
//! down gracefully (HTTP/2: GOAWAY, then close). hyper's HTTP/2 server has no idle
//! timeout of its own, so every connection is run by [`serve`], which watches an
//! [`Activity`] that each request marks busy until its response body is done.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::{Service, service_fn};
use tokio::task::unconstrained;
use tokio::time::Instant;

use crate::body::ProxyBody;
use crate::context::{ConnContext, Shared, stopping};
use crate::joint::Joint;
use crate::leg::{Drive, LegSlot};

/// A boxed answer of [`service`].
pub(crate) type TrackedAnswer =
    Pin<Box<dyn Future<Output = Result<Response<Tracked<ProxyBody>>, Infallible>> + Send>>;

/// The HTTP service of a client connection (the proxy's [`crate::context::Shared::serve_http`]),
/// each request marked busy on `activity` until its response body is done.
pub(crate) fn service(
    context: Arc<ConnContext>,
    activity: Arc<Activity>,
) -> impl Service<
    Request<Incoming>,
    Response = Response<Tracked<ProxyBody>>,
    Error = Infallible,
    Future = TrackedAnswer,
> {
    let serve = context.shared.serve_http;
    service_fn(move |request| {
        let busy = activity.busy();
        let answer = serve(context.clone(), request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Tracked::new(body, busy)))
        }) as TrackedAnswer
    })
}

/// Requests in flight on one connection and when the last one ended.
#[derive(Debug)]
pub(crate) struct Activity {
    open: AtomicUsize,
    /// Requests started on the connection so far.
    started: AtomicU64,
    last: Mutex<Instant>,
}

/// One request in flight; ended when dropped (with its response body).
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Activity {
    /// A connection that has just started (idle from now).
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            open: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            last: Mutex::new(Instant::now()),
        })
    }

    /// Marks a request in flight until the returned guard is dropped.
    pub(crate) fn busy(self: &Arc<Self>) -> Busy {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.open.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// How many requests have started on the connection.
    pub(crate) fn started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Whether no request is in flight.
    pub(crate) fn idle(&self) -> bool {
        self.open.load(Ordering::SeqCst) == 0
    }

    /// When the connection will have been idle for `idle`, if nothing starts meanwhile
    /// (`None`: a request is in flight).
    fn idle_at(&self, idle: Duration) -> Option<Instant> {
        if self.open.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        Some(last + idle)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request marked busy until it is done or dropped.
pub(crate) struct Tracked<B> {
    inner: B,
    busy: Option<Busy>,
}

impl<B> Tracked<B> {
    /// `inner`, holding `busy` until it ends.
    pub(crate) fn new(inner: B, busy: Busy) -> Self {
        Tracked {
            inner,
            busy: Some(busy),
        }
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.busy = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Runs `connection` until it ends, with its upstream leg (`leg`, if any) driven on the
/// same task; once no request has been in flight on it for the idle timeout or the proxy
/// is stopping, `graceful` shuts it down and it is run to its end.
pub(crate) async fn serve<C>(
    mut connection: Pin<&mut C>,
    graceful: fn(Pin<&mut C>),
    activity: &Activity,
    shared: &Shared,
    leg: Option<&LegSlot>,
) -> C::Output
where
    C: Future,
{
    // Without a leg (h2 clients) the connection is polled directly: the joint's wakers
    // pay only where two parts hand work to each other (docs/benchmarks.md, "h2
    // instructions per request, before item 1 and now").
    let Some(leg) = leg else {
        if let Some(output) = until_idle(&mut connection, activity, shared).await {
            return output;
        }
        graceful(connection.as_mut());
        return connection.await;
    };
    // The leg's driver never ends; one poll hands requests and responses between the two.
    let mut joint = Joint::new(Drive::of(leg), connection);
    if let Some(output) = until_idle(&mut joint, activity, shared).await {
        return output;
    }
    graceful(joint.connection());
    joint.await
}

/// Polls `serving` until it ends (its output) or, first, until no request has been in
/// flight on the connection for the idle timeout or the proxy is stopping (`None`).
async fn until_idle<F>(serving: &mut F, activity: &Activity, shared: &Shared) -> Option<F::Output>
where
    F: Future + Unpin,
{
    let idle = shared.limits.idle_timeout;
    let mut shutdown = shared.shutdown.clone();
    loop {
        // Re-checked at least once per `idle` while requests are in flight.
        let wake = activity
            .idle_at(idle)
            .unwrap_or_else(|| Instant::now() + idle);
        tokio::select! {
            biased;
            output = &mut *serving => return Some(output),
            // Outside the task's budget, which the joint's rounds may have spent.
            () = unconstrained(stopping(&mut shutdown)) => return None,
            () = unconstrained(tokio::time::sleep_until(wake)) => {
                if activity.idle_at(idle).is_some_and(|at| at <= Instant::now()) {
                    tracing::debug!("closing a client connection idle for {idle:?}");
                    return None;
                }
            }
        }
    }
}

/// [`serve`] for an HTTP/1.1 client connection with its leg: once the connection ends,
/// its leg is offered as its destination's spare ([`crate::leg::Legs::park`]).
pub(crate) async fn serve_with_leg<C>(
    connection: Pin<&mut C>,
    graceful: fn(Pin<&mut C>),
    activity: &Activity,
    shared: &Shared,
    leg: Option<&LegSlot>,
) -> C::Output
where
    C: Future,
{
    let output = serve(connection, graceful, activity, shared, leg).await;
    if let Some(leg) = leg {
        shared.legs.park(leg);
    }
    output
}
