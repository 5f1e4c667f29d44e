//! The request-body step of the data path (HTTP glue around `airlock_mcp`'s pure checks):
//! reading a request body whole for inspection, shared by the MCP step and the
//! `json_deny` body guards, and deciding a body against the guards of the allow rules
//! that matched. Both fail closed: a body that is compressed, larger than
//! [`airlock_mcp::BODY_LIMIT`], cut short, not UTF-8 or not strict JSON is refused as
//! `body_uninspectable`.

use airlock_policy::model::Rule;
use airlock_policy::{Decision, Reason};
use bytes::Bytes;
use http::header::HeaderMap;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;

use crate::body::is_encoded;

/// The request body, read whole; `Err` (`body_uninspectable`) when it is compressed
/// (a `Content-Encoding` other than `identity`), over the limit, or cut short.
pub(crate) async fn read_whole(headers: &HeaderMap, body: Incoming) -> Result<Bytes, Reason> {
    if is_encoded(headers) {
        return Err(Reason::BodyUninspectable);
    }
    Ok(Limited::new(body, airlock_mcp::BODY_LIMIT)
        .collect()
        .await
        .map_err(|_| Reason::BodyUninspectable)?
        .to_bytes())
}

/// Decides `body` against the `json_deny` guards of `rules` (the allow rules with guards
/// that matched the request): `Err` is the refusal, `denied_by_rule` naming the first
/// rule whose guard matched, or `body_uninspectable` naming the first guarded rule.
pub(crate) fn check(body: &[u8], rules: &[&Rule]) -> Result<(), Decision> {
    match airlock_mcp::refusing_rule(body, rules) {
        Ok(None) => Ok(()),
        Ok(Some(rule)) => Err(Decision::deny(Reason::DeniedByRule, Some(rule.id.clone()))),
        Err(_) => Err(Decision::deny(
            Reason::BodyUninspectable,
            rules.first().map(|rule| rule.id.clone()),
        )),
    }
}
