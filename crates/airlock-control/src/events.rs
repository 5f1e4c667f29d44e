//! The fan-out of audit lines: the audit writer thread hands every written (already
//! redacted) line to [`Hub::observe`], which counts it into the [`Metrics`], keeps refusals
//! in a bounded ring for `GET /v1/denials`, keeps the last lines of every kind (and the
//! ask events) in a second bounded ring, the backlog `GET /v1/events?backlog=N` starts
//! with (docs/watch.md), and broadcasts it to `GET /v1/events` subscribers. Nothing here
//! blocks: a subscriber that falls behind loses lines (counted), never slows the writer.
//!
//! The backlog is bounded by lines ([`Hub::backlog_capacity`], `AIRLOCK_EVENTS_BACKLOG`,
//! default [`DEFAULT_BACKLOG`]) and by bytes ([`BACKLOG_BYTES`]). A line enters the ring
//! and the broadcast under one lock, and a subscriber copies the ring and subscribes under
//! the same lock, so that it sees every line once: in the backlog or live, never both.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;

use crate::metrics::Metrics;
use crate::summary::Summary;

/// How many recent refusals `GET /v1/denials` can return.
pub const DENIALS_CAPACITY: usize = 1024;

/// How many lines a subscriber may fall behind before it loses some.
pub const SUBSCRIBER_BACKLOG: usize = 4096;

/// How many recent events the backlog keeps by default.
pub const DEFAULT_BACKLOG: usize = 1000;
/// The most events `AIRLOCK_EVENTS_BACKLOG` may ask the backlog to keep.
pub const MAX_BACKLOG: usize = 100_000;
/// The most bytes of event text the backlog holds (older events go first).
pub const BACKLOG_BYTES: usize = 16 << 20;
/// The environment variable that sets the backlog's length (`0` keeps none).
pub const BACKLOG_VARIABLE: &str = "AIRLOCK_EVENTS_BACKLOG";

/// One audit line as broadcast: its text and what filters look at.
#[derive(Clone, Debug)]
pub struct Event {
    /// The line exactly as the audit log wrote it.
    pub line: Arc<str>,
    /// Its `kind`.
    pub kind: Arc<str>,
    /// Its `decision`.
    pub decision: Arc<str>,
}

/// The last events, bounded by count and bytes.
#[derive(Default)]
struct Backlog {
    events: VecDeque<Event>,
    bytes: usize,
    capacity: usize,
}

impl Backlog {
    fn push(&mut self, event: Event) {
        if self.capacity == 0 {
            return;
        }
        self.bytes += event.line.len();
        self.events.push_back(event);
        while self.events.len() > self.capacity || self.bytes > BACKLOG_BYTES {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.bytes -= old.line.len();
        }
    }
}

/// Shared by the audit tap and the admin API.
pub struct Hub {
    sender: broadcast::Sender<Event>,
    /// The recent events; its lock is held while an event is broadcast.
    backlog: Mutex<Backlog>,
    denials: Mutex<VecDeque<Arc<str>>>,
    /// Lines subscribers lost by falling behind.
    lagged: AtomicU64,
    /// Counters derived from the lines.
    pub metrics: Metrics,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::with_backlog(DEFAULT_BACKLOG)
    }
}

impl Hub {
    /// A hub whose backlog keeps the last `capacity` events (at most [`MAX_BACKLOG`]).
    pub fn with_backlog(capacity: usize) -> Self {
        Hub {
            sender: broadcast::channel(SUBSCRIBER_BACKLOG).0,
            backlog: Mutex::new(Backlog {
                capacity: capacity.min(MAX_BACKLOG),
                ..Backlog::default()
            }),
            denials: Mutex::new(VecDeque::with_capacity(DENIALS_CAPACITY)),
            lagged: AtomicU64::new(0),
            metrics: Metrics::default(),
        }
    }

    /// A hub whose backlog length comes from `AIRLOCK_EVENTS_BACKLOG` (a number of events,
    /// 0 to [`MAX_BACKLOG`]); unset, the default. A value that is not such a number is
    /// named on stderr and the default used.
    pub fn configured() -> Self {
        let value = std::env::var(BACKLOG_VARIABLE).ok();
        match backlog_length(value.as_deref()) {
            Ok(length) => Hub::with_backlog(length),
            Err(why) => {
                eprintln!("airlock: warning: {why}; keeping the last {DEFAULT_BACKLOG} events");
                Hub::default()
            }
        }
    }

    /// How many events the backlog keeps.
    pub fn backlog_capacity(&self) -> usize {
        self.lock_backlog().capacity
    }

    fn lock_backlog(&self) -> std::sync::MutexGuard<'_, Backlog> {
        self.backlog.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `event` in the backlog and broadcasts it, under one lock.
    fn publish(&self, event: Event) {
        let mut backlog = self.lock_backlog();
        backlog.push(event.clone());
        // An error only means nobody is subscribed.
        let _ = self.sender.send(event);
    }

    /// Takes one written audit line (called on the audit writer thread; never blocks).
    pub fn observe(&self, line: &str) {
        let Ok(summary) = serde_json::from_str::<Summary>(line) else {
            return;
        };
        self.take(line, &summary);
    }

    /// Takes one written audit line with its typed event (the audit tap: nothing is parsed
    /// back; called on the audit writer thread, never blocks).
    pub fn observe_written(&self, written: &airlock_audit::Written<'_>) {
        self.take(written.text, &Summary::of(written));
    }

