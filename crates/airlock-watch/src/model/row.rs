//! One line of the event stream as the view shows it ([`Row`]: an audit line, or an `ask`
//! / `answered` event of `--mode ask`), one pending ask ([`Ask`]), and the text each is
//! shown and filtered by. Pure: no I/O, no drawing.

use serde::Deserialize;
use serde_json::Value;

/// One decision (or ask event), as the view shows it. Every field is optional on the
/// wire: a line of a newer or older airlock still reads.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Row {
    /// RFC 3339 time.
    #[serde(default)]
    pub ts: String,
    /// `http`, `tcp`, `dns`, `mcp`, `ws`, `policy`, `fs`, `audit`; `ask` and `answered`
    /// for the events of `--mode ask`.
    #[serde(default)]
    pub kind: String,
    /// `allow` or `deny`.
    #[serde(default)]
    pub decision: String,
    /// `deny` on a report-mode line that passed.
    #[serde(default)]
    pub would: Option<String>,
    /// Ask mode asked about it.
    #[serde(default)]
    pub asked: Option<bool>,
    /// The deciding rule.
    #[serde(default)]
    pub rule: Option<String>,
    /// Why it was refused.
    #[serde(default)]
    pub reason: Option<String>,
    /// HTTP method.
    #[serde(default)]
    pub method: Option<String>,
    /// `http` or `https`.
    #[serde(default)]
    pub scheme: Option<String>,
    /// Destination host.
    #[serde(default)]
    pub host: Option<String>,
    /// Destination port.
    #[serde(default)]
    pub port: Option<u16>,
    /// DNS name asked for.
    #[serde(default)]
    pub name: Option<String>,
    /// DNS query type.
    #[serde(default)]
    pub qtype: Option<String>,
    /// Canonical path.
    #[serde(default)]
    pub path: Option<String>,
    /// The query, values redacted by the audit log.
    #[serde(default)]
    pub query: Option<String>,
    /// MCP tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// The stdio MCP server of `airlock mcp`.
    #[serde(default)]
    pub server: Option<String>,
    /// The guarded MCP argument.
    #[serde(default)]
    pub argument: Option<String>,
    /// Response status.
    #[serde(default)]
    pub status: Option<u16>,
    /// Bytes sent up.
    #[serde(default)]
    pub bytes_up: Option<u64>,
    /// Bytes received.
    #[serde(default)]
    pub bytes_down: Option<u64>,
    /// Duration in milliseconds.
    #[serde(default)]
    pub ms: Option<f64>,
    /// Secrets swapped or injected.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// How a credential travelled (`surrogate`, `real`, `cleartext`).
    #[serde(default)]
    pub form: Option<String>,
    /// The kind of credential found.
    #[serde(default)]
    pub credential: Option<String>,
    /// The client connection.
    #[serde(default)]
    pub conn: Option<u64>,
    /// `open` or `close` on a long-lived connection's lines.
    #[serde(default)]
    pub phase: Option<String>,
    /// Identical lines folded into this one.
    #[serde(default)]
    pub count: Option<u64>,
    /// A policy or audit line's message.
    #[serde(default)]
    pub message: Option<String>,
    /// The decision's id (the ask's id on `ask` / `answered` events).
    #[serde(default)]
    pub id: Option<Value>,
    /// The process that opened the connection, when airlock knows it.
    #[serde(default)]
    pub process: Option<Value>,
    /// `answered`: the scope of an allow.
    #[serde(default)]
    pub scope: Option<String>,
    /// `answered`: the ask timed out.
    #[serde(default)]
    pub timeout: Option<bool>,
    /// `ask`: the rule that would allow it.
    #[serde(default)]
    pub suggestion: Option<Value>,
}

impl Row {
    /// An audit line read as a row; `None` for a line that is not a JSON object.
    pub fn from_line(line: &str) -> Option<Row> {
        serde_json::from_str(line).ok()
    }

    /// Whether it is an event of `--mode ask` rather than a decision.
    pub fn is_ask_event(&self) -> bool {
        matches!(self.kind.as_str(), "ask" | "answered")
    }

    /// Whether the line is a refusal (or a report-mode would-be refusal).
    pub fn refused(&self) -> bool {
        !self.is_ask_event() && (self.decision == "deny" || self.would.is_some())
    }

