//! `--audit-format ocsf`: each audit line written as an OCSF 1.2.0 event instead of
//! airlock's own shape (docs/operations.md, "OCSF lines", has the field mapping).
//!
//! `http`, `ws` and `mcp` lines with a destination become **HTTP Activity** (class 4002),
//! `tcp` lines **Network Activity** (4001), every other line (`dns`, `policy`, `audit`,
//! `fs`, a stdio MCP call) a **Base Event** (class 0). Every event carries the attributes
//! OCSF 1.2.0 requires of its class (`activity_id`, `category_uid`, `class_uid`,
//! `type_uid`, `time`, `severity_id`, `metadata.version`, `metadata.product.vendor_name`;
//! for the network classes `src_endpoint` and `dst_endpoint`; for HTTP Activity
//! `http_request` and `http_response`), the security-control profile's `action_id`, and
//! what has no OCSF attribute (`rule`, `reason`, `secrets`, ...) under `unmapped`. The
//! decision's `id` is `metadata.uid`. Checkpoints ([`crate::checkpoint`]) keep airlock's
//! shape; the chain ([`crate::chain`]) is the last key of every line either way.

use serde_json::{Map, Value, json};

/// The OCSF schema version the events follow.
pub const VERSION: &str = "1.2.0";

/// How lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// airlock's own shape (docs/contract.md §5).
    #[default]
    Airlock,
    /// OCSF events.
    Ocsf,
}

impl Format {
    /// `airlock` or `ocsf`.
    pub fn parse(text: &str) -> Result<Format, String> {
        match text {
            "airlock" => Ok(Format::Airlock),
            "ocsf" => Ok(Format::Ocsf),
            _ => Err(format!("{text:?}: the audit format is `airlock` or `ocsf`")),
        }
    }
}

/// Keys of airlock's line that OCSF attributes take; all others go under `unmapped`.
const MAPPED: &[&str] = &[
    "ts",
    "id",
    "method",
    "scheme",
    "host",
    "port",
    "path",
    "query",
    "status",
    "bytes_up",
    "bytes_down",
    "ms",
    "message",
    "chain",
];

