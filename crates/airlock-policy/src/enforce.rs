//! One pure call per enforcement question: what the policy says about one HTTP request, as
//! the proxy enforces it and `airlock policy explain` shows it. Both ask
//! [`CompiledPolicy::answer`]; neither works a decision or a secret scope out on its own.
//!
//! The [`Answer`] holds the decision, the request the rest of the handling sees (a request
//! to [`crate::route::ROUTE_HOST`] becomes the request to its route's upstream, over TLS),
//! the `json_deny` guards of its body and its [`SecretScope`]: the secrets whose hosts
//! match the destination (and a route's secret), of which only those sent over TLS, or the
//! route's own, are swapped (docs/secrets.md). Running modes (report, ask) and the checks
//! that need more than the request (the outbound guard on values, the address guard at
//! dial time) come after, elsewhere.
//!
//! `localhost`, `127.0.0.1` and `::1` are the host's loopback: a request is decided on the
//! name the client used, and the proxy establishes that name the same way whether the
//! connection came through `CONNECT`, an absolute URI or `airlock run`'s capture of a
//! loopback address (`airlock-proxy`'s identity module, [`is_loopback_alias`]).

use std::net::IpAddr;

use crate::canonical::{CanonicalRequest, Host, parse_authority};
use crate::decision::{Decision, Reason};
use crate::matcher::CompiledPolicy;
use crate::model::Rule;
use crate::programs::Caller;
use crate::route::Outcome;

/// The request the policy is asked about.
pub struct Question<'c> {
    /// The canonical request (method, host, port, path, query).
    pub canonical: CanonicalRequest,
    /// Sent over TLS (`https`, `wss`).
    pub tls: bool,
    /// The origin-form target as sent (`/p?q`).
    pub path_and_query: String,
    /// The program that sent it, when known (`process:` rules).
    pub caller: Caller<'c>,
}

/// The policy's answer to a [`Question`].
#[derive(Debug)]
pub struct Answer<'p> {
    /// The decision on the request (a routed request: allowed by its route).
    pub decision: Decision,
    /// The request from here on: the question's, or its route's upstream request.
    pub canonical: CanonicalRequest,
    /// Sent on over TLS (a routed request always is).
    pub tls: bool,
    /// The origin-form target sent on (the route's upstream path for a routed request).
    pub path_and_query: String,
    /// Whether the request was routed ([`crate::route`]).
    pub routed: bool,
    /// The `json_deny` rules that apply to its body (and WebSocket messages).
    pub body_guards: Vec<&'p Rule>,
    /// The secrets that may be swapped into it.
    pub scope: SecretScope<'p>,
}

/// Which secrets a request may carry (docs/secrets.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretScope<'p> {
    /// The secrets whose hosts match the destination, and a route's secret, in policy
    /// order: the real values that may go there (over TLS).
    pub home: Vec<&'p str>,
    /// The secrets swapped: `home` over TLS; over plain HTTP only a route's secret.
    pub in_scope: Vec<&'p str>,
    /// The route's secret (injected whatever the upstream host).
    pub route_secret: Option<&'p str>,
}

impl CompiledPolicy {
    /// Answers `question`: decision, route followed, body guards and secret scope.
    pub fn answer(&self, question: Question<'_>) -> Answer<'_> {
        let Question {
            canonical,
            tls,
            path_and_query,
            caller,
        } = question;
        let (decision, canonical, tls, path_and_query, route_secret, routed) = match self
            .decide_request_as(&canonical, tls, caller)
        {
            Outcome::Routed(routed) => (
                Decision::allow(routed.rule),
                routed.request,
                true,
                routed.path_and_query,
                routed.secret,
                true,
            ),
            Outcome::Decided(decision) => (decision, canonical, tls, path_and_query, None, false),
        };
        let scope = self.secret_scope(&canonical.host, tls, route_secret.as_deref());
        let body_guards = self.body_guards(&canonical);
        Answer {
            decision,
            canonical,
            tls,
            path_and_query,
            routed,
            body_guards,
            scope,
        }
    }

    /// The secrets a request to `host` may carry, over TLS or not, with a route's secret.
    pub fn secret_scope(
        &self,
        host: &Host,
        tls: bool,
        route_secret: Option<&str>,
    ) -> SecretScope<'_> {
        let mut home: Vec<&str> = self
            .secrets_for_host(host)
            .iter()
            .map(|secret| secret.name.as_str())
            .collect();
        let route_secret = route_secret.and_then(|name| {
            self.policy()
                .secrets
                .iter()
                .find(|secret| secret.name == name)
                .map(|secret| secret.name.as_str())
        });
        if let Some(name) = route_secret
            && !home.contains(&name)
        {
            home.push(name);
        }
        let in_scope = home
            .iter()
            .copied()
            .filter(|name| tls || Some(*name) == route_secret)
            .collect();
        SecretScope {
            home,
            in_scope,
            route_secret,
        }
    }
}

