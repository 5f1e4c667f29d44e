//! airlock's audit log: one JSON line per decision (docs/contract.md §5), written off the
//! hot path.
//!
//! [`AuditLog::record`] never blocks: it stamps the event and hands it to a writer thread
//! through a bounded queue. The writer folds repeated identical events into one line with
//! `count` ([`fold`]), serialises with serde_json, redacts query values, writes in batches
//! (whatever is queued, at once) and, for a file opened with a maximum size, rotates it
//! ([`LogOptions`], [`output`]). [`AuditLog::record_acked`] also returns an [`Ack`] that
//! resolves once the line's batch is written: the proxy holds an answer until then, so
//! that no answer reaches a client without its line (docs/reliability.md).
//!
//! A full queue or a failed write (a full disk, a read-only file system, a rotation that
//! cannot be done) makes the log *unavailable*: the proxy checks [`AuditLog::admit`] and
//! refuses requests (fail closed) while the writer tries again every [`RETRY_INTERVAL`]
//! ([`AuditLog::retry_now`] on SIGHUP); the first line written again says how long the log
//! was unavailable and how many requests were refused ([`writer`]).
//!
//! # Line format
//!
//! Keys appear in this order. `ts`, `id`, `kind`, `decision` and `rule` (`null` when no
//! rule decided) are always written; `secrets` is always written on `http`, `ws` and `mcp`
//! lines (`[]` when none); every other key is written only when known. `would` (always
//! `deny`) marks a line that report mode let through although the policy refuses it; its
//! `reason` is the refusal it would have had; `asked` (always `true`) marks a request ask
//! mode held and asked about:
//!
//! `ts id kind decision would asked rule reason method scheme host port path query status
//! bytes_up bytes_down ms secrets conn name qtype server tool argument form credential
//! message phase refused lost process trace count`
//!
//! `refused` and `lost` appear only on `kind: audit` lines: the one written when the log
//! can be written again after an outage ([`writer`]), and (`lost` alone) the one with
//! `reason` `audit_export_dropped` that counts the lines `--audit-otlp` could not export
//! ([`otlp`]). `trace` is the W3C trace id sent upstream when the policy asks for
//! `traceparent`.
//!
//! `server` names the stdio MCP server of an `airlock mcp` line; `argument` names the
//! guarded argument that refused an MCP call (`mcp_argument_denied`), never its value.
//!
//! `ts` is RFC 3339 UTC with microseconds and a `Z` (`2026-11-22T10:00:00.123456Z`);
//! `query` has every value replaced by `REDACTED` (`a=1&b` → `a=REDACTED&b`). `phase` is
//! `open` on the line written when a long-lived `tcp` or `ws` connection opens and `close`
//! on its line at the end. `count` (at least 1) is written only on a line that stands for
//! that many identical events folded within one second ([`fold`]); such a line carries the
//! `id` of the last event it stands for. `id` is the decision's [`DecisionId`]: 32 hex
//! digits, unique within a run ([`id`]).
//!
//! The event is typed from the step that decides to the writer ([`AuditEvent`], in
//! [`event`]); [`line`] is the one place it becomes text, and the control plane's tap gets
//! the typed event beside the text ([`LineTap`]).

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod ack;
pub mod chain;
pub mod checkpoint;
pub mod event;
pub mod fold;
pub mod id;
pub mod line;
pub mod ocsf;
pub mod otlp;
pub mod output;
pub mod signing;
mod time;
pub mod verify;
pub mod writer;

use std::borrow::Cow;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ack::Acker;
pub use crate::ack::{Ack, Unavailable};
pub use crate::event::{AuditEvent, Decision, DecisionId, Kind, Phase};
pub(crate) use crate::line::Line;
pub use crate::line::{Written, redact_query};
pub use crate::output::ROTATED_KEEP;
use crate::output::{Output, Rotation};
pub use crate::time::format_timestamp;
pub use crate::writer::RETRY_INTERVAL;
use crate::writer::Writer;

/// How many events may wait for the writer before the log is declared unhealthy.
pub const QUEUE_CAPACITY: usize = 65_536;

/// The value every query parameter is logged with.
pub const REDACTED: &str = "REDACTED";