/// The OCSF event for one of airlock's lines (a JSON object).
pub fn event(line: &Map<String, Value>) -> Value {
    let text = |key: &str| line.get(key).and_then(Value::as_str);
    let kind = text("kind").unwrap_or_default();
    let allowed = text("decision") == Some("allow");
    let http = matches!(kind, "http" | "ws" | "mcp") && line.contains_key("host");
    let (class_uid, activity_id) = if http {
        (4002, http_activity(text("method")))
    } else if kind == "tcp" {
        (4001, network_activity(text("phase"), allowed))
    } else {
        (0, 99)
    };
    let mut event = json!({
        "activity_id": activity_id,
        "category_uid": class_uid / 1000,
        "class_uid": class_uid,
        "type_uid": class_uid * 100 + activity_id,
        "time": text("ts").and_then(epoch_millis).unwrap_or(0),
        "severity_id": if allowed { 1 } else { 2 },
        "status_id": if allowed { 1 } else { 2 },
        "action_id": if allowed { 1 } else { 2 },
        "disposition_id": if allowed { 1 } else { 2 },
        "metadata": {
            "version": VERSION,
            "uid": text("id"),
            "profiles": ["security_control"],
            "product": {
                "name": "airlock",
                "vendor_name": "airlock",
                "version": env!("CARGO_PKG_VERSION"),
            },
        },
    });
    let object = event.as_object_mut().expect("an object");
    if let Some(message) = text("message").or(text("reason")) {
        object.insert("message".into(), message.into());
    }
    if let Some(ms) = line.get("ms").and_then(Value::as_f64) {
        object.insert("duration".into(), json!(ms.round() as u64));
    }
    if class_uid != 0 {
        network_attributes(line, object);
    }
    if http {
        http_attributes(line, object);
    }
    let unmapped: Map<String, Value> = line
        .iter()
        .filter(|(key, _)| !MAPPED.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    object.insert("unmapped".into(), Value::Object(unmapped));
    event
}

/// HTTP Activity's activity: the method (99 Other for one OCSF 1.2.0 does not name).
fn http_activity(method: Option<&str>) -> u64 {
    match method.unwrap_or_default() {
        "" => 0,
        "CONNECT" => 1,
        "DELETE" => 2,
        "GET" => 3,
        "HEAD" => 4,
        "OPTIONS" => 5,
        "POST" => 6,
        "PUT" => 7,
        "TRACE" => 8,
        _ => 99,
    }
}

/// Network Activity's activity: Open, Close, Refuse or Traffic.
fn network_activity(phase: Option<&str>, allowed: bool) -> u64 {
    match (phase, allowed) {
        (Some("open"), _) => 1,
        (Some("close"), _) => 2,
        (_, false) => 5,
        _ => 6,
    }
}

/// `src_endpoint` (the client connection, by number), `dst_endpoint`, `traffic` and
/// `connection_info` of the network classes.
fn network_attributes(line: &Map<String, Value>, object: &mut Map<String, Value>) {
    let conn = line.get("conn").and_then(Value::as_u64).unwrap_or(0);
    object.insert(
        "src_endpoint".into(),
        json!({ "uid": conn.to_string(), "name": "airlock client connection" }),
    );
    let host = line.get("host").and_then(Value::as_str).unwrap_or_default();
    let mut dst = Map::new();
    let host_key = if host.parse::<std::net::IpAddr>().is_ok() {
        "ip"
    } else {
        "hostname"
    };
    dst.insert(host_key.into(), host.into());
    if let Some(port) = line.get("port") {
        dst.insert("port".into(), port.clone());
    }
    object.insert("dst_endpoint".into(), Value::Object(dst));
    object.insert(
        "connection_info".into(),
        json!({ "direction_id": 2, "protocol_name": "tcp" }),
    );
    let bytes = |key: &str| line.get(key).and_then(Value::as_u64);
    if let (Some(up), Some(down)) = (bytes("bytes_up"), bytes("bytes_down")) {
        object.insert(
            "traffic".into(),
            json!({ "bytes_out": up, "bytes_in": down, "bytes": up + down }),
        );
    }
}

/// `http_request` (method and URL, its query already redacted) and `http_response` (the
/// status airlock answered, 0 when none was sent).
fn http_attributes(line: &Map<String, Value>, object: &mut Map<String, Value>) {
    let text = |key: &str| line.get(key).and_then(Value::as_str);
    let mut url = Map::new();
    url.insert("path".into(), text("path").unwrap_or("/").into());
    if let Some(scheme) = text("scheme") {
        url.insert("scheme".into(), scheme.into());
    }
    if let Some(host) = text("host") {
        url.insert("hostname".into(), host.into());
    }
    if let Some(port) = line.get("port") {
        url.insert("port".into(), port.clone());
    }
    if let Some(query) = text("query") {
        url.insert("query_string".into(), query.into());
    }
    let mut request = Map::new();
    if let Some(method) = text("method") {
        request.insert("http_method".into(), method.into());
    }
    request.insert("url".into(), Value::Object(url));
    object.insert("http_request".into(), Value::Object(request));
    let status = line.get("status").and_then(Value::as_u64).unwrap_or(0);
    object.insert("http_response".into(), json!({ "code": status }));
    if status != 0 {
        object.insert("http_status".into(), json!(status));
    }
}

/// Milliseconds since the epoch of airlock's `ts` (`2026-11-22T10:00:00.123456Z`).
fn epoch_millis(ts: &str) -> Option<u64> {
    let number = |range: std::ops::Range<usize>| ts.get(range)?.parse::<u64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    let micros = number(20..26).unwrap_or(0);
    let days = days_from_civil(year, month, day)?;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(seconds * 1000 + micros / 1000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`,
/// from the epoch on).
pub(crate) fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || year < 1970 {
        return None;
    }
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year % 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    (era * 146_097 + day_of_era).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_become_epoch_milliseconds() {
        assert_eq!(epoch_millis("1970-01-01T00:00:00.000000Z"), Some(0));
        assert_eq!(
            epoch_millis("2026-11-22T10:00:00.123456Z"),
            Some(1_795_341_600_123)
        );
        assert_eq!(
            epoch_millis("2000-03-01T00:00:00.000000Z"),
            Some(951_868_800_000)
        );
        assert_eq!(epoch_millis("garbage"), None);
    }

    #[test]
    fn formats_parse() {
        assert_eq!(Format::parse("ocsf"), Ok(Format::Ocsf));
        assert_eq!(Format::parse("airlock"), Ok(Format::Airlock));
        assert!(Format::parse("cef").is_err());
    }
}