    /// Counts, keeps and broadcasts one line summarised as `summary`.
    fn take(&self, line: &str, summary: &Summary) {
        self.metrics.count(summary);
        let line: Arc<str> = Arc::from(line);
        if summary.decision == "deny" {
            let mut ring = self.denials.lock().unwrap_or_else(PoisonError::into_inner);
            if ring.len() == DENIALS_CAPACITY {
                ring.pop_front();
            }
            ring.push_back(line.clone());
        }
        self.publish(Event {
            line,
            kind: Arc::from(summary.kind.as_str()),
            decision: Arc::from(summary.decision.as_str()),
        });
    }

    /// Broadcasts an event that is not an audit line (the `ask` and `answered` events of
    /// `--mode ask`: JSON objects with `kind`, and `decision` once answered); never blocks.
    pub fn announce(&self, line: &str) {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        let field = |name: &str| Arc::from(value.get(name).and_then(|v| v.as_str()).unwrap_or(""));
        self.publish(Event {
            line: Arc::from(line),
            kind: field("kind"),
            decision: field("decision"),
        });
    }

    /// A new live subscription (lines from now on).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    /// The last `limit` events of the backlog, oldest first, and a live subscription that
    /// continues right after them (no event in both, none lost between).
    pub fn subscribe_with_backlog(&self, limit: usize) -> (Vec<Event>, broadcast::Receiver<Event>) {
        let backlog = self.lock_backlog();
        let skip = backlog.events.len().saturating_sub(limit);
        let recent = backlog.events.iter().skip(skip).cloned().collect();
        (recent, self.sender.subscribe())
    }

    /// The `limit` most recent refusals, oldest first.
    pub fn denials(&self, limit: usize) -> Vec<Arc<str>> {
        let ring = self.denials.lock().unwrap_or_else(PoisonError::into_inner);
        ring.iter()
            .skip(ring.len().saturating_sub(limit))
            .cloned()
            .collect()
    }

    /// Counts lines a subscriber lost.
    pub fn lost(&self, count: u64) {
        self.lagged.fetch_add(count, Ordering::Relaxed);
    }

    /// Lines subscribers lost so far.
    pub fn lagged(&self) -> u64 {
        self.lagged.load(Ordering::Relaxed)
    }
}

/// Reads `AIRLOCK_EVENTS_BACKLOG`'s value: unset is the default.
fn backlog_length(value: Option<&str>) -> Result<usize, String> {
    let Some(text) = value else {
        return Ok(DEFAULT_BACKLOG);
    };
    match text.trim().parse::<usize>() {
        Ok(length) if length <= MAX_BACKLOG => Ok(length),
        _ => Err(format!(
            "{BACKLOG_VARIABLE}={text:?} is not a number of events from 0 to {MAX_BACKLOG}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backlog_keeps_the_last_events_and_continues_live() {
        let hub = Hub::with_backlog(3);
        for i in 0..5 {
            hub.observe(&format!(
                r#"{{"kind":"http","decision":"allow","port":{i}}}"#
            ));
        }
        hub.announce(r#"{"kind":"answered","id":"1","decision":"allow"}"#);
        let (recent, mut live) = hub.subscribe_with_backlog(10);
        let lines: Vec<&str> = recent.iter().map(|e| &*e.line).collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains(r#""port":3"#), "{lines:?}");
        assert!(lines[2].contains("answered"), "{lines:?}");
        assert_eq!(hub.subscribe_with_backlog(1).0.len(), 1);
        hub.observe(r#"{"kind":"dns","decision":"allow"}"#);
        assert_eq!(&*live.try_recv().expect("live").kind, "dns");
        assert!(live.try_recv().is_err());
        let none = Hub::with_backlog(0);
        none.observe(r#"{"kind":"http","decision":"deny"}"#);
        assert!(none.subscribe_with_backlog(10).0.is_empty());
    }

    #[test]
    fn the_backlog_is_bounded_by_bytes_too() {
        let hub = Hub::with_backlog(MAX_BACKLOG);
        let long = "x".repeat(1 << 20);
        for _ in 0..20 {
            hub.observe(&format!(
                r#"{{"kind":"http","decision":"allow","path":"{long}"}}"#
            ));
        }
        let (recent, _) = hub.subscribe_with_backlog(usize::MAX);
        let bytes: usize = recent.iter().map(|e| e.line.len()).sum();
        assert!(
            bytes <= BACKLOG_BYTES && recent.len() >= 15,
            "{}",
            recent.len()
        );
    }

    #[test]
    fn the_backlog_length_is_read_from_the_environment_value() {
        assert_eq!(backlog_length(None), Ok(DEFAULT_BACKLOG));
        assert_eq!(backlog_length(Some("0")), Ok(0));
        assert_eq!(backlog_length(Some(" 250 ")), Ok(250));
        assert!(backlog_length(Some("lots")).is_err());
        assert!(backlog_length(Some("1000000")).is_err());
        assert_eq!(
            Hub::with_backlog(usize::MAX).backlog_capacity(),
            MAX_BACKLOG
        );
    }

    #[test]
    fn denials_ring_is_bounded_and_ordered() {
        let hub = Hub::default();
        for i in 0..DENIALS_CAPACITY + 5 {
            hub.observe(&format!(
                r#"{{"kind":"http","decision":"deny","port":{i}}}"#
            ));
        }
        hub.observe(r#"{"kind":"http","decision":"allow"}"#);
        let all = hub.denials(usize::MAX);
        assert_eq!(all.len(), DENIALS_CAPACITY);
        assert!(all[0].contains(r#""port":5}"#));
        let last = hub.denials(1);
        assert!(last[0].contains(&format!(r#""port":{}}}"#, DENIALS_CAPACITY + 4)));
    }
}
