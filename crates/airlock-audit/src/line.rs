//! The serialised form of an [`AuditEvent`]: [`Line`] borrows the event and fixes the key
//! order of the JSON line (docs/contract.md §5, the crate documentation); the one place an
//! event becomes text.

use serde::Serialize;

use crate::REDACTED;
use crate::event::{AuditEvent, Decision, DecisionId, Kind, Phase};

/// One line as written, handed to the [`crate::LineTap`]: the text (after the
/// [`crate::LineFilter`], without the newline) and the typed event it was made from, so
/// that the control plane counts the event without parsing the text back.
#[derive(Clone, Copy, Debug)]
pub struct Written<'a> {
    /// The line exactly as written.
    pub text: &'a str,
    /// The event the line was serialised from.
    pub event: &'a AuditEvent,
    /// How many folded events the line stands for (`None`: one).
    pub count: Option<u64>,
}

/// The serialised form of an event (field order = key order of the line).
#[derive(Serialize)]
pub(crate) struct Line<'a> {
    ts: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<DecisionId>,
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
    process: Option<&'a airlock_process::Caller>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<&'a str>,
    // EXTENSIONS: an optional key of [`AuditEvent`] is written here (before `count`, which
    // stays last) with `skip_serializing_if = "Option::is_none"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
}

impl<'a> Line<'a> {
    /// The line of `event` stamped `ts`, standing for `count` folded events.
    pub(crate) fn new(ts: &'a str, event: &'a AuditEvent, count: Option<u64>) -> Self {
        let request_kind = matches!(event.kind, Kind::Http | Kind::Ws | Kind::Mcp);
        Line {
            ts,
            id: event.id,
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
            process: event.process.as_ref(),
            trace: event.trace.as_deref(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
