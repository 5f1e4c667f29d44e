//! The MCP step of the data path (HTTP glue around `airlock_mcp`): for a request on an
//! `mcp` rule's host and path, the body is read (at most [`airlock_mcp::BODY_LIMIT`], by
//! [`crate::body_guard::read_whole`]),
//! refused as `body_uninspectable` when it is compressed, oversize or not strict JSON-RPC,
//! and each `tools/call` decided (tool, then argument guards) and audited (`kind: mcp`,
//! `mcp_tool_denied` or `mcp_argument_denied`); denied calls are answered here
//! (HTTP 200, JSON-RPC error), a partly denied batch is forwarded smaller and its answer
//! merged. The response (JSON or event stream, any method) has denied tools removed from
//! `tools/list` results; one that cannot be filtered is never passed on.

use std::sync::Arc;

use airlock_audit::AuditLog;
use airlock_credentials::Scrubber;
use airlock_mcp::{Action, Inspection, Slot, SseFilter, Uninspectable};
use airlock_policy::model::McpRule;
use airlock_policy::{CompiledPolicy, Host, Reason};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::response::Parts;
use http::{Response, StatusCode};
use hyper::body::Incoming;

use crate::body::ProxyBody;
use crate::body::is_encoded;
use crate::body_guard::{self, Unread};
use crate::budget::{Budget, Held};
use crate::record::{Exchange, Line, LineKind};
use crate::refusal;

/// What the response step needs to know about an inspected MCP request.
pub(crate) struct McpGuard {
    rule: McpRule,
    /// The local errors and upstream answers of a partly denied batch, in order.
    plan: Option<Vec<Slot>>,
    policy: Arc<CompiledPolicy>,
    host: Host,
}

/// The outcome of the request step.
pub(crate) enum Inspected {
    /// Forward `body` (the original, or a smaller batch); filter the response with `guard`.
    Forward { body: Bytes, guard: Box<McpGuard> },
    /// Answered here (every call needing an answer was denied).
    Answered(Box<Response<ProxyBody>>),
}

/// The `mcp` rule covering `host` and `path` (canonical, without query), if any: in any
/// spelling servers route alike (case, trailing slash, `;` parameters; see
/// `airlock_policy::mcp_path`), for requests and upgrades alike.
pub(crate) fn rule_for(policy: &Arc<CompiledPolicy>, host: &Host, path: &str) -> Option<McpRule> {
    policy.mcp_rule(host, path).cloned()
}

/// Decides an MCP request whose body `bytes` was read whole by
/// [`crate::body_guard::read_whole`]. `line` is the request's `http` line (destination,
/// method, path) from which the `mcp` lines are made, written to `audit`; `policy` is the
/// request's one snapshot (the response filter asks it which paths the rule covers). `Err`
/// is the refusal reason (`body_uninspectable`).
pub(crate) fn inspect_request(
    (policy, audit): (&Arc<CompiledPolicy>, &AuditLog),
    rule: McpRule,
    line: &Line,
    host: &Host,
    headers: &mut HeaderMap,
    bytes: Bytes,
) -> Result<Inspected, Reason> {
    // Responses are filtered, so they must come uncompressed.
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let guard = |plan| {
        Box::new(McpGuard {
            rule: rule.clone(),
            plan,
            policy: Arc::clone(policy),
            host: host.clone(),
        })
    };
    if bytes.is_empty() {
        return Ok(Inspected::Forward {
            body: bytes,
            guard: guard(None),
        });
    }
    let Inspection { calls, action } =
        airlock_mcp::inspect_request(&bytes, &rule).map_err(|_| Reason::BodyUninspectable)?;
    for call in calls {
        let mut call_line = Line::new(LineKind::Mcp, line.host.clone(), line.port, line.conn);
        call_line.allowed = call.allowed;
        call_line.rule = Some(rule.id.clone());
        call_line.reason = match (call.allowed, &call.argument) {
            (true, _) => None,
            (false, None) => Some(Reason::McpToolDenied),
            (false, Some(_)) => Some(Reason::McpArgumentDenied),
        };
        call_line.method = line.method.clone();
        call_line.scheme = line.scheme;
        call_line.path = line.path.clone();
        call_line.process = line.process.clone();
        call_line.tool = Some(call.tool);
        call_line.argument = call.argument;
        call_line.write(audit);
    }
    Ok(match action {
        Action::Forward => Inspected::Forward {
            body: bytes,
            guard: guard(None),
        },
        Action::ForwardPart { body, plan } => {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            Inspected::Forward {
                body: Bytes::from(body),
                guard: guard(Some(plan)),
            }
        }
        Action::Answer(Some(answer)) => Inspected::Answered(Box::new(json_answer(answer))),
        Action::Answer(None) => Inspected::Answered(Box::new(
            Response::builder()
                .status(StatusCode::ACCEPTED)
                .body(ProxyBody::empty())
                .unwrap_or_else(|_| refusal::bad_gateway("cannot build the answer")),
        )),
    })
}

