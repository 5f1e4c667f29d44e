//! The *refresh* response step (docs/secrets.md, "Refreshes"): the answer to a POST to
//! a watched login's token endpoint whose body carried that login's projected refresh
//! token (swapped for the real one on the way out) holds brand-new real tokens. It is
//! read whole (at most [`MAX_ANSWER`] bytes, decoded), each new token gets a new
//! surrogate, the credential store is replaced by one holding the new values (the old
//! ones retired: still redacted and scrubbed), the command gets the answer with the
//! surrogates, and the real tokens go to the session's sink, which writes the host file
//! back. An error status passes as any answer from a secret's host (scrubbed); a 2xx
//! that is not JSON, is too large, or holds a token airlock cannot place is a 502: never
//! the raw body. A refresh grant holds its login's turn from its screen to its answer: a
//! second grant of the same login waits for it (at most `limits.body_timeout`) and is
//! refused 403 when the first one rotated its refresh token.

use std::sync::{Arc, PoisonError};

use airlock_audit::{AuditEvent, Decision as AuditDecision, Kind};
use airlock_credentials::{Credentials, Refresh};
use airlock_credfiles::refresh::request::{Screened, screen_body};
use airlock_credfiles::refresh::{self as pure, Field, NewTokens, Watch, scope};
use airlock_encoding::Limits;
use airlock_policy::canonical::Host;
use airlock_policy::{Decision, Reason};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::response::Parts;
use http::{Method, Response};
use http_body_util::Either;
use hyper::body::Incoming;

use super::answer::{self, Answered};
use super::outbound;
use crate::body::{ProxyBody, content_decoder};
use crate::body_guard::{self, Unread};
use crate::budget::Held;
use crate::context::ConnContext;
use crate::record::{BodyReport, Exchange, Line};
use crate::refresh::Refreshes;
use crate::refusal;
use crate::scrub::scrub_head;

/// The largest token answer read (decoded): real ones are a few KiB.
pub(super) const MAX_ANSWER: usize = 256 * 1024;

/// The new surrogate of each token of an answer.
type Surrogates = Vec<(Field, String)>;

