//! One audit line as an OTLP log record, and a batch of them as an export request: pure
//! functions, no I/O (docs/operations.md, "OTLP export", has the mapping).
//!
//! The record's body is the line exactly as written to the file (its `chain` included, so
//! that the chain can be checked from the exported copy); the main fields are copied into
//! attributes named `airlock.*`, read from airlock's shape or, for `--audit-format ocsf`,
//! from where the OCSF event puts them. A `deny` line is `WARN`, anything else `INFO`. The
//! timestamp is the line's own (`ts`, or OCSF's `time`); a line that has a `trace` id
//! (docs/policy.md, `traceparent`) carries it as the record's `trace_id`.

use prost::Message;
use serde_json::{Map, Value};

use super::proto::{
    AnyValue, ExportLogsServiceRequest, InstrumentationScope, KeyValue, LogRecord, Resource,
    ResourceLogs, SEVERITY_INFO, SEVERITY_WARN, ScopeLogs,
};

/// The attributes a record may carry: (attribute name, key on airlock's line, paths into
/// an OCSF event).
const ATTRIBUTES: &[(&str, &str, &[&[&str]])] = &[
    ("airlock.id", "id", &[&["metadata", "uid"]]),
    ("airlock.kind", "kind", &[&["unmapped", "kind"]]),
    ("airlock.decision", "decision", &[]),
    ("airlock.rule", "rule", &[&["unmapped", "rule"]]),
    ("airlock.reason", "reason", &[&["unmapped", "reason"]]),
    (
        "airlock.host",
        "host",
        &[
            &["http_request", "url", "hostname"],
            &["dst_endpoint", "hostname"],
            &["dst_endpoint", "ip"],
        ],
    ),
    (
        "airlock.method",
        "method",
        &[&["http_request", "http_method"]],
    ),
    ("airlock.trace", "trace", &[&["unmapped", "trace"]]),
];

/// Who sends the records: the resource every batch is labelled with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `service.instance.id`: this process's instance (the random half of its decision ids).
    pub instance: String,
    /// `host.name`, when known.
    pub host_name: Option<String>,
}

impl Identity {
    /// This process: its decision ids' random half and the kernel's host name.
    pub fn this_process() -> Identity {
        let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|name| name.trim().to_owned())
            .filter(|name| !name.is_empty());
        Identity {
            instance: crate::id::DecisionId::instance(),
            host_name,
        }
    }
}

/// The log record of one audit line (`line` as written, without its newline); `observed`
/// is when the exporter took it, in nanoseconds since the epoch.
pub fn record(line: &str, observed: u64) -> LogRecord {
    let parsed: Option<Map<String, Value>> = serde_json::from_str(line).ok();
    let mut attributes = Vec::new();
    let mut time = 0;
    let mut deny = false;
    let mut trace_id = Vec::new();
    if let Some(fields) = &parsed {
        let ocsf = fields.contains_key("class_uid");
        for (name, key, paths) in ATTRIBUTES {
            if let Some(value) = lookup(fields, key, paths, ocsf) {
                attributes.push(KeyValue::string(name, value));
            }
        }
        let decision = if ocsf {
            match fields.get("action_id").and_then(Value::as_u64) {
                Some(1) => Some("allow"),
                Some(2) => Some("deny"),
                _ => None,
            }
        } else {
            fields.get("decision").and_then(Value::as_str)
        };
        if let (Some(decision), true) = (decision, ocsf) {
            attributes.push(KeyValue::string("airlock.decision", decision));
        }
        deny = decision == Some("deny");
        time = line_time(fields).unwrap_or(0);
        if let Some(trace) = lookup(fields, "trace", &[&["unmapped", "trace"]], ocsf) {
            trace_id = hex_bytes(trace).unwrap_or_default();
        }
    }
    let (severity_number, severity_text) = if deny {
        (SEVERITY_WARN, "WARN")
    } else {
        (SEVERITY_INFO, "INFO")
    };
    LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: observed,
        severity_number,
        severity_text: severity_text.to_owned(),
        body: Some(AnyValue::string(line)),
        attributes,
        trace_id,
        ..LogRecord::default()
    }
}

/// The export request of `records`, labelled with `identity`.
pub fn request(identity: &Identity, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    let mut attributes = vec![
        KeyValue::string("service.name", "airlock"),
        KeyValue::string("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::string("service.instance.id", identity.instance.clone()),
    ];
    if let Some(host) = &identity.host_name {
        attributes.push(KeyValue::string("host.name", host.clone()));
    }
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource { attributes }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "airlock.audit".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                }),
                log_records: records,
            }],
        }],
    }
}

/// The protobuf bytes of the export request of `lines`.
pub fn encode(identity: &Identity, lines: &[String], observed: u64) -> Vec<u8> {
    let records = lines.iter().map(|line| record(line, observed)).collect();
    request(identity, records).encode_to_vec()
}

