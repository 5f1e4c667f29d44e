//! The first two steps of the request path: *screen* (the audit log works, a `CONNECT`
//! goes to its own handler, a head with both framings is malformed) and *identify* (the
//! destination from the connection's origin, the request target and `Host`, and the one
//! [`CanonicalRequest`] every later step decides on). The names the request gives for its
//! host (`Host`, `:authority`, an absolute URI's authority) are searched by the outbound
//! guard first, before they are compared, decided or resolved ([`name_guard::guard_name`]).

use std::sync::Arc;

use airlock_credentials::{Credentials, Finding};
use airlock_policy::{CanonicalRequest, CompiledPolicy, Decision, Reason};
use http::uri::PathAndQuery;
use http::{Method, Request, header};
use hyper::body::Incoming;

use super::answer::{self, Answered, Auditor, Seen};
use crate::connect;
use crate::context::ConnContext;
use crate::identity::{self, Destination, IdentityError, Origin};
use crate::malformed::malformed;
use crate::name_guard;
use crate::refusal;

/// What *identify* found out about a request.
pub(super) struct Identified {
    pub(super) destination: Destination,
    pub(super) canonical: CanonicalRequest,
    /// The origin-form target as the client sent it.
    pub(super) path_and_query: String,
}

/// Lets through a request the later steps can take; answers the rest here.
pub(super) async fn screen(
    context: &Arc<ConnContext>,
    request: Request<Incoming>,
) -> Result<Request<Incoming>, Answered> {
    if !context.shared.audit_ok() {
        return Err(refusal::audit_unavailable());
    }
    if request.method() == Method::CONNECT {
        return Err(match context.origin {
            // Boxed: a tunnel's setup is once per connection, and its future would
            // otherwise make every request's future larger (docs/benchmarks.md).
            Origin::Direct => Box::pin(connect::handle(context, request)).await,
            Origin::Tunnel { .. } => malformed(
                context,
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
        return Err(malformed(
            context,
            &request,
            "the request has both Content-Length and Transfer-Encoding",
        ));
    }
    Ok(request)
}

/// Names the request's destination and canonicalises it; a malformed target or a `Host`
/// that contradicts the tunnel is answered here. The names are guarded with the request's
/// one snapshot of the policy and of the credentials (`snapshot`).
// An answer is the response itself (152 bytes); boxing it would allocate on every
// refusal to spare a move on a path that ends here.
#[allow(clippy::result_large_err)]
pub(super) fn identify(
    context: &ConnContext,
    snapshot: (&CompiledPolicy, &Credentials),
    request: Request<Incoming>,
) -> Result<(Request<Incoming>, Identified), Answered> {
    if let Err(finding) = guard_names(snapshot, &request) {
        let port = mismatched(&context.origin, &request, String::new()).port;
        let path = airlock_dlp::redact(request.uri().path()).into_owned();
        let redacted = snapshot.1.redactor().redact(&path).into_owned();
        let method = request.method().as_str().to_owned();
        let response = name_guard::refuse_named(context, &finding, &method, port, Some(&redacted));
        return Err(answer::after_draining(request.into_body(), response));
    }
    let found = identity::destination(&context.origin, request.uri(), request.headers());
    let destination = match found {
        Ok(destination) => destination,
        Err(IdentityError::Malformed(message)) => {
            return Err(malformed(context, &request, message));
        }
        Err(IdentityError::Mismatch { host }) => {
            let seen = mismatched(&context.origin, &request, host);
            let decision = Decision::deny(Reason::HostMismatch, None);
            let response = Auditor::of(context).refuse(decision, seen);
            return Err(answer::after_draining(request.into_body(), response));
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
    let identified = Identified {
        destination,
        canonical,
        path_and_query,
    };
    Ok((request, identified))
}

/// The outbound guard on the names of the request's host, as the client wrote them: the
/// URI's authority (`:authority` over HTTP/2, an absolute URI's) and every `Host` value,
/// searched with the request's one snapshot of the policy and of the credentials.
fn guard_names<B>(
    (policy, credentials): (&CompiledPolicy, &Credentials),
    request: &Request<B>,
) -> Result<(), Finding> {
    let guard = |name: &[u8]| name_guard::guard_name_in(policy, credentials, name);
    if let Some(authority) = request.uri().authority() {
        guard(authority.as_str().as_bytes())?;
    }
    for host in request.headers().get_all(header::HOST) {
        guard(host.as_bytes())?;
    }
    Ok(())
}

/// The request whose `Host` names `host`, not the tunnel's destination, as refused.
fn mismatched<B>(origin: &Origin, request: &Request<B>, host: String) -> Seen {
    let port = match origin {
        Origin::Tunnel { port, .. } => *port,
        Origin::Direct => request.uri().port_u16().unwrap_or(80),
    };
    Seen {
        method: request.method().as_str().to_owned(),
        scheme: None,
        host,
        port,
        path: request.uri().path().to_owned(),
        query: None,
    }
}

#[cfg(test)]
mod tests {
    use airlock_policy::Host;

    use super::*;

    #[test]
    fn a_mismatched_host_is_shown_at_the_tunnel_port_or_the_targets() {
        let request = Request::post("http://elsewhere.example:8080/a/b?secret=1")
            .body(())
            .unwrap();
        let tunnel = Origin::Tunnel {
            host: Host::Name("api.example.com".into()),
            port: 8443,
            sni: None,
            tls: true,
        };
        let seen = mismatched(&tunnel, &request, "elsewhere.example".into());
        assert_eq!((seen.host.as_str(), seen.port), ("elsewhere.example", 8443));
        assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/a/b"));
        assert_eq!((seen.scheme, seen.query), (None, None), "no query is shown");
        let direct = mismatched(&Origin::Direct, &request, "x".into());
        assert_eq!(direct.port, 8080);
        let plain = Request::get("/").body(()).unwrap();
        assert_eq!(mismatched(&Origin::Direct, &plain, "x".into()).port, 80);
    }

    /// A policy with one secret, and a store holding `real` for it.
    fn snapshot(real: &str) -> (CompiledPolicy, Credentials) {
        let yaml = "version: 1\nnetwork:\n  allow:\n    - host: api.example\n\
                    secrets:\n  KEY:\n    env: KEY\n    hosts: [api.example]\n";
        let policy = airlock_policy::load::load_str("p.yaml", yaml).unwrap();
        let policy = CompiledPolicy::compile(&policy).unwrap();
        let secrets = policy
            .policy()
            .secrets
            .iter()
            .map(|secret| (secret.clone(), real.to_owned()))
            .collect();
        (policy, Credentials::new(secrets).unwrap())
    }

    #[test]
    fn the_names_are_guarded_with_the_requests_snapshot_authority_and_every_host() {
        const REAL: &str = "realvalue0123456789abcdef";
        let (policy, credentials) = snapshot(REAL);
        let names = (&policy, &credentials);
        let in_host = Request::get("/x")
            .header(header::HOST, "api.example")
            .header(header::HOST, format!("{REAL}.api.example"))
            .body(())
            .unwrap();
        assert!(
            guard_names(names, &in_host).is_err(),
            "the second Host is searched"
        );
        let in_authority = Request::get(format!("http://{REAL}.example/x"))
            .body(())
            .unwrap();
        assert!(guard_names(names, &in_authority).is_err());
        let clean = Request::get("http://api.example/x")
            .header(header::HOST, "api.example")
            .body(())
            .unwrap();
        assert!(guard_names(names, &clean).is_ok());
        // Another store (a rotated secret) holds another value: the request's own is the
        // one searched.
        let (_, rotated) = snapshot("othervalue0123456789abcdef");
        assert!(guard_names((&policy, &rotated), &in_host).is_ok());
    }
}
