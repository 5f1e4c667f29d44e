//! MCP inspection for airlock: parses a JSON-RPC request body (one message
//! or a batch), decides each `tools/call` on `params.name` against an `mcp` rule (and its
//! argument guards on `params.arguments`), builds
//! the JSON-RPC errors for denied calls and merges them with the upstream's answers, and
//! filters `tools/list` results (JSON bodies and SSE streams) so denied tools are not
//! advertised. It also checks request bodies against `json_deny` body guards
//! ([`refusing_rule`]). [`stdio`] frames and decides the lines of the stdio transport
//! (`airlock mcp`) with the same decisions. All of that is pure (no I/O); the one module
//! that does I/O is `relay` (Unix), the pump of `airlock mcp` that moves the stdio lines
//! between airlock's standard input/output and the server's pipes and audits them.
//!
//! Parsing is strict and fail-closed: the body must be UTF-8 JSON (no BOM, no comments,
//! no UTF-16), every object this module looks into must have unique keys (a duplicate
//! `name`, `method` or `params` is refused rather than guessed), and a `tools/call`
//! without a string `params.name` is refused. Values this module does not change are
//! passed on byte for byte (ids of any JSON type stay exactly as sent).

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

mod args;
mod body_guard;
mod json;
#[cfg(unix)]
pub mod relay;
mod sse;
pub mod stdio;

pub use body_guard::refusing_rule;
pub use sse::SseFilter;

use airlock_policy::model::ToolRules;
use serde_json::value::RawValue;

use crate::json::{Object, quote};

/// The largest request or response body (and SSE event) inspected: 1 MiB.
pub const BODY_LIMIT: usize = 1 << 20;

/// Why a body cannot be inspected (the request is refused with `body_uninspectable`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Uninspectable {
    /// The body is not UTF-8.
    #[error("the body is not UTF-8 JSON")]
    NotUtf8,
    /// The body is not JSON (or not the JSON-RPC shape expected).
    #[error("the body is not valid JSON: {0}")]
    Json(String),
    /// An object has the same key twice.
    #[error("an object has the key {0:?} twice")]
    DuplicateKey(String),
    /// A batch with no message.
    #[error("the batch is empty")]
    EmptyBatch,
    /// A message is not a JSON object.
    #[error("a JSON-RPC message is not an object")]
    NotAMessage,
    /// A `tools/call` without a string `params.name`.
    #[error("a tools/call has no string params.name")]
    ToolNameMissing,
    /// The body or SSE event is larger than [`BODY_LIMIT`].
    #[error("the body is larger than {BODY_LIMIT} bytes")]
    TooLarge,
    /// An SSE stream breaks lines with a lone CR or announces an endpoint outside the rule.
    #[error("the event stream cannot be inspected: {0}")]
    Stream(&'static str),
    /// A stdio line carries a raw character that some MCP peer reads as a line break
    /// (`\r` other than one right before the newline, U+2028, U+2029, ...): the peer
    /// could see two messages where airlock saw one ([`stdio::LINE_BREAKS`]).
    #[error("the line carries a raw line break (U+{0:04X}) other than its final newline")]
    LineBreak(u32),
}

/// Whether `rule` lets the tool `name` be called: the deny list is checked first and
/// matches case-insensitively (Unicode lower case on both sides, so `Run_Command` is
/// denied by `run_command`); then a non-empty allow list must contain `name` exactly
/// (byte for byte, no case folding or Unicode normalisation).
pub fn tool_allowed(rule: &(impl ToolRules + ?Sized), name: &str) -> bool {
    let lower = name.to_lowercase();
    if rule
        .denied_tools()
        .iter()
        .any(|denied| denied.to_lowercase() == lower)
    {
        return false;
    }
    let allow = rule.allowed_tools();
    allow.is_empty() || allow.iter().any(|allowed| allowed == name)
}

/// One `tools/call` found in a request, in body order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `params.name`.
    pub tool: String,
    /// Whether it is forwarded.
    pub allowed: bool,
    /// The guarded argument that refused an otherwise allowed tool (`mcp_argument_denied`);
    /// `None` when allowed or refused for the tool itself (`mcp_tool_denied`).
    pub argument: Option<String>,
}

/// What to do with an inspected request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing denied: forward the body as it came.
    Forward,
    /// Everything that needed an answer was denied: answer with this JSON body (HTTP 200),
    /// or with 202 and no body when only notifications were denied.
    Answer(Option<String>),
    /// A batch with some calls denied: forward `body` (the other messages, as a batch) and
    /// [`merge`] the upstream's answer with the local errors along `plan`.
    ForwardPart {
        /// The smaller batch.
        body: String,
        /// One slot per answer expected, in the original order.
        plan: Vec<Slot>,
    },
}

