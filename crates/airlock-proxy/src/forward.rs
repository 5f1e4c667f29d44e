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
//! The request's one policy snapshot and one credentials snapshot are taken once, before
//! *identify*; after *decide* its [`state::RequestState`] (the snapshots, the destination,
//! the audit line, the body guards, the [`answer::Auditor`]) is built once, and each later
//! step borrows from it only what it needs, never the connection context (only *screen*,
//! *identify* and the refresh steps take that). A step that stops the request hands back
//! its answer, audited ([`answer`]); an allowed request's audit line is written when its
//! response body ends.

mod answer;
mod credentials;
mod decide;
mod identify;
mod inspect;
mod outbound;
mod refresh;
mod respond;
mod state;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use airlock_audit::AuditLog;
use airlock_credentials::{BodySwap, GuardStream, Prepared};
use airlock_policy::{Decision, Reason};
use futures_util::FutureExt as _;
use http::request::Parts;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use self::answer::{Answered, Auditor};
use self::state::{RequestState, Snapshot, Verdict};
use crate::body::ProxyBody;
use crate::budget::Held;
use crate::context::ConnContext;
use crate::record::Line;
use crate::refusal;
use crate::websocket;

/// Serves one request arriving on `context`'s connection. The steps' future is mapped,
/// not awaited inside another one, so that it is not moved once more per request
/// (docs/benchmarks.md).
pub(crate) fn serve(
    context: Arc<ConnContext>,
    request: Request<Incoming>,
) -> impl Future<Output = Result<Response<ProxyBody>, Infallible>> + Send {
    steps(context, request).map(|answered| Ok(answered.unwrap_or_else(|answered| answered)))
}

/// An allowed request's head and body, with what the credentials step prepared for them.
struct Allowed {
    parts: Parts,
    body: Incoming,
    /// The client's side of the upgrade the request asks for.
    on_client_upgrade: Option<OnUpgrade>,
    /// The outbound guard's search of the body (of the messages, for an upgrade).
    guard: Option<GuardStream>,
    body_swap: Option<BodySwap>,
    /// The destination is a secret's host: its response is scrubbed.
    scrub: bool,
}

/// The steps in order; `Err` is an answer given before the request was forwarded.
///
/// Each phase's values live in a function or a scope of their own, so that the request's
/// future (moved whole into the box each request is spawned in) does not keep what an
/// earlier phase has handed on; and the steps that take owned values return `async`
/// blocks, which keep their captures once where an `async fn` keeps its arguments twice
/// (docs/benchmarks.md, "The request's future, smaller").
async fn steps(
    context: Arc<ConnContext>,
    request: Request<Incoming>,
) -> Result<Answered, Answered> {
    let context = &context;
    let request = identify::screen(context, request).await?;
    let started = Instant::now();
    // One snapshot of the policy and one of the credentials serve the whole request,
    // from the guard on its names to its response's scrub, even if either is swapped
    // meanwhile.
    let shared = &context.shared;
    let snapshot = Snapshot::take(&shared.policy, &shared.credentials);
    let ready = {
        let swapped = swapped(context, &snapshot, request, started)?;
        let (state, allowed, refresh) = ask(context, swapped).await?;
        prepare(context, state, allowed, refresh).await?
    };
    let Ready {
        outbound,
        inspectors,
        refresh,
        held: _held,
    } = ready;
    // The bytes read for the body's inspection and for a refresh's screen (`_held`) stay
    // taken from the budget until the answer has passed the audit gate.
    let response = forward_and_back(context, outbound, inspectors, refresh).await;
    // No answer goes out whole without its audit line (docs/reliability.md).
    Ok(audit_gate(&shared.audit, response).await)
}

/// A request decided, its credentials swapped, before *ask*.
struct Swapped<'r> {
    state: RequestState<'r>,
    verdict: Verdict<'r>,
    parts: Parts,
    body: Incoming,
    /// The client's side of the upgrade the request asks for.
    on_client_upgrade: Option<OnUpgrade>,
    /// What the credentials step prepared for the head and the body.
    prepared: Prepared,
}

