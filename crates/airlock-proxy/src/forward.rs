//! The request service: one HTTP request goes through the request path's steps, each a
//! module of its own (docs/architecture.md walks one request through them):
//!
//! 1. *screen* and *identify* ([`identify`]): the destination and one canonical request;
//! 2. *decide* ([`decide`]): one policy snapshot's decision, a route followed, the run's
//!    mode applied;
//! 3. *credentials* ([`credentials`]): the outbound guard on the head, surrogates swapped;
//! 4. *body* ([`inspect`]): a body a `json_deny` guard or an MCP rule needs whole;
//! 5. *outbound* ([`outbound`]): the upstream request with its streaming body inspectors;
//! 6. *forward* and back ([`respond`]): sent through the pooling client, the response
//!    relayed, filtered or scrubbed.
//!
//! A step that stops the request hands back its answer, audited ([`answer`]); an allowed
//! request's audit line is written when its response body ends.

mod answer;
mod credentials;
mod decide;
mod identify;
mod inspect;
mod outbound;
mod refresh;
mod respond;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use airlock_audit::AuditLog;
use airlock_policy::{Decision, Reason};
use futures_util::FutureExt as _;
use http::{Request, Response};
use hyper::body::Incoming;

use self::answer::{Answered, Seen};
use crate::body::ProxyBody;
use crate::context::ConnContext;
use crate::mcp;
use crate::record::Line;
use crate::refusal;
use crate::websocket;
use airlock_credentials::Prepared;

/// Serves one request arriving on `context`'s connection. The steps' future is mapped,
/// not awaited inside another one, so that it is not moved once more per request
/// (docs/benchmarks.md).
pub(crate) fn serve(
    context: Arc<ConnContext>,
    request: Request<Incoming>,
) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send {
    steps(context, request).map(|answered| Ok(answered.unwrap_or_else(|answered| answered)))
}

/// The steps in order; `Err` is an answer given before the request was forwarded.
async fn steps(
    context: Arc<ConnContext>,
    request: Request<Incoming>,
) -> Result<Answered, Answered> {
    let context = &context;
    let request = identify::screen(context, request).await?;
    let started = Instant::now();
    let (mut request, identified) = identify::identify(context, request)?;
    // One snapshot of the policy and one of the credentials serve the whole request, even
    // if either is swapped meanwhile.
    let policy = context.shared.policy.load_full();
    let credentials = context.shared.credentials.load_full();
    let raw_path = request.uri().path();
    let caller = context.program();
    let decided = decide::decide(&policy, context.shared.mode, identified, raw_path, caller);
    if !decided.goes_on() {
        let seen = decided.seen;
        return Err(refuse_draining(
            context,
            decided.decision,
            seen,
            request.into_body(),
        ));
    }
    let seen = decided.seen;
    let mcp_rule = mcp::rule_for(&policy, &decided.destination.host, &seen.path);
    let rule = decided.decision.rule.as_ref();
    let headers = request.headers();
    let upgrade =
        match websocket::check_upgrade(request.version(), headers, mcp_rule.as_ref(), rule) {
            Ok(upgrade) => upgrade,
            Err(refusal) => {
                return Err(refuse_draining(context, refusal, seen, request.into_body()));
            }
        };
    let on_client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    let mut path_and_query = decided.path_and_query;
    let destination = decided.destination;
    let swapped = credentials::swap_credentials(
        &credentials,
        &policy,
        &destination,
        &decided.scope,
        &mut path_and_query,
        &mut parts.headers,
    );
    let prepared = match swapped {
        Ok(prepared) => prepared,
        Err(refusal) => {
            let decision = Decision::deny(refusal.reason, decided.decision.rule);
            let line = seen.line_of(context);
            let response =
                credentials::refuse_credential(context, &credentials, decision, refusal, line);
            return Err(answer::after_draining(body, response));
        }
    };
    let key =
        || crate::ask::request_key(&seen.method, seen.host.clone(), seen.port, Some(&seen.path));
    // The program behind the request goes with its ask (docs/watch.md).
    let process = || {
        let caller = context.caller.as_ref()?;
        serde_json::to_value(&caller.process).ok()
    };
    let (decision, asked) =
        decide::hold(&context.shared, decided.ask, key, decided.decision, process).await;
    let refresh = refresh::pending(context, &seen.method, &destination.host, &seen.path);
    let mut line = seen.line_of(context);
    line.asked = asked;
    if !decision.is_allow() {
        let response = answer::refuse_line(context, decision, line);
        return Err(answer::after_draining(body, response));
    }
    let Prepared {
        secrets,
        scrub,
        body_swap,
        guard,
        logged,
    } = prepared;
    let mut line = allowed_line(line, decision, decided.would, secrets, &logged);
    if policy.policy().audit.traceparent {
        line.trace = Some(crate::traceparent::apply(&mut parts.headers, line.id));
    }
    let inspect::Body {
        body,
        mcp_guard,
        held: _held,
    } = inspect::request_body(
        context,
        (mcp_rule, &decided.body_guards),
        &destination,
        &mut parts.headers,
        body,
        &line,
    )
    .await?;
    let (body, refresh, _refresh_held) = refresh::screen(
        context,
        &credentials,
        refresh,
        &mut parts.headers,
        body,
        &line,
    )
    .await?;
    let uri = outbound::target(context, &destination, &path_and_query, &line)?;
    let mut plan = outbound::Plan {
        uri,
        on_client_upgrade,
        guard,
        body_swap,
        body_guards: &decided.body_guards,
    };
    let upgrade = outbound::reserve_upgrade(context, &mut plan, &mut parts.headers, &line).await?;
    let outbound = outbound::assemble(context, plan, (parts, body), (line, upgrade), started)?;
    let inspectors = respond::Inspectors {
        scrub: scrub.then(|| credentials.scrubber()),
        mcp_guard,
        refresh,
    };
    // The inspected body's bytes (`_held`) stay taken from the budget until it is sent.
    let response = respond::forward(context, outbound, inspectors).await;
    // No answer goes out whole without its audit line (docs/reliability.md).
    Ok(audit_gate(&context.shared.audit, response).await)
}