/// A request to a watched login's token host (any path) or to one of its
/// [`pure::MINTING`] endpoints: it may be a refresh, and its answer may hold tokens.
pub(super) struct Pending {
    refreshes: Arc<Refreshes>,
    /// The first watch whose token host this is (the login the audit lines name).
    login: usize,
    /// The watch whose token endpoint this is (a POST to its normalised path), if any.
    endpoint: Option<usize>,
    host: String,
    path: String,
    /// A `HEAD`: its answer has no body to look at.
    bodiless: bool,
    /// The request was a refresh grant of the projected refresh token ([`screen`]): only
    /// then is the answer's token taken in and written back to the host file.
    grant: bool,
    /// A grant's turn of its login ([`Refreshes`]), held until this is dropped (its
    /// answer taken in, or the request failed).
    turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// The watched request `method` `host` `path` is, when the proxy watches logins and
/// `host` is one of their token hosts.
pub(super) fn pending(
    context: &ConnContext,
    method: &str,
    host: &Host,
    path: &str,
) -> Option<Pending> {
    let refreshes = context.shared.refreshes.as_ref()?;
    let host = host.to_string();
    let login = refreshes
        .watches
        .iter()
        .position(|w| w.on_host(&host) || w.mints(&host, path))?;
    let endpoint = if method == Method::POST.as_str() {
        refreshes
            .watches
            .iter()
            .position(|w| w.matches(&host, path))
    } else {
        None
    };
    Some(Pending {
        refreshes: Arc::clone(refreshes),
        login,
        endpoint,
        host,
        path: path.to_owned(),
        bodiless: method == Method::HEAD.as_str(),
        grant: false,
        turn: None,
    })
}

/// The request body of a request to a token host, read whole (bounded as an inspected
/// body). A body that carries a projected surrogate passes only as an unambiguous refresh
/// grant of the projected refresh token at its login's token endpoint (no query, no
/// content coding, every parameter once, keys decoded like values: docs/secrets.md,
/// "Refreshes"); anything else carrying one is refused 403 before it is sent, so the real
/// token is never swapped into it. `credentials` is the request's snapshot (the one its
/// body swap was built from). `Err`: the refusal, audited on `line`.
pub(super) async fn screen(
    context: &ConnContext,
    credentials: &Credentials,
    mut pending: Pending,
    headers: &mut HeaderMap,
    body: Either<Incoming, Bytes>,
    line: &Line,
) -> Result<(Either<Incoming, Bytes>, Pending, Option<Held>), Answered> {
    let coded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|value| !value.as_bytes().eq_ignore_ascii_case(b"identity"));
    let stale = stale_surrogates(credentials, &context.shared.credentials.load());
    let in_text = |text: &[u8]| stale.iter().any(|s| contains(text, s.as_bytes()));
    let in_head = line
        .secrets
        .iter()
        .any(|name| name.starts_with(airlock_credfiles::SECRET_PREFIX))
        || headers.values().any(|value| in_text(value.as_bytes()))
        || [Some(&pending.path), line.query.as_ref()]
            .into_iter()
            .flatten()
            .any(|text| in_text(text.as_bytes()));
    let refused = if in_head {
        Some(
            "a projected login's token may go to its token host only in a refresh grant's \
             body, and never to an endpoint that mints an API key",
        )
    } else if headers.contains_key(header::UPGRADE) {
        Some("a protocol upgrade to a login's token host is not relayed")
    } else if coded {
        Some("a request body with a content coding to a login's token host cannot be checked")
    } else {
        None
    };
    if let Some(why) = refused {
        let reason = if in_head {
            Reason::SecretOutOfScope
        } else {
            Reason::BodyUninspectable
        };
        let response = refuse_request(context, line, reason, why);
        return Err(match body {
            Either::Left(streamed) => answer::after_draining(streamed, response),
            Either::Right(_) => response,
        });
    }
    let (bytes, held) = match body {
        Either::Right(bytes) => (bytes, None),
        Either::Left(mut streamed) => {
            let shared = &context.shared;
            let timeout = shared.limits.body_timeout;
            match body_guard::read_whole(headers, &mut streamed, &shared.budget, timeout).await {
                Ok((bytes, held)) => (bytes, Some(held)),
                Err(Unread::Timeout) => {
                    return Err(answer::refuse_timeout(
                        context,
                        line.rule.clone(),
                        line.clone(),
                    ));
                }
                Err(Unread::Refused(reason)) => {
                    let decision = Decision::deny(reason, line.rule.clone());
                    let response = answer::refuse_line(context, decision, line.clone());
                    return Err(answer::after_draining(streamed, response));
                }
            }
        }
    };
    let watch = pending
        .endpoint
        .map(|index| &pending.refreshes.watches[index]);
    let query = line.query.as_deref();
    let granted = match grant((credentials, &stale), watch, query, &bytes) {
        Ok(granted) => granted,
        Err((reason, why)) => return Err(refuse_request(context, line, reason, &why)),
    };
    if granted {
        if let Err((reason, why)) = take_turn(context, credentials, &mut pending, &bytes).await {
            return Err(refuse_request(context, line, reason, &why));
        }
        pending.grant = true;
    }
    Ok((Either::Right(bytes), pending, held))
}

/// A refresh grant's last checks, then its login's turn: its `scope` keeps every scope the
/// login's host file records ([`scope::check_scope`]); it waits (at most
/// `limits.body_timeout`) while another grant of the same login is in flight, and once it
/// has the turn its refresh surrogate must still be current (when the other grant
/// refreshed, the provider rotated the token: sending it again could revoke the new
/// login, so it is refused, never answered from the other grant's result).
async fn take_turn(
    context: &ConnContext,
    credentials: &Credentials,
    pending: &mut Pending,
    body: &[u8],
) -> Result<(), (Reason, String)> {
    let Some(index) = pending.endpoint else {
        return Err((
            Reason::SecretOutOfScope,
            "it is no token endpoint".to_owned(),
        ));
    };
    let recorded = pending.refreshes.scopes[index].as_deref();
    scope::check_scope(recorded, body).map_err(|why| (Reason::SecretOutOfScope, why.to_owned()))?;
    let turn = Arc::clone(&pending.refreshes.turns[index]);
    let waiting = context.shared.limits.body_timeout;
    let Ok(held) = tokio::time::timeout(waiting, turn.lock_owned()).await else {
        return Err((
            Reason::Overloaded,
            "another refresh of this login is still under way; retry later".to_owned(),
        ));
    };
    let stale = stale_surrogates(credentials, &context.shared.credentials.load());
    if stale
        .iter()
        .any(|surrogate| contains(body, surrogate.as_bytes()))
    {
        return Err((
            Reason::SecretOutOfScope,
            "another refresh of this login finished while this one waited for it: its \
             refresh token is rotated, so this one is not sent (the CLI must read its \
             credential file again)"
                .to_owned(),
        ));
    }
    pending.turn = Some(held);
    Ok(())
}

