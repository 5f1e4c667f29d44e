//! The upstream leg of an HTTP/1.1 client connection (docs/benchmarks.md, "The exchange on
//! the client's task"): an HTTP/1.1 upstream connection made with hyper's connection-level client
//! over the stream [`Upstream`] dials for the pool (resolver, pins, address guard, TLS
//! offering http/1.1: one code path), owned by the client connection and driven by
//! [`Drive`] on the client connection's own task, so that a request and its response wake
//! no other task.
//!
//! This module owns the legs: [`LegSlot`] (one per HTTP/1.1 client connection: its one
//! destination's leg), [`Legs`] (proxy-wide: how many legs are open per destination, at
//! most [`LEGS_PER_DESTINATION`], and the spares: an idle leg whose client connection
//! ended, kept by a keeper task for [`SPARE_IDLE`] so that the next client connection to
//! that destination reuses it; at most [`SPARES`] in the whole proxy). A request the leg
//! cannot take (another destination, the bound reached, the leg busy) returns to the
//! caller for the pool.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::uri::{Authority, Scheme};
use http::{HeaderValue, Request, Response, Uri, header};
use hyper::body::Incoming;
use hyper::client::conn::http1;

use crate::body::UploadBody;
use crate::upstream::Upstream;

/// How many legs may be open to one destination at once; past that, client connections
/// share the pool's connection (one h2 connection batches many clients' frames).
pub(crate) const LEGS_PER_DESTINATION: usize = 4;
/// How many spare legs the whole proxy keeps (each an idle upstream connection); per
/// destination the spares are also bounded by [`LEGS_PER_DESTINATION`], as every spare is
/// an open leg. Past it an ended client connection's leg is closed.
pub(crate) const SPARES: usize = 64;
/// How long a spare leg is kept for the next client connection to its destination (the
/// pool's idle timeout).
pub(crate) const SPARE_IDLE: Duration = Duration::from_secs(60);

/// An error of a request sent through a leg.
pub(crate) type LegError = Box<dyn StdError + Send + Sync>;

/// Where a leg goes: scheme and authority of the request's absolute URI.
type Key = (Scheme, Authority);

/// A leg's connection future, polled by a [`Drive`].
type Driving = Pin<Box<dyn Future<Output = ()> + Send>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The connection future a [`Drive`] polls, and the task to wake when it is set or taken.
#[derive(Default)]
struct DriveSlot {
    state: Mutex<DriveState>,
}

#[derive(Default)]
struct DriveState {
    conn: Option<Driving>,
    waker: Option<Waker>,
}

