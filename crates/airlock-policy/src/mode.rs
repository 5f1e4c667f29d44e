//! Enforcement modes (`--mode enforce|report|ask`, docs/policy.md "Report mode" and
//! "Ask mode").
//!
//! In [`Mode::Report`] a request refused *only* for its host, method or path is let
//! through, and the refusal it would have had is kept so that its audit line can say
//! `"decision":"allow","would":"deny","reason":R`. Nothing else is relaxed: deny rules,
//! private addresses, credential checks (scope, tripwires, foreign credentials), body
//! guards, MCP rules, unsafe paths and malformed requests refuse as in
//! [`Mode::Enforce`]. Those checks happen after the policy decision, on the request as it
//! stands, so relaxing the decision does not reach them.
//!
//! In [`Mode::Ask`] the same refusals are not relaxed here: [`Mode::askable`] says which
//! ones the proxy holds until someone answers (see [`crate::ask`]).

use std::fmt;
use std::str::FromStr;

use crate::canonical::{Host, ROUTE_HOST};
use crate::decision::{Decision, Reason, Verdict};
use crate::matcher::TunnelDecision;

/// How the proxy applies the policy's decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Refuse whatever the policy refuses (the default).
    #[default]
    Enforce,
    /// Let through what is refused only for host, method or path, and log it as a
    /// would-be refusal.
    Report,
    /// Hold what is refused only for host, method or path until it is answered (or its
    /// time runs out).
    Ask,
}

impl Mode {
    /// `"enforce"`, `"report"` or `"ask"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Report => "report",
            Mode::Ask => "ask",
        }
    }

    /// In ask mode, the reason of a refusal the proxy may hold and ask about: one for
    /// host, method or path only, never on airlock's own route host.
    pub fn askable(self, host: &Host, decision: &Decision) -> Option<Reason> {
        let own = matches!(host, Host::Name(name) if name == ROUTE_HOST);
        decision
            .reason
            .filter(|reason| self == Mode::Ask && relaxable(*reason) && !own)
    }

    /// Applies the mode to the decision on a request to `host`: the decision to act on,
    /// and the reason it was set aside for (`Some` only when report mode let a refusal
    /// through). Requests to airlock's own route host are never relaxed (a missing route
    /// cannot be reported through).
    pub fn apply(self, host: &Host, decision: Decision) -> (Decision, Option<Reason>) {
        let own = matches!(host, Host::Name(name) if name == ROUTE_HOST);
        match decision.reason {
            Some(reason) if self == Mode::Report && relaxable(reason) && !own => {
                let relaxed = Decision {
                    verdict: Verdict::Allow,
                    rule: decision.rule,
                    reason: None,
                };
                (relaxed, Some(reason))
            }
            _ => (decision, None),
        }
    }

    /// Applies the mode to the decision on a tunnel to `host`: in report mode a tunnel
    /// refused for its host passes (raw TCP included) with [`TunnelDecision::would`] set.
    pub fn apply_tunnel(self, host: &Host, tunnel: TunnelDecision) -> TunnelDecision {
        let (decision, would) = self.apply(host, tunnel.decision);
        match would {
            Some(reason) => TunnelDecision {
                decision,
                raw_tcp_allowed: true,
                passthrough: tunnel.passthrough,
                would: Some(reason),
            },
            None => TunnelDecision { decision, ..tunnel },
        }
    }
}

/// Whether report mode lets a refusal for `reason` through: host, method and path only.
pub fn relaxable(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::HostNotAllowed | Reason::MethodNotAllowed | Reason::PathNotAllowed
    )
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a `--mode` value was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModeError {
    /// Anything but `enforce`, `report` or `ask`.
    #[error("unknown mode {0:?}: use `enforce`, `report` or `ask`")]
    Unknown(String),
}

impl FromStr for Mode {
    type Err = ModeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "enforce" => Ok(Mode::Enforce),
            "report" => Ok(Mode::Report),
            "ask" => Ok(Mode::Ask),
            other => Err(ModeError::Unknown(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host::Name("new.example.test".to_owned())
    }

    #[test]
    fn the_route_host_is_never_relaxed() {
        let own = Host::Name(ROUTE_HOST.to_owned());
        let refused = Decision::deny(Reason::PathNotAllowed, None);
        assert_eq!(Mode::Report.apply(&own, refused.clone()), (refused, None));
    }

    #[test]
    fn report_relaxes_host_method_and_path_only() {
        for reason in Reason::ALL {
            let (decision, would) = Mode::Report.apply(&host(), Decision::deny(reason, None));
            assert_eq!(decision.is_allow(), relaxable(reason), "{reason}");
            assert_eq!(would, relaxable(reason).then_some(reason), "{reason}");
            let (decision, would) = Mode::Enforce.apply(&host(), Decision::deny(reason, None));
            assert!(!decision.is_allow() && would.is_none(), "{reason}");
        }
        let relaxed: Vec<Reason> = Reason::ALL.into_iter().filter(|r| relaxable(*r)).collect();
        assert_eq!(
            relaxed,
            [
                Reason::HostNotAllowed,
                Reason::MethodNotAllowed,
                Reason::PathNotAllowed
            ]
        );
    }

    #[test]
    fn an_allow_stays_as_it_is() {
        let allow = Decision::allow("network.allow[0]");
        assert_eq!(Mode::Report.apply(&host(), allow.clone()), (allow, None));
    }

    #[test]
    fn a_tunnel_refused_for_its_host_passes_in_report_mode() {
        let refused = TunnelDecision {
            decision: Decision::deny(Reason::HostNotAllowed, None),
            raw_tcp_allowed: false,
            passthrough: false,
            would: None,
        };
        let relaxed = Mode::Report.apply_tunnel(&host(), refused.clone());
        assert!(relaxed.decision.is_allow() && relaxed.raw_tcp_allowed);
        assert_eq!(relaxed.would, Some(Reason::HostNotAllowed));
        assert_eq!(
            Mode::Enforce.apply_tunnel(&host(), refused.clone()),
            refused
        );
        let denied = TunnelDecision {
            decision: Decision::deny(Reason::DeniedByRule, Some("network.deny[0]".into())),
            ..refused
        };
        assert_eq!(Mode::Report.apply_tunnel(&host(), denied.clone()), denied);
    }

    #[test]
    fn modes_parse() {
        assert_eq!("report".parse::<Mode>(), Ok(Mode::Report));
        assert_eq!("enforce".parse::<Mode>(), Ok(Mode::Enforce));
        assert_eq!("ask".parse::<Mode>(), Ok(Mode::Ask));
        let loud = "loud".parse::<Mode>().unwrap_err().to_string();
        assert!(loud.contains("`ask`"), "{loud}");
    }

    #[test]
    fn ask_mode_relaxes_nothing_and_asks_about_host_method_and_path_only() {
        for reason in Reason::ALL {
            let refused = Decision::deny(reason, None);
            assert_eq!(
                Mode::Ask.apply(&host(), refused.clone()),
                (refused.clone(), None)
            );
            let askable = Mode::Ask.askable(&host(), &refused);
            assert_eq!(askable, relaxable(reason).then_some(reason), "{reason}");
            assert_eq!(Mode::Enforce.askable(&host(), &refused), None);
            assert_eq!(Mode::Report.askable(&host(), &refused), None);
        }
        let own = Host::Name(ROUTE_HOST.to_owned());
        let refused = Decision::deny(Reason::HostNotAllowed, None);
        assert_eq!(Mode::Ask.askable(&own, &refused), None);
        assert_eq!(Mode::Ask.askable(&host(), &Decision::allow("r")), None);
    }
}