/// The *retired* surrogates of projected logins: replaced by a refresh earlier in this
/// run, in either store, including one current in `snapshot` (the request's store, its
/// body swap's) but not in `latest` (a refresh that finished while the request came in).
/// The provider has rotated their tokens: a request carrying one is refused whatever it
/// is (replaying a rotated refresh token may revoke the new one).
fn stale_surrogates(snapshot: &Credentials, latest: &Credentials) -> Vec<String> {
    let current = latest.surrogates();
    let projected = snapshot.surrogates();
    let mut stale: Vec<String> = snapshot
        .retired_surrogates()
        .chain(latest.retired_surrogates())
        .chain(projected.iter().map(|(n, s)| (n.as_str(), s.as_str())))
        .filter(|(name, surrogate)| {
            name.starts_with(airlock_credfiles::SECRET_PREFIX)
                && !current.iter().any(|(_, now)| now == surrogate)
        })
        .map(|(_, surrogate)| surrogate.to_owned())
        .collect();
    stale.sort_unstable();
    stale.dedup();
    stale
}

/// Whether `body` is a refresh grant of the projected refresh token (`Ok(false)`: it
/// carries no projected surrogate); `Err`: it carries one and is anything else, or one of
/// the `retired` surrogates ([`stale_surrogates`]). `snapshot` is the store the request's
/// body swap was built from; `watch` is the login whose token endpoint the request goes
/// to (a POST there).
fn grant(
    (snapshot, retired): (&Credentials, &[String]),
    watch: Option<&Watch>,
    query: Option<&str>,
    body: &[u8],
) -> Result<bool, (Reason, String)> {
    let projected: Vec<(String, String)> = snapshot
        .surrogates()
        .into_iter()
        .filter(|(name, _)| name.starts_with(airlock_credfiles::SECRET_PREFIX))
        .collect();
    if retired
        .iter()
        .any(|surrogate| contains(body, surrogate.as_bytes()))
    {
        return Err((
            Reason::SecretOutOfScope,
            "the request carries a projected login's token that an earlier refresh in this \
             run replaced (the provider has rotated it; the CLI must read its credential \
             file again)"
                .to_owned(),
        ));
    }
    let carried = projected
        .iter()
        .any(|(_, surrogate)| contains(body, surrogate.as_bytes()));
    if !carried {
        return Ok(false);
    }
    let Some(watch) = watch else {
        return Err((
            Reason::SecretOutOfScope,
            "a projected login's token may go to its token host only in a refresh grant \
             POSTed to its token endpoint"
                .to_owned(),
        ));
    };
    if query.is_some_and(|query| !query.is_empty()) {
        return Err((
            Reason::BodyUninspectable,
            "a refresh request with a query string is ambiguous (servers that merge query \
             and body would read its parameters twice)"
                .to_owned(),
        ));
    }
    let refresh = watch.secret(Field::Refresh).and_then(|name| {
        projected
            .iter()
            .find_map(|(secret, surrogate)| (secret == name).then_some(surrogate.as_str()))
    });
    let all: Vec<&str> = projected.iter().map(|(_, s)| s.as_str()).collect();
    match refresh.map(|refresh| screen_body(body, refresh, &all)) {
        Some(Screened::Grant) => Ok(true),
        Some(Screened::Ambiguous(why)) => Err((
            Reason::BodyUninspectable,
            format!("the refresh request is ambiguous or unexpected: {why}"),
        )),
        Some(Screened::Other) | None => Err((
            Reason::SecretOutOfScope,
            "the request carries a projected login's token but is not a refresh grant of \
             the projected refresh token (grant_type=refresh_token, refresh_token=the \
             surrogate)"
                .to_owned(),
        )),
    }
}

/// Whether `needle` occurs in `haystack` (linear in both: docs/security.md, "Bounded work
/// per request").
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && memchr::memmem::find(haystack, needle).is_some()
}