/// A field's text: airlock's `key`, or the first OCSF path that holds a string.
fn lookup<'a>(
    fields: &'a Map<String, Value>,
    key: &str,
    paths: &[&[&str]],
    ocsf: bool,
) -> Option<&'a str> {
    if !ocsf {
        return fields.get(key).and_then(Value::as_str);
    }
    paths.iter().find_map(|path| {
        let (first, rest) = path.split_first()?;
        let mut value = fields.get(*first)?;
        for step in rest {
            value = value.get(*step)?;
        }
        value.as_str()
    })
}

/// Nanoseconds since the epoch of the line's `ts` (RFC 3339 UTC, as airlock writes it) or
/// of an OCSF event's `time` (milliseconds).
fn line_time(fields: &Map<String, Value>) -> Option<u64> {
    if let Some(ts) = fields.get("ts").and_then(Value::as_str) {
        return epoch_nanos(ts);
    }
    let millis = fields.get("time").and_then(Value::as_u64)?;
    millis.checked_mul(1_000_000)
}

/// Nanoseconds since the epoch of `2026-11-22T10:00:00.123456Z`.
pub(crate) fn epoch_nanos(ts: &str) -> Option<u64> {
    let number = |range: std::ops::Range<usize>| ts.get(range)?.parse::<u64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let micros = number(20..26).unwrap_or(0);
    let days = crate::ocsf::days_from_civil(year, month, day)?;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    seconds
        .checked_mul(1_000_000)?
        .checked_add(micros)?
        .checked_mul(1000)
}

/// The bytes of 32 lowercase hex digits (a trace id).
fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..16)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::proto::Value as Any;

    fn attribute<'a>(record: &'a LogRecord, name: &str) -> Option<&'a str> {
        record
            .attributes
            .iter()
            .find(|kv| kv.key == name)
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Any::StringValue(text) => Some(text.as_str()),
                _ => None,
            })
    }

    #[test]
    fn an_airlock_line_maps_to_a_record() {
        let line = r#"{"ts":"2026-11-22T10:00:00.123456Z","id":"0123456789abcdef0000000000000001","kind":"http","decision":"deny","rule":null,"reason":"host_not_allowed","method":"GET","host":"evil.example","trace":"0123456789abcdef0000000000000001","chain":"ab"}"#;
        let record = record(line, 7);
        assert_eq!(record.time_unix_nano, 1_795_341_600_123_456_000);
        assert_eq!(record.observed_time_unix_nano, 7);
        assert_eq!(
            (record.severity_number, record.severity_text.as_str()),
            (13, "WARN")
        );
        assert_eq!(record.body, Some(AnyValue::string(line)));
        assert_eq!(attribute(&record, "airlock.decision"), Some("deny"));
        assert_eq!(attribute(&record, "airlock.host"), Some("evil.example"));
        assert_eq!(
            attribute(&record, "airlock.reason"),
            Some("host_not_allowed")
        );
        assert_eq!(attribute(&record, "airlock.rule"), None);
        assert_eq!(record.trace_id.len(), 16);
        assert_eq!(record.trace_id[0], 0x01);
    }

    #[test]
    fn an_ocsf_line_maps_to_a_record() {
        let line = r#"{"class_uid":4002,"action_id":1,"time":1795341600123,"metadata":{"uid":"x"},"http_request":{"http_method":"GET","url":{"hostname":"api.example"}},"unmapped":{"kind":"http","rule":"network.allow[0]"}}"#;
        let record = record(line, 0);
        assert_eq!(record.time_unix_nano, 1_795_341_600_123_000_000);
        assert_eq!(record.severity_number, SEVERITY_INFO);
        assert_eq!(attribute(&record, "airlock.decision"), Some("allow"));
        assert_eq!(attribute(&record, "airlock.host"), Some("api.example"));
        assert_eq!(attribute(&record, "airlock.method"), Some("GET"));
        assert_eq!(attribute(&record, "airlock.rule"), Some("network.allow[0]"));
        assert_eq!(attribute(&record, "airlock.id"), Some("x"));
    }

    #[test]
    fn a_request_round_trips_through_protobuf() {
        let identity = Identity {
            instance: "abc".into(),
            host_name: Some("node".into()),
        };
        let lines = vec![
            r#"{"ts":"2026-11-22T10:00:00.000000Z","kind":"checkpoint"}"#.to_owned(),
            "not json".to_owned(),
        ];
        let bytes = encode(&identity, &lines, 1);
        let decoded = ExportLogsServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let scope = &decoded.resource_logs[0].scope_logs[0];
        assert_eq!(scope.log_records.len(), 2);
        assert_eq!(
            scope.log_records[1].body,
            Some(AnyValue::string("not json"))
        );
        let resource = decoded.resource_logs[0].resource.as_ref().unwrap();
        assert!(
            resource
                .attributes
                .contains(&KeyValue::string("service.name", "airlock"))
        );
    }
}