impl DriveSlot {
    /// Puts `conn` in the slot (empty: checked by the caller) and wakes its driver.
    fn set(&self, conn: Driving) {
        let waker = {
            let mut state = lock(&self.state);
            state.conn = Some(conn);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Takes the connection out of the slot (its driver ends, or waits for another).
    fn take(&self) -> Option<Driving> {
        let (conn, waker) = {
            let mut state = lock(&self.state);
            (state.conn.take(), state.waker.take())
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        conn
    }

    fn is_empty(&self) -> bool {
        lock(&self.state).conn.is_none()
    }
}

/// Polls the connection in a slot on the task that polls it: a client connection's (never
/// ends), or a spare's keeper (ends once the connection is taken or over).
pub(crate) struct Drive {
    slot: Arc<DriveSlot>,
    ends_empty: bool,
}

impl Drive {
    /// The driver of a client connection's leg.
    pub(crate) fn of(leg: &LegSlot) -> Drive {
        Drive {
            slot: leg.drive.clone(),
            ends_empty: false,
        }
    }
}

impl Future for Drive {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.slot.state);
        if let Some(conn) = state.conn.as_mut()
            && conn.as_mut().poll(cx).is_ready()
        {
            state.conn = None;
        }
        if state.conn.is_none() && self.ends_empty {
            return Poll::Ready(());
        }
        if !state
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            state.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// A leg's sender and where it goes.
struct Held {
    key: Key,
    sender: http1::SendRequest<UploadBody>,
}

/// The leg of one HTTP/1.1 client connection, when it has one.
#[derive(Default)]
pub(crate) struct LegSlot {
    held: Mutex<Option<Held>>,
    drive: Arc<DriveSlot>,
}

/// A spare leg: its sender and the slot its keeper drives.
struct Spare {
    sender: http1::SendRequest<UploadBody>,
    drive: Arc<DriveSlot>,
}

/// The legs of the whole proxy: how many are open per destination, and the spares.
#[derive(Default)]
pub(crate) struct Legs {
    open: Mutex<HashMap<Key, usize>>,
    spares: Mutex<Spares>,
}

/// The spare legs, per destination, and how many in all.
#[derive(Default)]
struct Spares {
    by_key: HashMap<Key, Vec<Spare>>,
    count: usize,
}

impl Spares {
    /// Removes and returns the newest spare to `key`.
    fn pop(&mut self, key: &Key) -> Option<Spare> {
        let list = self.by_key.get_mut(key)?;
        let spare = list.pop();
        if list.is_empty() {
            self.by_key.remove(key);
        }
        self.count -= usize::from(spare.is_some());
        spare
    }

    /// Removes the spare driven through `drive`, if it is still kept.
    fn remove(&mut self, key: &Key, drive: &Arc<DriveSlot>) {
        let Some(list) = self.by_key.get_mut(key) else {
            return;
        };
        let before = list.len();
        list.retain(|spare| !Arc::ptr_eq(&spare.drive, drive));
        self.count -= before - list.len();
        if list.is_empty() {
            self.by_key.remove(key);
        }
    }
}

/// One open leg counted under its destination, until dropped with its connection.
struct Counted {
    legs: Arc<Legs>,
    key: Key,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = lock(&self.legs.open);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

impl Legs {
    /// Counts a new leg to `key`, unless [`LEGS_PER_DESTINATION`] are open.
    fn count(self: &Arc<Self>, key: &Key) -> Option<Counted> {
        let mut open = lock(&self.open);
        let count = open.entry(key.clone()).or_insert(0);
        if *count >= LEGS_PER_DESTINATION {
            return None;
        }
        *count += 1;
        Some(Counted {
            legs: self.clone(),
            key: key.clone(),
        })
    }

    /// A spare leg to `key`, with its connection taken from its keeper (a spare found
    /// closed is dropped and the next one tried). A spare still finishing its last
    /// exchange is taken too: until it is ready, [`send`] hands requests to the pool.
    fn take_spare(&self, key: &Key) -> Option<(http1::SendRequest<UploadBody>, Driving)> {
        loop {
            let spare = lock(&self.spares).pop(key)?;
            if let Some(conn) = spare.drive.take()
                && !spare.sender.is_closed()
            {
                return Some((spare.sender, conn));
            }
        }
    }

    /// When a client connection ends: its leg, unless closed, becomes a spare of its
    /// destination (one still reading the end of its last response, as when the client
    /// closed as soon as it had the whole body, is ready moments later) (unless [`SPARES`] are kept), driven by a keeper task for up to
    /// [`SPARE_IDLE`].
    pub(crate) fn park(self: &Arc<Self>, leg: &LegSlot) {
        let Some(held) = lock(&leg.held).take() else {
            return;
        };
        let conn = leg.drive.take();
        let (Some(conn), false) = (conn, held.sender.is_closed()) else {
            return;
        };
        let drive = Arc::new(DriveSlot::default());
        {
            let mut spares = lock(&self.spares);
            if spares.count >= SPARES {
                return;
            }
            drive.set(conn);
            let spare = Spare {
                sender: held.sender,
                drive: drive.clone(),
            };
            spares
                .by_key
                .entry(held.key.clone())
                .or_default()
                .push(spare);
            spares.count += 1;
        }
        let legs = self.clone();
        tokio::spawn(async move {
            let keeping = Drive {
                slot: drive.clone(),
                ends_empty: true,
            };
            let _ = tokio::time::timeout(SPARE_IDLE, keeping).await;
            drop(drive.take());
            lock(&legs.spares).remove(&held.key, &drive);
        });
    }
}

/// Sends `request` (absolute URI, no `Host`) through the client connection's leg `leg`,
/// opening or taking one if it has none. `Err(request)`, unchanged, when the leg cannot
/// take it: the pool sends it.
pub(crate) async fn send(
    leg: &LegSlot,
    legs: &Arc<Legs>,
    upstream: &Arc<Upstream>,
    request: Request<UploadBody>,
) -> Result<Result<Response<Incoming>, LegError>, Request<UploadBody>> {
    let uri = request.uri();
    let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
        return Err(request);
    };
    let key = (scheme.clone(), authority.clone());
    let mut sender = match ready_sender(leg, legs, &key) {
        Ready::Sender(sender) => sender,
        Ready::Pool => return Err(request),
        Ready::Open(counted) => {
            match Box::pin(open(upstream, request.uri().clone(), counted)).await {
                Ok((sender, conn)) => {
                    leg.drive.set(conn);
                    sender
                }
                Err(error) => return Ok(Err(error)),
            }
        }
    };
    let absolute = request.uri().clone();
    let sending = sender.try_send_request(http1_form(request, &absolute));
    *lock(&leg.held) = Some(Held { key, sender });
    match sending.await {
        Ok(response) => Ok(Ok(response)),
        Err(mut error) => match error.take_message() {
            // Never written: the pool sends it (as the pool retries such a request).
            Some(mut request) => {
                *request.uri_mut() = absolute;
                Err(request)
            }
            None => Ok(Err(error.into_error().into())),
        },
    }
}

/// What [`send`] goes on with.
enum Ready {
    /// The leg's sender, ready for a request.
    Sender(http1::SendRequest<UploadBody>),
    /// A new leg may be opened, counted.
    Open(Counted),
    /// The pool sends this one.
    Pool,
}

/// The connection's leg to `key` if it is ready, else a spare to `key`, else a new leg
/// if the bound allows.
fn ready_sender(leg: &LegSlot, legs: &Arc<Legs>, key: &Key) -> Ready {
    let mut held = lock(&leg.held);
    match held.take() {
        Some(current) if current.key == *key && current.sender.is_ready() => {
            return Ready::Sender(current.sender);
        }
        // Another destination's leg, or this one busy: kept, and the pool sends this.
        Some(current) if current.key != *key || !current.sender.is_closed() => {
            *held = Some(current);
            return Ready::Pool;
        }
        // None, or closed: dropped.
        _ => {}
    }
    drop(held);
    if !leg.drive.is_empty() {
        // The old leg's connection is still ending.
        return Ready::Pool;
    }
    if let Some((sender, conn)) = legs.take_spare(key) {
        leg.drive.set(conn);
        return Ready::Sender(sender);
    }
    legs.count(key).map_or(Ready::Pool, Ready::Open)
}

/// Dials `uri`'s destination as the pool does (HTTP/1.1 only) and handshakes: the sender
/// and the connection future, which holds `counted` until it ends.
async fn open(
    upstream: &Arc<Upstream>,
    uri: Uri,
    counted: Counted,
) -> Result<(http1::SendRequest<UploadBody>, Driving), LegError> {
    let io = upstream.dial_http1(uri).await?;
    let (sender, conn) = http1::Builder::new().handshake(io).await?;
    let driving = Box::pin(async move {
        let _counted = counted;
        if let Err(e) = conn.await {
            tracing::debug!("upstream leg: {e}");
        }
    });
    Ok((sender, driving))
}

/// `request` as HTTP/1.1 sends it: origin-form, with the `Host` the URI names (its port
/// only when not the scheme's default), as the pool's client does.
fn http1_form(mut request: Request<UploadBody>, uri: &Uri) -> Request<UploadBody> {
    if let Some(host) = uri.host() {
        let default = if uri.scheme() == Some(&Scheme::HTTPS) {
            443
        } else {
            80
        };
        let value = match uri.port_u16() {
            Some(port) if port != default => HeaderValue::from_str(&format!("{host}:{port}")),
            _ => HeaderValue::from_str(host),
        };
        if let Ok(value) = value {
            request.headers_mut().entry(header::HOST).or_insert(value);
        }
    }
    let origin = match uri.path_and_query() {
        Some(path) if path.as_str() != "/" => Uri::from(path.clone()),
        _ => Uri::from_static("/"),
    };
    *request.uri_mut() = origin;
    request
}
