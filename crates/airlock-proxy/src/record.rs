//! The audit step of the data path: what one decision looked like, written as one line of
//! the audit log (docs/contract.md §5). [`Exchange`] follows an allowed request while its
//! response streams and writes its `http` (or `ws`) line at the end, so that the line
//! carries the status, the bytes moved each way and the duration: [`Exchange::finish`]
//! writes it acknowledged, and the response body holds its last bytes until the writer
//! has written it (or aborts the transfer when it could not be: no answer reaches a client
//! whole without its line, docs/reliability.md); an exchange dropped unfinished (the client
//! went away) writes it without waiting. Refusals and tunnel decisions are written at once
//! with [`Line::write`]. A long-lived `tcp` or `ws`
//! connection also gets a line when it opens ([`Line::write_open`], `"phase":"open"`), and
//! its line at the end then says `"phase":"close"`.
//!
//! This module is the only one that touches [`airlock_audit`]'s event type.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use airlock_audit::{Ack, AuditEvent, AuditLog, DecisionId, Phase};
use airlock_credentials::Finding;
use airlock_policy::{Decision, Reason};

/// The kinds of audit line the data plane writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// One HTTP request.
    Http,
    /// One upgraded WebSocket, at close.
    Ws,
    /// One raw TCP (or TLS passthrough) connection, at close or refusal.
    Tcp,
    /// One MCP `tools/call` decision.
    Mcp,
}

/// One audit line, before it is written.
#[derive(Clone, Debug)]
pub struct Line {
    /// The decision's id (`"id"` on the line and in its refusal body, docs/contract.md §5).
    pub id: DecisionId,
    /// What was decided on.
    pub kind: LineKind,
    /// Whether it passed.
    pub allowed: bool,
    /// The rule that decided, if any.
    pub rule: Option<String>,
    /// Why it was refused.
    pub reason: Option<Reason>,
    /// Report mode let it through although the policy refuses it for this reason: written
    /// as `"would":"deny"` with this `reason` on an `allow` line.
    pub would: Option<Reason>,
    /// Ask mode held it and asked about it: written as `"asked":true`.
    pub asked: bool,
    /// The request was malformed and answered 400: logged with reason `bad_request`.
    pub malformed: bool,
    /// The request method (HTTP and WebSocket lines).
    pub method: Option<String>,
    /// `http` or `https` (HTTP and WebSocket lines).
    pub scheme: Option<&'static str>,
    /// The canonical host (a name or an address).
    pub host: String,
    /// The destination port.
    pub port: u16,
    /// The canonical path without query.
    pub path: Option<String>,
    /// The raw query (the writer redacts its values).
    pub query: Option<String>,
    /// The response status.
    pub status: Option<u16>,
    /// Bytes from the client to the upstream.
    pub bytes_up: u64,
    /// Bytes from the upstream to the client.
    pub bytes_down: u64,
    /// Milliseconds from decision to end.
    pub ms: Option<f64>,
    /// Names of the secrets swapped into the request.
    pub secrets: Vec<String>,
    /// The client connection's id.
    pub conn: u64,
    /// The MCP tool name (`mcp` lines).
    pub tool: Option<String>,
    /// The guarded argument's name on `mcp_argument_denied` lines.
    pub argument: Option<String>,
    /// How a refused credential travelled (`surrogate`, `real`, `cleartext`).
    pub form: Option<&'static str>,
    /// The well-known credential kind found (`credential_outbound`, or logged by `dlp`).
    pub credential: Option<&'static str>,
    /// An open line was written ([`Line::write_open`]): this one closes the connection.
    pub opened: bool,
    /// The answer was refused because the audit log could not be written (reason
    /// `audit_log_unavailable`).
    pub audit_refused: bool,
    /// The process behind a connection from a jail (`Some(None)`: not found, written as
    /// `"process":null`); `None` for connections from outside any jail.
    pub process: Option<airlock_process::Caller>,
    /// The trace id sent upstream in `traceparent` ([`crate::traceparent`]).
    pub trace: Option<String>,
}

impl Line {
    /// A line with only the destination filled in.
    pub fn new(kind: LineKind, host: String, port: u16, conn: u64) -> Self {
        Line {
            id: DecisionId::next(),
            kind,
            allowed: false,
            rule: None,
            reason: None,
            would: None,
            asked: false,
            malformed: false,
            method: None,
            scheme: None,
            host,
            port,
            path: None,
            query: None,
            status: None,
            bytes_up: 0,
            bytes_down: 0,
            ms: None,
            secrets: Vec::new(),
            conn,
            tool: None,
            argument: None,
            form: None,
            credential: None,
            opened: false,
            audit_refused: false,
            process: None,
            trace: None,
        }
    }

