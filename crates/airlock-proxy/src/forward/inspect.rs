//! The *body* step for requests whose body must be read whole before anything is sent:
//! a `json_deny` guard's (docs/policy.md) or an MCP rule's (docs/mcp.md). The body is read
//! within the body timeout, its bytes taken from the memory budget until the exchange is
//! sent, then checked; an MCP call is decided and may be answered here. Every other body
//! streams (its inspectors are set up by the *outbound* step).

use airlock_policy::model::{McpRule, Rule};
use airlock_policy::{Decision, Reason};
use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Either;
use hyper::body::Incoming;

use super::answer::{self, Answered};
use crate::body_guard::{self, Unread};
use crate::budget::Held;
use crate::context::ConnContext;
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

/// Reads and checks the body when `guards` or `mcp_rule` need it whole; passes it through
/// as a stream otherwise. `line` is the request's allowed `http` line.
pub(super) async fn request_body(
    context: &ConnContext,
    (mcp_rule, guards): (Option<McpRule>, &[&Rule]),
    destination: &Destination,
    headers: &mut HeaderMap,
    body: Incoming,
    line: &Line,
) -> Result<Body, Answered> {
    if mcp_rule.is_none() && guards.is_empty() {
        return Ok(Body {
            body: Either::Left(body),
            mcp_guard: None,
            held: None,
        });
    }
    // Boxed: most requests stream, and every request's future would carry this one.
    let (bytes, held) = Box::pin(read_checked(context, headers, body, guards, line)).await?;
    let Some(rule) = mcp_rule else {
        return Ok(Body {
            body: Either::Right(bytes),
            mcp_guard: None,
            held: Some(held),
        });
    };
    match mcp::inspect_request(context, rule, line, &destination.host, headers, bytes) {
        Ok(Inspected::Forward { body, guard }) => Ok(Body {
            body: Either::Right(body),
            mcp_guard: Some(guard),
            held: Some(held),
        }),
        Ok(Inspected::Answered(response)) => Err(*response),
        Err(reason) => {
            let decision = Decision::deny(reason, line.rule.clone());
            Err(answer::refuse_line(context, decision, line.clone()))
        }
    }
}

/// Reads the body whole (within the body timeout, its bytes taken from the budget) and
/// checks it against `guards`; `Err` is the answer already audited: 403, 408
/// `request_timeout` or 503 `overloaded`.
async fn read_checked(
    context: &ConnContext,
    headers: &mut HeaderMap,
    mut body: Incoming,
    guards: &[&Rule],
    line: &Line,
) -> Result<(Bytes, Held), Answered> {
    let shared = &context.shared;
    let rule = guards
        .first()
        .map(|rule| rule.id.clone())
        .or_else(|| line.rule.clone());
    let timeout = shared.limits.body_timeout;
    let read = body_guard::read_whole(headers, &mut body, &shared.budget, timeout).await;
    let refusal = match read {
        Ok((bytes, held)) => match body_guard::check(&bytes, guards) {
            Ok(()) => return Ok((bytes, held)),
            Err(decision) => decision,
        },
        Err(Unread::Timeout) => return Err(answer::refuse_timeout(context, rule, line.clone())),
        Err(Unread::Refused(Reason::Overloaded)) => {
            let decision = Decision::deny(Reason::Overloaded, rule);
            let response = answer::refuse_line(context, decision, line.clone());
            return Err(answer::after_draining(body, response));
        }
        Err(Unread::Refused(reason)) => Decision::deny(reason, rule),
    };
    Err(answer::refuse_line(context, refusal, line.clone()))
}
