//! The *forward* step and the way back: the upstream request goes out through the pooling
//! client (HTTP/1 only for an upgrade), and its response comes back through the response
//! inspectors: an upgrade is relayed (its messages checked), an MCP response filtered, and
//! every response from a secret's host scrubbed of real values, head and body. A body the
//! inspectors tripped on, or an upstream the address guard refused, is a refusal; any
//! other failure of the upstream a 502. Either way the exchange's audit line is written.
//! [`send`] takes an [`Upstream`] handle and [`respond`] the budget, not the connection
//! context; between [`returned`] and [`respond`], `forward.rs` lets the refresh step see a
//! token host's answer.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use airlock_encoding::Decoder;
use airlock_encoding::Limits;
use airlock_policy::{Decision, Reason};
use futures_util::future::{self, Either};
use futures_util::{FutureExt as _, TryFutureExt as _};
use http::response::Parts;
use http::{HeaderMap, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use super::answer::Answered;
use super::outbound::{self, Outbound, Upgrade};
use crate::body::UploadBody;
use crate::body::{ProxyBody, content_decoder};
use crate::budget::Budget;
use crate::context::{Admitted, ConnContext};
use crate::leg::{self, LegError, LegSlot, Legs};
use crate::mcp::{self, McpGuard};
use crate::record::{BodyReport, Exchange, Trip};
use crate::refusal;
use crate::scrub::scrub_head;
use crate::upstream::{DialError, Upstream as UpstreamSide, UpstreamClient};
use crate::websocket;
use airlock_credentials::Scrubber;

/// How far a response from a secret's host is decoded to be scrubbed: its size is the
/// upstream's business (it streams), but one coded byte may not become more than any
/// real coding yields (deflate's best is 1032:1).
const RESPONSE_DECODING: Limits = Limits {
    max_output: u64::MAX,
    max_ratio: 1100,
    ratio_floor: 1024 * 1024,
};

/// What the forward step needs of the proxy (not the connection context): the pooling
/// clients (each with its connector: the `--resolve` pins, the address guard, the
/// upstream CA), the inspection budget, and what an upgrade's relay holds.
pub(super) struct Upstream<'c> {
    /// Offers h2 and HTTP/1.1.
    pub(super) client: &'c UpstreamClient,
    /// For upgrades: HTTP/1.1 only.
    pub(super) http1_client: &'c UpstreamClient,
    /// The client connection's own upstream leg (HTTP/1.1 clients), tried before the pool.
    pub(super) leg: Option<(&'c LegSlot, &'c Arc<Legs>, &'c Arc<UpstreamSide>)>,
    /// What an MCP response filter holds while it reads the answer whole.
    pub(super) budget: &'c Budget,
    /// An upgrade's relay: its idle timeout, and the client connection's permit it holds.
    pub(super) relay: (Duration, &'c Arc<Admitted>),
}

impl<'c> Upstream<'c> {
    /// The upstream handle of `context`'s proxy.
    pub(super) fn of(context: &'c ConnContext) -> Self {
        let shared = &context.shared;
        Upstream {
            client: &shared.client,
            http1_client: &shared.http1_client,
            leg: (context.leg.as_deref()).map(|leg| (leg, &shared.legs, &shared.upstream)),
            budget: &shared.budget,
            relay: (shared.limits.relay_idle_timeout, &context._permit),
        }
    }
}

/// How the response is inspected on its way back.
pub(super) struct Inspectors {
    /// The destination is a secret's host: the head and the body are scrubbed with this
    /// (made from the request's one credentials snapshot).
    pub(super) scrub: Option<Scrubber>,
    /// The MCP call's guard, which filters the response.
    pub(super) mcp_guard: Option<Box<McpGuard>>,
}

/// The upstream's response to a request that was not upgraded, before its inspectors.
pub(super) struct Returned {
    pub(super) response: Response<Incoming>,
    pub(super) exchange: Exchange,
    /// What the request body's inspectors found, when they ran.
    pub(super) body_report: Option<Arc<BodyReport>>,
}

/// `outbound`'s upstream request, made ready to go through `upstream`'s leg or pooling
/// client: the future that sends it and yields the response (nothing is sent until it is
/// polled), and what [`returned`] needs of the request once it is answered.
///
/// A plain function: the request moves into its response future before anything waits,
/// so the exchange's future holds neither `outbound` nor the request while the upstream
/// answers (docs/benchmarks.md, "The request's future, smaller").
#[must_use = "nothing is sent until the response future is polled"]
pub(super) fn send<'c>(
    upstream: &Upstream<'c>,
    outbound: Outbound,
) -> (
    impl Future<Output = Result<Response<Incoming>, LegError>> + Send + use<'c>,
    Sent,
) {
    let Outbound {
        request,
        exchange,
        body_report,
        upgrade,
    } = outbound;
    let response = request_upstream(upstream, request, upgrade.is_some());
    let sent = Sent {
        exchange,
        body_report,
        upgrade,
    };
    (response, sent)
}

/// What [`send`] keeps of the outbound request while the upstream answers.
pub(super) struct Sent {
    exchange: Exchange,
    body_report: Option<Arc<BodyReport>>,
    upgrade: Option<Upgrade>,
}

/// The upstream's `response` to a request [`send`] sent. `Err` is the answer given here:
/// the refusal of a body its inspectors stopped, the upstream's failure, or a switched
/// upgrade relayed in the background (its head scrubbed with `scrub`).
// An answer is the response itself (152 bytes); boxing it would allocate on every
// refusal to spare a move on a path that ends here.
#[allow(clippy::result_large_err)]
pub(super) fn returned(
    relay: (Duration, &Arc<Admitted>),
    response: Result<Response<Incoming>, LegError>,
    sent: Sent,
    scrub: Option<&Scrubber>,
) -> Result<Returned, Answered> {
    let Sent {
        mut exchange,
        body_report,
        upgrade,
    } = sent;
    let response = match response {
        Ok(response) => response,
        Err(error) => match body_refusal(body_report.as_deref()) {
            Some((decision, cause)) => {
                exchange.note_credential(cause.as_ref().and_then(Trip::finding));
                return Err(refusal::refuse_exchange(&mut exchange, decision));
            }
            None => return Err(upstream_failed(exchange, &error)),
        },
    };
    exchange.set_status(response.status().as_u16());
    if switched(upgrade.is_some(), response.status())
        && let Some(upgrade) = upgrade
    {
        return Err(relay_upgrade(relay, upgrade, response, exchange, scrub));
    }
    Ok(Returned {
        response,
        exchange,
        body_report,
    })
}

/// The response future of `request`: an upgrade through the HTTP/1.1 pool, any other
/// request through the client connection's leg when it takes it, else through the pool.
/// The pool's future is the client's own (a box); only the leg's path is boxed here, so
/// that the pool's path (h2 clients) does not carry the leg's future or the request.
fn request_upstream<'c>(
    upstream: &Upstream<'c>,
    request: Request<UploadBody>,
    upgrade: bool,
) -> impl Future<Output = Result<Response<Incoming>, LegError>> + Send + use<'c> {
    if upgrade {
        return Either::Left(upstream.http1_client.request(request).err_into());
    }
    let client = upstream.client;
    match upstream.leg {
        // Chained, not an `async` block: the box holds the leg's future or the pool's, not
        // both, nor the request beside them.
        Some((leg, legs, side)) => Either::Right(Box::pin(
            leg::send(leg, legs, side, request).then(move |sent| match sent {
                Ok(answer) => Either::Left(future::ready(answer)),
                // The leg did not take it: the pool sends it.
                Err(request) => Either::Right(client.request(request).err_into()),
            }),
        )),
        None => Either::Left(client.request(request).err_into()),
    }
}

