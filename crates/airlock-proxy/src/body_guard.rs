//! The request-body step of the data path (HTTP glue around `airlock_mcp`'s pure checks):
//! reading a request body whole for inspection, shared by the MCP step and the
//! `json_deny` body guards, and deciding a body against the guards of the allow rules
//! that matched. A compressed body is decoded first. Both fail closed: a body in an unknown
//! coding, larger than
//! [`airlock_mcp::BODY_LIMIT`], cut short, not UTF-8 or not strict JSON is refused as
//! `body_uninspectable`.

use airlock_encoding::Limits;
use airlock_policy::model::Rule;
use airlock_policy::{Decision, Reason};
use bytes::Bytes;
use http::header::HeaderMap;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;

use crate::body::content_decoder;

/// The request body, read whole and decoded when it has a `Content-Encoding` (the
/// header and `Content-Length` then go: it is forwarded decoded); `Err`
/// (`body_uninspectable`) when it is over the limit (coded or decoded), cut short, or in
/// a coding airlock cannot undo.
pub(crate) async fn read_whole(headers: &mut HeaderMap, body: Incoming) -> Result<Bytes, Reason> {
    let raw = Limited::new(body, airlock_mcp::BODY_LIMIT)
        .collect()
        .await
        .map_err(|_| Reason::BodyUninspectable)?
        .to_bytes();
    let limits = Limits {
        max_output: airlock_mcp::BODY_LIMIT as u64,
        ..Limits::default()
    };
    let Some(mut decoder) =
        content_decoder(headers, true, limits).map_err(|()| Reason::BodyUninspectable)?
    else {
        return Ok(raw);
    };
    let mut decoded = decoder.push(&raw).map_err(|_| Reason::BodyUninspectable)?;
    decoded.extend(decoder.finish().map_err(|_| Reason::BodyUninspectable)?);
    Ok(Bytes::from(decoded))
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