/// The 403 (503 for [`Reason::Overloaded`]) of a request to a token host that is
/// refused: one audit line, its `http` line with `reason` (one refusal, one line); the
/// body says `why`.
fn refuse_request(context: &ConnContext, line: &Line, reason: Reason, why: &str) -> Answered {
    let decision = Decision::deny(reason, line.rule.clone());
    let generic = answer::refuse_line(context, decision, line.clone());
    let (mut parts, _) = generic.into_parts();
    let body = serde_json::json!({
        "error": "blocked_by_policy",
        "reason": reason.as_str(),
        "method": line.method,
        "host": line.host,
        "path": line.path,
        "id": line.id,
        "message": format!("airlock refused the request: {why}"),
        "hint": "a projected login's tokens are only ever sent in its CLI's own refresh \
                 request (docs/secrets.md, \"Refreshes\")",
    });
    let json = serde_json::to_vec(&body).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, ProxyBody::full(Bytes::from(json)))
}

/// Answer content types that never hold a token field (web page assets): passed as any
/// answer from a secret's host.
fn asset(parts: &http::HeaderMap) -> bool {
    let Some(kind) = parts
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let kind = kind.to_ascii_lowercase();
    ["image/", "font/", "audio/", "video/", "text/css"]
        .iter()
        .any(|prefix| kind.starts_with(prefix))
        || kind.contains("javascript")
}

/// Handles `response` to a request to a token host: a 2xx answering a refresh grant that
/// carried the login's projected refresh token is a refresh ([`refresh`]); any other 2xx
/// is read whole and refused 502 when it holds token fields
/// ([`pure::request::answer_carries_tokens`]), else passed scrubbed. Everything else is
/// handed back untouched.
pub(super) async fn respond(
    context: &ConnContext,
    pending: Pending,
    response: Response<Incoming>,
    exchange: Exchange,
    body_report: Option<&BodyReport>,
) -> Result<Answered, (Response<Incoming>, Exchange)> {
    if !response.status().is_success() || pending.bodiless {
        return Err((response, exchange));
    }
    let carried = pending
        .endpoint
        .and_then(|index| pending.refreshes.watches[index].secret(Field::Refresh))
        .is_some_and(|name| body_report.is_some_and(|r| r.swapped().iter().any(|s| s == name)));
    // A refresh's answer is never exempt, whatever it says its content type is: anything
    // but the token JSON is a 502 there (docs/secrets.md, "Refreshes").
    if pending.grant && carried {
        return Ok(refresh(context, &pending, response, exchange).await);
    }
    if asset(response.headers()) {
        return Err((response, exchange));
    }
    Ok(guard_answer(context, &pending, response, exchange).await)
}

/// A 2xx from a token host that is not a refresh: refused 502 when it holds token fields
/// (a token exchange, a login, an API key minted), else passed whole and scrubbed.
async fn guard_answer(
    context: &ConnContext,
    pending: &Pending,
    response: Response<Incoming>,
    exchange: Exchange,
) -> Answered {
    let (mut parts, body) = response.into_parts();
    outbound::strip_hop_by_hop(&mut parts.headers, false);
    let answer = match read_answer(context, &mut parts, body).await {
        Ok(answer) => answer,
        Err(why) => return refuse(context, pending, exchange, why),
    };
    if pure::request::answer_carries_tokens(&answer) {
        let why = "it holds token fields and does not answer a refresh grant of a projected login";
        return refuse(context, pending, exchange, why);
    }
    let store = context.shared.credentials.load_full();
    let scrubber = store.scrubber();
    let shown = scrubber.scrub(&answer).into_owned();
    scrub_head(&scrubber, &mut parts);
    finish(parts, shown, exchange).await
}

/// The answer `parts` with the body `shown`, once its audit line is written.
async fn finish(mut parts: Parts, shown: Vec<u8>, mut exchange: Exchange) -> Answered {
    parts.headers.remove(header::CONTENT_ENCODING);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(shown.len()));
    exchange.add_bytes_down(shown.len() as u64);
    // The answer waits for its audit line (docs/reliability.md).
    if exchange.finish().await.is_err() {
        return refusal::audit_unavailable();
    }
    Response::from_parts(parts, ProxyBody::full(Bytes::from(shown)))
}

