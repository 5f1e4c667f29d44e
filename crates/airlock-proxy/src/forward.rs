//! The request service: one HTTP request goes
//! identify → canonicalise → decide (or route) → swap credentials → resolve and guard →
//! forward → audit, each step a call into the module that owns it. A refusal at any step
//! is the JSON 403 (written as an `http` audit line); an allowed request is sent through
//! the pooling client and its response streamed back, the audit line being written when
//! the response body ends. A plain-HTTP request to `airlock.internal` is routed: from the
//! decision on it is the request to its route's upstream, the route standing in for the
//! allow rule and adding its secret to the scope.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use airlock_credentials::{BodySwap, Credentials, Finding, GuardScope, GuardStream};
use airlock_encoding::Limits;
use airlock_policy::canonical::PathUnsafe;
use airlock_policy::model::{DlpMode, Rule};
use airlock_policy::route::Outcome;
use airlock_policy::{CanonicalRequest, CompiledPolicy, Decision, Reason};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, Uri, Version};
use http_body::Body as _;
use http_body_util::{BodyExt as _, Either};
use hyper::body::Incoming;

use crate::ask::Asked;
use crate::body::content_decoder;
use crate::body::{ProxyBody, UploadBody};
use crate::body_guard::{self, Unread};
use crate::budget::{Held, Overloaded};
use crate::connect;
use crate::context::ConnContext;
use crate::identity::{self, Destination, IdentityError, Origin};
use crate::malformed::malformed;
use crate::mcp::{self, Inspected};
use crate::record::{Exchange, Line, LineKind, Trip};
use crate::refusal::{self, Refused};
use crate::scrub::scrub_head;
use crate::upstream::DialError;
use crate::websocket;

/// The most of a refused request's body read and discarded.
const DRAIN_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// How long a refused request's body is drained at most.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How far a response from a secret's host is decoded to be scrubbed: its size is the
/// upstream's business (it streams), but one coded byte may not become more than any
/// real coding yields (deflate's best is 1032:1).
const RESPONSE_DECODING: Limits = Limits {
    max_output: u64::MAX,
    max_ratio: 1100,
    ratio_floor: 1024 * 1024,
};

