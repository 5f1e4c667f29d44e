//! The fan-out of audit lines: the audit writer thread hands every written (already
//! redacted) line to [`Hub::observe`], which counts it into the [`Metrics`], keeps refusals
//! in a bounded ring for `GET /v1/denials`, and broadcasts it to `GET /v1/events`
//! subscribers. Nothing here blocks: a subscriber that falls behind loses lines (counted),
//! never slows the writer.

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

/// Shared by the audit tap and the admin API.
pub struct Hub {
    sender: broadcast::Sender<Event>,
    denials: Mutex<VecDeque<Arc<str>>>,
    /// Lines subscribers lost by falling behind.
    lagged: AtomicU64,
    /// Counters derived from the lines.
    pub metrics: Metrics,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            sender: broadcast::channel(SUBSCRIBER_BACKLOG).0,
            denials: Mutex::new(VecDeque::with_capacity(DENIALS_CAPACITY)),
            lagged: AtomicU64::new(0),
            metrics: Metrics::default(),
        }
    }
}

impl Hub {
    /// Takes one written audit line (called on the audit writer thread; never blocks).
    pub fn observe(&self, line: &str) {
        let Ok(summary) = serde_json::from_str::<Summary>(line) else {
            return;
        };
        self.metrics.count(&summary);
        let line: Arc<str> = Arc::from(line);
        if summary.decision == "deny" {
            let mut ring = self.denials.lock().unwrap_or_else(PoisonError::into_inner);
            if ring.len() == DENIALS_CAPACITY {
                ring.pop_front();
            }
            ring.push_back(line.clone());
        }
        // An error only means nobody is subscribed.
        let _ = self.sender.send(Event {
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
        let _ = self.sender.send(Event {
            line: Arc::from(line),
            kind: field("kind"),
            decision: field("decision"),
        });
    }

    /// A new live subscription (lines from now on).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
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

#[cfg(test)]
mod tests {
    use super::*;

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