/// *identify*, *decide* and *credentials*; `Err` is the answer of a request stopped here.
// An answer is the response itself (152 bytes): see `decided`.
#[allow(clippy::result_large_err)]
fn swapped<'r>(
    context: &'r ConnContext,
    snapshot: &'r Snapshot,
    request: Request<Incoming>,
    started: Instant,
) -> Result<Swapped<'r>, Answered> {
    let (mut request, mut state, verdict) = decided(context, snapshot, request, started)?;
    let rule = verdict.decision.rule.as_ref();
    let (version, headers) = (request.version(), request.headers());
    let upgrade = match websocket::check_upgrade(version, headers, state.mcp_rule.as_ref(), rule) {
        Ok(upgrade) => upgrade,
        Err(refusal) => return Err(refuse_draining(state, refusal, request.into_body())),
    };
    let on_client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    let swapped = credentials::swap_credentials(
        state.credentials,
        state.policy,
        &state.destination,
        &verdict.scope,
        &mut state.path_and_query,
        &mut parts.headers,
    );
    let prepared = match swapped {
        Ok(prepared) => prepared,
        Err(refusal) => {
            let decision = Decision::deny(refusal.reason, verdict.decision.rule);
            let (auditor, credentials) = (state.auditor, state.credentials);
            let response =
                credentials::refuse_credential(auditor, credentials, decision, refusal, state.line);
            return Err(answer::after_draining(body, response));
        }
    };
    Ok(Swapped {
        state,
        verdict,
        parts,
        body,
        on_client_upgrade,
        prepared,
    })
}

/// *ask*: an allowed request's state and head, with the refresh it carries, if any; `Err`
/// is the answer of a request refused here.
fn ask<'r>(
    context: &'r ConnContext,
    swapped: Swapped<'r>,
) -> impl Future<Output = Result<(RequestState<'r>, Allowed, Option<refresh::Pending>), Answered>>
+ Send
+ 'r {
    let Swapped {
        mut state,
        verdict,
        mut parts,
        body,
        on_client_upgrade,
        prepared,
    } = swapped;
    async move {
        let asks = &context.shared.asks;
        let (decision, asked) = hold(asks, &state, verdict.ask, verdict.decision).await;
        let refresh = refresh::pending(
            context,
            state.method(),
            &state.destination.host,
            state.path(),
        );
        state.line.asked = asked;
        if !decision.is_allow() {
            let response = state.auditor.refuse_line(decision, state.line);
            return Err(answer::after_draining(body, response));
        }
        let Prepared {
            secrets,
            scrub,
            body_swap,
            guard,
            logged,
        } = prepared;
        allow(&mut state.line, decision, verdict.would, secrets, &logged);
        if state.policy.policy().audit.traceparent {
            state.line.trace = Some(crate::traceparent::apply(&mut parts.headers, state.line.id));
        }
        let allowed = Allowed {
            parts,
            body,
            on_client_upgrade,
            guard,
            body_swap,
            scrub,
        };
        Ok((state, allowed, refresh))
    }
}

/// *identify* and *decide*: the request's state, built once from the decision on
/// `snapshot`'s policy; a request refused here (not held for an ask) is answered.
// An answer is the response itself (152 bytes); boxing it would allocate on every
// refusal to spare a move on a path that ends here.
#[allow(clippy::result_large_err)]
fn decided<'r>(
    context: &'r ConnContext,
    snapshot: &'r Snapshot,
    request: Request<Incoming>,
    started: Instant,
) -> Result<(Request<Incoming>, RequestState<'r>, Verdict<'r>), Answered> {
    let names = (&*snapshot.policy, &*snapshot.credentials);
    let (request, identified) = identify::identify(context, names, request)?;
    let raw_path = request.uri().path();
    let mode = context.shared.mode;
    let decided = decide::decide(
        &snapshot.policy,
        mode,
        identified,
        raw_path,
        context.program(),
    );
    let goes_on = decided.goes_on();
    let (state, verdict) = RequestState::new(snapshot, Auditor::of(context), decided, started);
    if !goes_on {
        return Err(refuse_draining(
            state,
            verdict.decision,
            request.into_body(),
        ));
    }
    Ok((request, state, verdict))
}

/// *ask*: the decision to act on once a held refusal is answered, and whether it was
/// asked about (the request's key and the program behind it go with the ask).
async fn hold(
    asks: &crate::ask::Asks,
    state: &RequestState<'_>,
    ask: Option<Reason>,
    decision: Decision,
) -> (Decision, bool) {
    let line = &state.line;
    let key = || {
        crate::ask::request_key(
            state.method(),
            line.host.clone(),
            line.port,
            Some(state.path()),
        )
    };
    // The program behind the request goes with its ask (docs/watch.md).
    let process = || state.auditor.process();
    decide::hold(asks, ask, key, decision, process).await
}

/// An allowed request ready to be sent: its outbound request, the inspectors of its
/// response, the refresh it carries, and the bytes held for it.
struct Ready {
    outbound: outbound::Outbound,
    inspectors: respond::Inspectors,
    refresh: Option<refresh::Pending>,
    /// The bytes read for the body's inspection and for a refresh's screen, taken from the
    /// budget until the answer has passed the audit gate.
    held: (Option<Held>, Option<Held>),
}

