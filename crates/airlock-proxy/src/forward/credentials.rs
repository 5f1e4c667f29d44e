//! The *credentials* step: the guard-then-swap sequence of `airlock-credentials`
//! ([`Credentials::swap_request`]: the outbound guard on the head, the tripwire, the swap,
//! the foreign check, the deferred refusals) run on the request head with the secret
//! scope of the policy's answer. What it prepares for the body and the response
//! ([`Prepared`]) travels on; a refusal ([`CredentialRefusal`]) is answered with the path
//! redacted (docs/secrets.md, docs/security.md "Outbound guard").

use std::sync::Arc;

use airlock_credentials::{CredentialRefusal, Credentials, Head, Prepared};
use airlock_policy::enforce::SecretScope;
use airlock_policy::{CompiledPolicy, Decision};
use http::header::HeaderMap;

use super::answer::{Answered, Auditor};
use crate::identity::Destination;
use crate::record::Line;

/// The credentials step of a request to `destination` with the secrets of `scope`: the
/// head is searched, surrogates swapped (a route's secret is injected whatever the host;
/// over plain HTTP nothing else is in scope). When bodies are scanned, a body with a
/// `Content-Encoding` is decoded first (`crate::body::content_decoder`).
pub(super) fn swap_credentials(
    credentials: &Arc<Credentials>,
    policy: &CompiledPolicy,
    destination: &Destination,
    scope: &SecretScope<'_>,
    path_and_query: &mut String,
    headers: &mut HeaderMap,
) -> Result<Prepared, CredentialRefusal> {
    let head = Head {
        host: &destination.host,
        tls: destination.scheme == "https",
        path_and_query,
        headers,
    };
    credentials.swap_request(policy, scope, head)
}

/// The refusal of the credentials step: the path is shown (to the client and in the log)
/// with real values and well-known tokens redacted.
pub(super) fn refuse_credential(
    auditor: Auditor<'_>,
    credentials: &Credentials,
    decision: Decision,
    refusal: CredentialRefusal,
    mut line: Line,
) -> Answered {
    line.form = refusal.form;
    line.credential = refusal.credential;
    if let Some(path) = &line.path {
        let redacted = airlock_dlp::redact(&credentials.redactor().redact(path)).into_owned();
        line.path = Some(redacted);
    }
    auditor.refuse_line(decision, line)
}

#[cfg(test)]
mod tests;
