//! The *decide* step: one policy snapshot's verdict on an identified request. A plain-HTTP
//! request to `airlock.internal` is routed: from here on it is the request to its route's
//! upstream, the route standing in for the allow rule and adding its secret to the scope.
//! The run's mode then relaxes (report) or holds for an answer (ask) a refusal for host,
//! method or path only.

use airlock_policy::ask::AskKey;
use airlock_policy::canonical::PathUnsafe;
use airlock_policy::enforce::{Answer, Question, SecretScope};
use airlock_policy::mode::Mode;
use airlock_policy::model::Rule;
use airlock_policy::{CanonicalRequest, CompiledPolicy, Decision, Reason};

use super::answer::Seen;
use super::identify::Identified;
use crate::ask::{Asked, Asks};
use crate::identity::Destination;

/// What a request is decided and forwarded as.
pub(super) struct Decided<'p> {
    pub(super) destination: Destination,
    /// The request as its audit line shows it.
    pub(super) seen: Seen,
    /// The `json_deny` rules that apply to its body.
    pub(super) body_guards: Vec<&'p Rule>,
    /// The origin-form target sent upstream.
    pub(super) path_and_query: String,
    pub(super) decision: Decision,
    /// Report mode: the refusal let through.
    pub(super) would: Option<Reason>,
    /// Ask mode: the refusal to hold until it is answered.
    pub(super) ask: Option<Reason>,
    /// The secrets the request may carry (a route's included).
    pub(super) scope: SecretScope<'p>,
}

impl Decided<'_> {
    /// Whether the request goes on: allowed, or held for an answer.
    pub(super) fn goes_on(&self) -> bool {
        self.decision.is_allow() || self.ask.is_some()
    }
}

/// The request as its audit line shows it, taken apart from its canonical form; an
/// unsafe path is shown as sent (`raw_path`), an asterisk-form `OPTIONS *` as `*`.
fn seen(canonical: CanonicalRequest, scheme: &'static str, target: &str, raw_path: &str) -> Seen {
    let path = match canonical.path {
        Ok(path) => path,
        Err(PathUnsafe::NotAbsolute) if target == "*" => "*".to_owned(),
        Err(_) => raw_path.to_owned(),
    };
    Seen {
        method: canonical.method,
        scheme: Some(scheme),
        host: canonical.host.to_string(),
        port: canonical.port,
        path,
        query: canonical.query,
    }
}

/// Decides `identified` (whose target's path, as sent, is `raw_path`) on `policy` under
/// `mode`, for the program `caller` (`process:` rules).
pub(super) fn decide<'p>(
    policy: &'p CompiledPolicy,
    mode: Mode,
    identified: Identified,
    raw_path: &str,
    caller: airlock_policy::programs::Caller<'_>,
) -> Decided<'p> {
    let Identified {
        destination,
        canonical,
        path_and_query,
    } = identified;
    // The one question the policy answers, as `airlock policy explain` asks it.
    let answer = policy.answer(Question {
        canonical,
        tls: destination.scheme == "https",
        path_and_query,
        caller,
    });
    let Answer {
        decision,
        canonical,
        tls,
        path_and_query,
        body_guards,
        scope,
        ..
    } = answer;
    let destination = Destination {
        scheme: if tls { "https" } else { "http" },
        host: canonical.host.clone(),
        port: canonical.port,
    };
    let (decision, would) = mode.apply(&canonical.host, decision);
    let ask = mode
        .askable(&canonical.host, &decision)
        .filter(|_| canonical.path.is_ok());
    let seen = seen(canonical, destination.scheme, &path_and_query, raw_path);
    Decided {
        destination,
        seen,
        body_guards,
        path_and_query,
        decision,
        would,
        ask,
        scope,
    }
}

/// Ask mode: holds a request refused for `ask` (a reason [`Mode::askable`] gave) until its
/// ask is answered; the decision to act on, and whether it was asked about. Without a
/// reason, `decision` stands.
pub(super) async fn hold(
    asks: &Asks,
    ask: Option<Reason>,
    key: impl FnOnce() -> AskKey,
    decision: Decision,
    process: impl FnOnce() -> Option<serde_json::Value>,
) -> (Decision, bool) {
    let Some(reason) = ask else {
        return (decision, false);
    };
    // Boxed: only a held request waits here, and every request's future would carry it.
    match Box::pin(asks.hold_from(key(), reason, process())).await {
        Asked::Allowed { rule, asked } => (Decision::allow(rule), asked),
        Asked::Refused => (decision, true),
    }
}

#[cfg(test)]
mod tests;
