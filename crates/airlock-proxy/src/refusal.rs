//! What a refused, malformed or unserviceable request gets back: the JSON 403 of
//! docs/contract.md §4 (with a message and a hint per reason), the 400 for malformed
//! requests, the 502 for an unreachable upstream and the 503 once the audit log has failed.
//!
//! Every body here is built from the canonical request the policy saw; none of it ever
//! contains a header value, so a secret cannot leak through a refusal.

use airlock_audit::DecisionId;
use airlock_policy::{Explanation, Reason};
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;

use crate::body::ProxyBody;

/// The header every refusal carries.
pub const DECISION_HEADER: &str = "x-airlock-decision";

/// The facts a 403 body reports about the refused request.
#[derive(Clone, Copy, Debug)]
pub struct Refused<'a> {
    /// Why it was refused.
    pub reason: Reason,
    /// The request method (`CONNECT` for a refused tunnel).
    pub method: &'a str,
    /// The canonical host (or what the client named when it could not be canonicalised).
    pub host: &'a str,
    /// The canonical path, if there was one.
    pub path: Option<&'a str>,
    /// The rule that decided, if a rule did.
    pub rule: Option<&'a str>,
    /// The decision's id, as on its audit line.
    pub id: DecisionId,
}

#[derive(Serialize)]
struct DenyBody<'a> {
    error: &'static str,
    reason: &'static str,
    method: &'a str,
    host: &'a str,
    path: Option<&'a str>,
    rule: Option<&'a str>,
    id: DecisionId,
    message: String,
    hint: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    asked: bool,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'static str,
    message: &'a str,
}

impl Refused<'_> {
    /// The message and hint of this refusal: the same text `airlock policy explain` gives.
    pub fn explanation(&self) -> Explanation {
        self.reason
            .explain(self.method, self.host, self.path.unwrap_or("/"), self.rule)
    }

    /// The JSON 403 response of docs/contract.md §4.
    pub fn response(&self) -> Response<ProxyBody> {
        self.response_asked(false)
    }

    /// The JSON 403 response, with `"asked":true` when ask mode asked about the request
    /// and nobody allowed it.
    pub fn response_asked(&self, asked: bool) -> Response<ProxyBody> {
        let Explanation { message, hint } = self.explanation();
        let body = DenyBody {
            error: "blocked_by_policy",
            reason: self.reason.as_str(),
            method: self.method,
            host: self.host,
            path: self.path,
            rule: self.rule,
            id: self.id,
            message,
            hint,
            asked,
        };
        let json = serde_json::to_vec(&body).unwrap_or_default();
        json_response(StatusCode::FORBIDDEN, json, true)
    }
}

/// 400 for a malformed request (duplicate Host, conflicting framing, unparsable target);
/// the connection is closed after it.
pub fn bad_request(message: &str) -> Response<ProxyBody> {
    error_response(StatusCode::BAD_REQUEST, "bad_request", message, true)
}

/// 502 when the upstream could not be reached or answered garbage.
pub fn bad_gateway(message: &str) -> Response<ProxyBody> {
    error_response(
        StatusCode::BAD_GATEWAY,
        "upstream_unreachable",
        message,
        false,
    )
}

/// 503 `overloaded`: the inspection memory budget (`limits.buffer_memory`) is taken; the
/// body was not read. Retrying later may pass.
pub fn overloaded() -> Response<ProxyBody> {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded",
        "airlock holds as many request bodies for inspection as limits.buffer_memory allows; \
         retry later",
        true,
    )
}

/// 408 `request_timeout`: an inspected body was not complete within `limits.body_timeout`;
/// the connection is closed.
pub fn request_timeout() -> Response<ProxyBody> {
    error_response(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        "the request body was not complete within limits.body_timeout",
        true,
    )
}

/// 503 while the audit log cannot be written: nothing passes unrecorded.
pub fn audit_unavailable() -> Response<ProxyBody> {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "audit_log_unavailable",
        "airlock refuses requests because its audit log cannot be written (a full disk, a \
         read-only file system); it tries again every second and serves again once a line \
         is written: free space or fix the log destination (SIGHUP tries at once)",
        true,
    )
}

fn error_response(
    status: StatusCode,
    error: &'static str,
    message: &str,
    close: bool,
) -> Response<ProxyBody> {
    let json = serde_json::to_vec(&ErrorBody { error, message }).unwrap_or_default();
    let mut response = json_response(status, json, false);
    if close {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn json_response(status: StatusCode, json: Vec<u8>, deny: bool) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::full(Bytes::from(json)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if deny {
        headers.insert(DECISION_HEADER, HeaderValue::from_static("deny"));
    }
    response
}

/// Turns an allowed exchange into a refusal and answers its 403 (503 `overloaded` when
/// its decoded body found no room in the budget).
pub(crate) fn refuse_exchange(
    exchange: &mut crate::record::Exchange,
    decision: airlock_policy::Decision,
) -> Response<ProxyBody> {
    let line = exchange.deny(decision);
    let response = if line.reason == Some(Reason::Overloaded) {
        overloaded()
    } else {
        Refused {
            reason: line.reason.unwrap_or(Reason::PrivateAddress),
            method: line.method.as_deref().unwrap_or("GET"),
            host: &line.host,
            path: line.path.as_deref(),
            rule: line.rule.as_deref(),
            id: line.id,
        }
        .response()
    };
    exchange.set_status(response.status().as_u16());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn deny_body_has_the_contract_keys() {
        let refused = Refused {
            reason: Reason::HostNotAllowed,
            method: "GET",
            host: "evil.example",
            path: Some("/x"),
            rule: None,
            id: DecisionId::next(),
        };
        let response = refused.response();
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        assert_eq!(response.headers()[DECISION_HEADER], "deny");
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let bytes = response
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(value["error"], "blocked_by_policy");
        assert_eq!(value["reason"], "host_not_allowed");
        assert_eq!(value["method"], "GET");
        assert_eq!(value["host"], "evil.example");
        assert_eq!(value["path"], "/x");
        assert!(value["rule"].is_null());
        assert_eq!(value["id"], refused.id.to_string());
        let text = String::from_utf8_lossy(&bytes);
        let at = |key: &str| text.find(&format!("\"{key}\":")).expect(key);
        let expected = [
            "error", "reason", "method", "host", "path", "rule", "id", "message", "hint",
        ];
        assert!(
            expected.windows(2).all(|pair| at(pair[0]) < at(pair[1])),
            "docs/contract.md §4, in order: {text}"
        );
        assert_eq!(value.as_object().map(|o| o.len()), Some(expected.len()));
        assert_eq!(value["message"], "evil.example is not in the allowlist");
        assert_eq!(
            value["hint"],
            "add `- host: evil.example` under network.allow in airlock.yaml"
        );
    }

    #[test]
    fn every_reason_has_a_message_and_hint() {
        for reason in Reason::ALL {
            let refused = Refused {
                reason,
                method: "POST",
                host: "h.example",
                path: Some("/p"),
                rule: Some("network.allow[0]"),
                id: DecisionId::next(),
            };
            let explanation = refused.explanation();
            assert!(!explanation.message.is_empty());
            assert!(!explanation.hint.is_empty());
        }
    }
}
