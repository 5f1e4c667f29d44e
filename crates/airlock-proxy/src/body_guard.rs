//! The request-body step of the data path (HTTP glue around `airlock_mcp`'s pure checks):
//! reading a request body whole for inspection (within `limits.body_timeout`, its bytes
//! taken from the inspection budget), shared by the MCP step and the `json_deny` body
//! guards, and deciding a body against the guards of the allow rules
//! that matched. A compressed body is decoded first. Both fail closed: a body in an unknown
//! coding, larger than
//! [`airlock_mcp::BODY_LIMIT`], cut short, not UTF-8 or not strict JSON is refused as
//! `body_uninspectable`.

use std::time::Duration;

use airlock_encoding::Limits;
use airlock_policy::model::Rule;
use airlock_policy::{Decision, Reason};
use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http_body::Body;
use http_body_util::BodyExt as _;

use crate::body::content_decoder;
use crate::budget::{Budget, Held, Overloaded};
use crate::metered::Stopped;

/// Why a body was not read whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unread {
    /// Refused: `body_uninspectable`, or `overloaded` (the budget is taken).
    Refused(Reason),
    /// Not complete within `limits.body_timeout`: 408, the connection closes.
    Timeout,
}

impl From<Overloaded> for Unread {
    fn from(_: Overloaded) -> Self {
        Unread::Refused(Reason::Overloaded)
    }
}

/// The request body, read whole within `deadline`, its bytes taken from `budget` as they
/// are buffered (held until the returned [`Held`] is dropped), and decoded when it has a
/// `Content-Encoding` (the header and `Content-Length` then go: it is forwarded decoded).
/// `Err`: `body_uninspectable` when it is over the limit (coded or decoded), cut short, or
/// in a coding airlock cannot undo; `overloaded` when the budget has no room for it;
/// [`Unread::Timeout`] past the deadline.
pub(crate) async fn read_whole<B: Body<Data = Bytes> + Unpin>(
    headers: &mut HeaderMap,
    body: &mut B,
    budget: &Budget,
    deadline: Duration,
) -> Result<(Bytes, Held), Unread> {
    let mut held = Held::default();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if let Some(length) = declared {
        if length > airlock_mcp::BODY_LIMIT as u64 {
            return Err(Unread::Refused(Reason::BodyUninspectable));
        }
        if !budget.fits(length) {
            return Err(Unread::Refused(Reason::Overloaded));
        }
    }
    let reading = collect(body, budget, &mut held, declared);
    let raw = tokio::time::timeout(deadline, reading)
        .await
        .map_err(|_| Unread::Timeout)??;
    let limits = Limits {
        max_output: airlock_mcp::BODY_LIMIT as u64,
        ..Limits::default()
    };
    let refused = || Unread::Refused(Reason::BodyUninspectable);
    let Some(decoder) = content_decoder(headers, true, limits).map_err(|()| refused())? else {
        return Ok((raw, held));
    };
    // Decoded in steps, each taken from the budget before it exists (crate::metered).
    let decoded = crate::metered::decode_whole(decoder, &raw, budget, &mut held)
        .await
        .map_err(|stopped| match stopped {
            Stopped::Overloaded => Unread::Refused(Reason::Overloaded),
            Stopped::Undecodable => refused(),
        })?;
    Ok((Bytes::from(decoded), held))
}

/// Reads `body` to its end, at most [`airlock_mcp::BODY_LIMIT`] bytes, taking from `budget`
/// every byte of buffer before it is allocated (`declared`: the announced length, taken
/// up front); `body_uninspectable` when it is over the limit or cut short.
pub(crate) async fn collect<B: Body<Data = Bytes> + Unpin>(
    body: &mut B,
    budget: &Budget,
    held: &mut Held,
    declared: Option<u64>,
) -> Result<Bytes, Unread> {
    let limit = airlock_mcp::BODY_LIMIT;
    let first = declared.map_or(0, |length| length as usize);
    budget.take(held, first).await?;
    let mut buffer = BytesMut::with_capacity(first);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| Unread::Refused(Reason::BodyUninspectable))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let needed = buffer.len() + data.len();
        if needed > limit {
            return Err(Unread::Refused(Reason::BodyUninspectable));
        }
        if needed > buffer.capacity() {
            let grown = needed.max(buffer.capacity() * 2).min(limit);
            budget.take(held, grown - buffer.capacity()).await?;
            buffer.reserve(grown - buffer.len());
        }
        buffer.extend_from_slice(&data);
    }
    Ok(buffer.freeze())
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
