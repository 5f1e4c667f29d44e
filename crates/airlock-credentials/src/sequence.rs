//! The whole guard-then-swap sequence on one request head, in the order docs/secrets.md
//! and docs/security.md ("Outbound guard") give it:
//!
//! 1. the outbound guard searches the request line and headers as the client sent them
//!    (real values outside their hosts, unknown credentials of well-known formats);
//! 2. the tripwire: a surrogate of a secret not in scope in the path or query;
//! 3. surrogates swapped (or injected) in the headers, tripping on others' surrogates;
//! 4. the foreign-credential check on the query;
//! 5. the refusals kept for last: on a secret's own host, another account's key is a
//!    foreign credential before it is an unknown one, so the guard's
//!    `credential_outbound` there is given only if nothing else refused;
//! 6. surrogates of `body: true` secrets swapped in the query.
//!
//! The secret scope comes from the policy's one answer
//! ([`airlock_policy::enforce::SecretScope`]); [`Credentials::swap_request`] is the one call
//! the proxy makes.

use std::sync::Arc;

use airlock_policy::enforce::SecretScope;
use airlock_policy::model::DlpMode;
use airlock_policy::{CompiledPolicy, Host, Reason};
use http::header::{self, HeaderMap, HeaderValue};

use crate::{BodySwap, Credentials, Finding, GuardScope, GuardStream};

/// The request a [`Credentials::swap_request`] works on.
pub struct Head<'a> {
    /// The destination host (after routing).
    pub host: &'a Host,
    /// Sent on over TLS.
    pub tls: bool,
    /// The origin-form target, rewritten when a `body: true` surrogate is swapped in it.
    pub path_and_query: &'a mut String,
    /// The headers, surrogates swapped for real values.
    pub headers: &'a mut HeaderMap,
}

/// What the sequence prepared for the rest of one request.
#[derive(Default)]
pub struct Prepared {
    /// The secrets swapped into the headers or query.
    pub secrets: Vec<String>,
    /// The destination is a secret's host: the response is scrubbed of real values.
    pub scrub: bool,
    /// The body is scanned (some secret in scope says `body: true`).
    pub body_swap: Option<BodySwap>,
    /// The outbound guard's search of the body.
    pub guard: Option<GuardStream>,
    /// Credential kinds found in the head that `dlp: {credentials: log}` only logs.
    pub logged: Vec<&'static str>,
}

/// Why the sequence refused a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialRefusal {
    /// The refusal reason.
    pub reason: Reason,
    /// How the credential travelled (`surrogate`, `real`, `cleartext`).
    pub form: Option<&'static str>,
    /// The well-known kind found (`credential_outbound`).
    pub credential: Option<&'static str>,
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

impl Credentials {
    /// Runs the guard-then-swap sequence (module documentation) on `head` with `scope`.
    /// On a secret's host the request asks for an identity-encoded response, which is
    /// then scrubbed.
    pub fn swap_request(
        self: &Arc<Self>,
        policy: &CompiledPolicy,
        scope: &SecretScope<'_>,
        head: Head<'_>,
    ) -> Result<Prepared, CredentialRefusal> {
        let Head {
            host,
            tls,
            path_and_query,
            headers,
        } = head;
        let home = &scope.home;
        let (guard, logged, deferred) =
            match self.guard_head(policy, host, tls, home, path_and_query, headers) {
                Ok((guard, logged)) => (guard, logged, None),
                Err(refusal)
                    if refusal.reason == Reason::CredentialOutbound && !home.is_empty() =>
                {
                    (None, Vec::new(), Some(refusal))
                }
                Err(refusal) => return Err(refusal),
            };
        if policy.policy().secrets.is_empty() {
            return Ok(Prepared {
                guard,
                logged,
                ..Prepared::default()
            });
        }
        let in_scope = &scope.in_scope;
        let tripwire = |reason: Reason, headers: &HeaderMap| {
            self.tripwire_refusal(home, tls, path_and_query, headers, reason)
        };
        if let Err(reason) = self.check_out_of_scope(in_scope, path_and_query.as_bytes()) {
            return Err(tripwire(reason, headers));
        }
        let body_swap = self.body_swap(in_scope);
        let mut secrets = match self.prepare_request(in_scope, headers) {
            Ok(secrets) => secrets,
            Err(reason) => return Err(tripwire(reason, headers)),
        };
        if let Err(reason) = self.check_foreign_query(in_scope, path_and_query) {
            return Err(tripwire(reason, headers));
        }
        if let Some(refusal) = deferred {
            return Err(refusal);
        }
        self.swap_in_query(in_scope, path_and_query, &mut secrets);
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
        &self,
        home: &[&str],
        tls: bool,
        path_and_query: &str,
        headers: &HeaderMap,
        reason: Reason,
    ) -> CredentialRefusal {
        let form = (reason == Reason::SecretOutOfScope).then(|| {
            let mut probe = headers.clone();
            let home_only = !tls
                && self
                    .check_out_of_scope(home, path_and_query.as_bytes())
                    .and_then(|()| self.prepare_request(home, &mut probe))
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
    /// the refusal, or the body's search and the kinds only logged. `home` names the
    /// secrets whose hosts match the destination.
    fn guard_head(
        &self,
        policy: &CompiledPolicy,
        host: &Host,
        tls: bool,
        home: &[&str],
        path_and_query: &str,
        headers: &HeaderMap,
    ) -> Result<(Option<GuardStream>, Vec<&'static str>), CredentialRefusal> {
        let dlp = &policy.policy().dlp;
        if policy.policy().secrets.is_empty() && dlp.mode() == DlpMode::Off {
            return Ok((None, Vec::new()));
        }
        let scope = GuardScope {
            values: self.value_scopes(home, tls),
            formats: dlp.mode(),
            allowed_kinds: policy
                .dlp_kinds_for_host(host)
                .map(|kinds| kinds.into_iter().map(str::to_owned).collect()),
        };
        let guard = self.guard();
        let logged = guard.check_head(&scope, path_and_query.as_bytes(), headers)?;
        Ok((Some(guard.stream(scope)), logged))
    }

    /// Swaps the surrogates of in-scope `body: true` secrets in the query, adding their
    /// names to `secrets`.
    fn swap_in_query(
        &self,
        in_scope: &[&str],
        path_and_query: &mut String,
        secrets: &mut Vec<String>,
    ) {
        if let Some((_, query)) = path_and_query.split_once('?')
            && let Some((new_query, names)) = self.swap_in_body(in_scope, query.as_bytes())
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
}