/// The refresh proper: read, swap the store, answer with surrogates, hand on the tokens.
async fn refresh(
    context: &ConnContext,
    pending: &Pending,
    response: Response<Incoming>,
    exchange: Exchange,
) -> Answered {
    let Some(watch) = endpoint_watch(pending) else {
        return refuse(context, pending, exchange, "it answers no token endpoint");
    };
    let (mut parts, body) = response.into_parts();
    outbound::strip_hop_by_hop(&mut parts.headers, false);
    let answer = match read_answer(context, &mut parts, body).await {
        Ok(answer) => answer,
        Err(why) => return refuse(context, pending, exchange, why),
    };
    let tokens = match pure::parse_response(&answer) {
        Ok(tokens) => tokens,
        Err(error) => return refuse(context, pending, exchange, &error.to_string()),
    };
    let current = context.shared.credentials.load_full();
    let (surrogates, refreshes) = match new_surrogates(watch, &current, &tokens) {
        Ok(planned) => planned,
        Err(why) => return refuse(context, pending, exchange, why),
    };
    let shown = match pure::surrogate_response(&answer, &surrogates) {
        Ok(shown) if !inert_left(watch, &tokens, &shown) => shown,
        Ok(_) => return refuse(context, pending, exchange, "a token is outside its field"),
        Err(_) => return refuse(context, pending, exchange, "it could not be rewritten"),
    };
    let store = match swap_store(context, pending, &refreshes) {
        Ok(store) => store,
        Err(why) => return refuse(context, pending, exchange, why),
    };
    let scrubber = store.scrubber();
    let shown = scrubber.scrub(&shown).into_owned();
    scrub_head(&scrubber, &mut parts);
    let names: Vec<String> = surrogates
        .iter()
        .filter_map(|(field, _)| watch.secret(*field).map(str::to_owned))
        .collect();
    let message =
        "refreshed: new surrogates given to the command, the real tokens sent to the host file";
    credentials_line(context, pending, AuditDecision::Allow, names, message);
    let shown_tokens = shown_tokens(&surrogates, tokens.expires_in);
    let sink = &pending.refreshes.sink;
    sink.refreshed(watch, tokens, shown_tokens, pending.grant);
    finish(parts, shown, exchange).await
}

/// The watch whose token endpoint `pending` was sent to.
fn endpoint_watch(pending: &Pending) -> Option<&Watch> {
    pending
        .endpoint
        .map(|index| &pending.refreshes.watches[index])
}

/// The surrogates of a refresh as tokens (what the command's copy of its file gets).
fn shown_tokens(surrogates: &Surrogates, expires_in: Option<u64>) -> NewTokens {
    let mut shown = NewTokens {
        expires_in,
        ..NewTokens::default()
    };
    for (field, surrogate) in surrogates {
        let slot = match field {
            Field::Access => &mut shown.access,
            Field::Refresh => &mut shown.refresh,
            Field::Id => &mut shown.id,
        };
        *slot = Some(surrogate.clone());
    }
    shown
}

/// The answer's body, read whole and decoded, at most [`MAX_ANSWER`] bytes, within the
/// inspected-body time limit (`limits.body_timeout`; over it: an error, so a 502).
async fn read_answer(
    context: &ConnContext,
    parts: &mut Parts,
    mut body: Incoming,
) -> Result<Vec<u8>, &'static str> {
    let limits = Limits {
        max_output: MAX_ANSWER as u64,
        ..Limits::default()
    };
    let Ok(decoder) = content_decoder(&mut parts.headers, true, limits) else {
        return Err("the answer is in a content coding airlock cannot decode");
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_ANSWER as u64) {
        return Err("the answer is larger than airlock reads");
    }
    let mut held = Held::default();
    let budget = &context.shared.budget;
    let deadline = context.shared.limits.body_timeout;
    let reading = body_guard::collect(&mut body, budget, &mut held, declared);
    let Ok(collected) = tokio::time::timeout(deadline, reading).await else {
        return Err("the answer was not read whole in time");
    };
    let collected = match collected {
        Ok(collected) if collected.len() <= MAX_ANSWER => collected,
        Ok(_) => return Err("the answer is larger than airlock reads"),
        Err(Unread::Refused(airlock_policy::Reason::Overloaded)) => {
            return Err("no room to read the answer");
        }
        Err(_) => return Err("the answer could not be read whole (too large or cut)"),
    };
    let Some(mut decoder) = decoder else {
        return Ok(collected.to_vec());
    };
    let mut decoded = decoder
        .push(&collected)
        .map_err(|_| "the answer could not be decoded")?;
    decoded.extend(
        decoder
            .finish()
            .map_err(|_| "the answer could not be decoded")?,
    );
    if decoded.len() > MAX_ANSWER {
        return Err("the answer is larger than airlock reads");
    }
    Ok(decoded)
}

