//! What the control plane reads of an audit line: the few fields that the fan-out filters
//! on and the metrics count. The audit tap hands them over typed ([`Summary::of`], from
//! the event the line was written from); a line given as text (tests, replays) is read
//! with serde. The lowest module of the crate: it imports nothing from it.

use airlock_audit::Written;

/// The fields of an audit line that the hub and the metrics look at.
#[derive(serde::Deserialize)]
pub(crate) struct Summary {
    pub(crate) kind: String,
    pub(crate) decision: String,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) bytes_up: Option<u64>,
    #[serde(default)]
    pub(crate) bytes_down: Option<u64>,
    #[serde(default)]
    pub(crate) ms: Option<f64>,
    /// `open` on the line written when a long-lived connection opens.
    #[serde(default)]
    pub(crate) phase: Option<String>,
    /// How many identical events the line stands for (folded lines; absent = 1).
    #[serde(default)]
    pub(crate) count: Option<u64>,
}

impl Summary {
    /// The summary of a written line, from its typed event (the same values the line
    /// shows: `ms` rounded to the microsecond as written).
    pub(crate) fn of(written: &Written<'_>) -> Summary {
        let event = written.event;
        Summary {
            kind: event.kind.as_str().to_owned(),
            decision: event.decision.as_str().to_owned(),
            reason: event.reason.map(str::to_owned),
            bytes_up: event.bytes_up,
            bytes_down: event.bytes_down,
            ms: event.ms.map(|ms| (ms * 1000.0).round() / 1000.0),
            phase: event.phase.map(|phase| phase.as_str().to_owned()),
            count: written.count,
        }
    }
}

#[cfg(test)]
mod tests {
    use airlock_audit::{AuditEvent, Decision, Kind, Phase};

    use super::*;

    #[test]
    fn the_typed_summary_is_the_parsed_one() {
        let event = AuditEvent {
            kind: Kind::Ws,
            decision: Decision::Deny,
            reason: Some("secret_out_of_scope"),
            bytes_up: Some(3),
            bytes_down: Some(5),
            ms: Some(1.234_567_8),
            phase: Some(Phase::Close),
            ..AuditEvent::default()
        };
        let text = r#"{"kind":"ws","decision":"deny","reason":"secret_out_of_scope","bytes_up":3,"bytes_down":5,"ms":1.235,"phase":"close","count":2}"#;
        let typed = Summary::of(&Written {
            text,
            event: &event,
            count: Some(2),
        });
        let parsed: Summary = serde_json::from_str(text).unwrap();
        assert_eq!(
            (typed.kind, typed.decision, typed.reason),
            (parsed.kind, parsed.decision, parsed.reason)
        );
        assert_eq!(
            (typed.bytes_up, typed.bytes_down, typed.phase, typed.count),
            (
                parsed.bytes_up,
                parsed.bytes_down,
                parsed.phase,
                parsed.count
            )
        );
        assert_eq!(typed.ms, parsed.ms);
    }
}