    /// The line of a connection closed without a byte relayed: `tcp`, refused for
    /// `reason`.
    pub fn tcp_refused(host: String, port: u16, conn: u64, reason: Reason) -> Self {
        let mut line = Line::new(LineKind::Tcp, host, port, conn);
        line.reason = Some(reason);
        line
    }

    /// Marks the line a refusal for `reason` by `rule` (if a rule decided it). Nothing
    /// passed: no `would`, no secrets.
    pub fn refuse(&mut self, rule: Option<String>, reason: Reason) {
        self.allowed = false;
        self.would = None;
        self.secrets.clear();
        self.rule = rule;
        self.reason = Some(reason);
    }

    /// Marks the line allowed by `rule`; `would` is the refusal report mode set aside.
    pub fn allow(&mut self, rule: Option<String>, would: Option<Reason>) {
        self.allowed = true;
        self.rule = rule;
        self.would = would;
    }

    /// Marks the line a malformed request answered `status` (written with reason
    /// `bad_request`): nothing decided it, nothing passed.
    pub fn refuse_malformed(&mut self, status: u16) {
        self.allowed = false;
        self.rule = None;
        self.malformed = true;
        self.status = Some(status);
    }

    /// Writes the line of a long-lived connection that just opened: `"phase":"open"`, without
    /// bytes or duration. The line itself, written at the end, then says `"phase":"close"`.
    /// Returns the writer's acknowledgement: the relay starts once it resolves `Ok`, and
    /// never when it does not (docs/reliability.md, "The audit log's disk").
    pub fn write_open(&mut self, audit: &AuditLog) -> Ack {
        self.opened = true;
        let mut event = self.clone().into_event();
        event.phase = Some(Phase::Open);
        event.bytes_up = None;
        event.bytes_down = None;
        event.ms = None;
        audit.record_acked(event)
    }

    /// Writes the line to `audit`.
    pub fn write(self, audit: &AuditLog) {
        audit.record(self.into_event());
    }

    fn into_event(self) -> AuditEvent {
        let kind = match self.kind {
            LineKind::Http => airlock_audit::Kind::Http,
            LineKind::Ws => airlock_audit::Kind::Ws,
            LineKind::Tcp => airlock_audit::Kind::Tcp,
            LineKind::Mcp => airlock_audit::Kind::Mcp,
        };
        let decision = if self.allowed {
            airlock_audit::Decision::Allow
        } else {
            airlock_audit::Decision::Deny
        };
        AuditEvent {
            id: Some(self.id),
            kind,
            decision,
            would: self.would.map(|_| "deny"),
            asked: self.asked.then_some(true),
            rule: self.rule,
            reason: self
                .reason
                .or(self.would)
                .map(Reason::as_str)
                .or(self.malformed.then_some("bad_request"))
                .or(self
                    .audit_refused
                    .then_some(airlock_audit::writer::UNAVAILABLE)),
            method: self.method,
            scheme: self.scheme,
            host: Some(self.host),
            port: Some(self.port),
            path: self.path,
            query: self.query,
            status: self.status,
            bytes_up: Some(self.bytes_up),
            bytes_down: Some(self.bytes_down),
            ms: self.ms,
            secrets: self.secrets,
            conn: Some(self.conn),
            tool: self.tool,
            argument: self.argument,
            form: self.form,
            credential: self.credential,
            phase: self.opened.then_some(Phase::Close),
            process: self.process,
            trace: self.trace,
            ..AuditEvent::default()
        }
    }
}

/// An allowed request in flight: written as one line when dropped (response body ended,
/// failed or abandoned by the client).
pub struct Exchange {
    audit: AuditLog,
    started: Instant,
    line: Line,
    sent: Option<Arc<AtomicU64>>,
    body: Option<Arc<BodyReport>>,
    /// The line was written ([`Exchange::finish`]): nothing to write on drop.
    finished: bool,
}

impl Exchange {
    /// Starts following `line` (its `allowed`, `rule`, method, path... already filled);
    /// `sent` counts the request body bytes relayed upstream.
    pub fn new(
        audit: AuditLog,
        started: Instant,
        line: Line,
        sent: Option<Arc<AtomicU64>>,
    ) -> Self {
        Exchange {
            audit,
            started,
            line,
            sent,
            body: None,
            finished: false,
        }
    }

