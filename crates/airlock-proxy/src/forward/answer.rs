//! How a step of the request path stops a request: it hands back an [`Answered`], the
//! response whose audit line is already written. Owns [`Seen`] (the request as its `http`
//! audit line shows it), the [`Auditor`] that writes a request's refusals (made once per
//! request from the connection context, so that a step needs it, not the context), and
//! the bounded background drain of a refused request's body.

use std::time::Duration;

use airlock_audit::AuditLog;
use airlock_policy::{Decision, Reason};
use http::Response;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;

use crate::body::ProxyBody;
use crate::caller::ConnCaller;
use crate::context::ConnContext;
use crate::record::{Line, LineKind};
use crate::refusal::{self, Refused};

/// A response that ends the request path early; its audit line is written.
pub(super) type Answered = Response<ProxyBody>;

/// The most of a refused request's body read and discarded.
const DRAIN_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// How long a refused request's body is drained at most.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The request as its `http` audit line and its refusal body show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) method: String,
    /// `http` or `https`; `None` when the request was refused before its scheme was known.
    pub(super) scheme: Option<&'static str>,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) path: String,
    pub(super) query: Option<String>,
}

impl Seen {
    /// The `http` line of this request on connection `conn`, not yet decided.
    pub(super) fn into_line(self, conn: u64) -> Line {
        let mut line = Line::new(LineKind::Http, self.host, self.port, conn);
        line.method = Some(self.method);
        line.scheme = self.scheme;
        line.path = Some(self.path);
        line.query = self.query;
        line
    }
}

/// Who writes a request's audit lines: the log, the connection's id and the program
/// behind it (from a jail). Made once per request ([`Auditor::of`]); the steps that stop a
/// request take this, not the connection context.
#[derive(Clone, Copy)]
pub(super) struct Auditor<'c> {
    pub(super) audit: &'c AuditLog,
    pub(super) conn: u64,
    caller: Option<&'c ConnCaller>,
}

impl<'c> Auditor<'c> {
    /// The auditor of connection `conn`'s requests, written to `audit`, from the program
    /// `caller` (from a jail).
    pub(super) fn new(audit: &'c AuditLog, conn: u64, caller: Option<&'c ConnCaller>) -> Self {
        Auditor {
            audit,
            conn,
            caller,
        }
    }

    /// The auditor of a request on `context`'s connection.
    pub(super) fn of(context: &'c ConnContext) -> Self {
        Auditor::new(&context.shared.audit, context.id, context.caller.as_deref())
    }

    /// The program behind the connection, as its `ask` shows it (docs/watch.md).
    pub(super) fn process(&self) -> Option<serde_json::Value> {
        serde_json::to_value(&self.caller?.process).ok()
    }

    /// The `http` line of the request `seen` (with the process behind it, from a jail).
    pub(super) fn line(&self, seen: Seen) -> Line {
        let mut line = seen.into_line(self.conn);
        line.process = self.caller.map(|caller| caller.process.clone());
        line
    }

    /// Writes the refusal's audit line for the request `seen` and builds its 403.
    pub(super) fn refuse(&self, decision: Decision, seen: Seen) -> Answered {
        self.refuse_line(decision, self.line(seen))
    }

    /// Writes the refusal's `http` audit line (its request fields already filled in) and
    /// builds its 403 (503 for `overloaded`).
    pub(super) fn refuse_line(&self, decision: Decision, line: Line) -> Answered {
        let reason = decision.reason.unwrap_or(Reason::HostNotAllowed);
        let response = if reason == Reason::Overloaded {
            refusal::overloaded()
        } else {
            Refused {
                reason,
                method: line.method.as_deref().unwrap_or_default(),
                host: &line.host,
                path: line.path.as_deref(),
                rule: decision.rule.as_deref(),
                id: line.id,
            }
            .response_asked(line.asked)
        };
        self.write_refusal(decision, reason, line, response)
    }

    /// The 408 of an inspected body not complete within `limits.body_timeout`, audited as
    /// a `body_uninspectable` refusal by `rule`.
    pub(super) fn refuse_timeout(&self, rule: Option<String>, line: Line) -> Answered {
        let reason = Reason::BodyUninspectable;
        let decision = Decision::deny(reason, rule);
        self.write_refusal(decision, reason, line, refusal::request_timeout())
    }

    /// Writes a refusal's audit line (status from `response`) and hands `response` back.
    fn write_refusal(
        &self,
        decision: Decision,
        reason: Reason,
        mut line: Line,
        response: Answered,
    ) -> Answered {
        line.refuse(decision.rule, reason);
        line.status = Some(response.status().as_u16());
        line.write(self.audit);
        response
    }
}

/// [`Auditor::refuse_line`] on `context`'s connection (for steps that still take the
/// context: `forward/refresh.rs`).
pub(super) fn refuse_line(context: &ConnContext, decision: Decision, line: Line) -> Answered {
    Auditor::of(context).refuse_line(decision, line)
}

