//! The *outbound* step: the upstream request assembled from what the earlier steps
//! decided. The target becomes `scheme://host[:port]` of the canonical destination,
//! hop-by-hop and `Proxy-*` headers go, a checked WebSocket gets its message room from
//! the budget and is offered no extension, and a body the outbound guard or a body swap
//! must see is decoded and wrapped by its streaming inspectors. The request's audit line
//! becomes the [`Exchange`] that is written when the response ends.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use airlock_credentials::{BodySwap, GuardStream};
use airlock_encoding::Limits;
use airlock_policy::model::Rule;
use airlock_policy::{Decision, Reason};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Uri, Version};
use http_body::Body as _;
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use airlock_audit::AuditLog;

use super::answer::{Answered, Auditor};
use crate::body::{UploadBody, content_decoder};
use crate::budget::{Budget, Held, Overloaded};
use crate::identity::Destination;
use crate::record::{BodyReport, Exchange, Line};
use crate::refusal;
use crate::websocket;

/// What the earlier steps decided the upstream request carries.
pub(super) struct Plan<'a> {
    /// The upstream target ([`target`]).
    pub(super) uri: Uri,
    /// The client's side of the upgrade the request asks for.
    pub(super) on_client_upgrade: Option<OnUpgrade>,
    /// The outbound guard's search of the body (of the messages, for an upgrade).
    pub(super) guard: Option<GuardStream>,
    pub(super) body_swap: Option<BodySwap>,
    /// The `json_deny` rules that apply (to the messages, for an upgrade).
    pub(super) body_guards: &'a [&'a Rule],
}

/// The upstream request, ready to send.
pub(super) struct Outbound {
    pub(super) request: Request<UploadBody>,
    /// The request's audit record, written when the response ends.
    pub(super) exchange: Exchange,
    /// What the body's inspectors found, when they run.
    pub(super) body_report: Option<Arc<BodyReport>>,
    /// The upgrade asked for, relayed if the upstream switches protocols.
    pub(super) upgrade: Option<Upgrade>,
}

/// An upgrade's relay: the client's side and the checks on its messages.
pub(super) struct Upgrade {
    pub(super) on_client: OnUpgrade,
    /// Messages are checked (so no extension may be negotiated).
    pub(super) checked: bool,
    pub(super) message_guards: Vec<Rule>,
    pub(super) message_guard: Option<GuardStream>,
    pub(super) message_room: Option<Held>,
}