/// One answer of a partly denied batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// Answered by airlock with this JSON-RPC error.
    Local(String),
    /// Answered by the upstream: the request's id, as sent (raw JSON text).
    Upstream(String),
}

/// The result of inspecting a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// Every `tools/call`, in order.
    pub calls: Vec<Call>,
    /// What to do.
    pub action: Action,
}

/// One message of a request, classified.
struct Message<'a> {
    raw: &'a RawValue,
    /// The id, raw, when the message is a request (not a notification).
    id: Option<&'a RawValue>,
    /// The denial error when it is a denied `tools/call`.
    denied: Option<String>,
}

/// Inspects a request body against `rule`.
pub fn inspect_request(
    body: &[u8],
    rule: &(impl ToolRules + ?Sized),
) -> Result<Inspection, Uninspectable> {
    if body.len() > BODY_LIMIT {
        return Err(Uninspectable::TooLarge);
    }
    let text = std::str::from_utf8(body).map_err(|_| Uninspectable::NotUtf8)?;
    let (batch, raws) = json::split_batch(text)?;
    let mut calls = Vec::new();
    let mut messages = Vec::with_capacity(raws.len());
    for raw in raws {
        messages.push(classify(raw, rule, &mut calls)?);
    }
    let action = plan(batch, &messages);
    Ok(Inspection { calls, action })
}

fn classify<'a>(
    raw: &'a RawValue,
    rule: &(impl ToolRules + ?Sized),
    calls: &mut Vec<Call>,
) -> Result<Message<'a>, Uninspectable> {
    let object = Object::parse(raw)?;
    let id = object.get("id");
    let mut message = Message {
        raw,
        id,
        denied: None,
    };
    let Some(method) = unambiguous(&object, "method")? else {
        return Ok(message);
    };
    let method: String = json::parse_as(method)?;
    if method != "tools/call" {
        return Ok(message);
    }
    let params = unambiguous(&object, "params")?.ok_or(Uninspectable::ToolNameMissing)?;
    let params = Object::parse(params).map_err(|e| match e {
        Uninspectable::NotAMessage => Uninspectable::ToolNameMissing,
        other => other,
    })?;
    let name = unambiguous(&params, "name")?.ok_or(Uninspectable::ToolNameMissing)?;
    let tool: String = json::parse_as(name).map_err(|_| Uninspectable::ToolNameMissing)?;
    let argument = if tool_allowed(rule, &tool) {
        args::refused_argument(&params, rule, &tool)?
    } else {
        message.denied = Some(denial(id, &tool));
        None
    };
    if let Some(argument) = &argument {
        message.denied = Some(argument_denial(id, &tool, argument));
    }
    let allowed = message.denied.is_none();
    calls.push(Call {
        tool,
        allowed,
        argument,
    });
    Ok(message)
}

/// The value of `key` in `object`; [`Uninspectable::DuplicateKey`] when another key
/// equals it under case folding (`Name` beside `name`): a server that reads keys
/// case-insensitively, as Go's `encoding/json` does, might take the other one.
fn unambiguous<'a>(object: &Object<'a>, key: &str) -> Result<Option<&'a RawValue>, Uninspectable> {
    let folded = airlock_policy::mcp_args::fold(key);
    if object
        .keys()
        .any(|k| k != key && airlock_policy::mcp_args::fold(k) == folded)
    {
        return Err(Uninspectable::DuplicateKey(key.to_owned()));
    }
    Ok(object.get(key))
}

/// The JSON-RPC error for a denied call (docs/contract.md §4), `id` copied as sent.
pub fn denial(id: Option<&RawValue>, tool: &str) -> String {
    let message = format!("tool call denied by policy: {tool}");
    rpc_error(id, &message, "mcp_tool_denied", tool, None)
}

/// The JSON-RPC error for a call whose argument `argument` (as named in the guard) was
/// refused (docs/contract.md §4), `id` copied as sent.
pub fn argument_denial(id: Option<&RawValue>, tool: &str, argument: &str) -> String {
    let message = format!("tool call denied by policy: {tool} argument {argument}");
    rpc_error(id, &message, "mcp_argument_denied", tool, Some(argument))
}

fn rpc_error(
    id: Option<&RawValue>,
    message: &str,
    reason: &str,
    tool: &str,
    argument: Option<&str>,
) -> String {
    let id = id.map_or("null", RawValue::get);
    let argument = argument.map_or_else(String::new, |a| format!(",\"argument\":{}", quote(a)));
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32602,\"message\":{},\
         \"data\":{{\"reason\":\"{reason}\",\"tool\":{}{argument}}}}}}}",
        quote(message),
        quote(tool)
    )
}

