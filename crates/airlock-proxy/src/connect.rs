//! `CONNECT host:port`: the tunnel is decided on its destination alone; a tunnel the
//! policy refuses is answered on the CONNECT itself (403 + JSON, one `http` line with
//! method `CONNECT`) in explicit mode, otherwise the client gets 200 and the tunnel's first
//! bytes are handed to [`crate::tunnel`] once hyper releases the connection. In ask mode a
//! CONNECT refused only for its host is accepted like an allowed one, so that each request
//! inside is asked about once with its method and path (docs/policy.md "Ask mode"); raw
//! TCP inside is asked about at its first bytes. First of all, the target as the client
//! wrote it is searched by the outbound guard ([`name_guard::guard_name`]): a name
//! carrying a credential is refused on the CONNECT whatever the policy says, before
//! anything is resolved or dialled.

use std::sync::Arc;

use airlock_policy::{Decision, Reason};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::body::ProxyBody;
use crate::config::TunnelRefusal;
use crate::context::ConnContext;
use crate::malformed::malformed;
use crate::name_guard::{self, refuse_named};
use crate::record::{Line, LineKind};
use crate::refusal::Refused;
use crate::tunnel;
use crate::wire::connect_target;

/// Answers a CONNECT request arriving on a direct proxy connection.
pub(crate) async fn handle(
    context: &Arc<ConnContext>,
    mut request: Request<Incoming>,
) -> Response<ProxyBody> {
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    let (host, port) = match connect_target(authority.as_deref()) {
        Ok(target) => target,
        Err(bad) => return malformed(context, &request, bad.message()),
    };
    let written = authority.as_deref().unwrap_or_default().as_bytes();
    if let Err(finding) = name_guard::guard_name(context, written)
        .and_then(|()| name_guard::guard_host(context, &host))
    {
        return refuse_named(context, &finding, "CONNECT", port, None);
    }
    let shared = &context.shared;
    let tunnel = shared
        .mode
        .apply_tunnel(&host, shared.policy.load().decide_tunnel(&host, port));
    // Ask mode asks at the request, not here: a tunnel refused only for its host is
    // accepted and each request inside is asked about with its method and path (raw TCP
    // at its first bytes, `crate::tunnel`).
    let asked_inside = shared.mode.askable(&host, &tunnel.decision).is_some();
    if !tunnel.decision.is_allow()
        && shared.tunnel_refusal == TunnelRefusal::OnConnect
        && !asked_inside
    {
        return refuse_connect(context, tunnel.decision, host.to_string(), port);
    }
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(tunnel::run(context.clone(), on_upgrade, host, port, tunnel));
    let mut response = Response::new(ProxyBody::empty());
    *response.status_mut() = StatusCode::OK;
    response
}

fn refuse_connect(
    context: &ConnContext,
    decision: Decision,
    host: String,
    port: u16,
) -> Response<ProxyBody> {
    let reason = decision.reason.unwrap_or(Reason::HostNotAllowed);
    let mut line = Line::new(LineKind::Http, host, port, context.id);
    let response = Refused {
        reason,
        method: "CONNECT",
        host: &line.host,
        path: None,
        rule: decision.rule.as_deref(),
        id: line.id,
    }
    .response();
    line.refuse(decision.rule, reason);
    line.method = Some("CONNECT".to_owned());
    line.status = Some(response.status().as_u16());
    line.write(&context.shared.audit);
    response
}
