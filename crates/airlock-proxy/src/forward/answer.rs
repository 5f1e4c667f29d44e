//! How a step of the request path stops a request: it hands back an [`Answered`], the
//! response whose audit line is already written. Owns [`Seen`] (the request as its `http`
//! audit line shows it), the refusal helpers built on it, and the bounded background
//! drain of a refused request's body.

use std::time::Duration;

use airlock_policy::{Decision, Reason};
use http::Response;
use http_body::Body as _;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;

use crate::body::ProxyBody;
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

    /// The `http` line of this request on `context`'s connection (with the process
    /// behind it, from a jail).
    pub(super) fn line_of(self, context: &ConnContext) -> Line {
        context.stamp(self.into_line(context.id))
    }
}

/// Writes the refusal's audit line for the request `seen` and builds its 403.
pub(super) fn refuse(context: &ConnContext, decision: Decision, seen: Seen) -> Answered {
    refuse_line(context, decision, seen.line_of(context))
}

/// Writes the refusal's `http` audit line (its request fields already filled in) and
/// builds its 403 (503 for `overloaded`).
pub(super) fn refuse_line(context: &ConnContext, decision: Decision, line: Line) -> Answered {
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
    write_refusal(context, decision, reason, line, response)
}

/// The 408 of an inspected body not complete within `limits.body_timeout`, audited as a
/// `body_uninspectable` refusal by `rule`.
pub(super) fn refuse_timeout(context: &ConnContext, rule: Option<String>, line: Line) -> Answered {
    let reason = Reason::BodyUninspectable;
    let decision = Decision::deny(reason, rule);
    write_refusal(context, decision, reason, line, refusal::request_timeout())
}

/// Writes a refusal's audit line (status from `response`) and hands `response` back.
fn write_refusal(
    context: &ConnContext,
    decision: Decision,
    reason: Reason,
    mut line: Line,
    response: Answered,
) -> Answered {
    line.refuse(decision.rule, reason);
    line.status = Some(response.status().as_u16());
    line.write(&context.shared.audit);
    response
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
