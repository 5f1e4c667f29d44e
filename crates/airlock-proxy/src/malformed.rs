//! Requests the proxy cannot read as one well-formed request: the 400 answer and the
//! `bad_request` audit line with the best destination the connection knows (used by the
//! HTTP service, CONNECT handling and tunnels alike).

use http::{Request, Response};

use crate::body::ProxyBody;
use crate::context::ConnContext;
use crate::identity::Origin;
use crate::record::LineKind;
use crate::refusal;

/// Answers a malformed request with 400 (the connection closes after it) and logs it with
/// the best destination the connection knows.
pub(crate) fn malformed<B>(
    context: &ConnContext,
    request: &Request<B>,
    message: &str,
) -> Response<ProxyBody> {
    let response = refusal::bad_request(message);
    log_malformed(
        context,
        Some(request),
        Some(request.method().as_str()),
        response.status().as_u16(),
    );
    response
}

/// Logs a request hyper's parser refused before the service saw it (bad framing, two
/// differing `Content-Length`s, an oversize head): hyper has answered it with a 4xx and
/// closed the connection.
pub(crate) fn log_parse_error(context: &ConnContext, error: &hyper::Error) {
    if error.is_parse() || error.is_parse_too_large() {
        let status = if error.is_parse_too_large() { 431 } else { 400 };
        log_malformed::<()>(context, None, None, status);
    }
}

/// One `bad_request` audit line: the tunnel's destination, or on a direct connection the
/// request URI's host when there is a request to read it from.
fn log_malformed<B>(
    context: &ConnContext,
    request: Option<&Request<B>>,
    method: Option<&str>,
    status: u16,
) {
    let (host, port) = match (&context.origin, request) {
        (Origin::Tunnel { host, port, .. }, _) => (host.to_string(), *port),
        (Origin::Direct, Some(request)) => (
            request.uri().host().unwrap_or_default().to_owned(),
            request.uri().port_u16().unwrap_or(80),
        ),
        (Origin::Direct, None) => (String::new(), 0),
    };
    let mut line = context.line(LineKind::Http, host, port);
    line.method = method.map(str::to_owned);
    line.refuse_malformed(status);
    line.write(&context.shared.audit);
}
