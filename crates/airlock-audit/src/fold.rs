//! Folding of repeated lines, so that a flood of identical decisions (a DNS query sent in a
//! loop, a refused request retried) cannot fill the disk.
//!
//! Two events are *identical* when every field but `ms` and `id` is equal (`ts` is not
//! part of the event): same kind, decision, rule, reason, destination, path, query, status, bytes,
//! secrets, connection, phase, name, server, tool, argument and message. The first of a run is written at
//! once and opens a window of [`WINDOW`]; identical events within the window are counted,
//! not written. When the window ends (checked at least every [`WINDOW`], on
//! [`crate::AuditLog::flush`] and when the log closes) one more line is written if any
//! were counted: the last of them (its `id` too), with `"count":N` for the N it stands for. Summing
//! `count` (1 where absent) over the lines therefore gives the number of events.
//!
//! At most [`MAX_OPEN`] windows are open; beyond that, events are written as they come.
//! The comparison uses a hash of the usual fields, then full equality, so a field added to
//! [`AuditEvent`] can only make fewer lines fold, never fold different ones.

use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use crate::AuditEvent;

/// How long identical events are folded after the first.
pub const WINDOW: Duration = Duration::from_secs(1);

/// The most windows open at once.
pub const MAX_OPEN: usize = 4096;

/// One open window.
struct Window {
    /// The event written when the window opened.
    first: Box<AuditEvent>,
    opened: Instant,
    /// The last folded event and its timestamp, and how many were folded.
    last: Option<(String, Box<AuditEvent>)>,
    folded: u64,
}

/// A line the fold lets through: timestamp, event and `count` (`None` = one event).
pub(crate) type Pending = (String, Box<AuditEvent>, Option<u64>);

/// The open windows, by hash of the event.
#[derive(Default)]
pub(crate) struct Folds {
    open: HashMap<u64, Window>,
    /// Hashes in the order their windows opened (possibly stale: checked on close).
    order: VecDeque<(Instant, u64)>,
}

impl Folds {
    /// Takes one event at `now`: `Some` to write it now, `None` when it was folded.
    pub(crate) fn take(
        &mut self,
        ts: String,
        event: Box<AuditEvent>,
        now: Instant,
    ) -> Option<Pending> {
        let key = fold_hash(&event);
        match self.open.entry(key) {
            Entry::Occupied(mut entry) => {
                let window = entry.get_mut();
                if now.duration_since(window.opened) < WINDOW && identical(&window.first, &event) {
                    window.folded += 1;
                    window.last = Some((ts, event));
                    return None;
                }
                // A different event with the same hash, or a window due to close: the
                // caller closes expired windows first, so this is a collision.
                Some((ts, event, None))
            }
            Entry::Vacant(entry) => {
                if self.order.len() < MAX_OPEN {
                    entry.insert(Window {
                        first: event.clone(),
                        opened: now,
                        last: None,
                        folded: 0,
                    });
                    self.order.push_back((now, key));
                }
                Some((ts, event, None))
            }
        }
    }

    /// Closes the windows opened [`WINDOW`] or longer before `now` (every window when
    /// `all`), returning the summary lines to write, oldest first.
    pub(crate) fn close(&mut self, now: Instant, all: bool) -> Vec<Pending> {
        let mut summaries = Vec::new();
        while let Some(&(opened, key)) = self.order.front() {
            if !all && now.duration_since(opened) < WINDOW {
                break;
            }
            self.order.pop_front();
            if let Some(window) = self.open.remove(&key)
                && let Some((ts, event)) = window.last
            {
                summaries.push((ts, event, Some(window.folded)));
            }
        }
        summaries
    }

    /// When the oldest open window ends, if any.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.order.front().map(|(opened, _)| *opened + WINDOW)
    }
}

/// Whether two events are identical but for `ms`, `id` and `trace`.
fn identical(a: &AuditEvent, b: &AuditEvent) -> bool {
    let mut b = b.clone();
    b.ms = a.ms;
    b.id = a.id;
    b.trace.clone_from(&a.trace);
    *a == b
}