    /// The verdict column: `allow`, `DENY`, `would` (report mode), `ASK` (an ask opened),
    /// `allow`/`deny` for an answer, `timeout` for an ask nobody answered.
    pub fn verdict(&self) -> &'static str {
        match self.kind.as_str() {
            "ask" => "ASK",
            "answered" if self.timeout == Some(true) => "tmout",
            _ if self.would.is_some() => "would",
            _ if self.decision == "deny" => "DENY",
            _ => "allow",
        }
    }

    /// `hh:mm:ss` of its time (an `answered` event has none: empty).
    pub fn clock(&self) -> &str {
        self.ts.get(11..19).unwrap_or("")
    }

    /// The destination: host, DNS name, or nothing.
    pub fn target(&self) -> &str {
        self.host.as_deref().or(self.name.as_deref()).unwrap_or("")
    }

    /// The path, or the MCP tool, or nothing.
    pub fn detail(&self) -> String {
        match (&self.path, &self.tool) {
            (Some(path), Some(tool)) => format!("{path} {tool}"),
            (Some(path), None) => path.clone(),
            (None, Some(tool)) => tool.clone(),
            (None, None) => String::new(),
        }
    }

    /// The id as text (a string or a number on the wire).
    pub fn id_text(&self) -> Option<String> {
        self.id.as_ref().map(value_text)
    }

    /// What an `answered` event says: `allow once`, `deny`, `timed out`.
    pub fn answer_text(&self) -> String {
        if self.timeout == Some(true) {
            return "timed out".to_owned();
        }
        match (self.decision.as_str(), self.scope.as_deref()) {
            ("allow", Some(scope)) => format!("allow {scope}"),
            (decision, _) => decision.to_owned(),
        }
    }

    /// The full URL as the audit line shows it (query values redacted there):
    /// `https://host:8443/path?a=REDACTED`; the port only when it is not the scheme's.
    pub fn url(&self) -> Option<String> {
        let host = self.host.as_deref()?;
        let path = self.path.as_deref()?;
        let scheme = self.scheme.as_deref().unwrap_or("https");
        let port = match (scheme, self.port) {
            ("https", Some(443)) | ("http", Some(80)) | (_, None) => String::new(),
            (_, Some(port)) => format!(":{port}"),
        };
        let query = self
            .query
            .as_deref()
            .map_or_else(String::new, |q| format!("?{q}"));
        Some(format!("{scheme}://{host}{port}{path}{query}"))
    }

    /// The program that made the request, short: the executable's file name (or
    /// `argv0`, or `comm`/`name`); empty when unknown.
    pub fn program(&self) -> String {
        let Some(process) = &self.process else {
            return String::new();
        };
        let field = |name: &str| process.get(name).and_then(Value::as_str);
        let text = field("exe")
            .or_else(|| field("executable"))
            .or_else(|| field("argv0"))
            .or_else(|| field("comm"))
            .or_else(|| field("name"))
            .unwrap_or("");
        text.rsplit('/').next().unwrap_or(text).to_owned()
    }

    /// Every text field joined, lower-cased, for a filter word without a field name.
    pub(super) fn haystack(&self) -> String {
        let parts = [
            Some(self.kind.as_str()),
            Some(self.decision.as_str()),
            Some(self.verdict()),
            self.reason.as_deref(),
            self.rule.as_deref(),
            self.method.as_deref(),
            self.host.as_deref(),
            self.name.as_deref(),
            self.path.as_deref(),
            self.tool.as_deref(),
            self.message.as_deref(),
        ];
        let mut text: Vec<String> = parts.into_iter().flatten().map(str::to_owned).collect();
        text.extend(self.secrets.iter().cloned());
        text.extend(self.process.iter().map(value_text));
        text.join(" ").to_lowercase()
    }

    /// Whether one field-named filter term (`decision:deny`, `host:x`, `program:git`...)
    /// matches; `None` for a field the filter does not know.
    pub(super) fn field_matches(&self, field: &str, needle: &str) -> Option<bool> {
        let has = |text: Option<&str>| text.is_some_and(|t| t.to_lowercase().contains(needle));
        Some(match field {
            "decision" | "d" => self.verdict().eq_ignore_ascii_case(needle),
            "host" | "h" => has(self.host.as_deref()) || has(self.name.as_deref()),
            "program" | "process" | "p" => self
                .process
                .as_ref()
                .is_some_and(|p| value_text(p).to_lowercase().contains(needle)),
            "kind" | "k" => self.kind.eq_ignore_ascii_case(needle),
            "reason" | "r" => has(self.reason.as_deref()),
            "method" | "m" => has(self.method.as_deref()),
            "path" => has(self.path.as_deref()),
            _ => return None,
        })
    }
}

/// A JSON value as plain text: a string as it is, an object as `key=value` pairs (nested
/// values the same way), an array's items joined by ` ← ` (a process's parent chain).
pub fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join(" ← "),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| match value {
                Value::Object(_) | Value::Array(_) => format!("{key}=[{}]", value_text(value)),
                _ => format!("{key}={}", value_text(value)),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// One held request, as `GET /v1/pending` lists it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Ask {
    /// The ask's id (used to answer it).
    pub id: String,
    /// HTTP method (`CONNECT` for raw TCP).
    #[serde(default)]
    pub method: String,
    /// Destination host.
    #[serde(default)]
    pub host: String,
    /// Destination port.
    #[serde(default)]
    pub port: Option<u16>,
    /// Canonical path (none for raw TCP).
    #[serde(default)]
    pub path: Option<String>,
    /// The refusal it would get.
    #[serde(default)]
    pub reason: String,
    /// The rule that would allow it.
    #[serde(default)]
    pub suggestion: Option<Value>,
    /// When it was first held.
    #[serde(default)]
    pub since: Option<Value>,
    /// The process that made it, when airlock knows it.
    #[serde(default)]
    pub process: Option<Value>,
}