/// The steps of an allowed request before it goes: *body*, *refresh* (its request), then
/// *outbound*. `Err` is the answer of a request stopped here.
fn prepare<'r>(
    context: &'r ConnContext,
    state: RequestState<'r>,
    allowed: Allowed,
    refresh: Option<refresh::Pending>,
) -> impl Future<Output = Result<Ready, Answered>> + Send + 'r {
    let Allowed {
        mut parts,
        body,
        on_client_upgrade,
        guard,
        body_swap,
        scrub,
    } = allowed;
    async move {
        let shared = &context.shared;
        let inspect::Body {
            body,
            mcp_guard,
            held,
        } = inspect::request_body(
            (&shared.budget, shared.limits.body_timeout),
            (state.auditor, state.policy),
            (state.mcp_rule, &state.body_guards),
            &state.destination,
            &mut parts.headers,
            body,
            &state.line,
        )
        .await?;
        let (body, refresh, refresh_held) = match refresh {
            None => (body, None, None),
            // Boxed: only a request to a token host waits here (docs/benchmarks.md,
            // future sizes).
            Some(pending) => {
                let (credentials, headers) = (state.credentials, &mut parts.headers);
                let screen =
                    refresh::screen(context, credentials, pending, headers, body, &state.line);
                let (body, pending, held) = Box::pin(screen).await?;
                (body, Some(pending), held)
            }
        };
        let (destination, line) = (&state.destination, &state.line);
        let uri = outbound::target(
            state.auditor.audit,
            destination,
            &state.path_and_query,
            line,
        )?;
        let mut plan = outbound::Plan {
            uri,
            on_client_upgrade,
            guard,
            body_swap,
            body_guards: &state.body_guards,
        };
        let with = (&shared.budget, state.auditor);
        let upgrade = outbound::reserve_upgrade(with, &mut plan, &mut parts.headers, line).await?;
        let sent = (parts, body);
        let outbound = outbound::assemble(with, plan, sent, (state.line, upgrade), state.started)?;
        let inspectors = respond::Inspectors {
            scrub: scrub.then(|| state.credentials.scrubber()),
            mcp_guard,
        };
        Ok(Ready {
            outbound,
            inspectors,
            refresh,
            held: (held, refresh_held),
        })
    }
}

/// *forward* ([`respond::send`], its answer made by [`respond::returned`]), then the answer
/// of a token host ([`refresh::respond`], which takes the context) or the response through
/// its inspectors ([`respond::respond`]). A plain function: `outbound` moves into the
/// upstream request before anything waits, so that the exchange's future does not keep it
/// (docs/benchmarks.md, "The request's future, smaller").
fn forward_and_back<'c>(
    context: &'c ConnContext,
    outbound: outbound::Outbound,
    inspectors: respond::Inspectors,
    refresh: Option<refresh::Pending>,
) -> impl Future<Output = Answered> + Send + 'c {
    let upstream = respond::Upstream::of(context);
    let (response, sent) = respond::send(&upstream, outbound);
    async move {
        // A scope of its own: what the upstream returned is not kept while the response
        // is inspected.
        let (response, exchange) = {
            let scrub = inspectors.scrub.as_ref();
            let returned = match respond::returned(upstream.relay, response.await, sent, scrub) {
                Ok(returned) => returned,
                Err(answered) => return answered,
            };
            let respond::Returned {
                response,
                exchange,
                body_report,
            } = returned;
            match refresh {
                Some(pending) => {
                    let report = body_report.as_deref();
                    // Boxed: only a refresh waits here (docs/benchmarks.md, future sizes).
                    let answer = refresh::respond(context, pending, response, exchange, report);
                    match Box::pin(answer).await {
                        Ok(answered) => return answered,
                        Err(untouched) => untouched,
                    }
                }
                None => (response, exchange),
            }
        };
        respond::respond(upstream.budget, response, exchange, inspectors).await
    }
}

/// Writes the refusal's audit line on `state`'s line and answers while the body drains.
fn refuse_draining(state: RequestState<'_>, decision: Decision, body: Incoming) -> Answered {
    let response = state.auditor.refuse_line(decision, state.line);
    answer::after_draining(body, response)
}

/// Makes `line` an allowed request's: its rule, the refusal report mode let through, the
/// secrets swapped and the first credential kind `dlp: {credentials: log}` passed (the
/// path then redacted: the line does not keep the token).
fn allow(
    line: &mut Line,
    decision: Decision,
    would: Option<Reason>,
    secrets: Vec<String>,
    logged: &[&'static str],
) {
    line.allow(decision.rule, would);
    line.secrets = secrets;
    line.credential = logged.first().copied();
    if line.credential.is_some() {
        line.path = line
            .path
            .take()
            .map(|path| airlock_dlp::redact(&path).into_owned());
    }
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

#[cfg(test)]
mod tests;