/// Relays a switched upgrade in the background and answers with the upstream's 101.
fn relay_upgrade(
    relay: (Duration, &Arc<Admitted>),
    upgrade: Upgrade,
    mut response: Response<Incoming>,
    mut exchange: Exchange,
    scrub: Option<&Scrubber>,
) -> Answered {
    if extension_unchecked(upgrade.checked, response.headers()) {
        exchange.set_status(502);
        return refusal::bad_gateway(
            "the upstream accepted the WebSocket with an extension airlock did not offer; \
             its messages could not be checked against the body guards, so it is not \
             relayed",
        );
    }
    let on_upstream = hyper::upgrade::on(&mut response);
    websocket::relay_upgraded(
        relay,
        exchange,
        (upgrade.on_client, on_upstream),
        upgrade.message_guards,
        upgrade.message_guard,
        upgrade.message_room,
    );
    let (mut parts, _) = response.into_parts();
    if let Some(scrubber) = scrub {
        scrub_head(scrubber, &mut parts);
    }
    Response::from_parts(parts, ProxyBody::empty())
}

/// The response of a request that was not upgraded, through its inspectors (an MCP
/// filter reading the answer whole takes its bytes from `budget`).
pub(super) async fn respond(
    budget: &Budget,
    response: Response<Incoming>,
    exchange: Exchange,
    inspectors: Inspectors,
) -> Answered {
    // Every head from a secret's host is scrubbed: header values and the reason phrase.
    // 1xx heads never reach this point: hyper's client reads past them (docs/secrets.md).
    let scrubber = inspectors.scrub;
    let (mut parts, body) = response.into_parts();
    clean_head(&mut parts, scrubber.as_ref());
    let (mut parts, body, mut exchange) = match inspectors.mcp_guard {
        None => (parts, body, exchange),
        Some(guard) => {
            let scrub = scrubber.as_ref();
            // Boxed: only an MCP call waits here (docs/benchmarks.md, future sizes).
            let filtered = mcp::filter_response(budget, guard, parts, body, exchange, scrub);
            match Box::pin(filtered).await {
                Ok(response) => return response,
                Err(untouched) => untouched,
            }
        }
    };
    let Some(scrubber) = scrubber else {
        return Response::from_parts(parts, ProxyBody::upstream(body, exchange));
    };
    let Ok(decoder) = scrub_plan(&mut parts.headers, &scrubber) else {
        exchange.set_status(502);
        return refusal::bad_gateway(UNDECODABLE);
    };
    Response::from_parts(
        parts,
        ProxyBody::scrubbed(body, exchange, decoder, scrubber.stream()),
    )
}

