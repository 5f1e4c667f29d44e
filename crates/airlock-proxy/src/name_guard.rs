//! The outbound guard on destination names (docs/security.md, "Outbound guard"): a CONNECT
//! target, an SNI, `Host`, `:authority` or an absolute URI's authority that carries a
//! configured secret's real value or a well-known credential is refused before the name is
//! decided, resolved or dialled, and audited with the name redacted. Used by the CONNECT
//! handler, the tunnel and the request's identification step.

use airlock_credentials::{Credentials, Finding};
use airlock_policy::CompiledPolicy;
use airlock_policy::canonical::Host;
use http::Response;

use crate::body::ProxyBody;
use crate::context::ConnContext;
use crate::record::LineKind;
use crate::refusal::Refused;

/// The outbound guard on a name the client gives for its destination (a CONNECT target, an
/// SNI, `Host`, `:authority`, an absolute URI's authority), as written: the refusal when
/// it carries a configured secret's real value (any case) or a well-known credential
/// (docs/security.md, "Outbound guard"). Runs before the name is decided, resolved or
/// dialled, so that it reaches neither a resolver nor the upstream.
pub(crate) fn guard_name(context: &ConnContext, name: &[u8]) -> Result<(), Finding> {
    let shared = &context.shared;
    guard_name_in(&shared.policy.load(), &shared.credentials.load(), name)
}

/// [`guard_name`] on the given policy and credentials snapshots (a request's one
/// snapshot of each: `forward::identify`).
pub(crate) fn guard_name_in(
    policy: &CompiledPolicy,
    credentials: &Credentials,
    name: &[u8],
) -> Result<(), Finding> {
    let formats = policy.policy().dlp.mode();
    credentials.guard().check_authority(formats, name)
}

/// [`guard_name`] on a canonical host (what is resolved, dialled and sent as SNI).
pub(crate) fn guard_host(context: &ConnContext, host: &Host) -> Result<(), Finding> {
    guard_name(context, host.to_string().as_bytes())
}

/// Refuses a request (`method`, `path`) whose host name carried a credential, audited on
/// an `http` line (a `tcp` line for a tunnel, `method` `None`) that shows the name as
/// [`Finding::placeholder`]. The answer is the 403 to give, if any.
pub(crate) fn refuse_named(
    context: &ConnContext,
    finding: &Finding,
    method: &str,
    port: u16,
    path: Option<&str>,
) -> Response<ProxyBody> {
    let host = finding.placeholder();
    let mut line = context.line(LineKind::Http, host, port);
    let response = Refused {
        reason: finding.reason,
        method,
        host: &line.host,
        path,
        rule: None,
        id: line.id,
    }
    .response();
    line.refuse(None, finding.reason);
    line.method = Some(method.to_owned());
    line.path = path.map(str::to_owned);
    line.form = finding.form.as_audit();
    line.credential = finding.kind;
    line.status = Some(response.status().as_u16());
    line.write(&context.shared.audit);
    response
}
