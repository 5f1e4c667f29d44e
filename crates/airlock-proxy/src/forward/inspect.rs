//! The *body* step for requests whose body must be read whole before anything is sent:
//! a `json_deny` guard's (docs/policy.md) or an MCP rule's (docs/mcp.md). The body is read
//! within the body timeout, its bytes taken from the memory budget until the exchange is
//! sent, then checked; an MCP call is decided and may be answered here. Every other body
//! streams (its inspectors are set up by the *outbound* step).

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::model::{McpRule, Rule};
use airlock_policy::{CompiledPolicy, Decision, Reason};
use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Either;
use hyper::body::Incoming;

use super::answer::{self, Answered, Auditor};
use crate::body_guard::{self, Unread};
use crate::budget::{Budget, Held};
use crate::identity::Destination;
use crate::mcp::{self, Inspected};
use crate::record::Line;

/// The request body after the body step.
pub(super) struct Body {
    /// Streamed as it arrives (`Left`) or read and checked whole (`Right`).
    pub(super) body: Either<Incoming, Bytes>,
    /// The MCP call's guard, which filters its response.
    pub(super) mcp_guard: Option<Box<mcp::McpGuard>>,
    /// The whole body's bytes, held from the budget until the exchange is sent.
    pub(super) held: Option<Held>,
}

/// Reads and checks the body when `guards` or `mcp_rule` need it whole (from the budget,
/// within the body timeout: `within`); passes it through as a stream otherwise. `line` is
/// the request's allowed `http` line, `policy` its one snapshot (an MCP call's guard
/// keeps it), `auditor` writes its refusals.
pub(super) async fn request_body(
    within: (&Budget, Duration),
    (auditor, policy): (Auditor<'_>, &Arc<CompiledPolicy>),
    (mcp_rule, guards): (Option<McpRule>, &[&Rule]),
    destination: &Destination,
    headers: &mut HeaderMap,
    body: Incoming,
    line: &Line,
) -> Result<Body, Answered> {
    if !reads_whole(mcp_rule.is_some(), guards) {
        return Ok(Body {
            body: Either::Left(body),
            mcp_guard: None,
            held: None,
        });
    }
    // Boxed: most requests stream, and every request's future would carry this one.
    let read = read_checked(within, auditor, headers, body, guards, line);
    let (bytes, held) = Box::pin(read).await?;
    let Some(rule) = mcp_rule else {
        return Ok(Body {
            body: Either::Right(bytes),
            mcp_guard: None,
            held: Some(held),
        });
    };
    let inspected = mcp::inspect_request(
        (policy, auditor.audit),
        rule,
        line,
        &destination.host,
        headers,
        bytes,
    );
    match inspected {
        Ok(Inspected::Forward { body, guard }) => Ok(Body {
            body: Either::Right(body),
            mcp_guard: Some(guard),
            held: Some(held),
        }),
        Ok(Inspected::Answered(response)) => Err(*response),
        Err(reason) => {
            let decision = Decision::deny(reason, line.rule.clone());
            Err(auditor.refuse_line(decision, line.clone()))
        }
    }
}

/// Whether the body must be read whole: an MCP rule (`mcp`) or a `json_deny` guard needs
/// it; every other body streams.
fn reads_whole(mcp: bool, guards: &[&Rule]) -> bool {
    mcp || !guards.is_empty()
}

/// Why a body read whole is not sent on: each is its own answer.
#[derive(Debug, PartialEq, Eq)]
enum Unsent {
    /// Not complete within the body timeout: the 408, audited as `body_uninspectable` by
    /// this rule.
    Timeout(Option<String>),
    /// No room in the budget: the 503 `overloaded`, while the rest of the body drains.
    Overloaded(Decision),
    /// The 403: a guard matched, or the body cannot be inspected.
    Refused(Decision),
}

/// Reads the body whole (within the body timeout, its bytes taken from the budget) and
/// checks it against `guards`; `Err` is the answer already audited: 403, 408
/// `request_timeout` or 503 `overloaded`.
async fn read_checked(
    within: (&Budget, Duration),
    auditor: Auditor<'_>,
    headers: &mut HeaderMap,
    mut body: Incoming,
    guards: &[&Rule],
    line: &Line,
) -> Result<(Bytes, Held), Answered> {
    let read = read_and_check(headers, &mut body, guards, line.rule.as_deref(), within).await;
    match read {
        Ok(read) => Ok(read),
        Err(Unsent::Timeout(rule)) => Err(auditor.refuse_timeout(rule, line.clone())),
        Err(Unsent::Overloaded(decision)) => {
            let response = auditor.refuse_line(decision, line.clone());
            Err(answer::after_draining(body, response))
        }
        Err(Unsent::Refused(decision)) => Err(auditor.refuse_line(decision, line.clone())),
    }
}

/// The decision of [`read_checked`], without its answers: the body read whole from
/// `budget` within `timeout`, then checked against `guards`. A refusal names the first
/// guarded rule, or `line_rule` (the request's allow rule) when there is none (an MCP
/// call's body).
async fn read_and_check<B: http_body::Body<Data = Bytes> + Unpin>(
    headers: &mut HeaderMap,
    body: &mut B,
    guards: &[&Rule],
    line_rule: Option<&str>,
    (budget, timeout): (&Budget, Duration),
) -> Result<(Bytes, Held), Unsent> {
    let rule = guards
        .first()
        .map(|rule| rule.id.clone())
        .or_else(|| line_rule.map(str::to_owned));
    match body_guard::read_whole(headers, body, budget, timeout).await {
        Ok((bytes, held)) => match body_guard::check(&bytes, guards) {
            Ok(()) => Ok((bytes, held)),
            Err(decision) => Err(Unsent::Refused(decision)),
        },
        Err(Unread::Timeout) => Err(Unsent::Timeout(rule)),
        Err(Unread::Refused(Reason::Overloaded)) => {
            Err(Unsent::Overloaded(Decision::deny(Reason::Overloaded, rule)))
        }
        Err(Unread::Refused(reason)) => Err(Unsent::Refused(Decision::deny(reason, rule))),
    }
}

#[cfg(test)]
mod tests;