/// An HTTP 200 JSON answer built by airlock.
fn json_answer(body: String) -> Response<ProxyBody> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-airlock-decision", "deny")
        .body(ProxyBody::full(Bytes::from(body)))
        .unwrap_or_else(|_| refusal::bad_gateway("cannot build the answer"))
}

/// The media type of `headers`' `Content-Type`, lower case, without parameters.
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Filters the upstream's response to an MCP request (and merges a partly denied batch).
/// `scrubber` is there when the host is a secret's (the body is scrubbed after filtering;
/// the headers already were): the request's one credentials snapshot's. The answer's bytes
/// are taken from `budget` while it is filtered. `Err` gives the response back untouched for the normal path (a
/// non-2xx answer that is neither JSON nor an event stream, or a 202/204 without a plan).
pub(crate) async fn filter_response(
    budget: &Budget,
    guard: Box<McpGuard>,
    mut parts: Parts,
    body: Incoming,
    mut exchange: Exchange,
    scrubber: Option<&Scrubber>,
) -> Result<Response<ProxyBody>, (Parts, Incoming, Exchange)> {
    let media = media_type(&parts.headers);
    let status = parts.status;
    if is_encoded(&parts.headers) {
        exchange.set_status(502);
        return Ok(refusal::bad_gateway(
            "the MCP server sent a compressed response although airlock asked for identity; \
             it cannot be filtered, so it is not passed on",
        ));
    }
    if media == "text/event-stream" {
        let locals: Vec<String> = guard
            .plan
            .iter()
            .flatten()
            .filter_map(|slot| match slot {
                Slot::Local(error) => Some(error.clone()),
                Slot::Upstream(_) => None,
            })
            .collect();
        let McpGuard {
            rule, policy, host, ..
        } = *guard;
        let rule_id = rule.id.clone();
        let covered = Box::new(move |path: &str| {
            policy
                .mcp_rule(&host, path)
                .is_some_and(|other| other.id == rule_id)
        });
        let filter = SseFilter::new(rule, covered, &locals);
        parts.headers.remove(header::CONTENT_LENGTH);
        let scrub = scrubber.map(|s| s.stream());
        return Ok(Response::from_parts(
            parts,
            ProxyBody::event_stream(body, exchange, filter, scrub),
        ));
    }
    let is_json = media == "application/json";
    let passes_as_is =
        status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT || !status.is_success();
    if !is_json && (guard.plan.is_none() && passes_as_is) {
        return Err((parts, body, exchange));
    }
    let no_content = status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT;
    if !(is_json || guard.plan.is_some() && no_content) {
        exchange.set_status(502);
        return Ok(refusal::bad_gateway(
            "the MCP server answered with a body that is neither JSON nor an event stream; \
             it cannot be filtered, so it is not passed on",
        ));
    }
    let mut body = body;
    // The answer's bytes are taken from the inspection budget while it is filtered.
    let mut held = Held::default();
    let upstream = match body_guard::collect(&mut body, budget, &mut held, None).await {
        Ok(collected) if is_json => collected,
        Ok(_) => Bytes::new(),
        Err(Unread::Refused(Reason::Overloaded)) => {
            exchange.set_status(503);
            return Ok(refusal::overloaded());
        }
        Err(_) => {
            exchange.set_status(502);
            return Ok(refusal::bad_gateway(
                "the MCP server's answer could not be read whole (too large or cut)",
            ));
        }
    };
    let filtered = merge_and_filter(&guard, &upstream);
    let Ok(filtered) = filtered else {
        exchange.set_status(502);
        return Ok(refusal::bad_gateway(
            "the MCP server's answer is not strict JSON-RPC; it cannot be filtered, so it \
             is not passed on",
        ));
    };
    let mut out = filtered.map_or_else(|| upstream.to_vec(), String::into_bytes);
    if let Some(scrubber) = scrubber {
        out = scrubber.scrub(&out).into_owned();
    }
    exchange.add_bytes_down(out.len() as u64);
    if guard.plan.is_some() {
        parts.status = StatusCode::OK;
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(out.len()));
    // The answer waits for its audit line (docs/reliability.md).
    if exchange.finish().await.is_err() {
        return Ok(refusal::audit_unavailable());
    }
    Ok(Response::from_parts(
        parts,
        ProxyBody::full(Bytes::from(out)),
    ))
}