/// The 502's message for a response from a secret's host in a coding airlock cannot undo.
const UNDECODABLE: &str = "the upstream sent a response from a secret's host in a content \
                           coding airlock cannot decode; it cannot be scrubbed of the real \
                           credential, so it is not passed on";

/// The refusal of a request whose body its inspectors stopped (the upload was abandoned,
/// which is why the upstream failed), with the trip for the audit line; `None` when the
/// body was not stopped.
fn body_refusal(report: Option<&BodyReport>) -> Option<(Decision, Option<Trip>)> {
    let report = report.filter(|report| report.tripped())?;
    let cause = report.cause();
    let reason = cause
        .as_ref()
        .map_or(Reason::SecretOutOfScope, Trip::reason);
    Some((Decision::deny(reason, None), cause))
}

/// Whether the response switches protocols for a request that asked to (`asked`): only
/// then is it relayed as an upgrade; any other 101 is answered as a response is.
fn switched(asked: bool, status: StatusCode) -> bool {
    asked && status == StatusCode::SWITCHING_PROTOCOLS
}

/// Whether a switched WebSocket whose messages must be checked (`checked`) came back
/// with an extension airlock did not offer (its messages could not be read): a 502.
fn extension_unchecked(checked: bool, headers: &HeaderMap) -> bool {
    checked && websocket::negotiated_extension(headers)
}

/// The head of a response that was not upgraded, before any filter: hop-by-hop headers
/// go, and from a secret's host (`scrubber`) every header value and the reason phrase are
/// scrubbed. 1xx heads never reach this point: hyper's client reads past them
/// (docs/secrets.md).
fn clean_head(parts: &mut Parts, scrubber: Option<&Scrubber>) {
    outbound::strip_hop_by_hop(&mut parts.headers, false);
    if let Some(scrubber) = scrubber {
        scrub_head(scrubber, parts);
    }
}

/// How the body of a response from a secret's host is scrubbed: asked for identity and
/// sent a coded body anyway, it is decoded (the decoder) and passed on decoded; its
/// `Content-Length` goes when scrubbing may change the length. `Err` for a coding airlock
/// cannot undo: not passed on.
fn scrub_plan(headers: &mut HeaderMap, scrubber: &Scrubber) -> Result<Option<Decoder>, ()> {
    let decoder = content_decoder(headers, true, RESPONSE_DECODING)?;
    if !scrubber.preserves_length() {
        headers.remove(header::CONTENT_LENGTH);
    }
    Ok(decoder)
}

/// How the upstream failed, as the client is answered.
#[derive(Debug, PartialEq, Eq)]
enum Failed {
    /// The address guard refused the upstream's address: the 403 of this decision.
    Denied(Decision),
    /// Any other failure: a 502 with this message.
    BadGateway(String),
}

/// The answer when the upstream could not be used: 403 if the address guard refused it,
/// 502 otherwise. Either way the exchange's audit line is written.
fn upstream_failed(mut exchange: Exchange, error: &LegError) -> Response<ProxyBody> {
    match failed(&**error) {
        Failed::Denied(decision) => {
            let response = refusal::refuse_exchange(&mut exchange, decision);
            drop(exchange);
            response
        }
        Failed::BadGateway(message) => {
            exchange.set_status(502);
            refusal::bad_gateway(&message)
        }
    }
}

/// How `error` (the pooling client's) is answered: by the [`DialError`] in its chain, or
/// as the upstream's failure, named by its cause.
fn failed(error: &(dyn StdError + 'static)) -> Failed {
    match find_dial_error(error) {
        Some(DialError::Denied(decision)) => Failed::Denied(decision.clone()),
        Some(dial) => Failed::BadGateway(dial.to_string()),
        None => Failed::BadGateway(match error.source() {
            Some(source) => format!("the upstream failed: {source}"),
            None => format!("the upstream failed: {error}"),
        }),
    }
}

fn find_dial_error<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a DialError> {
    let mut current = Some(error);
    for _ in 0..16 {
        let error = current?;
        if let Some(dial) = error.downcast_ref::<DialError>() {
            return Some(dial);
        }
        current = error.source();
    }
    None
}

#[cfg(test)]
mod tests;
