//! airlock's audit log: one JSON line per decision (docs/contract.md §5), written off the
//! hot path.
//!
//! [`AuditLog::record`] never blocks: it stamps the event and hands it to a writer thread
//! through a bounded queue. The writer folds repeated identical events into one line with
//! `count` ([`fold`]), serialises with serde_json, redacts query values, batches writes
//! (flushing whenever the queue drains) and, for a file opened with a maximum size, rotates
//! it ([`LogOptions`], [`output`]). A full queue or a failed write (a full disk, a rotation
//! that cannot be done) makes the log unhealthy for good; the proxy checks
//! [`AuditLog::healthy`] and refuses every request from then on (fail closed).
//!
//! # Line format
//!
//! Keys appear in this order. `ts`, `kind`, `decision` and `rule` (`null` when no rule
//! decided) are always written; `secrets` is always written on `http`, `ws` and `mcp`
//! lines (`[]` when none); every other key is written only when known. `would` (always
//! `deny`) marks a line that report mode let through although the policy refuses it; its
//! `reason` is the refusal it would have had; `asked` (always `true`) marks a request ask
//! mode held and asked about:
//!
//! `ts kind decision would asked rule reason method scheme host port path query status
//! bytes_up bytes_down ms secrets conn name qtype server tool argument form credential
//! message phase count`
//!
//! `server` names the stdio MCP server of an `airlock mcp` line; `argument` names the
//! guarded argument that refused an MCP call (`mcp_argument_denied`), never its value.
//!
//! `ts` is RFC 3339 UTC with microseconds and a `Z` (`2026-11-22T10:00:00.123456Z`);
//! `query` has every value replaced by `REDACTED` (`a=1&b` → `a=REDACTED&b`). `phase` is
//! `open` on the line written when a long-lived `tcp` or `ws` connection opens and `close`
//! on its line at the end. `count` (at least 1) is written only on a line that stands for
//! that many identical events folded within one second ([`fold`]).

#![forbid(unsafe_code)]

pub mod fold;
pub mod output;

use std::borrow::Cow;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::fold::{Folds, Pending};
use crate::output::{Output, Rotation, open_append};
pub use crate::output::{ROTATED_KEEP, number_and_unit, parse_size};

/// How many events may wait for the writer before the log is declared unhealthy.
pub const QUEUE_CAPACITY: usize = 65_536;

/// The value every query parameter is logged with.
pub const REDACTED: &str = "REDACTED";

/// What a line is about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An HTTP request (intercepted or plain), or a CONNECT refused as such.
    #[default]
    Http,
    /// A raw TCP connection.
    Tcp,
    /// A DNS query answered by airlock.
    Dns,
    /// An MCP `tools/call` decision.
    Mcp,
    /// A WebSocket session (written when it ends).
    Ws,
    /// A policy change (admin API).
    Policy,
}

/// Allowed or refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Let through.
    Allow,
    /// Refused (the default, so that a forgotten field never reads as a pass).
    #[default]
    Deny,
}

/// Which end of a long-lived connection a line is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The connection was just opened (allowed and relayed from now on).
    Open,
    /// The connection ended (bytes and duration are final).
    Close,
}

/// How a file log is written ([`AuditLog::open_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Rotate the file before it would grow beyond this many bytes (`None`: never).
    pub max_size: Option<u64>,
}