impl Answer<'_> {
    /// The decision as `airlock policy explain` states it: an IP-literal destination is
    /// also put to the address guard (a name's addresses are only known at dial time).
    pub fn explained(&self, policy: &CompiledPolicy) -> Decision {
        if self.decision.is_allow()
            && let Host::Ip(ip) = self.canonical.host
            && let Err(refusal) = policy.check_address(&self.canonical.host, ip)
        {
            return refusal;
        }
        self.decision.clone()
    }
}

/// Whether a connection to the loopback address `address` that the client names `named`
/// is for `named`: `localhost` (or a name under `.localhost`, RFC 6761) is the loopback
/// `127.0.0.0/8` and `::1` are. A capture of a loopback address (`airlock run`) is then
/// decided on the name the client used, as `airlock proxy` and `explain` decide it.
pub fn is_loopback_alias(address: &Host, named: &Host) -> bool {
    let loopback_ip = |host: &Host| matches!(host, Host::Ip(ip) if is_loopback(*ip));
    let loopback_name = |host: &Host| matches!(host, Host::Name(name) if name == "localhost" || name.ends_with(".localhost"));
    loopback_ip(address) && loopback_name(named)
}

fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// A request named the way `explain` takes it, `METHOD URL`, as a [`Question`] (the
/// fragment dropped, an empty path made `/`); the text shown for its host.
pub fn question_from_url(method: &str, url: &str) -> Result<(Question<'static>, String), String> {
    let valid_method = !method.is_empty()
        && method
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_');
    if !valid_method {
        return Err(format!("{method:?} is not an HTTP method"));
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not an absolute URL: write it as https://HOST/PATH"))?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" | "wss" => 443,
        "http" | "ws" => 80,
        other => {
            return Err(format!(
                "unsupported URL scheme {other:?}: use http or https"
            ));
        }
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(end);
    if authority.contains('@') {
        return Err(format!(
            "{url:?} carries user information: name the host alone"
        ));
    }
    let (host, port) =
        parse_authority(authority, default_port).map_err(|e| format!("{authority:?}: {e}"))?;
    let path_and_query = match path_and_query.split('#').next() {
        Some(p) if p.starts_with('/') => p.to_owned(),
        Some(p) => format!("/{p}"),
        None => "/".to_owned(),
    };
    let host_text = match &host {
        Host::Name(name) => name.clone(),
        Host::Ip(IpAddr::V4(ip)) => ip.to_string(),
        Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
    };
    let question = Question {
        canonical: CanonicalRequest::new(method, host, port, &path_and_query),
        tls: default_port == 443,
        path_and_query,
        caller: None,
    };
    Ok((question, host_text))
}

/// The reason an answer's refusal would be given for (the default when none is named).
pub fn refusal_reason(decision: &Decision) -> Reason {
    decision.reason.unwrap_or(Reason::HostNotAllowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Policy;

    fn policy(yaml: &str) -> CompiledPolicy {
        let policy: Policy = crate::load::load_str("test.yaml", yaml).expect("policy");
        CompiledPolicy::compile(&policy).expect("compile")
    }

    const SECRETS: &str = "version: 1\nnetwork:\n  allow:\n    - host: api.example\n    \
                           - host: plain.example\nsecrets:\n  KEY:\n    env: KEY\n    \
                           hosts: [api.example, plain.example]\n";

    #[test]
    fn plain_http_has_no_secret_in_scope_but_its_home_is_known() {
        let compiled = policy(SECRETS);
        let (question, _) = question_from_url("GET", "http://plain.example/x").unwrap();
        let answer = compiled.answer(question);
        assert!(answer.decision.is_allow());
        assert_eq!(answer.scope.home, ["KEY"]);
        assert!(answer.scope.in_scope.is_empty());
        let (question, _) = question_from_url("GET", "https://api.example/x").unwrap();
        assert_eq!(compiled.answer(question).scope.in_scope, ["KEY"]);
    }

    #[test]
    fn loopback_names_and_addresses_are_aliases_of_a_loopback_address() {
        let v4 = Host::Ip("127.0.0.1".parse().unwrap());
        let v6 = Host::Ip("::1".parse().unwrap());
        let name = |n: &str| Host::Name(n.to_owned());
        assert!(is_loopback_alias(&v4, &name("localhost")));
        assert!(is_loopback_alias(&v6, &name("localhost")));
        assert!(is_loopback_alias(&v4, &name("app.localhost")));
        assert!(
            !is_loopback_alias(&v4, &v6),
            "addresses compare as addresses"
        );
        assert!(!is_loopback_alias(&v4, &name("example.com")));
        assert!(!is_loopback_alias(&name("localhost"), &v4));
        let public = Host::Ip("203.0.113.9".parse().unwrap());
        assert!(!is_loopback_alias(&public, &name("localhost")));
    }
}
