//! `--audit-otlp URL`: every audit line, as written to the file, also sent as an
//! OpenTelemetry log record over OTLP/HTTP with protobuf (docs/operations.md, "OTLP
//! export").
//!
//! [`proto`] holds the messages, [`record`] turns lines into them (pure), [`export`] is
//! the I/O: a thread of its own that batches, posts and retries. The writer hands each
//! batch it wrote to the [`Exporter`] without ever waiting: when the bounded queue is full
//! the lines are counted as dropped ([`Stats`], `/metrics`) and the writer says how many
//! in a line of the audit file ([`DROPPED`]). A decision never waits for the collector.

pub mod export;
pub mod proto;
pub mod record;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use export::Exporter;

/// The reason on the `kind: audit` line that says how many lines were not exported.
pub const DROPPED: &str = "audit_export_dropped";

/// The default bound of the export queue, in lines (about 4 MiB of typical lines).
pub const DEFAULT_QUEUE: usize = 8192;

/// The most records sent in one request.
pub const BATCH_RECORDS: usize = 512;

/// The most body bytes (lines) gathered into one request.
pub const BATCH_BYTES: usize = 1 << 20;

/// How long a line may wait for its batch to fill before the batch is sent.
pub const BATCH_DELAY: Duration = Duration::from_millis(200);

/// The longest wait between two tries (a `Retry-After` beyond it is cut to it).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How long the exporter goes on sending once the log is closed.
pub const SHUTDOWN_FLUSH: Duration = Duration::from_secs(5);

/// How often at most the writer notes lines not exported.
pub const NOTE_INTERVAL: Duration = Duration::from_secs(1);

/// The `kind: audit` line saying that `dropped` lines were not exported: `lost` is their
/// number.
pub(crate) fn dropped_event(dropped: u64) -> crate::AuditEvent {
    crate::AuditEvent {
        kind: crate::Kind::Audit,
        decision: crate::Decision::Allow,
        reason: Some(DROPPED),
        message: Some(format!(
            "{dropped} audit line(s) not exported to the OTLP collector (queue full, \
             refused, or not sent before shutdown); they are in this file"
        )),
        lost: Some(dropped),
        ..crate::AuditEvent::default()
    }
}

/// Where and how to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The collector's URL (`http://` or `https://`), normally ending in `/v1/logs`.
    pub url: String,
    /// Extra trust anchors (PEM) for an `https://` collector, beside the system's.
    pub ca: Option<PathBuf>,
    /// The bound of the queue, in lines (at least 1).
    pub queue: usize,
}

impl Config {
    /// `url` with the default queue and no extra CA.
    pub fn new(url: impl Into<String>) -> Config {
        Config {
            url: url.into(),
            ca: None,
            queue: DEFAULT_QUEUE,
        }
    }
}

/// What the exporter did so far (`/metrics`: `airlock_audit_otlp_*`).
#[derive(Debug, Default)]
pub struct Stats {
    /// Records the collector accepted.
    pub exported: AtomicU64,
    /// Lines not exported: the queue was full, the collector refused them for good, or
    /// the shutdown flush ran out of time.
    pub dropped: AtomicU64,
    /// Requests that failed (and were tried again).
    pub failures: AtomicU64,
    /// Lines waiting in the queue or in the batch being sent.
    pub queued: AtomicU64,
    /// Lines dropped that no audit line has counted yet.
    pub(crate) unnoted: AtomicU64,
}

/// A snapshot of [`Stats`] for [`crate::Status`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Records the collector accepted.
    pub exported: u64,
    /// Lines not exported (see [`Stats::dropped`]).
    pub dropped: u64,
    /// Requests that failed and were tried again.
    pub failures: u64,
    /// Lines waiting to be sent.
    pub queued: u64,
}

impl Stats {
    /// A snapshot.
    pub fn counts(&self) -> Counts {
        Counts {
            exported: self.exported.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed),
        }
    }

    /// Counts `n` lines not exported (to be noted in the audit file unless `noted`).
    pub(crate) fn drop_lines(&self, n: u64, noted: bool) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
        if !noted {
            self.unnoted.fetch_add(n, Ordering::Relaxed);
        }
    }
}