/// How a file log is written ([`AuditLog::open_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Rotate the file before it would grow beyond this many bytes (`None`: never).
    pub max_size: Option<u64>,
}

/// Why the log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file could not be opened for appending.
    #[error("cannot open audit log {path}: {source}")]
    Open {
        /// The destination as given.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The writer thread could not be started.
    #[error("cannot start the audit log writer: {0}")]
    Spawn(io::Error),
    /// The OTLP export could not be set up (`--audit-otlp`, [`otlp`]).
    #[error("{0}")]
    Export(String),
}

/// The audit log handle: cheap to clone, shared by every connection.
#[derive(Clone, Debug)]
pub struct AuditLog {
    /// `None` when logging is disabled.
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    /// Taken (dropped) on drop so that the writer drains and exits.
    sender: Option<SyncSender<Message>>,
    writer: Option<JoinHandle<()>>,
    state: Arc<Health>,
}

/// Shared between the handles and the writer thread.
pub(crate) struct Health {
    /// `false` while the log is unavailable.
    pub(crate) healthy: AtomicBool,
    /// Applied to every serialised line before it is written ([`AuditLog::redact_with`]).
    pub(crate) filter: OnceLock<LineFilter>,
    /// Handed every line as written ([`AuditLog::tap_with`]).
    pub(crate) tap: OnceLock<LineTap>,
    /// The OTLP exporter's counters, when lines are exported ([`otlp`]).
    export: OnceLock<Arc<otlp::Stats>>,
    /// When the current outage began, in microseconds since the epoch (0: none).
    since_micros: AtomicU64,
    /// Requests refused during the current outage.
    pub(crate) refused: AtomicU64,
    /// Lines lost during the current outage.
    pub(crate) lost: AtomicU64,
    /// Requests refused for the log since it was opened.
    refused_total: AtomicU64,
    /// Outages since the log was opened.
    outages: AtomicU64,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("healthy", &self.healthy)
            .field("filtered", &self.filter.get().is_some())
            .field("tapped", &self.tap.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Health {
    fn new() -> Self {
        Health {
            healthy: AtomicBool::new(true),
            filter: OnceLock::new(),
            tap: OnceLock::new(),
            export: OnceLock::new(),
            since_micros: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            refused_total: AtomicU64::new(0),
            outages: AtomicU64::new(0),
        }
    }

    /// Marks the log unavailable; the first failure of an outage says so on stderr.
    pub(crate) fn fail(&self, why: &str) {
        if self.healthy.swap(false, Ordering::SeqCst) {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let micros = u64::try_from(now.as_micros()).unwrap_or(u64::MAX).max(1);
            self.since_micros.store(micros, Ordering::SeqCst);
            self.outages.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "airlock: audit log write failed ({why}): refusing all traffic until it can \
                 be written again (tried every {} s; `airlock proxy` also tries on SIGHUP)",
                writer::RETRY_INTERVAL.as_secs()
            );
        }
    }

    /// Marks the log available again after an outage of `elapsed`.
    pub(crate) fn recover(&self, elapsed: Duration, refused: u64) {
        self.since_micros.store(0, Ordering::SeqCst);
        self.healthy.store(true, Ordering::SeqCst);
        eprintln!(
            "airlock: audit log written again after {:.1} s unavailable ({refused} request(s) \
             refused meanwhile): serving",
            elapsed.as_secs_f64()
        );
    }

    /// Counts one request refused because the log is unavailable.
    pub(crate) fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::SeqCst);
        self.refused_total.fetch_add(1, Ordering::SeqCst);
    }

    /// When the current outage began (RFC 3339), or an empty string.
    pub(crate) fn since(&self) -> String {
        match self.since_micros.load(Ordering::SeqCst) {
            0 => String::new(),
            micros => format_timestamp(UNIX_EPOCH + Duration::from_micros(micros)),
        }
    }
}

/// The state of the log, for `/healthz` and `/metrics` (docs/operations.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Lines are being written (requests are served).
    pub healthy: bool,
    /// When the current outage began (RFC 3339 UTC), while unavailable.
    pub unavailable_since: Option<String>,
    /// Requests refused during the current outage.
    pub refused: u64,
    /// Requests refused because the log was unavailable, since it was opened.
    pub refused_total: u64,
    /// Outages since the log was opened.
    pub outages: u64,
    /// What the OTLP export did, when lines are exported (`--audit-otlp`).
    pub otlp: Option<otlp::Counts>,
}