/// One decision to log. Fields left `None` (or an empty `secrets`) are left out of the line,
/// except as the [crate documentation](crate) says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuditEvent {
    /// What the line is about.
    pub kind: Kind,
    /// Allowed or refused.
    pub decision: Decision,
    /// `Some("deny")` when report mode let through what the policy refuses (`reason`
    /// says why it would have been refused).
    pub would: Option<&'static str>,
    /// `Some(true)` when ask mode held the request and asked about it.
    pub asked: Option<bool>,
    /// The rule id that decided (`network.allow[0]`), if any.
    pub rule: Option<String>,
    /// The refusal reason (`host_not_allowed`, ...).
    pub reason: Option<&'static str>,
    /// The request method.
    pub method: Option<String>,
    /// `http` or `https`.
    pub scheme: Option<&'static str>,
    /// Destination host name or address.
    pub host: Option<String>,
    /// Destination port.
    pub port: Option<u16>,
    /// The canonical path, without query.
    pub path: Option<String>,
    /// The raw query (without `?`); its values are redacted when written.
    pub query: Option<String>,
    /// The HTTP status sent to the client.
    pub status: Option<u16>,
    /// Bytes from the client to the upstream.
    pub bytes_up: Option<u64>,
    /// Bytes from the upstream to the client.
    pub bytes_down: Option<u64>,
    /// Duration in milliseconds.
    pub ms: Option<f64>,
    /// Names of the secrets swapped or injected.
    pub secrets: Vec<String>,
    /// The client connection number.
    pub conn: Option<u64>,
    /// The queried name (`dns` lines).
    pub name: Option<String>,
    /// The query type (`dns` lines: `A`, `AAAA`, ...).
    pub qtype: Option<String>,
    /// The stdio MCP server's name (`mcp` lines of `airlock mcp`).
    pub server: Option<String>,
    /// The MCP tool name (`mcp` lines).
    pub tool: Option<String>,
    /// The guarded argument's name (never its value) on `mcp_argument_denied` lines.
    pub argument: Option<String>,
    /// How a refused credential travelled: `surrogate`, `real` or `cleartext`.
    pub form: Option<&'static str>,
    /// The kind of a well-known credential format found (`github`, `aws`, ...).
    pub credential: Option<&'static str>,
    /// A free-form explanation.
    pub message: Option<String>,
    /// `open` or `close` for a long-lived `tcp` or `ws` connection.
    pub phase: Option<Phase>,
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
struct Health {
    healthy: AtomicBool,
    /// Applied to every serialised line before it is written ([`AuditLog::redact_with`]).
    filter: OnceLock<LineFilter>,
    /// Handed every line as written ([`AuditLog::tap_with`]).
    tap: OnceLock<LineTap>,
    /// Serialises the one-time stderr notice.
    reported: Mutex<bool>,
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
    /// Marks the log unhealthy; prints the notice the first time only.
    fn fail(&self, why: &str) {
        self.healthy.store(false, Ordering::SeqCst);
        let mut reported = self.reported.lock().unwrap_or_else(PoisonError::into_inner);
        if !*reported {
            *reported = true;
            eprintln!("airlock: audit log write failed ({why}): refusing all traffic");
        }
    }
}

/// A last rewrite of each serialised line (the credentials' redactor: a real secret value
/// that reached an event anyway is written as `[REDACTED:NAME]`).
pub type LineFilter = Arc<dyn for<'a> Fn(&'a str) -> Cow<'a, str> + Send + Sync>;

/// Receives every line exactly as written (after the [`LineFilter`], without the newline),
/// on the writer thread: it must not block (hand the line on with a non-blocking send).
pub type LineTap = Arc<dyn Fn(&str) + Send + Sync>;