/// Serves one request arriving on `context`'s connection.
#[allow(clippy::too_many_lines)] // split on main in parallel; remove on merge
pub(crate) async fn serve(
    context: Arc<ConnContext>,
    mut request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let shared = &context.shared;
    if !shared.audit_ok() {
        return Ok(refusal::audit_unavailable());
    }
    if request.method() == Method::CONNECT {
        return Ok(match context.origin {
            Origin::Direct => connect::handle(&context, request).await,
            Origin::Tunnel { .. } => malformed(
                &context,
                &request,
                "CONNECT inside a tunnel is not supported",
            ),
        });
    }
    if request.headers().contains_key(header::TRANSFER_ENCODING)
        && context
            .head_tap
            .as_ref()
            .is_some_and(|tap| tap.declared_length(request.method(), request.uri()))
    {
        return Ok(malformed(
            &context,
            &request,
            "the request has both Content-Length and Transfer-Encoding",
        ));
    }
    let started = Instant::now();
    let destination = match identity::destination(&context.origin, request.uri(), request.headers())
    {
        Ok(destination) => destination,
        Err(IdentityError::Malformed(message)) => {
            return Ok(malformed(&context, &request, message));
        }
        Err(IdentityError::Mismatch { host }) => {
            let path = request.uri().path().to_owned();
            let port = match &context.origin {
                Origin::Tunnel { port, .. } => *port,
                Origin::Direct => request.uri().port_u16().unwrap_or(80),
            };
            let response = refuse(
                &context,
                Decision::deny(Reason::HostMismatch, None),
                request.method().as_str(),
                host,
                port,
                Some(path),
                None,
                None,
            );
            return Ok(after_draining(request.into_body(), response).await);
        }
    };
    let path_and_query = request
        .uri()
        .path_and_query()
        .map_or("/", PathAndQuery::as_str)
        .to_owned();
    let canonical = CanonicalRequest::new(
        request.method().as_str(),
        destination.host.clone(),
        destination.port,
        &path_and_query,
    );
    // One snapshot decides the whole request, even if the policy is swapped meanwhile.
    let policy = shared.policy.load_full();
    let Target {
        destination,
        canonical,
        path_and_query,
        decision,
        route_secret,
    } = decide(&policy, destination, canonical, path_and_query);
    // Report mode: a refusal for host, method or path only is let through and logged as
    // a would-be refusal; every later check (credentials, body, MCP, address) still holds.
    let (decision, would) = shared.mode.apply(&canonical.host, decision);
    // Ask mode: such a refusal is held until it is answered (or times out), once the
    // credential checks passed (a request they refuse is never held).
    let ask = shared
        .mode
        .askable(&canonical.host, &decision)
        .filter(|_| canonical.path.is_ok());
    let body_guards = policy.body_guards(&canonical);
    let CanonicalRequest {
        method,
        host,
        port,
        path,
        query,
    } = canonical;
    let path = match path {
        Ok(path) => path,
        Err(PathUnsafe::NotAbsolute) if path_and_query == "*" => path_and_query.clone(),
        Err(_) => request.uri().path().to_owned(),
    };
    let host_text = host.to_string();
    if !decision.is_allow() && ask.is_none() {
        let response = refuse(
            &context,
            decision,
            &method,
            host_text,
            port,
            Some(path),
            query,
            Some(destination.scheme),
        );
        return Ok(after_draining(request.into_body(), response).await);
    }

    let mcp_rule = mcp::rule_for(&policy, &destination.host, &path);
    let upgrade = match websocket::check_upgrade(
        request.version(),
        request.headers(),
        mcp_rule.as_ref(),
        decision.rule.as_ref(),
    ) {
        Ok(upgrade) => upgrade,
        Err(refusal) => {
            let (scheme, path) = (Some(destination.scheme), Some(path));
            let response = refuse(
                &context, refusal, &method, host_text, port, path, query, scheme,
            );
            return Ok(after_draining(request.into_body(), response).await);
        }
    };
    let on_client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    let mut path_and_query = path_and_query;
    let Prepared {
        secrets,
        scrub,
        body_swap,
        guard,
        logged,
    } = match swap_credentials(
        &context,
        &policy,
        &destination,
        route_secret.as_deref(),
        &mut path_and_query,
        &mut parts.headers,
    ) {
        Ok(prepared) => prepared,
        Err(refusal) => {
            let mut line = Line::new(LineKind::Http, host_text, port, context.id);
            line.rule = decision.rule.clone();
            line.method = Some(method);
            line.scheme = Some(destination.scheme);
            line.path = Some(path);
            line.query = query;
            let decision = Decision::deny(refusal.reason, decision.rule);
            let response = refuse_credential(&context, decision, refusal, line);
            return Ok(after_draining(body, response).await);
        }
    };

    let key = || crate::ask::request_key(&method, host_text.clone(), port, Some(&path));
    let (decision, asked) = hold_if_asked(shared, ask, key, decision).await;
    let mut line = Line::new(LineKind::Http, host_text, port, context.id);
    line.method = Some(method);
    line.scheme = Some(destination.scheme);
    line.path = Some(path);
    line.query = query;
    line.asked = asked;
    if !decision.is_allow() {
        return Ok(after_draining(body, refuse_line(&context, decision, line)).await);
    }
    line.allowed = true;
    line.rule = decision.rule;
    line.would = would;
    line.secrets = secrets;
    line.credential = logged.first().copied();
    if line.credential.is_some() {
        // `dlp: {credentials: log}` passes the token; its line does not keep it.
        line.path = line
            .path
            .map(|path| airlock_dlp::redact(&path).into_owned());
    }
    // The inspected body's bytes stay taken from the budget until the exchange is sent.
    let mut _held = None;
    let body = if mcp_rule.is_some() || !body_guards.is_empty() {
        match read_inspected(&context, &mut parts.headers, body, &body_guards, &line).await {
            Ok((bytes, held)) => {
                _held = Some(held);
                Either::Right(bytes)
            }
            Err(response) => return Ok(response),
        }
    } else {
        Either::Left(body)
    };
    let (body, mcp_guard) = match (mcp_rule, body) {
        (Some(rule), Either::Right(bytes)) => {
            match mcp::inspect_request(
                &context,
                rule,
                &line,
                &destination.host,
                &mut parts.headers,
                bytes,
            ) {
                Ok(Inspected::Forward { body, guard }) => (Either::Right(body), Some(guard)),
                Ok(Inspected::Answered(response)) => return Ok(*response),
                Err(reason) => {
                    let decision = Decision::deny(reason, line.rule.clone());
                    return Ok(refuse_line(&context, decision, line));
                }
            }
        }
        (_, body) => (body, None),
    };

    let Some(uri) = upstream_uri(&destination, &path_and_query) else {
        let response = refusal::bad_request("the request target cannot be forwarded");
        line.allowed = false;
        line.rule = None;
        line.malformed = true;
        line.status = Some(response.status().as_u16());
        line.write(&shared.audit);
        return Ok(response);
    };
    let sent = Arc::new(AtomicU64::new(0));
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers, upgrade);
    // Guarded messages must arrive uncompressed to be checked: offer no extension.
    // A WebSocket's client messages go through the outbound guard instead of its body.
    let (guard, message_guard) = if upgrade {
        (None, guard)
    } else {
        (guard, None)
    };
    let checked = message_guard.is_some() || (upgrade && !body_guards.is_empty());
    let mut message_room = None;
    if checked {
        parts.headers.remove(websocket::EXTENSIONS);
        match websocket::reserve(&shared.budget).await {
            Ok(held) => message_room = Some(held),
            Err(Overloaded) => {
                let decision = Decision::deny(Reason::Overloaded, line.rule.clone());
                return Ok(refuse_line(&context, decision, line));
            }
        }
    }
    let message_guards: Vec<Rule> = if upgrade && !body_guards.is_empty() {
        body_guards.iter().map(|rule| (*rule).clone()).collect()
    } else {
        Vec::new()
    };
    parts.headers.remove(header::HOST);
    let upload = match body {
        Either::Left(streamed) => UploadBody::new(streamed, sent.clone()),
        Either::Right(buffered) => UploadBody::buffered(buffered, sent.clone()),
    };
    if body_swap.as_ref().is_some_and(BodySwap::may_change_length) {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    let guard = guard.filter(|_| !upload.is_end_stream());
    let inspected = guard.is_some() || body_swap.is_some();
    let decoder = match content_decoder(
        &mut parts.headers,
        inspected && !upload.is_end_stream(),
        Limits::default(),
    ) {
        Ok(decoder) => decoder,
        Err(()) => {
            let decision = Decision::deny(Reason::BodyUninspectable, line.rule.clone());
            return Ok(refuse_line(&context, decision, line));
        }
    };
    let (upload, body_report) = if inspected {
        let (upload, report) = upload.inspecting(decoder, guard, body_swap);
        (upload, Some(report))
    } else {
        (upload, None)
    };
    let upstream_request = Request::from_parts(parts, upload);

    let client = if upgrade {
        &shared.http1_client
    } else {
        &shared.client
    };
    let mut exchange = Exchange::new(shared.audit.clone(), started, line, Some(sent));
    if let Some(report) = &body_report {
        exchange.follow_body(report.clone());
    }
    let mut response = match client.request(upstream_request).await {
        Ok(response) => response,
        Err(_) if body_report.as_ref().is_some_and(|report| report.tripped()) => {
            let cause = body_report.as_ref().and_then(|report| report.cause());
            let reason = cause
                .as_ref()
                .map_or(Reason::SecretOutOfScope, Trip::reason);
            exchange.note_credential(cause.as_ref().and_then(Trip::finding));
            let response = refusal::refuse_exchange(&mut exchange, Decision::deny(reason, None));
            drop(exchange);
            return Ok(response);
        }
        Err(error) => return Ok(upstream_failed(exchange, &error)),
    };
    exchange.set_status(response.status().as_u16());
    // Every head from a secret's host is scrubbed: header values and the reason phrase.
    // 1xx heads never reach this point: hyper's client reads past them (docs/secrets.md).
    let scrubber = scrub.then(|| shared.credentials.load().scrubber());
    if let Some(on_client_upgrade) = on_client_upgrade
        && response.status() == http::StatusCode::SWITCHING_PROTOCOLS
    {
        if checked && websocket::negotiated_extension(response.headers()) {
            exchange.set_status(502);
            return Ok(refusal::bad_gateway(
                "the upstream accepted the WebSocket with an extension airlock did not offer; \
                 its messages could not be checked against the body guards, so it is not \
                 relayed",
            ));
        }
        let on_upstream_upgrade = hyper::upgrade::on(&mut response);
        websocket::relay_upgraded(
            &context,
            exchange,
            (on_client_upgrade, on_upstream_upgrade),
            message_guards,
            message_guard,
            message_room,
        );
        let (mut parts, _) = response.into_parts();
        if let Some(scrubber) = &scrubber {
            scrub_head(scrubber, &mut parts);
        }
        return Ok(Response::from_parts(parts, ProxyBody::empty()));
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    if let Some(scrubber) = &scrubber {
        scrub_head(scrubber, &mut parts);
    }
    let (mut parts, body, mut exchange) = match mcp_guard {
        None => (parts, body, exchange),
        Some(guard) => {
            match mcp::filter_response(&context, guard, parts, body, exchange, scrub).await {
                Ok(response) => return Ok(response),
                Err(untouched) => untouched,
            }
        }
    };
    let Some(scrubber) = scrubber else {
        return Ok(Response::from_parts(
            parts,
            ProxyBody::upstream(body, exchange),
        ));
    };
    // Asked for identity and got a coded body anyway: it is decoded to be scrubbed and
    // passed on decoded; a coding airlock cannot undo is not passed on.
    let decoder = match content_decoder(&mut parts.headers, true, RESPONSE_DECODING) {
        Ok(decoder) => decoder,
        Err(()) => {
            exchange.set_status(502);
            return Ok(refusal::bad_gateway(
                "the upstream sent a response from a secret's host in a content coding \
                 airlock cannot decode; it cannot be scrubbed of the real credential, so it \
                 is not passed on",
            ));
        }
    };
    if !scrubber.preserves_length() {
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    Ok(Response::from_parts(
        parts,
        ProxyBody::scrubbed(body, exchange, decoder, scrubber.stream()),
    ))
}

/// What a request is decided and forwarded as.
struct Target {
    destination: Destination,
    canonical: CanonicalRequest,
    /// The origin-form target sent upstream.
    path_and_query: String,
    decision: Decision,
    /// The route's secret, injected whatever the upstream host.
    route_secret: Option<String>,
}

/// Decides a request; a request to `airlock.internal` (plain HTTP only) becomes the request
/// to its route's upstream (https), allowed by the route, or is refused as it stands.
fn decide(
    policy: &CompiledPolicy,
    destination: Destination,
    canonical: CanonicalRequest,
    path_and_query: String,
) -> Target {
    match policy.decide_request(&canonical, destination.scheme == "https") {
        Outcome::Routed(routed) => Target {
            destination: Destination {
                scheme: "https",
                host: routed.request.host.clone(),
                port: routed.request.port,
            },
            canonical: routed.request,
            path_and_query: routed.path_and_query,
            decision: Decision::allow(routed.rule),
            route_secret: routed.secret,
        },
        Outcome::Decided(decision) => Target {
            destination,
            canonical,
            path_and_query,
            decision,
            route_secret: None,
        },
    }
}

/// Reads the body a `json_deny` guard or an MCP rule must inspect (within the body
/// timeout, its bytes taken from the budget) and checks it against `guards`; `Err` is the
/// answer already audited: 403, 408 `request_timeout` or 503 `overloaded`.
async fn read_inspected(
    context: &ConnContext,
    headers: &mut HeaderMap,
    mut body: Incoming,
    guards: &[&Rule],
    line: &Line,
) -> Result<(Bytes, Held), Response<ProxyBody>> {
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
        Err(Unread::Timeout) => return Err(refuse_timeout(context, rule, line.clone())),
        Err(Unread::Refused(Reason::Overloaded)) => {
            let decision = Decision::deny(Reason::Overloaded, rule);
            let response = refuse_line(context, decision, line.clone());
            return Err(after_draining(body, response).await);
        }
        Err(Unread::Refused(reason)) => Decision::deny(reason, rule),
    };
    Err(refuse_line(context, refusal, line.clone()))
}

/// Sends a refusal while the refused request's body is read and discarded in the
/// background (bounded in size and time), so that a client still uploading — an HTTP/2
/// stream especially — reads the 403 instead of a reset.
async fn after_draining(mut body: Incoming, response: Response<ProxyBody>) -> Response<ProxyBody> {
    if body.is_end_stream() {
        return response;
    }
    tokio::spawn(async move {
        let mut left = DRAIN_LIMIT_BYTES;
        let draining = async {
            while let Some(Ok(frame)) = body.frame().await {
                let len = frame.data_ref().map_or(0, |d| d.len());
                match left.checked_sub(len) {
                    Some(rest) => left = rest,
                    None => return,
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, draining).await;
    });
    response
}

/// Writes the refusal's `http` audit line (its request fields already filled in) and
/// builds its 403.
fn refuse_line(context: &ConnContext, decision: Decision, line: Line) -> Response<ProxyBody> {
    let reason = decision.reason.unwrap_or(Reason::HostNotAllowed);
    let response = if reason == Reason::Overloaded {
        refusal::overloaded()
    } else {
        Refused {
            reason,
            method: line.method.as_deref().unwrap_or_default(),
            host: &line.host,
            path: line.path.as_deref(),
            rule: decision.rule.as_deref(),
        }
        .response_asked(line.asked)
    };
    write_refusal(context, decision, reason, line, response)
}

/// The 408 of an inspected body not complete within `limits.body_timeout`, audited as a
/// `body_uninspectable` refusal by `rule`.
fn refuse_timeout(context: &ConnContext, rule: Option<String>, line: Line) -> Response<ProxyBody> {
    let reason = Reason::BodyUninspectable;
    let decision = Decision::deny(reason, rule);
    write_refusal(context, decision, reason, line, refusal::request_timeout())
}

/// Ask mode: holds a request refused for `ask` (a reason [`Mode::askable`] gave) until its
/// ask is answered; the decision to act on, and whether it was asked about. Without a
/// reason, `decision` stands.
///
/// [`Mode::askable`]: airlock_policy::mode::Mode::askable
async fn hold_if_asked(
    shared: &crate::context::Shared,
    ask: Option<Reason>,
    key: impl FnOnce() -> airlock_policy::ask::AskKey,
    decision: Decision,
) -> (Decision, bool) {
    let Some(reason) = ask else {
        return (decision, false);
    };
    match shared.asks.hold(key(), reason).await {
        Asked::Allowed { rule, asked } => (Decision::allow(rule), asked),
        Asked::Refused => (decision, true),
    }
}

/// Writes a refusal's audit line (status from `response`) and hands `response` back.
fn write_refusal(
    context: &ConnContext,
    decision: Decision,
    reason: Reason,
    mut line: Line,
    response: Response<ProxyBody>,
) -> Response<ProxyBody> {
    line.allowed = false;
    line.would = None;
    line.secrets.clear();
    line.rule = decision.rule;
    line.reason = Some(reason);
    line.status = Some(response.status().as_u16());
    line.write(&context.shared.audit);
    response
}

/// Writes the refusal's audit line and builds its 403.
#[allow(clippy::too_many_arguments)]
fn refuse(
    context: &ConnContext,
    decision: Decision,
    method: &str,
    host: String,
    port: u16,
    path: Option<String>,
    query: Option<String>,
    scheme: Option<&'static str>,
) -> Response<ProxyBody> {
    let mut line = Line::new(LineKind::Http, host, port, context.id);
    line.method = Some(method.to_owned());
    line.scheme = scheme;
    line.path = path;
    line.query = query;
    refuse_line(context, decision, line)
}

/// What [`swap_credentials`] prepared for one request.
struct Prepared {
    /// The secrets swapped into the headers or query.
    secrets: Vec<String>,
    /// The destination is a secret's host: the response is scrubbed of real values.
    scrub: bool,
    /// The body is scanned (some secret says `body: true`).
    body_swap: Option<BodySwap>,
    /// The outbound guard's search of the body.
    guard: Option<GuardStream>,
    /// Credential kinds found in the head that `dlp: {credentials: log}` only logs.
    logged: Vec<&'static str>,
}

/// Why the credentials step refused a request.
struct CredentialRefusal {
    reason: Reason,
    /// How the credential travelled (`surrogate`, `real`, `cleartext`).
    form: Option<&'static str>,
    /// The well-known kind found (`credential_outbound`).
    credential: Option<&'static str>,
}

impl From<Finding> for CredentialRefusal {
    fn from(finding: Finding) -> Self {
        CredentialRefusal {
            reason: finding.reason,
            form: finding.form.as_audit(),
            credential: finding.kind,
        }
    }
}

/// The credentials step of a request to `destination`: the outbound guard searches the
/// request line and headers as the client sent them (real values outside their hosts,
/// unknown credentials of well-known formats); then surrogates are swapped for real
/// values in the headers (and, for `body: true` secrets, the query), tripping on
/// surrogates of other secrets in the headers, path or query. On a secret's host the
/// request asks for an identity-encoded response, which is then scrubbed. When bodies are
/// scanned, a body with a `Content-Encoding` is decoded first ([`content_decoder`]). A route's secret is in scope whatever the host (its `inject`
/// replaces what the client sent). Over plain HTTP no secret is in scope (docs/secrets.md).
fn swap_credentials(
    context: &ConnContext,
    policy: &CompiledPolicy,
    destination: &Destination,
    route_secret: Option<&str>,
    path_and_query: &mut String,
    headers: &mut HeaderMap,
) -> Result<Prepared, CredentialRefusal> {
    let credentials = context.shared.credentials.load_full();
    let tls = destination.scheme == "https";
    let mut home: Vec<&str> = policy
        .secrets_for_host(&destination.host)
        .iter()
        .map(|secret| secret.name.as_str())
        .collect();
    if let Some(name) = route_secret
        && !home.contains(&name)
    {
        home.push(name);
    }
    // On a secret's own host, another account's key is a foreign credential before it is
    // an unknown one: that refusal is decided first, this one kept for after.
    let (guard, logged, deferred) = match guard_head(
        &credentials,
        policy,
        destination,
        &home,
        path_and_query,
        headers,
    ) {
        Ok((guard, logged)) => (guard, logged, None),
        Err(refusal) if refusal.reason == Reason::CredentialOutbound && !home.is_empty() => {
            (None, Vec::new(), Some(refusal))
        }
        Err(refusal) => return Err(refusal),
    };
    if policy.policy().secrets.is_empty() {
        return Ok(Prepared {
            secrets: Vec::new(),
            scrub: false,
            body_swap: None,
            guard,
            logged,
        });
    }
    let in_scope: Vec<&str> = home
        .iter()
        .copied()
        .filter(|name| tls || Some(*name) == route_secret)
        .collect();
    let tripwire = |reason: Reason, headers: &HeaderMap| {
        tripwire_refusal(&credentials, &home, tls, path_and_query, headers, reason)
    };
    if let Err(reason) = credentials.check_out_of_scope(&in_scope, path_and_query.as_bytes()) {
        return Err(tripwire(reason, headers));
    }
    let body_swap = credentials.body_swap(&in_scope);
    let mut secrets = match credentials.prepare_request(&in_scope, headers) {
        Ok(secrets) => secrets,
        Err(reason) => return Err(tripwire(reason, headers)),
    };
    if let Err(reason) = credentials.check_foreign_query(&in_scope, path_and_query) {
        return Err(tripwire(reason, headers));
    }
    if let Some(refusal) = deferred {
        return Err(refusal);
    }
    swap_in_query(&credentials, &in_scope, path_and_query, &mut secrets);
    let scrub = !in_scope.is_empty();
    if scrub {
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    Ok(Prepared {
        secrets,
        scrub,
        body_swap,
        guard,
        logged,
    })
}

/// The refusal for `reason` from the surrogate checks. A surrogate out of scope is
/// `"form":"cleartext"` when it would have been in scope over TLS (its own host, in
/// clear), `"form":"surrogate"` otherwise.
fn tripwire_refusal(
    credentials: &Credentials,
    home: &[&str],
    tls: bool,
    path_and_query: &str,
    headers: &HeaderMap,
    reason: Reason,
) -> CredentialRefusal {
    let form = (reason == Reason::SecretOutOfScope).then(|| {
        let mut probe = headers.clone();
        let home_only = !tls
            && credentials
                .check_out_of_scope(home, path_and_query.as_bytes())
                .and_then(|()| credentials.prepare_request(home, &mut probe))
                .is_ok();
        if home_only { "cleartext" } else { "surrogate" }
    });
    CredentialRefusal {
        reason,
        form,
        credential: None,
    }
}

/// The outbound guard on the head of a request (docs/security.md, "Outbound guard"):
/// the refusal, or the body's search and the kinds only logged. `home` names the secrets
/// whose hosts match the destination.
fn guard_head(
    credentials: &Credentials,
    policy: &CompiledPolicy,
    destination: &Destination,
    home: &[&str],
    path_and_query: &str,
    headers: &HeaderMap,
) -> Result<(Option<GuardStream>, Vec<&'static str>), CredentialRefusal> {
    let dlp = &policy.policy().dlp;
    if policy.policy().secrets.is_empty() && dlp.mode() == DlpMode::Off {
        return Ok((None, Vec::new()));
    }
    let scope = GuardScope {
        values: credentials.value_scopes(home, destination.scheme == "https"),
        formats: dlp.mode(),
        allowed_kinds: policy
            .dlp_kinds_for_host(&destination.host)
            .map(|kinds| kinds.into_iter().map(str::to_owned).collect()),
    };
    let guard = credentials.guard();
    let logged = guard.check_head(&scope, path_and_query.as_bytes(), headers)?;
    Ok((Some(guard.stream(scope)), logged))
}

/// Swaps the surrogates of in-scope `body: true` secrets in the query, adding their names
/// to `secrets`.
fn swap_in_query(
    credentials: &Credentials,
    in_scope: &[&str],
    path_and_query: &mut String,
    secrets: &mut Vec<String>,
) {
    if let Some((_, query)) = path_and_query.split_once('?')
        && let Some((new_query, names)) = credentials.swap_in_body(in_scope, query.as_bytes())
    {
        let path = &path_and_query[..path_and_query.len() - query.len()];
        *path_and_query = format!("{path}{}", String::from_utf8_lossy(&new_query));
        for name in names {
            if !secrets.contains(&name) {
                secrets.push(name);
            }
        }
    }
}

/// The refusal of the credentials step: the path is shown (to the client and in the log)
/// with real values and well-known tokens redacted.
fn refuse_credential(
    context: &ConnContext,
    decision: Decision,
    refusal: CredentialRefusal,
    mut line: Line,
) -> Response<ProxyBody> {
    line.form = refusal.form;
    line.credential = refusal.credential;
    if let Some(path) = &line.path {
        let redactor = context.shared.credentials.load().redactor();
        let redacted = airlock_dlp::redact(&redactor.redact(path)).into_owned();
        line.path = Some(redacted);
    }
    refuse_line(context, decision, line)
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
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
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

/// The answer when the upstream could not be used: 403 if the address guard refused it,
/// 502 otherwise. Either way the exchange's audit line is written.
fn upstream_failed(
    mut exchange: Exchange,
    error: &hyper_util::client::legacy::Error,
) -> Response<ProxyBody> {
    match find_dial_error(error) {
        Some(DialError::Denied(decision)) => {
            let response = refusal::refuse_exchange(&mut exchange, decision.clone());
            drop(exchange);
            response
        }
        Some(dial) => {
            let message = dial.to_string();
            exchange.set_status(502);
            refusal::bad_gateway(&message)
        }
        None => {
            exchange.set_status(502);
            let message = match error.source() {
                Some(source) => format!("the upstream failed: {source}"),
                None => format!("the upstream failed: {error}"),
            };
            refusal::bad_gateway(&message)
        }
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
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_proxy_headers_are_removed() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret-hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert("proxy-authorization", HeaderValue::from_static("Basic x"));
        headers.insert("proxy-connection", HeaderValue::from_static("keep-alive"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert(header::TE, HeaderValue::from_static("gzip"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut headers, false);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key(header::ACCEPT));
    }

    #[test]
    fn te_trailers_and_upgrades_survive() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
        strip_hop_by_hop(&mut headers, true);
        assert_eq!(headers[header::UPGRADE], "websocket");
        assert_eq!(headers[header::CONNECTION], "upgrade");
        assert_eq!(headers[header::TE], "trailers");
    }
}