/// The merged (partly denied batch) and filtered JSON body; `None` when unchanged.
fn merge_and_filter(guard: &McpGuard, upstream: &[u8]) -> Result<Option<String>, Uninspectable> {
    let merged = match &guard.plan {
        Some(plan) => Some(airlock_mcp::merge(plan, upstream)?),
        None => None,
    };
    let text = merged.as_deref().map_or(upstream, str::as_bytes);
    if text.is_empty() {
        return Ok(merged);
    }
    Ok(airlock_mcp::filter_response(text, &guard.rule)?.or(merged))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use airlock_audit::Written;
    use airlock_audit::event::AuditEvent;
    use airlock_policy::load::load_str;

    use super::*;

    const POLICY: &str = "version: 1\nnetwork:\n  allow:\n    - host: api.example\n\
                          mcp:\n  - host: api.example\n    path: /mcp\n    tools: {deny: [run]}\n";

    fn call(id: u32, tool: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
        )
    }

    #[test]
    fn a_call_is_decided_on_the_requests_snapshot_and_audited_to_its_log() {
        let policy =
            Arc::new(CompiledPolicy::compile(&load_str("p.yaml", POLICY).unwrap()).unwrap());
        let host = Host::Name("api.example".into());
        let rule = rule_for(&policy, &host, "/mcp").expect("the mcp rule");
        let log = AuditLog::discarding().unwrap();
        let kept = Arc::new(Mutex::new(Vec::<AuditEvent>::new()));
        let sink = Arc::clone(&kept);
        log.tap_with(Arc::new(move |written: &Written<'_>| {
            sink.lock().unwrap().push(written.event.clone());
        }));
        let mut line = Line::new(LineKind::Http, "api.example".into(), 443, 5);
        line.method = Some("POST".into());
        line.path = Some("/mcp".into());
        let batch = format!("[{},{}]", call(1, "read"), call(2, "run"));
        let mut headers = HeaderMap::new();
        let inspected = inspect_request(
            (&policy, &log),
            rule,
            &line,
            &host,
            &mut headers,
            Bytes::from(batch),
        );
        let Ok(Inspected::Forward { body, guard }) = inspected else {
            panic!("the allowed half is forwarded");
        };
        assert!(
            Arc::ptr_eq(&guard.policy, &policy),
            "the guard keeps the request's snapshot"
        );
        assert!(
            guard.plan.is_some(),
            "a partly denied batch is merged on the way back"
        );
        assert!(
            !body.windows(5).any(|w| w == b"\"run\""),
            "the denied call is not sent"
        );
        assert_eq!(headers[header::ACCEPT_ENCODING], "identity");
        log.flush();
        let events = kept.lock().unwrap();
        let calls: Vec<_> = events
            .iter()
            .map(|e| (e.tool.as_deref(), e.reason, e.conn))
            .collect();
        assert_eq!(
            calls,
            [
                (Some("read"), None, Some(5)),
                (Some("run"), Some(Reason::McpToolDenied.as_str()), Some(5)),
            ]
        );
    }
}