/// [`Auditor::refuse_timeout`] on `context`'s connection (for `forward/refresh.rs`).
pub(super) fn refuse_timeout(context: &ConnContext, rule: Option<String>, line: Line) -> Answered {
    Auditor::of(context).refuse_timeout(rule, line)
}

/// Sends a refusal while the refused request's body is read and discarded in the
/// background (bounded in size and time), so that a client still uploading — an HTTP/2
/// stream especially — reads the 403 instead of a reset.
pub(super) fn after_draining(mut body: Incoming, response: Answered) -> Answered {
    if body.is_end_stream() {
        return response;
    }
    tokio::spawn(async move {
        let mut left = DRAIN_LIMIT_BYTES;
        let draining = async {
            while let Some(Ok(frame)) = body.frame().await {
                let len = frame.data_ref().map_or(0, |d| d.len());
                match left.checked_sub(len) {
                    Some(rest) => left = rest,
                    None => return,
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, draining).await;
    });
    response
}

/// An audit log in memory for the steps' unit tests: every event it writes is kept.
#[cfg(test)]
pub(super) mod kept {
    use std::sync::{Arc, Mutex};

    use airlock_audit::event::AuditEvent;
    use airlock_audit::{AuditLog, Written};

    /// A log writing nowhere whose written events are kept, in order.
    pub(in super::super) fn log() -> (AuditLog, Arc<Mutex<Vec<AuditEvent>>>) {
        let log = AuditLog::discarding().expect("an in-memory log");
        let kept = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&kept);
        log.tap_with(Arc::new(move |written: &Written<'_>| {
            sink.lock().unwrap().push(written.event.clone());
        }));
        (log, kept)
    }

    /// The events `log` has written so far (waiting for its writer).
    pub(in super::super) fn written(
        log: &AuditLog,
        kept: &Mutex<Vec<AuditEvent>>,
    ) -> Vec<AuditEvent> {
        log.flush();
        std::mem::take(&mut *kept.lock().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seen_request_becomes_an_undecided_http_line() {
        let seen = Seen {
            method: "POST".into(),
            scheme: Some("https"),
            host: "api.example.com".into(),
            port: 8443,
            path: "/v1/x".into(),
            query: Some("a=1".into()),
        };
        let line = seen.into_line(7);
        assert!(matches!(line.kind, LineKind::Http));
        assert_eq!(line.method.as_deref(), Some("POST"));
        assert_eq!(line.scheme, Some("https"));
        assert_eq!(
            (line.host.as_str(), line.port, line.conn),
            ("api.example.com", 8443, 7)
        );
        assert_eq!(line.path.as_deref(), Some("/v1/x"));
        assert_eq!(line.query.as_deref(), Some("a=1"));
        assert!(!line.allowed && line.reason.is_none() && line.status.is_none());
    }
}

#[cfg(test)]
mod auditor_tests {
    use airlock_audit::event::Decision as Logged;
    use http::StatusCode;

    use super::*;

    fn seen() -> Seen {
        Seen {
            method: "GET".into(),
            scheme: Some("https"),
            host: "api.example.com".into(),
            port: 443,
            path: "/v1/x".into(),
            query: None,
        }
    }

    #[test]
    fn a_refusal_is_answered_and_written_once_on_its_connection() {
        let (log, kept) = kept::log();
        let auditor = Auditor::new(&log, 42, None);
        let decision = Decision::deny(Reason::PathNotAllowed, Some("network.allow[0]".into()));
        let response = auditor.refuse(decision, seen());
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let events = kept::written(&log, &kept);
        assert_eq!(events.len(), 1, "one refusal, one line: {events:?}");
        let event = &events[0];
        assert_eq!(event.decision, Logged::Deny);
        assert_eq!(event.conn, Some(42));
        assert_eq!(event.status, Some(403));
        assert_eq!(event.reason, Some(Reason::PathNotAllowed.as_str()));
        assert_eq!(event.rule.as_deref(), Some("network.allow[0]"));
        assert_eq!(
            (event.method.as_deref(), event.path.as_deref()),
            (Some("GET"), Some("/v1/x"))
        );
        assert_eq!(event.process, None, "no jail, no process");
    }

    #[test]
    fn overloaded_is_a_503_and_a_late_body_a_408_each_audited() {
        let (log, kept) = kept::log();
        let auditor = Auditor::new(&log, 7, None);
        let line = auditor.line(seen());
        let busy = auditor.refuse_line(Decision::deny(Reason::Overloaded, None), line.clone());
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        let late = auditor.refuse_timeout(Some("guard".into()), line);
        assert_eq!(late.status(), StatusCode::REQUEST_TIMEOUT);
        let events = kept::written(&log, &kept);
        let shown: Vec<_> = events.iter().map(|e| (e.status, e.reason)).collect();
        assert_eq!(
            shown,
            [
                (Some(503), Some(Reason::Overloaded.as_str())),
                (Some(408), Some(Reason::BodyUninspectable.as_str())),
            ]
        );
        assert_eq!(events[1].rule.as_deref(), Some("guard"));
    }
}