    /// Writes the exchange's line now and returns the writer's acknowledgement: the
    /// caller holds the end of the answer until it resolves, and aborts (or refuses) it
    /// when it resolves as not written.
    pub fn finish(mut self) -> Ack {
        self.finished = true;
        let line = self.final_line();
        self.audit.record_acked(line.into_event())
    }

    /// Whether the answer has no body the client waits for (a `HEAD`, a 1xx, 204 or 304):
    /// its line is then finished before the head is sent.
    pub fn bodiless(&self) -> bool {
        self.line.method.as_deref() == Some("HEAD")
            || self
                .line
                .status
                .is_some_and(|status| status < 200 || status == 204 || status == 304)
    }

    /// Turns the exchange into a refusal for the audit log (its answer becomes the 503
    /// `audit_log_unavailable`); the line, if it can be written at all, says so.
    pub fn refuse_for_audit(&mut self) {
        self.line.allowed = false;
        self.line.would = None;
        self.line.secrets.clear();
        self.line.audit_refused = true;
        self.line.status = Some(503);
    }

    /// Also lists the secrets swapped in the request body (known once it has been sent).
    pub fn follow_body(&mut self, report: Arc<BodyReport>) {
        self.body = Some(report);
    }

    /// Sets the response status.
    pub fn set_status(&mut self, status: u16) {
        self.line.status = Some(status);
    }

    /// Turns the line into a `ws` line (the request was upgraded).
    pub fn set_kind(&mut self, kind: LineKind) {
        self.line.kind = kind;
    }

    /// Writes the `"phase":"open"` line of the upgraded connection ([`Line::write_open`]);
    /// returns the writer's acknowledgement, which the relay waits for.
    pub fn write_open(&mut self) -> Ack {
        self.line.write_open(&self.audit)
    }

    /// Adds `n` response bytes relayed to the client.
    pub fn add_bytes_down(&mut self, n: u64) {
        self.line.bytes_down += n;
    }

    /// Adds `n` request bytes relayed to the upstream.
    pub fn add_bytes_up(&mut self, n: u64) {
        self.line.bytes_up += n;
    }

    /// Writes at once one extra `deny` line of the exchange's kind for a refusal inside
    /// it (a WebSocket message its guards refused): the exchange's request fields, `decision`'s
    /// reason and rule (and how a credential travelled, for the outbound guard's
    /// refusals), no status, bytes or secrets. The exchange's own line is still
    /// written when it ends.
    pub fn write_refusal(&self, decision: Decision, finding: Option<&Finding>) {
        let own = &self.line;
        let mut line = Line::new(own.kind, own.host.clone(), own.port, own.conn);
        line.form = finding.and_then(|finding| finding.form.as_audit());
        line.credential = finding.and_then(|finding| finding.kind);
        line.reason = decision.reason;
        line.rule = decision.rule;
        line.method = own.method.clone();
        line.scheme = own.scheme;
        line.path = own.path.clone();
        line.query = own.query.clone();
        line.process = own.process.clone();
        line.write(&self.audit);
    }

    /// Records how a credential the outbound guard found in the body travelled.
    pub fn note_credential(&mut self, finding: Option<&Finding>) {
        if let Some(finding) = finding {
            self.line.form = finding.form.as_audit();
            self.line.credential = finding.kind;
        }
    }

    /// Turns the exchange into a refusal (the address guard or a tripped body refused what
    /// was allowed) and returns its line, for [`crate::refusal::refuse_exchange`].
    pub fn deny(&mut self, decision: Decision) -> &Line {
        let reason = decision.reason.unwrap_or(Reason::PrivateAddress);
        self.line.refuse(decision.rule, reason);
        &self.line
    }
}

impl Exchange {
    /// The line as it stands at the end: bytes, duration, a body the guards stopped.
    fn final_line(&mut self) -> Line {
        let mut line = Line::new(LineKind::Http, String::new(), 0, 0);
        std::mem::swap(&mut line, &mut self.line);
        if let Some(sent) = &self.sent {
            line.bytes_up += sent.load(Ordering::Relaxed);
        }
        if let Some(report) = &self.body
            && line.allowed
            && report.tripped()
        {
            // The upstream answered before the body was refused: the request still did
            // not get through whole, and the line says why.
            let cause = report.cause().unwrap_or(Trip::Surrogate);
            let rule = line.rule.take();
            line.refuse(rule, cause.reason());
            line.form = cause.finding().and_then(|f| f.form.as_audit());
            line.credential = cause.finding().and_then(|f| f.kind);
        }
        if let Some(report) = &self.body
            && line.allowed
        {
            line.credential = line.credential.or(report.logged());
            for name in report.swapped() {
                if !line.secrets.contains(&name) {
                    line.secrets.push(name);
                }
            }
        }
        line.ms = Some(self.started.elapsed().as_secs_f64() * 1000.0);
        line
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if !self.finished {
            let line = self.final_line();
            line.write(&self.audit);
        }
    }
}