/// Writes the refusal's audit line and answers while the body drains.
fn refuse_draining(
    context: &ConnContext,
    decision: Decision,
    seen: Seen,
    body: Incoming,
) -> Answered {
    let response = answer::refuse(context, decision, seen);
    answer::after_draining(body, response)
}

/// The audit line of an allowed request: its rule, the refusal report mode let through,
/// the secrets swapped and the first credential kind `dlp: {credentials: log}` passed (the
/// path then redacted: the line does not keep the token).
fn allowed_line(
    mut line: Line,
    decision: Decision,
    would: Option<Reason>,
    secrets: Vec<String>,
    logged: &[&'static str],
) -> Line {
    line.allow(decision.rule, would);
    line.secrets = secrets;
    line.credential = logged.first().copied();
    if line.credential.is_some() {
        line.path = line
            .path
            .map(|path| airlock_dlp::redact(&path).into_owned());
    }
    line
}

/// The audit gate an allowed answer passes before its head goes out (docs/reliability.md,
/// "The audit log's disk"): while the log is unavailable the answer becomes the 503
/// `audit_log_unavailable`; an answer whose body the client will not wait for (`HEAD`,
/// 204, 304, an empty body) has its line written, and acknowledged, first. Any other
/// answer's body holds its end until its line is written ([`crate::record::Exchange::finish`]).
async fn audit_gate(audit: &AuditLog, mut response: Response<ProxyBody>) -> Response<ProxyBody> {
    let body = response.body_mut();
    if !body.is_upstream() {
        return response;
    }
    if !audit.admit() {
        if let Some(mut exchange) = body.take_exchange(true) {
            exchange.refuse_for_audit();
        }
        return refusal::audit_unavailable();
    }
    let Some(exchange) = body.take_exchange(false) else {
        return response;
    };
    match exchange.finish().await {
        Ok(()) => response,
        Err(_) => refusal::audit_unavailable(),
    }
}