fn plan(batch: bool, messages: &[Message<'_>]) -> Action {
    if messages.iter().all(|m| m.denied.is_none()) {
        return Action::Forward;
    }
    let errors: Vec<&str> = messages
        .iter()
        .filter(|m| m.id.is_some())
        .filter_map(|m| m.denied.as_deref())
        .collect();
    let forwarded: Vec<&Message<'_>> = messages.iter().filter(|m| m.denied.is_none()).collect();
    if forwarded.is_empty() {
        return Action::Answer(match (batch, errors.as_slice()) {
            (_, []) => None,
            (false, [one]) => Some((*one).to_owned()),
            (_, many) => Some(format!("[{}]", many.join(","))),
        });
    }
    let body = format!(
        "[{}]",
        forwarded
            .iter()
            .map(|m| m.raw.get())
            .collect::<Vec<_>>()
            .join(",")
    );
    let plan = messages
        .iter()
        .filter_map(|m| match (&m.denied, m.id) {
            (Some(error), Some(_)) => Some(Slot::Local(error.clone())),
            (None, Some(id)) if json::is_request(m.raw) => {
                Some(Slot::Upstream(id.get().to_owned()))
            }
            _ => None,
        })
        .collect();
    Action::ForwardPart { body, plan }
}

/// Merges the upstream's answer to a partly denied batch (a JSON array, one object, or
/// nothing) with the local errors, in the original order: each upstream slot takes the
/// first unused answer with the same id; answers matching no slot follow at the end.
pub fn merge(plan: &[Slot], upstream: &[u8]) -> Result<String, Uninspectable> {
    let text = std::str::from_utf8(upstream).map_err(|_| Uninspectable::NotUtf8)?;
    let mut answers: Vec<(Option<String>, &RawValue)> = Vec::new();
    if !text.trim().is_empty() {
        for raw in json::split_batch(text)?.1 {
            let object = Object::parse(raw)?;
            let id = object.get("id").map(|id| json::compact(id.get()));
            answers.push((id, raw));
        }
    }
    let mut used = vec![false; answers.len()];
    let mut out: Vec<&str> = Vec::new();
    for slot in plan {
        match slot {
            Slot::Local(error) => out.push(error),
            Slot::Upstream(id) => {
                let id = json::compact(id);
                if let Some(i) = (0..answers.len())
                    .find(|&i| !used[i] && answers[i].0.as_deref() == Some(id.as_str()))
                {
                    used[i] = true;
                    out.push(answers[i].1.get());
                }
            }
        }
    }
    for (i, (_, raw)) in answers.iter().enumerate() {
        if !used[i] {
            out.push(raw.get());
        }
    }
    Ok(format!("[{}]", out.join(",")))
}

/// Filters a JSON response body (one message or a batch): every `result.tools` array
/// loses the tools `rule` does not allow (and entries without a string `name`). Returns
/// `None` when nothing changed (the body is passed on as it came).
pub fn filter_response(
    body: &[u8],
    rule: &(impl ToolRules + ?Sized),
) -> Result<Option<String>, Uninspectable> {
    if body.len() > BODY_LIMIT {
        return Err(Uninspectable::TooLarge);
    }
    let text = std::str::from_utf8(body).map_err(|_| Uninspectable::NotUtf8)?;
    let (batch, raws) = json::split_batch(text)?;
    let mut changed = false;
    let mut out = Vec::with_capacity(raws.len());
    for raw in raws {
        match filter_message(raw, rule)? {
            Some(new) => {
                changed = true;
                out.push(new);
            }
            None => out.push(raw.get().to_owned()),
        }
    }
    Ok(changed.then(|| {
        if batch {
            format!("[{}]", out.join(","))
        } else {
            out.remove(0)
        }
    }))
}

/// One message with its `result.tools` filtered, or `None` if unchanged.
fn filter_message(
    raw: &RawValue,
    rule: &(impl ToolRules + ?Sized),
) -> Result<Option<String>, Uninspectable> {
    let mut message = Object::parse(raw)?;
    let Some(result) = message.get("result") else {
        return Ok(None);
    };
    let Ok(mut result) = Object::parse(result) else {
        return Ok(None);
    };
    let Some(tools) = result.get("tools") else {
        return Ok(None);
    };
    let tools: Vec<&RawValue> = json::parse_as(tools)?;
    let mut kept = Vec::with_capacity(tools.len());
    for tool in &tools {
        let allowed = Object::parse(tool)
            .ok()
            .and_then(|entry| entry.get("name"))
            .and_then(|name| json::parse_as::<String>(name).ok())
            .is_some_and(|name| tool_allowed(rule, &name));
        if allowed {
            kept.push(tool.get());
        }
    }
    if kept.len() == tools.len() {
        return Ok(None);
    }
    let new_tools = format!("[{}]", kept.join(","));
    result.set("tools", &new_tools);
    let new_result = result.to_json();
    message.set("result", &new_result);
    Ok(Some(message.to_json()))
}

#[cfg(test)]
mod tests;