/// The new surrogate of each token of `tokens` (an answer to `watch`'s refresh), and the
/// store changes they make. An *inert* token ([`pure::inert`]: Codex's `id_token`) gets
/// a surrogate for the command and goes to the host file, but into no store: it is never
/// swapped to any host. `current` says which secrets the store has.
fn new_surrogates(
    watch: &Watch,
    current: &Credentials,
    tokens: &NewTokens,
) -> Result<(Surrogates, Vec<Refresh>), &'static str> {
    let mut refreshes = Vec::new();
    let mut surrogates = Vec::new();
    for field in Field::ALL {
        let Some(real) = tokens.get(field) else {
            continue;
        };
        let inert = pure::inert(watch.login, field);
        let name = watch.secret(field).filter(|name| current.has_secret(name));
        if name.is_none() && !inert {
            return Err("the answer holds a token airlock cannot place");
        }
        let surrogate = airlock_credfiles::token_surrogate(real)
            .ok_or("a new token has nothing a surrogate could randomise")?;
        surrogates.push((field, surrogate.clone()));
        if let Some(name) = name.filter(|_| !inert) {
            refreshes.push(Refresh {
                name: name.to_owned(),
                real: real.to_owned(),
                surrogate,
            });
        }
    }
    if refreshes.is_empty() {
        return Err("the answer holds no token");
    }
    Ok((surrogates, refreshes))
}

/// Whether the answer `shown` the command would get still holds an inert token's real
/// value (its field replaced, so anywhere else): no store scrubs those.
fn inert_left(watch: &Watch, tokens: &NewTokens, shown: &[u8]) -> bool {
    Field::ALL
        .into_iter()
        .filter(|field| pure::inert(watch.login, *field))
        .filter_map(|field| tokens.get(field))
        .any(|real| {
            let escaped = serde_json::to_string(real).unwrap_or_default();
            let escaped = escaped.trim_matches('"');
            contains(shown, real.as_bytes()) || contains(shown, escaped.as_bytes())
        })
}

/// Replaces the proxy's credential store with one holding `refreshes`; returns it.
fn swap_store(
    context: &ConnContext,
    pending: &Pending,
    refreshes: &[Refresh],
) -> Result<Arc<Credentials>, &'static str> {
    let _swapping = pending
        .refreshes
        .swapping
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let current = context.shared.credentials.load_full();
    let store = Arc::new(
        current
            .refreshed(refreshes)
            .map_err(|_| "the new tokens could not be taken in")?,
    );
    context.shared.credentials.store(Arc::clone(&store));
    Ok(store)
}

/// The 502 of a token host's answer airlock does not pass on (fail closed: the raw
/// answer is never passed on), with its `credentials` line.
fn refuse(context: &ConnContext, pending: &Pending, mut exchange: Exchange, why: &str) -> Answered {
    credentials_line(context, pending, AuditDecision::Deny, Vec::new(), why);
    exchange.set_status(502);
    refusal::bad_gateway(&format!(
        "airlock does not pass on the answer of a projected login's token host: {why} (it \
         would hold real tokens)"
    ))
}

/// The `kind: credentials` line of a refresh: the login, the secret names, what happened.
fn credentials_line(
    context: &ConnContext,
    pending: &Pending,
    decision: AuditDecision,
    secrets: Vec<String>,
    message: &str,
) {
    let watch = &pending.refreshes.watches[pending.login];
    let process = context.caller.as_ref().map(|caller| caller.process.clone());
    context.shared.audit.record(AuditEvent {
        kind: Kind::Credentials,
        decision,
        host: Some(pending.host.clone()),
        path: Some(pending.path.clone()),
        method: Some("POST".to_owned()),
        name: Some(watch.login.name().to_owned()),
        secrets,
        message: Some(message.to_owned()),
        conn: Some(context.id),
        process,
        ..AuditEvent::default()
    });
}

#[cfg(test)]
mod tests;
