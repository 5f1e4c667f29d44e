//! W3C trace context on forwarded requests (docs/policy.md, "audit"): with
//! `audit: {traceparent: true}` every allowed HTTP request goes upstream with
//! `traceparent: 00-<trace-id>-<span-id>-01`, and its audit line names the trace id
//! (`"trace"`), so that the upstream's traces and airlock's record join.
//!
//! The trace id is the decision's id (both are 128 bits), unless the command sent one valid
//! `traceparent` (W3C Trace Context level 1, version `00`): its trace id is kept (the
//! request stays in the command's trace) and airlock's span id replaces its parent id.
//! The span id is drawn from the decision id (unique within the process, never zero). An
//! invalid or repeated incoming `traceparent` is replaced, and its `tracestate` dropped.
//! Without the policy knob nothing is touched.

use airlock_audit::DecisionId;
use http::header::CONNECTION;
use http::{HeaderMap, HeaderValue};

/// The header's name.
const TRACEPARENT: &str = "traceparent";
/// The vendor state that goes with it.
const TRACESTATE: &str = "tracestate";

/// Sets `traceparent` on `headers` for the decision `id`; returns the trace id sent.
pub(crate) fn apply(headers: &mut HeaderMap, id: DecisionId) -> String {
    let own = id.to_string();
    let kept = incoming_trace(headers);
    if kept.is_none() {
        headers.remove(TRACESTATE);
    }
    let trace = kept.unwrap_or_else(|| own.clone());
    let value = format!("00-{trace}-{}-01", span_id(&own));
    // Hex digits and dashes only: always a valid header value.
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(TRACEPARENT, value);
    }
    unlist_from_connection(headers);
    trace
}

/// Takes `traceparent` out of `Connection`, which would otherwise have it stripped as
/// hop-by-hop on the way out (the command must not be able to drop it so).
fn unlist_from_connection(headers: &mut HeaderMap) {
    let listed = headers.get_all(CONNECTION).iter().any(|value| {
        value.to_str().map_or(true, |v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(TRACEPARENT))
        })
    });
    if !listed {
        return;
    }
    let kept: Vec<String> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|token| !token.is_empty() && !token.eq_ignore_ascii_case(TRACEPARENT))
        .map(str::to_owned)
        .collect();
    headers.remove(CONNECTION);
    if let Ok(value) = HeaderValue::from_str(&kept.join(", "))
        && !kept.is_empty()
    {
        headers.insert(CONNECTION, value);
    }
}

/// The trace id of the one valid incoming `traceparent`, if there is one.
fn incoming_trace(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(TRACEPARENT).iter();
    let value = values.next()?.to_str().ok()?;
    if values.next().is_some() {
        return None;
    }
    parse(value.trim()).map(str::to_owned)
}

/// The trace id of a valid version-00 `traceparent` value.
fn parse(value: &str) -> Option<&str> {
    let mut parts = value.split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let valid = parts.next().is_none()
        && version == "00"
        && hex(trace, 32)
        && !zero(trace)
        && hex(parent, 16)
        && !zero(parent)
        && hex(flags, 2);
    valid.then_some(trace)
}

/// A span id (16 hex digits) of the decision id `own` (32 hex digits): its two halves
/// mixed, one-to-one for ids of one process, and never zero.
fn span_id(own: &str) -> String {
    let half = |range: std::ops::Range<usize>| {
        own.get(range)
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .unwrap_or(0)
    };
    let span = half(0..16).rotate_left(17) ^ half(16..32);
    format!("{:016x}", if span == 0 { 1 } else { span })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_id_is_the_trace_id_without_an_incoming_one() {
        let mut headers = HeaderMap::new();
        headers.insert(TRACESTATE, HeaderValue::from_static("x=1"));
        let id = DecisionId::next();
        let trace = apply(&mut headers, id);
        assert_eq!(trace, id.to_string());
        let sent = headers[TRACEPARENT].to_str().unwrap().to_owned();
        assert_eq!(sent.len(), 55);
        assert!(sent.starts_with(&format!("00-{id}-")) && sent.ends_with("-01"));
        assert!(parse(&sent).is_some(), "{sent}");
        assert!(headers.get(TRACESTATE).is_none());
    }

    #[test]
    fn a_valid_incoming_trace_id_is_kept_with_a_new_span() {
        let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut headers = HeaderMap::new();
        headers.insert(TRACEPARENT, HeaderValue::from_static(incoming));
        headers.insert(TRACESTATE, HeaderValue::from_static("x=1"));
        let trace = apply(&mut headers, DecisionId::next());
        assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
        let sent = headers[TRACEPARENT].to_str().unwrap();
        assert!(sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        assert!(!sent.contains("00f067aa0ba902b7"), "a new span: {sent}");
        assert_eq!(headers[TRACESTATE], "x=1");
    }

    #[test]
    fn invalid_incoming_values_are_replaced() {
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "garbage",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        let mut headers = HeaderMap::new();
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        headers.append(TRACEPARENT, HeaderValue::from_static(valid));
        headers.append(TRACEPARENT, HeaderValue::from_static(valid));
        let id = DecisionId::next();
        assert_eq!(
            apply(&mut headers, id),
            id.to_string(),
            "two values: replaced"
        );
        assert_eq!(headers.get_all(TRACEPARENT).iter().count(), 1);
    }

    #[test]
    fn connection_cannot_strip_it() {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONNECTION,
            HeaderValue::from_static("keep-alive, TraceParent"),
        );
        apply(&mut headers, DecisionId::next());
        assert_eq!(headers[CONNECTION], "keep-alive");
        assert!(headers.get(TRACEPARENT).is_some());
    }

    #[test]
    fn span_ids_differ_between_decisions_and_are_never_zero() {
        let a = span_id(&DecisionId::next().to_string());
        let b = span_id(&DecisionId::next().to_string());
        assert_ne!(a, b);
        assert_eq!(span_id(&"0".repeat(32)), "0000000000000001");
    }
}
