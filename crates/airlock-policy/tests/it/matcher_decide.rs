//! The compiled matcher against hand-built policies (no loader involved): precedence,
//! hosts, ports, methods, globs, regexes, CIDRs, unsafe paths, tunnels, addresses,
//! secrets, passthrough and MCP rules.

mod addresses;
mod hosts;
mod paths;

use airlock_policy::CanonicalRequest;
use airlock_policy::canonical::{Host, canonical_host};
use airlock_policy::decision::{Decision, Reason};
use airlock_policy::matcher::CompiledPolicy;
use airlock_policy::model::{HostPattern, Network, Policy, Rule, Target};

/// A rule builder: `rule("network.allow[0]", host("a.com"))`.
fn rule(id: &str, target: Target) -> Rule {
    Rule {
        id: id.to_owned(),
        target,
        methods: None,
        paths: Vec::new(),
        path_regex: Vec::new(),
        ports: None,
        json_deny: Vec::new(),
        process: None,
    }
}

fn host(text: &str) -> Target {
    Target::Host(pattern(text))
}

fn pattern(text: &str) -> HostPattern {
    if text == "*" {
        return HostPattern::Any;
    }
    if let Some(suffix) = text.strip_prefix("*.") {
        return HostPattern::Wildcard(suffix.to_owned());
    }
    match canonical_host(text).expect("test host") {
        Host::Name(name) => HostPattern::Exact(name),
        Host::Ip(addr) => HostPattern::Ip(addr),
    }
}

fn cidr(text: &str) -> Target {
    Target::Cidr(text.parse().expect("test cidr"))
}

fn methods(rule: Rule, list: &[&str]) -> Rule {
    Rule {
        methods: Some(list.iter().map(|m| (*m).to_owned()).collect()),
        ..rule
    }
}

fn paths(rule: Rule, list: &[&str]) -> Rule {
    Rule {
        paths: list.iter().map(|p| (*p).to_owned()).collect(),
        ..rule
    }
}

fn regexes(rule: Rule, list: &[&str]) -> Rule {
    Rule {
        path_regex: list.iter().map(|p| (*p).to_owned()).collect(),
        ..rule
    }
}

fn ports(rule: Rule, list: &[u16]) -> Rule {
    Rule {
        ports: Some(list.to_vec()),
        ..rule
    }
}

fn policy(allow: Vec<Rule>, deny: Vec<Rule>) -> CompiledPolicy {
    compile(network(allow, deny))
}

/// A policy of these network rules alone (no passthrough, secrets or MCP rules), not yet
/// compiled.
fn network(allow: Vec<Rule>, deny: Vec<Rule>) -> Policy {
    Policy {
        network: Network {
            allow,
            deny,
            tls_passthrough: Vec::new(),
        },
        ..Policy::default()
    }
}

fn compile(policy: Policy) -> CompiledPolicy {
    CompiledPolicy::compile(&policy).expect("test policy compiles")
}

/// Decide `METHOD URL` (`https://host[:port]/path?query`).
fn decide(compiled: &CompiledPolicy, method: &str, url: &str) -> Decision {
    let (scheme, rest) = url.split_once("://").expect("test url");
    let default_port = if scheme == "https" { 443 } else { 80 };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let (host, port) = airlock_policy::canonical::parse_authority(authority, default_port)
        .expect("test authority");
    compiled.decide(&CanonicalRequest::new(method, host, port, path))
}

fn allowed_by(rule: &str) -> Decision {
    Decision::allow(rule)
}

fn denied(reason: Reason) -> Decision {
    Decision::deny(reason, None)
}

fn denied_by(rule: &str) -> Decision {
    Decision::deny(Reason::DeniedByRule, Some(rule.to_owned()))
}
