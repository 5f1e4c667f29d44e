//! The per-request state of the request path: the one [`Snapshot`] of the policy and of
//! the credentials a request is served by (taken once, before its names are guarded), and
//! the [`RequestState`] built once after *decide* from what it decided. Each later step
//! borrows the fields it needs from the state, never the connection context, so that no
//! step can load a second snapshot or reach another step's values.

use std::sync::Arc;
use std::time::Instant;

use airlock_credentials::Credentials;
use airlock_policy::enforce::SecretScope;
use airlock_policy::model::{McpRule, Rule};
use airlock_policy::{CompiledPolicy, Decision, Reason};
use arc_swap::ArcSwap;

use super::answer::Auditor;
use super::decide::Decided;
use crate::identity::Destination;
use crate::mcp;
use crate::record::Line;

/// The policy and the credentials one request is served by, whole, even if either is
/// swapped meanwhile (a reload, a rotated `file:` secret, a refresh).
pub(super) struct Snapshot {
    pub(super) policy: Arc<CompiledPolicy>,
    pub(super) credentials: Arc<Credentials>,
}

impl Snapshot {
    /// The current policy and credentials: the one load of each for a request.
    pub(super) fn take(
        policy: &ArcSwap<CompiledPolicy>,
        credentials: &ArcSwap<Credentials>,
    ) -> Self {
        Snapshot {
            policy: policy.load_full(),
            credentials: credentials.load_full(),
        }
    }
}

/// What the steps after *decide* share of one request.
pub(super) struct RequestState<'r> {
    /// The request's one policy snapshot.
    pub(super) policy: &'r Arc<CompiledPolicy>,
    /// The request's one credentials snapshot.
    pub(super) credentials: &'r Arc<Credentials>,
    /// Writes the request's refusals.
    pub(super) auditor: Auditor<'r>,
    /// When the request was read (its audit line's `ms`).
    pub(super) started: Instant,
    /// Where the request goes (a route's upstream, when it was routed).
    pub(super) destination: Destination,
    /// The origin-form target sent upstream (credentials swapped into it).
    pub(super) path_and_query: String,
    /// The request's `http` audit line: its request fields, then its decision.
    pub(super) line: Line,
    /// The `json_deny` rules that apply to its body (or its messages).
    pub(super) body_guards: Vec<&'r Rule>,
    /// The `mcp` rule covering its host and path, if any.
    pub(super) mcp_rule: Option<McpRule>,
}

/// What *decide* said of the request, acted on once by the steps that follow it.
pub(super) struct Verdict<'r> {
    pub(super) decision: Decision,
    /// Report mode: the refusal let through.
    pub(super) would: Option<Reason>,
    /// Ask mode: the refusal to hold until it is answered.
    pub(super) ask: Option<Reason>,
    /// The secrets the request may carry (a route's included).
    pub(super) scope: SecretScope<'r>,
}

impl<'r> RequestState<'r> {
    /// The state of the request `decided` on `snapshot`'s policy, audited by `auditor`.
    pub(super) fn new(
        snapshot: &'r Snapshot,
        auditor: Auditor<'r>,
        decided: Decided<'r>,
        started: Instant,
    ) -> (Self, Verdict<'r>) {
        let Decided {
            destination,
            seen,
            body_guards,
            path_and_query,
            decision,
            would,
            ask,
            scope,
        } = decided;
        let mcp_rule = mcp::rule_for(&snapshot.policy, &destination.host, &seen.path);
        let state = RequestState {
            policy: &snapshot.policy,
            credentials: &snapshot.credentials,
            auditor,
            started,
            destination,
            path_and_query,
            line: auditor.line(seen),
            body_guards,
            mcp_rule,
        };
        let verdict = Verdict {
            decision,
            would,
            ask,
            scope,
        };
        (state, verdict)
    }

    /// The request's method, as its audit line shows it.
    pub(super) fn method(&self) -> &str {
        self.line.method.as_deref().unwrap_or_default()
    }

    /// The request's canonical path (without its query), as its audit line shows it
    /// before any redaction.
    pub(super) fn path(&self) -> &str {
        self.line.path.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