/// A last rewrite of each serialised line (the credentials' redactor: a real secret value
/// that reached an event anyway is written as `[REDACTED:NAME]`).
pub type LineFilter = Arc<dyn for<'a> Fn(&'a str) -> Cow<'a, str> + Send + Sync>;

/// Receives every line exactly as written (after the [`LineFilter`], without the newline)
/// with its typed event ([`Written`]), on the writer thread: it must not block (hand the
/// line on with a non-blocking send).
pub type LineTap = Arc<dyn Fn(&Written<'_>) + Send + Sync>;

pub(crate) enum Message {
    /// One event, acknowledged (`ack`) or not.
    Event {
        ts: String,
        event: Box<AuditEvent>,
        ack: Option<Acker>,
    },
    /// Write everything, then answer.
    Flush(SyncSender<()>),
    /// Try an unavailable log again now.
    Retry,
}

impl AuditLog {
    /// Opens `dest`: `-` is stdout, anything else a file opened for appending (created with
    /// mode 0600). Fails if the file cannot be opened.
    pub fn open(dest: &str) -> Result<AuditLog, AuditError> {
        Self::open_with(dest, LogOptions::default())
    }

    /// [`AuditLog::open`] with `options`: a file with a `max_size` is rotated
    /// ([`output`]); stdout never is.
    pub fn open_with(dest: &str, options: LogOptions) -> Result<AuditLog, AuditError> {
        if dest == "-" {
            return Self::with_sink(Output::new(Box::new(io::stdout())), QUEUE_CAPACITY);
        }
        let rotation = options.max_size.map(Rotation::new);
        let output =
            Output::file(PathBuf::from(dest), rotation).map_err(|source| AuditError::Open {
                path: dest.to_owned(),
                source,
            })?;
        Self::with_sink(output, QUEUE_CAPACITY)
    }

    /// [`AuditLog::open_with`], with checkpoints of the line chain signed as `signing` says
    /// ([`checkpoint`]) and lines written in `format` ([`ocsf`]).
    pub fn open_signed(
        dest: &str,
        options: LogOptions,
        signing: checkpoint::Signing,
        format: ocsf::Format,
    ) -> Result<AuditLog, AuditError> {
        Self::open_exported(Some(dest), options, Some(signing), format, None)
    }

    /// [`AuditLog::open_signed`], with every line written also exported as `export` says
    /// (`--audit-otlp`, [`otlp`]); `dest` `None` keeps no file (lines are still sealed and
    /// exported), `signing` `None` writes no checkpoints.
    pub fn open_exported(
        dest: Option<&str>,
        options: LogOptions,
        signing: Option<checkpoint::Signing>,
        format: ocsf::Format,
        export: Option<&otlp::Config>,
    ) -> Result<AuditLog, AuditError> {
        let mut output = match dest {
            None => Output::new(Box::new(io::sink())),
            Some("-") => Output::new(Box::new(io::stdout())),
            Some(dest) => {
                let rotation = options.max_size.map(Rotation::new);
                Output::file(PathBuf::from(dest), rotation).map_err(|source| AuditError::Open {
                    path: dest.to_owned(),
                    source,
                })?
            }
        };
        if let Some(signing) = signing {
            output.sign_with(signing);
        }
        output.format_with(format);
        if let Some(config) = export {
            output.export_with(otlp::Exporter::start(config).map_err(AuditError::Export)?);
        }
        Self::with_sink(output, QUEUE_CAPACITY)
    }

    /// A log that writes nowhere but still serialises, filters and hands every line to its
    /// [tap](AuditLog::tap_with) (no `--log`, but an admin API streaming events).
    pub fn discarding() -> Result<AuditLog, AuditError> {
        Self::with_sink(Output::new(Box::new(io::sink())), QUEUE_CAPACITY)
    }

    /// A log that drops every event and is always healthy (no `--log`).
    pub fn disabled() -> AuditLog {
        AuditLog { inner: None }
    }

    fn with_sink(sink: Output, capacity: usize) -> Result<AuditLog, AuditError> {
        let (sender, receiver) = mpsc::sync_channel(capacity);
        let state = Arc::new(Health::new());
        if let Some(export) = sink.export() {
            let _ = state.export.set(export.stats());
        }
        let writer_state = Arc::clone(&state);
        let writer = std::thread::Builder::new()
            .name("airlock-audit".to_owned())
            .spawn(move || Writer::new(sink, writer_state).run(&receiver))
            .map_err(AuditError::Spawn)?;
        Ok(AuditLog {
            inner: Some(Arc::new(Inner {
                sender: Some(sender),
                writer: Some(writer),
                state,
            })),
        })
    }

    /// Records one event without blocking: stamps `ts` now (and an `id`, if the event has
    /// none) and queues it for the writer. If the queue is full the log becomes
    /// unavailable (and the event is lost).
    pub fn record(&self, event: AuditEvent) {
        self.queue(event, None);
    }

    /// Records one event as [`AuditLog::record`] does and returns the writer's
    /// acknowledgement: it resolves once the batch holding the line is written (`Ok`), or
    /// at once with `Err` when the log is unavailable (the line is then lost and counted
    /// as a refused request). A disabled log acknowledges at once.
    pub fn record_acked(&self, event: AuditEvent) -> Ack {
        let Some(inner) = &self.inner else {
            return Ack::ready(true);
        };
        if !inner.state.healthy.load(Ordering::SeqCst) {
            inner.state.lost.fetch_add(1, Ordering::SeqCst);
            inner.state.refuse();
            return Ack::ready(false);
        }
        let (ack, acker) = Ack::pending();
        self.queue(event, Some(acker));
        ack
    }

    fn queue(&self, mut event: AuditEvent, ack: Option<Acker>) {
        let Some(inner) = &self.inner else {
            return;
        };
        let Some(sender) = &inner.sender else {
            return;
        };
        event.id.get_or_insert_with(DecisionId::next);
        let ts = format_timestamp(SystemTime::now());
        let message = Message::Event {
            ts,
            event: Box::new(event),
            ack,
        };
        // A message not sent drops its acker, which resolves as not written.
        let why = match sender.try_send(message) {
            Ok(()) => return,
            Err(TrySendError::Full(_)) => "queue full",
            Err(TrySendError::Disconnected(_)) => "writer stopped",
        };
        inner.state.lost.fetch_add(1, Ordering::SeqCst);
        inner.state.fail(why);
    }

    /// Whether a request may be served: `true` while the log is available; otherwise
    /// counts the request as refused for the log and returns `false`.
    pub fn admit(&self) -> bool {
        match &self.inner {
            None => true,
            Some(inner) if inner.state.healthy.load(Ordering::SeqCst) => true,
            Some(inner) => {
                inner.state.refuse();
                false
            }
        }
    }

    /// Asks the writer to try an unavailable log again now rather than at its next
    /// [`RETRY_INTERVAL`] (SIGHUP); does nothing while the log is available.
    pub fn retry_now(&self) {
        if let Some(sender) = self.inner.as_ref().and_then(|inner| inner.sender.as_ref()) {
            let _ = sender.try_send(Message::Retry);
        }
    }

    /// The log's state ([`Status`]).
    pub fn status(&self) -> Status {
        let Some(inner) = &self.inner else {
            return Status {
                healthy: true,
                ..Status::default()
            };
        };
        let state = &inner.state;
        let healthy = state.healthy.load(Ordering::SeqCst);
        Status {
            healthy,
            unavailable_since: (!healthy).then(|| state.since()).filter(|s| !s.is_empty()),
            refused: state.refused.load(Ordering::SeqCst),
            refused_total: state.refused_total.load(Ordering::SeqCst),
            outages: state.outages.load(Ordering::SeqCst),
            otlp: state.export.get().map(|stats| stats.counts()),
        }
    }

    /// Sets the filter every line passes through before it is written; only the first call
    /// has an effect.
    pub fn redact_with(&self, filter: LineFilter) {
        if let Some(inner) = &self.inner {
            let _ = inner.state.filter.set(filter);
        }
    }

    /// Sets the tap every written line is handed to (the admin API's event stream); only
    /// the first call has an effect. A disabled log has no lines and ignores it.
    pub fn tap_with(&self, tap: LineTap) {
        if let Some(inner) = &self.inner {
            let _ = inner.state.tap.set(tap);
        }
    }

    /// `false` while the log is unavailable (queue full, a write or flush error), until
    /// the writer has written again ([`writer`]).
    pub fn healthy(&self) -> bool {
        match &self.inner {
            None => true,
            Some(inner) => inner.state.healthy.load(Ordering::SeqCst),
        }
    }

    /// Waits (at most `limit`) until every line written so far has left the OTLP export's
    /// queue, sent or dropped ([`otlp`]); `true` at once when lines are not exported. For
    /// a process that may end without dropping its last handle (`airlock run`): call it
    /// after [`AuditLog::flush`].
    pub fn wait_exported(&self, limit: Duration) -> bool {
        let Some(stats) = self
            .inner
            .as_ref()
            .and_then(|inner| inner.state.export.get())
        else {
            return true;
        };
        let deadline = std::time::Instant::now() + limit;
        loop {
            if stats.queued.load(Ordering::Relaxed) == 0 {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Blocks until every event recorded before this call is written and flushed (or the
    /// writer has failed); events folded so far are written out too.
    pub fn flush(&self) {
        let Some(sender) = self.inner.as_ref().and_then(|inner| inner.sender.as_ref()) else {
            return;
        };
        let (ack_sender, ack) = mpsc::sync_channel(1);
        if sender.send(Message::Flush(ack_sender)).is_ok() {
            // An error means the writer is gone, and then there is nothing left to wait for.
            let _ = ack.recv();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue lets the writer drain what is left, flush and exit.
        self.sender.take();
        if let Some(writer) = self.writer.take() {
            // A panicked writer has nothing left to flush.
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::Duration;

    use super::*;

    /// A sink that accepts nothing until the test lets it go.
    struct Stalled(std::sync::mpsc::Receiver<()>);

    impl Write for Stalled {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            // Released (or the test gave up): accept the bytes.
            let _ = self.0.recv_timeout(Duration::from_secs(10));
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_queue_makes_the_log_unhealthy() {
        let (release, stalled) = mpsc::channel();
        let log = AuditLog::with_sink(Output::new(Box::new(Stalled(stalled))), 4).expect("log");
        // The writer takes at most one event and stalls in it: the queue fills up.
        for _ in 0..16 {
            log.record(AuditEvent::default());
        }
        assert!(!log.healthy());
        for _ in 0..64 {
            let _ = release.send(());
        }
        drop(release);
        log.flush();
        assert!(!log.healthy());
    }

    /// A sink the test controls: it fails while `full`, counts its writes.
    #[derive(Clone, Default)]
    struct Disk(Arc<std::sync::Mutex<DiskState>>);

    #[derive(Default)]
    struct DiskState {
        full: bool,
        written: Vec<u8>,
        writes: usize,
    }

    impl Disk {
        fn set_full(&self, full: bool) {
            self.0.lock().unwrap().full = full;
        }
        fn lines(&self) -> Vec<serde_json::Value> {
            let state = self.0.lock().unwrap();
            String::from_utf8_lossy(&state.written)
                .lines()
                .map(|line| serde_json::from_str(line).expect("a whole JSON line"))
                .collect()
        }
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut state = self.0.lock().unwrap();
            if state.full {
                return Err(io::Error::from_raw_os_error(28));
            }
            state.writes += 1;
            state.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Blocks until `ack` resolves (at most 10 s).
    fn wait(ack: Ack) -> Result<(), Unavailable> {
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut ack = std::pin::pin!(ack);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let std::task::Poll::Ready(result) = ack.as_mut().poll(&mut cx) {
                return result;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the ack never resolved"
            );
            std::thread::park_timeout(Duration::from_millis(50));
        }
    }

    fn event(n: u64) -> AuditEvent {
        AuditEvent {
            decision: Decision::Allow,
            conn: Some(n),
            ..AuditEvent::default()
        }
    }

    #[test]
    fn an_ack_comes_after_its_line_is_written() {
        let disk = Disk::default();
        let log = AuditLog::with_sink(Output::new(Box::new(disk.clone())), 64).expect("log");
        assert_eq!(wait(log.record_acked(event(1))), Ok(()));
        // Acknowledged means written: the line is there without a flush.
        assert_eq!(disk.lines().len(), 1);
        assert_eq!(disk.lines()[0]["conn"], 1);
        assert_eq!(wait(AuditLog::disabled().record_acked(event(2))), Ok(()));
    }

    #[test]
    fn acks_of_one_batch_share_one_write() {
        let (release, stalled) = mpsc::channel();
        let disk = Disk::default();
        // The writer stalls in the first write while 200 acknowledged events queue up.
        struct Gate(mpsc::Receiver<()>, Disk);
        impl Write for Gate {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                let _ = self.0.recv_timeout(Duration::from_secs(10));
                self.1.write(buf)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let sink = Gate(stalled, disk.clone());
        let log = AuditLog::with_sink(Output::new(Box::new(sink)), 1024).expect("log");
        let first = log.record_acked(event(0));
        std::thread::sleep(Duration::from_millis(100));
        let acks: Vec<Ack> = (1..=200).map(|n| log.record_acked(event(n))).collect();
        for _ in 0..8 {
            release.send(()).unwrap();
        }
        assert_eq!(wait(first), Ok(()));
        for ack in acks {
            assert_eq!(wait(ack), Ok(()));
        }
        assert_eq!(disk.lines().len(), 201);
        let writes = disk.0.lock().unwrap().writes;
        assert!(writes <= 3, "{writes} writes for 201 lines in two batches");
    }

    #[test]
    fn a_failed_write_fails_its_acks_and_the_log_recovers() {
        let disk = Disk::default();
        let log = AuditLog::with_sink(Output::new(Box::new(disk.clone())), 64).expect("log");
        assert_eq!(wait(log.record_acked(event(1))), Ok(()));
        disk.set_full(true);
        assert_eq!(wait(log.record_acked(event(2))), Err(Unavailable));
        assert!(!log.healthy() && !log.admit());
        // While unavailable: refused at once, and counted.
        assert_eq!(wait(log.record_acked(event(3))), Err(Unavailable));
        log.record(event(4));
        let status = log.status();
        assert!(!status.healthy && status.unavailable_since.is_some());
        assert_eq!(status.refused, 3);
        // A retry while the disk is still full changes nothing.
        log.retry_now();
        log.flush();
        assert!(!log.healthy());
        disk.set_full(false);
        log.retry_now();
        log.flush();
        assert!(log.healthy(), "a retry after space returned writes again");
        assert_eq!(wait(log.record_acked(event(5))), Ok(()));
        let lines = disk.lines();
        let conns: Vec<_> = lines.iter().map(|line| line["conn"].clone()).collect();
        assert_eq!(conns[0], 1);
        assert_eq!(conns[2], 5);
        let gap = &lines[1];
        assert_eq!(gap["kind"], "audit");
        assert_eq!(gap["decision"], "deny");
        assert_eq!(gap["reason"], "audit_log_unavailable");
        assert_eq!(gap["refused"], 3);
        // Lost: the failed batch (2), the refused ack (3) and the plain line (4).
        assert_eq!(gap["lost"], 3);
        assert!(gap["ms"].as_f64().is_some());
        let status = log.status();
        assert!(status.healthy && status.unavailable_since.is_none());
        assert_eq!(
            (status.refused, status.refused_total, status.outages),
            (0, 3, 1)
        );
    }

    #[test]
    fn an_unavailable_log_is_tried_again_on_its_own() {
        let disk = Disk::default();
        disk.set_full(true);
        let log = AuditLog::with_sink(Output::new(Box::new(disk.clone())), 64).expect("log");
        assert_eq!(wait(log.record_acked(event(1))), Err(Unavailable));
        disk.set_full(false);
        let deadline = std::time::Instant::now() + RETRY_INTERVAL * 5;
        while !log.healthy() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(log.healthy(), "retried within the interval");
        assert_eq!(disk.lines()[0]["kind"], "audit");
    }
}