enum Message {
    Event { ts: String, event: Box<AuditEvent> },
    Flush(SyncSender<()>),
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
            return Self::with_sink(Output::new(Box::new(io::stdout()), None), QUEUE_CAPACITY);
        }
        let open_error = |source| AuditError::Open {
            path: dest.to_owned(),
            source,
        };
        let file = open_append(dest.as_ref()).map_err(open_error)?;
        let rotation = match options.max_size {
            Some(max_size) => {
                let size = file.metadata().map_err(open_error)?.len();
                Some(Rotation::new(PathBuf::from(dest), max_size, size))
            }
            None => None,
        };
        Self::with_sink(Output::new(Box::new(file), rotation), QUEUE_CAPACITY)
    }

    /// A log that writes nowhere but still serialises, filters and hands every line to its
    /// [tap](AuditLog::tap_with) (no `--log`, but an admin API streaming events).
    pub fn discarding() -> Result<AuditLog, AuditError> {
        Self::with_sink(Output::new(Box::new(io::sink()), None), QUEUE_CAPACITY)
    }

    /// A log that drops every event and is always healthy (no `--log`).
    pub fn disabled() -> AuditLog {
        AuditLog { inner: None }
    }

    fn with_sink(sink: Output, capacity: usize) -> Result<AuditLog, AuditError> {
        let (sender, receiver) = mpsc::sync_channel(capacity);
        let state = Arc::new(Health {
            healthy: AtomicBool::new(true),
            filter: OnceLock::new(),
            tap: OnceLock::new(),
            reported: Mutex::new(false),
        });
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

    /// Records one event without blocking: stamps `ts` now and queues it for the writer. If
    /// the queue is full the log becomes unhealthy (and the event is lost).
    pub fn record(&self, event: AuditEvent) {
        let Some(inner) = &self.inner else {
            return;
        };
        let Some(sender) = &inner.sender else {
            return;
        };
        let ts = format_timestamp(SystemTime::now());
        match sender.try_send(Message::Event {
            ts,
            event: Box::new(event),
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => inner.state.fail("queue full"),
            Err(TrySendError::Disconnected(_)) => inner.state.fail("writer stopped"),
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

    /// `false` forever after the first failure (queue full, write or flush error).
    pub fn healthy(&self) -> bool {
        match &self.inner {
            None => true,
            Some(inner) => inner.state.healthy.load(Ordering::SeqCst),
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

/// The writer thread's state: the output, the open fold windows, and whether a write has
/// failed (after which nothing more is written).
struct Writer {
    output: Output,
    folds: Folds,
    state: Arc<Health>,
    failed: bool,
    /// Reused for each serialised line.
    buffer: Vec<u8>,
}

impl Writer {
    fn new(output: Output, state: Arc<Health>) -> Self {
        Writer {
            output,
            folds: Folds::default(),
            state,
            failed: false,
            buffer: Vec::with_capacity(512),
        }
    }

    /// Writes until every handle is gone, then writes what is still folded and flushes.
    fn run(mut self, receiver: &Receiver<Message>) {
        while let Some(first) = self.next_message(receiver) {
            let mut next = first;
            // Batch: take everything already queued, then flush once.
            while let Some(message) = next {
                self.handle(message);
                next = receiver.try_recv().ok();
            }
            self.close_folds(false);
            self.flush();
        }
        self.close_folds(true);
        self.flush();
    }

    /// The next message; `Some(None)` when a fold window is due first, `None` when every
    /// handle is gone.
    fn next_message(&mut self, receiver: &Receiver<Message>) -> Option<Option<Message>> {
        let Some(deadline) = self.folds.next_deadline() else {
            return receiver.recv().ok().map(Some);
        };
        match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(message) => Some(Some(message)),
            Err(RecvTimeoutError::Timeout) => Some(None),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    fn handle(&mut self, message: Message) {
        match message {
            Message::Event { ts, event } => {
                self.close_folds(false);
                if let Some(line) = self.folds.take(ts, event, Instant::now()) {
                    self.write(&line);
                }
            }
            Message::Flush(ack) => {
                self.close_folds(true);
                self.flush();
                // The flusher may have stopped waiting: nothing to do then.
                let _ = ack.send(());
            }
        }
    }

    /// Writes the summary lines of the windows that ended (every window when `all`).
    fn close_folds(&mut self, all: bool) {
        for line in self.folds.close(Instant::now(), all) {
            self.write(&line);
        }
    }

    fn write(&mut self, (ts, event, count): &Pending) {
        if self.failed {
            return;
        }
        if let Err(err) = self.write_line(ts, event, *count) {
            self.failed = true;
            self.state.fail(&err.to_string());
        }
    }

    fn flush(&mut self) {
        if !self.failed
            && let Err(err) = self.output.flush()
        {
            self.failed = true;
            self.state.fail(&err.to_string());
        }
    }

    fn write_line(&mut self, ts: &str, event: &AuditEvent, count: Option<u64>) -> io::Result<()> {
        let line = Line::new(ts, event, count);
        self.buffer.clear();
        serde_json::to_writer(&mut self.buffer, &line).map_err(io::Error::other)?;
        let (filter, tap) = (self.state.filter.get(), self.state.tap.get());
        if filter.is_none() && tap.is_none() {
            return self.output.write_line(&self.buffer);
        }
        // serde_json writes UTF-8: this borrows.
        let raw = String::from_utf8_lossy(&self.buffer);
        let text = match filter {
            Some(filter) => filter(&raw),
            None => Cow::Borrowed(raw.as_ref()),
        };
        self.output.write_line(text.as_bytes())?;
        if let Some(tap) = tap {
            tap(&text);
        }
        Ok(())
    }
}

/// The serialised form of an event (field order = key order of the line).
#[derive(Serialize)]
struct Line<'a> {
    ts: &'a str,
    kind: Kind,
    decision: Decision,
    #[serde(skip_serializing_if = "Option::is_none")]
    would: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    asked: Option<bool>,
    rule: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheme: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_up: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_down: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    secrets: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    conn: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    qtype: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    argument: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    form: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    credential: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
}

impl<'a> Line<'a> {
    fn new(ts: &'a str, event: &'a AuditEvent, count: Option<u64>) -> Self {
        let request_kind = matches!(event.kind, Kind::Http | Kind::Ws | Kind::Mcp);
        Line {
            ts,
            kind: event.kind,
            decision: event.decision,
            would: event.would,
            asked: event.asked,
            rule: event.rule.as_deref(),
            reason: event.reason,
            method: event.method.as_deref(),
            scheme: event.scheme,
            host: event.host.as_deref(),
            port: event.port,
            path: event.path.as_deref(),
            query: event.query.as_deref().map(redact_query),
            status: event.status,
            bytes_up: event.bytes_up,
            bytes_down: event.bytes_down,
            // Microsecond precision is plenty and keeps float noise out of the log.
            ms: event.ms.map(|ms| (ms * 1000.0).round() / 1000.0),
            secrets: (request_kind || !event.secrets.is_empty()).then_some(&event.secrets[..]),
            conn: event.conn,
            name: event.name.as_deref(),
            qtype: event.qtype.as_deref(),
            server: event.server.as_deref(),
            tool: event.tool.as_deref(),
            argument: event.argument.as_deref(),
            form: event.form,
            credential: event.credential,
            message: event.message.as_deref(),
            phase: event.phase,
            count,
        }
    }
}

/// Replaces the value of every `key=value` pair of `query` by [`REDACTED`]; pairs without
/// `=` are kept as they are (`a=1&b` → `a=REDACTED&b`).
pub fn redact_query(query: &str) -> String {
    let mut redacted = String::with_capacity(query.len());
    for (index, pair) in query.split('&').enumerate() {
        if index > 0 {
            redacted.push('&');
        }
        match pair.split_once('=') {
            Some((key, _)) => {
                redacted.push_str(key);
                redacted.push('=');
                redacted.push_str(REDACTED);
            }
            None => redacted.push_str(pair),
        }
    }
    redacted
}

/// `time` as RFC 3339 UTC with microseconds: `2026-11-22T10:00:00.123456Z`. Times before
/// 1970 are written as the epoch.
pub fn format_timestamp(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let days = seconds / 86_400;
    let second_of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
        since_epoch.subsec_micros()
    )
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01 (H. Hinnant's
/// `civil_from_days`, restricted to dates from the epoch on).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01 so that leap days end each 400-year era.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::Duration;

    use super::*;

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(10_957), (2000, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1));
        assert_eq!(civil_from_days(47_540), (2100, 2, 28));
    }

    #[test]
    fn civil_dates_walk_the_calendar_day_by_day() {
        let month_length = |year: u64, month: u64| match month {
            2 if (year.is_multiple_of(4) && !year.is_multiple_of(100))
                || year.is_multiple_of(400) =>
            {
                29
            }
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut expected = (1970, 1, 1);
        for days in 0..200_000 {
            assert_eq!(civil_from_days(days), expected, "day {days}");
            let (year, month, day) = expected;
            expected = if day < month_length(year, month) {
                (year, month, day + 1)
            } else if month < 12 {
                (year, month + 1, 1)
            } else {
                (year + 1, 1, 1)
            };
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        let at = UNIX_EPOCH + Duration::new(1_795_341_600, 123_456_789);
        assert_eq!(format_timestamp(at), "2026-11-22T10:00:00.123456Z");
        assert_eq!(format_timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(format_timestamp(before), "1970-01-01T00:00:00.000000Z");
        let last = UNIX_EPOCH + Duration::new(951_868_799, 999_999_999);
        assert_eq!(format_timestamp(last), "2000-02-29T23:59:59.999999Z");
    }

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
        let log =
            AuditLog::with_sink(Output::new(Box::new(Stalled(stalled)), None), 4).expect("log");
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

    #[test]
    fn query_values_are_redacted() {
        assert_eq!(redact_query("a=1&b"), "a=REDACTED&b");
        assert_eq!(redact_query("a=1&a=2"), "a=REDACTED&a=REDACTED");
        assert_eq!(redact_query("token"), "token");
        assert_eq!(redact_query(""), "");
        assert_eq!(redact_query("a="), "a=REDACTED");
        assert_eq!(redact_query("a=b=c&&d=%3D%26"), "a=REDACTED&&d=REDACTED");
        assert_eq!(redact_query("k%20x=v%20y"), "k%20x=REDACTED");
    }
}