/// The upgrade `plan` asks for, its message room reserved: a checked WebSocket's client
/// messages go through the outbound guard instead of its body, and take room for one
/// message from `budget` (no room: a 503, audited on `line` by `auditor`). Awaits only
/// when the request asks for an upgrade.
pub(super) async fn reserve_upgrade(
    (budget, auditor): (&Budget, Auditor<'_>),
    plan: &mut Plan<'_>,
    headers: &mut HeaderMap,
    line: &Line,
) -> Result<Option<Upgrade>, Answered> {
    let Some(on_client) = plan.on_client_upgrade.take() else {
        return Ok(None);
    };
    let relay = prepare_upgrade(on_client, plan.guard.take(), plan.body_guards);
    // Boxed: only an upgrade waits here, and every request's future would carry it.
    match Box::pin(relay.reserve(budget, headers)).await {
        Ok(relay) => Ok(Some(relay)),
        Err(Overloaded) => {
            let decision = Decision::deny(Reason::Overloaded, line.rule.clone());
            Err(auditor.refuse_line(decision, line.clone()))
        }
    }
}

/// The upstream target, `scheme://host[:port]` of `destination` with the origin-form
/// `path_and_query` (credentials swapped); one that cannot be forwarded is a 400, audited
/// on `line` as malformed to `audit`.
// An answer is the response itself (152 bytes); boxing it would allocate on every
// refusal to spare a move on a path that ends here.
#[allow(clippy::result_large_err)]
pub(super) fn target(
    audit: &AuditLog,
    destination: &Destination,
    path_and_query: &str,
    line: &Line,
) -> Result<Uri, Answered> {
    upstream_uri(destination, path_and_query).ok_or_else(|| unforwardable(audit, line.clone()))
}

/// Assembles the upstream request from `parts` and `body` per `plan`, with the `upgrade`
/// [`reserve_upgrade`] made ready; `line` is the allowed request's audit line, written by
/// `auditor` when the exchange ends. A body is decoded in steps taken from `budget`; a
/// body coding that cannot be undone is a 403.
// An answer is the response itself (152 bytes); boxing it would allocate on every
// refusal to spare a move on a path that ends here.
#[allow(clippy::result_large_err)]
pub(super) fn assemble(
    (budget, auditor): (&Budget, Auditor<'_>),
    plan: Plan<'_>,
    (mut parts, body): (Parts, Either<Incoming, Bytes>),
    (line, upgrade): (Line, Option<Upgrade>),
    started: Instant,
) -> Result<Outbound, Answered> {
    let sent = Arc::new(AtomicU64::new(0));
    parts.uri = plan.uri;
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers, upgrade.is_some());
    parts.headers.remove(header::HOST);
    let upload = match body {
        Either::Left(streamed) => UploadBody::new(streamed, sent.clone()),
        Either::Right(buffered) => UploadBody::buffered(buffered, sent.clone()),
    };
    if plan
        .body_swap
        .as_ref()
        .is_some_and(BodySwap::may_change_length)
    {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    let guard = plan.guard.filter(|_| !upload.is_end_stream());
    let inspected = guard.is_some() || plan.body_swap.is_some();
    let wants_decoding = inspected && !upload.is_end_stream();
    let Ok(decoder) = content_decoder(&mut parts.headers, wants_decoding, Limits::default()) else {
        let decision = Decision::deny(Reason::BodyUninspectable, line.rule.clone());
        return Err(auditor.refuse_line(decision, line));
    };
    let (upload, body_report) = if inspected {
        let decoding = (decoder, budget);
        let (upload, report) = upload.inspecting(decoding, guard, plan.body_swap);
        (upload, Some(report))
    } else {
        (upload, None)
    };
    let mut exchange = Exchange::new(auditor.audit.clone(), started, line, Some(sent));
    if let Some(report) = &body_report {
        exchange.follow_body(report.clone());
    }
    Ok(Outbound {
        request: Request::from_parts(parts, upload),
        exchange,
        body_report,
        upgrade,
    })
}

/// An upgrade's relay before its message room is reserved.
fn prepare_upgrade(
    on_client: OnUpgrade,
    message_guard: Option<GuardStream>,
    body_guards: &[&Rule],
) -> Upgrade {
    Upgrade {
        on_client,
        checked: message_guard.is_some() || !body_guards.is_empty(),
        message_guards: body_guards.iter().map(|rule| (*rule).clone()).collect(),
        message_guard,
        message_room: None,
    }
}

impl Upgrade {
    /// A checked upgrade's messages must arrive uncompressed to be checked, so no
    /// extension is offered, and room for one message is taken from the budget.
    async fn reserve(
        mut self,
        budget: &Budget,
        headers: &mut HeaderMap,
    ) -> Result<Self, Overloaded> {
        if self.checked {
            headers.remove(websocket::EXTENSIONS);
            self.message_room = Some(websocket::reserve(budget).await?);
        }
        Ok(self)
    }
}

/// The 400 of an allowed request whose target cannot be forwarded, audited as malformed.
fn unforwardable(audit: &AuditLog, mut line: Line) -> Answered {
    let response = refusal::bad_request("the request target cannot be forwarded");
    line.refuse_malformed(response.status().as_u16());
    line.write(audit);
    response
}

/// `scheme://host[:port]path?query` with the canonical host.
fn upstream_uri(destination: &Destination, path_and_query: &str) -> Option<Uri> {
    let default_port = if destination.scheme == "https" {
        443
    } else {
        80
    };
    let authority = if destination.port == default_port {
        destination.host.to_string()
    } else {
        format!("{}:{}", destination.host, destination.port)
    };
    let scheme = if destination.scheme == "https" {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    };
    Uri::builder()
        .scheme(scheme)
        .authority(Authority::try_from(authority).ok()?)
        .path_and_query(PathAndQuery::try_from(path_and_query).ok()?)
        .build()
        .ok()
}

/// Headers that describe one hop only, never forwarded (RFC 9110 §7.6.1), plus every
/// `Proxy-*` header. An upgrade keeps `Connection: upgrade` and `Upgrade`.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::try_from(token.trim()).ok())
        .filter(|name| !(upgrade && *name == header::UPGRADE))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        HeaderName::from_static("keep-alive"),
    ] {
        if !(upgrade && (name == header::CONNECTION || name == header::UPGRADE)) {
            headers.remove(name);
        }
    }
    // `TE: trailers` is end-to-end meaningful (gRPC); any other TE is hop-by-hop.
    if headers
        .get(header::TE)
        .is_some_and(|te| !te.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        headers.remove(header::TE);
    }
    let proxy_headers: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for name in proxy_headers {
        headers.remove(name);
    }
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

#[cfg(test)]
mod tests;