/// Why a request body was stopped on its way upstream.
#[derive(Clone, Debug)]
pub enum Trip {
    /// A surrogate of a secret not in scope (`secret_out_of_scope`).
    Surrogate,
    /// The outbound guard found a credential.
    Credential(Finding),
    /// Its content coding could not be undone within the bounds (`body_uninspectable`).
    Undecodable,
    /// Its decoded bytes found no room in `limits.buffer_memory` in time (`overloaded`).
    Overloaded,
}

impl Trip {
    /// The refusal reason.
    pub fn reason(&self) -> Reason {
        match self {
            Trip::Surrogate => Reason::SecretOutOfScope,
            Trip::Credential(finding) => finding.reason,
            Trip::Undecodable => Reason::BodyUninspectable,
            Trip::Overloaded => Reason::Overloaded,
        }
    }

    /// The guard's finding, if the guard stopped it.
    pub fn finding(&self) -> Option<&Finding> {
        match self {
            Trip::Credential(finding) => Some(finding),
            _ => None,
        }
    }
}

/// What an inspected request body did: whether it was stopped (and why), the secrets
/// swapped in it, and the credential kinds `dlp: {credentials: log}` only logs.
#[derive(Debug, Default)]
pub struct BodyReport {
    tripped: AtomicBool,
    trip: Mutex<Option<Trip>>,
    swapped: Mutex<Vec<String>>,
    logged: Mutex<Vec<&'static str>>,
}

impl BodyReport {
    /// Whether the body was stopped (the upload was aborted).
    pub fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Relaxed)
    }

    /// Marks the body as stopped for `trip`.
    pub(crate) fn trip(&self, trip: Trip) {
        *self.trip.lock().unwrap_or_else(PoisonError::into_inner) = Some(trip);
        self.tripped.store(true, Ordering::Relaxed);
    }

    /// Why the body was stopped, if it was.
    pub fn cause(&self) -> Option<Trip> {
        self.trip
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the credential kinds found and only logged.
    pub(crate) fn set_logged(&self, kinds: &[&'static str]) {
        *self.logged.lock().unwrap_or_else(PoisonError::into_inner) = kinds.to_vec();
    }

    /// The first credential kind found and only logged.
    pub fn logged(&self) -> Option<&'static str> {
        self.logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .first()
            .copied()
    }

    /// Records the secrets swapped in the body.
    pub(crate) fn set_swapped(&self, names: Vec<String>) {
        *self.swapped.lock().unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// The names of the secrets swapped in the body, in policy order.
    pub fn swapped(&self) -> Vec<String> {
        self.swapped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_nothing_of_what_was_let_through() {
        let mut line = Line::new(LineKind::Http, "a.example".into(), 443, 1);
        line.allow(
            Some("network.allow[0]".into()),
            Some(Reason::PathNotAllowed),
        );
        line.secrets.push("KEY".into());
        assert!(line.allowed);
        line.refuse(None, Reason::SecretOutOfScope);
        assert!(!line.allowed && line.would.is_none() && line.secrets.is_empty());
        assert_eq!(line.reason, Some(Reason::SecretOutOfScope));
        assert_eq!(line.rule, None);
    }

    #[test]
    fn a_malformed_request_is_decided_by_no_rule() {
        let mut line = Line::new(LineKind::Http, "a.example".into(), 80, 1);
        line.allow(Some("network.allow[0]".into()), None);
        line.refuse_malformed(400);
        assert!(!line.allowed && line.malformed && line.rule.is_none());
        assert_eq!(line.status, Some(400));
        let tcp = Line::tcp_refused("10.0.0.1".into(), 0, 0, Reason::Overloaded);
        assert_eq!(
            (tcp.kind, tcp.reason),
            (LineKind::Tcp, Some(Reason::Overloaded))
        );
        assert!(!tcp.allowed);
    }
}
