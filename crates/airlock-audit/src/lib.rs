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
//! Keys appear in this order. `ts`, `kind`, `decision` and `rule` (`null` when no rule
//! decided) are always written; `secrets` is always written on `http`, `ws` and `mcp`
//! lines (`[]` when none); every other key is written only when known. `would` (always
//! `deny`) marks a line that report mode let through although the policy refuses it; its
//! `reason` is the refusal it would have had; `asked` (always `true`) marks a request ask
//! mode held and asked about:
//!
//! `ts kind decision would asked rule reason method scheme host port path query status
//! bytes_up bytes_down ms secrets conn name qtype server tool argument form credential
//! message phase refused lost count`
//!
//! `refused` and `lost` appear only on the `kind: audit` line written when the log can be
//! written again after an outage ([`writer`]).
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

pub mod ack;
pub mod fold;
pub mod output;
pub mod writer;

use std::borrow::Cow;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::ack::Acker;
pub use crate::ack::{Ack, Unavailable};
use crate::output::{Output, Rotation};
pub use crate::output::{ROTATED_KEEP, number_and_unit, parse_size};
pub use crate::writer::RETRY_INTERVAL;
use crate::writer::Writer;

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
    /// The audit log itself: written again after an outage, or its file reopened.
    Audit,
    /// A file the end-of-run check quarantined (or could not check), by name only.
    Fs,
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
    /// Requests refused while the log was unavailable (`audit` lines).
    pub refused: Option<u64>,
    /// Lines that could not be written while the log was unavailable (`audit` lines).
    pub lost: Option<u64>,
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
pub(crate) struct Health {
    /// `false` while the log is unavailable.
    pub(crate) healthy: AtomicBool,
    /// Applied to every serialised line before it is written ([`AuditLog::redact_with`]).
    pub(crate) filter: OnceLock<LineFilter>,
    /// Handed every line as written ([`AuditLog::tap_with`]).
    pub(crate) tap: OnceLock<LineTap>,
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
}

/// A last rewrite of each serialised line (the credentials' redactor: a real secret value
/// that reached an event anyway is written as `[REDACTED:NAME]`).
pub type LineFilter = Arc<dyn for<'a> Fn(&'a str) -> Cow<'a, str> + Send + Sync>;

/// Receives every line exactly as written (after the [`LineFilter`], without the newline),
/// on the writer thread: it must not block (hand the line on with a non-blocking send).
pub type LineTap = Arc<dyn Fn(&str) + Send + Sync>;

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
    /// the queue is full the log becomes unavailable (and the event is lost).
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

    fn queue(&self, event: AuditEvent, ack: Option<Acker>) {
        let Some(inner) = &self.inner else {
            return;
        };
        let Some(sender) = &inner.sender else {
            return;
        };
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
    refused: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lost: Option<u64>,
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
            refused: event.refused,
            lost: event.lost,
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
