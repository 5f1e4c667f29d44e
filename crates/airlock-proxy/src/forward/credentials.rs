//! The *credentials* step: the outbound guard on the request head (real values outside
//! their hosts, unknown credentials of well-known formats), then the swap of surrogates
//! for real values in the headers (and, for `body: true` secrets, the query), tripping on
//! surrogates of other secrets. What it prepares for the body and the response
//! ([`Prepared`]) travels on; a refusal ([`CredentialRefusal`]) is answered with the path
//! redacted (docs/secrets.md, docs/security.md "Outbound guard").

use airlock_credentials::{BodySwap, Credentials, Finding, GuardScope, GuardStream};
use airlock_policy::model::DlpMode;
use airlock_policy::{CompiledPolicy, Decision, Reason};
use http::header::{self, HeaderMap, HeaderValue};

use super::answer::{self, Answered};
use crate::context::ConnContext;
use crate::identity::Destination;
use crate::record::Line;

/// What [`swap_credentials`] prepared for one request.
pub(super) struct Prepared {
    /// The secrets swapped into the headers or query.
    pub(super) secrets: Vec<String>,
    /// The destination is a secret's host: the response is scrubbed of real values.
    pub(super) scrub: bool,
    /// The body is scanned (some secret says `body: true`).
    pub(super) body_swap: Option<BodySwap>,
    /// The outbound guard's search of the body.
    pub(super) guard: Option<GuardStream>,
    /// Credential kinds found in the head that `dlp: {credentials: log}` only logs.
    pub(super) logged: Vec<&'static str>,
}

/// Why the credentials step refused a request.
pub(super) struct CredentialRefusal {
    pub(super) reason: Reason,
    /// How the credential travelled (`surrogate`, `real`, `cleartext`).
    pub(super) form: Option<&'static str>,
    /// The well-known kind found (`credential_outbound`).
    pub(super) credential: Option<&'static str>,
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
/// scanned, a body with a `Content-Encoding` is decoded first (`crate::body::content_decoder`). A route's secret is in scope whatever the host (its `inject`
/// replaces what the client sent). Over plain HTTP no secret is in scope (docs/secrets.md).
pub(super) fn swap_credentials(
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
pub(super) fn refuse_credential(
    context: &ConnContext,
    decision: Decision,
    refusal: CredentialRefusal,
    mut line: Line,
) -> Answered {
    line.form = refusal.form;
    line.credential = refusal.credential;
    if let Some(path) = &line.path {
        let redactor = context.shared.credentials.load().redactor();
        let redacted = airlock_dlp::redact(&redactor.redact(path)).into_owned();
        line.path = Some(redacted);
    }
    answer::refuse_line(context, decision, line)
}
