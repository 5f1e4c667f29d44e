//! The audit event: what one decision looked like, typed, from the step that decided it to
//! the writer that serialises it ([`crate::line`]) and the control plane that counts it.

use serde::Serialize;

pub use crate::id::DecisionId;

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
    /// A projected credential file: a refresh carried out, a write-back, a write by the
    /// command kept from the host's file (secret names only, never values).
    Credentials,
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

impl Kind {
    /// The name written on the line (`http`, `dns`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Http => "http",
            Kind::Tcp => "tcp",
            Kind::Dns => "dns",
            Kind::Mcp => "mcp",
            Kind::Ws => "ws",
            Kind::Policy => "policy",
            Kind::Audit => "audit",
            Kind::Fs => "fs",
            Kind::Credentials => "credentials",
        }
    }
}

impl Decision {
    /// `allow` or `deny`, as written on the line.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
        }
    }
}

impl Phase {
    /// `open` or `close`, as written on the line.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Open => "open",
            Phase::Close => "close",
        }
    }
}

/// One decision to log. Fields left `None` (or an empty `secrets`) are left out of the line,
/// except as the [crate documentation](crate) says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuditEvent {
    /// The decision's id (`"id"`, docs/contract.md §5): set by the step that decided (so
    /// that its refusal body can quote it), or by [`crate::AuditLog::record`] when left
    /// `None`. Two lines of one long-lived connection (`open`, `close`) share it.
    pub id: Option<DecisionId>,
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
    /// The process behind a connection from `run`, `mcp` or a local sandbox:
    /// `Some(Some(..))` written as an object, `Some(None)` (not found) as `null`; `None`
    /// (elsewhere) leaves the key out.
    pub process: Option<airlock_process::Caller>,
    /// The W3C trace id sent upstream in `traceparent` (32 hex digits), when the policy
    /// asks for one (docs/policy.md, `audit.traceparent`).
    pub trace: Option<String>,
    // EXTENSIONS: an optional key added to the line (a `process` object, ...) goes here as
    // an `Option<_>` field, left `None` by every producer that does not know it; then in
    // `crate::line::Line` (its key position), in `crate::fold` (whether it tells events
    // apart) and in docs/contract.md §5. Nothing else has to change.
}