/// A hash of the fields that usually tell events apart (not `ms`, not `id`).
fn fold_hash(event: &AuditEvent) -> u64 {
    let mut hasher = DefaultHasher::new();
    event.kind.hash(&mut hasher);
    event.decision.hash(&mut hasher);
    event.rule.hash(&mut hasher);
    event.reason.hash(&mut hasher);
    event.method.hash(&mut hasher);
    event.host.hash(&mut hasher);
    event.port.hash(&mut hasher);
    event.path.hash(&mut hasher);
    event.query.hash(&mut hasher);
    event.status.hash(&mut hasher);
    event.bytes_up.hash(&mut hasher);
    event.bytes_down.hash(&mut hasher);
    event.conn.hash(&mut hasher);
    event.phase.hash(&mut hasher);
    event.name.hash(&mut hasher);
    event.server.hash(&mut hasher);
    event.tool.hash(&mut hasher);
    event.argument.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Decision, Kind};

    fn dns(name: &str) -> Box<AuditEvent> {
        Box::new(AuditEvent {
            kind: Kind::Dns,
            decision: Decision::Deny,
            name: Some(name.to_owned()),
            qtype: Some("TXT".to_owned()),
            ..AuditEvent::default()
        })
    }

    #[test]
    fn identical_events_fold_until_the_window_ends() {
        let mut folds = Folds::default();
        let start = Instant::now();
        assert!(folds.take("t0".into(), dns("a.example"), start).is_some());
        for i in 1..=99u64 {
            let at = start + Duration::from_millis(i * 5);
            assert!(folds.take(format!("t{i}"), dns("a.example"), at).is_none());
        }
        // A different name is written and opens its own window.
        assert!(folds.take("b".into(), dns("b.example"), start).is_some());
        assert!(
            folds
                .close(start + Duration::from_millis(999), false)
                .is_empty()
        );
        let summaries = folds.close(start + WINDOW, false);
        assert_eq!(summaries.len(), 1, "b.example had no repeat");
        let (ts, event, count) = &summaries[0];
        assert_eq!((ts.as_str(), count), ("t99", &Some(99)));
        assert_eq!(event.name.as_deref(), Some("a.example"));
        assert_eq!(folds.next_deadline(), None);
        // After the window, the same event is written again and opens a new one.
        assert!(
            folds
                .take("t100".into(), dns("a.example"), start + WINDOW)
                .is_some()
        );
    }

    #[test]
    fn only_ms_and_id_are_ignored_and_everything_closes_on_demand() {
        let mut folds = Folds::default();
        let now = Instant::now();
        let timed = |ms: f64, conn: u64| {
            Box::new(AuditEvent {
                id: Some(crate::DecisionId::next()),
                ms: Some(ms),
                conn: Some(conn),
                ..*dns("a.example")
            })
        };
        assert!(folds.take("1".into(), timed(1.0, 7), now).is_some());
        assert!(folds.take("2".into(), timed(2.0, 7), now).is_none());
        assert!(
            folds.take("3".into(), timed(2.0, 8), now).is_some(),
            "another connection"
        );
        let summaries = folds.close(now, true);
        assert_eq!(summaries.len(), 1);
        assert_eq!(summaries[0].2, Some(1));
        assert_eq!(folds.next_deadline(), None);
    }

    #[test]
    fn windows_are_bounded() {
        let mut folds = Folds::default();
        let now = Instant::now();
        for i in 0..MAX_OPEN + 10 {
            assert!(
                folds
                    .take(String::new(), dns(&format!("n{i}.example")), now)
                    .is_some()
            );
        }
        assert_eq!(folds.order.len(), MAX_OPEN);
        let name = format!("n{}.example", MAX_OPEN + 1);
        assert!(
            folds.take(String::new(), dns(&name), now).is_some(),
            "not folded: no window"
        );
    }
}
