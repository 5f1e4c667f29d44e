//! The *decide* step: one policy snapshot's verdict on an identified request. A plain-HTTP
//! request to `airlock.internal` is routed: from here on it is the request to its route's
//! upstream, the route standing in for the allow rule and adding its secret to the scope.
//! The run's mode then relaxes (report) or holds for an answer (ask) a refusal for host,
//! method or path only.

use airlock_policy::ask::AskKey;
use airlock_policy::canonical::PathUnsafe;
use airlock_policy::mode::Mode;
use airlock_policy::route::Outcome;
use airlock_policy::{CanonicalRequest, CompiledPolicy, Decision, Reason};

use super::answer::Seen;
use super::identify::Identified;
use crate::ask::Asked;
use crate::context::Shared;
use crate::identity::Destination;

/// What a request is decided and forwarded as.
pub(super) struct Decided {
    pub(super) destination: Destination,
    pub(super) canonical: CanonicalRequest,
    /// The origin-form target sent upstream.
    pub(super) path_and_query: String,
    pub(super) decision: Decision,
    /// Report mode: the refusal let through.
    pub(super) would: Option<Reason>,
    /// Ask mode: the refusal to hold until it is answered.
    pub(super) ask: Option<Reason>,
    /// The route's secret, injected whatever the upstream host.
    pub(super) route_secret: Option<String>,
}

impl Decided {
    /// Whether the request goes on: allowed, or held for an answer.
    pub(super) fn goes_on(&self) -> bool {
        self.decision.is_allow() || self.ask.is_some()
    }

    /// The request as its audit line shows it; an unsafe path is shown as sent
    /// (`raw_path`), an asterisk-form `OPTIONS *` as `*`.
    pub(super) fn seen(&self, raw_path: &str) -> Seen {
        let canonical = &self.canonical;
        let path = match &canonical.path {
            Ok(path) => path.clone(),
            Err(PathUnsafe::NotAbsolute) if self.path_and_query == "*" => "*".to_owned(),
            Err(_) => raw_path.to_owned(),
        };
        Seen {
            method: canonical.method.clone(),
            scheme: Some(self.destination.scheme),
            host: canonical.host.to_string(),
            port: canonical.port,
            path,
            query: canonical.query.clone(),
        }
    }
}

/// Decides `identified` on `policy` under `mode`.
pub(super) fn decide(policy: &CompiledPolicy, mode: Mode, identified: Identified) -> Decided {
    let mut decided = route(policy, identified);
    let (decision, would) = mode.apply(&decided.canonical.host, decided.decision);
    decided.ask = mode
        .askable(&decided.canonical.host, &decision)
        .filter(|_| decided.canonical.path.is_ok());
    decided.decision = decision;
    decided.would = would;
    decided
}

/// The policy's decision, a route followed to its upstream.
fn route(policy: &CompiledPolicy, identified: Identified) -> Decided {
    let Identified {
        destination,
        canonical,
        path_and_query,
    } = identified;
    let (destination, canonical, path_and_query, decision, route_secret) =
        match policy.decide_request(&canonical, destination.scheme == "https") {
            Outcome::Routed(routed) => (
                Destination {
                    scheme: "https",
                    host: routed.request.host.clone(),
                    port: routed.request.port,
                },
                routed.request,
                routed.path_and_query,
                Decision::allow(routed.rule),
                routed.secret,
            ),
            Outcome::Decided(decision) => (destination, canonical, path_and_query, decision, None),
        };
    Decided {
        destination,
        canonical,
        path_and_query,
        decision,
        would: None,
        ask: None,
        route_secret,
    }
}

/// Ask mode: holds a request refused for `ask` (a reason [`Mode::askable`] gave) until its
/// ask is answered; the decision to act on, and whether it was asked about. Without a
/// reason, `decision` stands.
pub(super) async fn hold(
    shared: &Shared,
    ask: Option<Reason>,
    key: impl FnOnce() -> AskKey,
    decision: Decision,
) -> (Decision, bool) {
    let Some(reason) = ask else {
        return (decision, false);
    };
    match shared.asks.hold(key(), reason).await {
        Asked::Allowed { rule, asked } => (Decision::allow(rule), asked),
        Asked::Refused => (decision, true),
    }
}

#[cfg(test)]
mod tests;
