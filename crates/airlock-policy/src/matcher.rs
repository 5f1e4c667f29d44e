//! The compiled matcher: a [`Policy`] turned once into hash maps, glob sets and regex sets
//! so that deciding a request looks only at the rules that name its host, never at every
//! rule.
//!
//! # Semantics
//!
//! * **Default deny.** A request passes iff it matches no deny rule and at least one allow
//!   rule. Deny wins. The allow rule reported is the lowest-index one that matches.
//! * **Hosts.** [`HostPattern::Exact`] matches that name only. [`HostPattern::Wildcard`]
//!   (`*.suffix`) matches one or more labels in front of the suffix, never the suffix
//!   itself. [`HostPattern::Any`] matches every *name* and never an IP literal, and so
//!   does [`Target::HostRegex`] for the names it fully matches (case-insensitively).
//!   [`HostPattern::Ip`] matches that IP literal only, and [`Target::Cidr`] the IP-literal
//!   hosts inside the block. An IPv4-mapped IPv6 literal (`[::ffff:10.0.0.1]`) is also
//!   looked up as its IPv4 address; for deny rules every IPv6 form with a fixed embedded
//!   IPv4 address ([`net::embedded_ipv4`]: mapped, compatible, NAT64, 6to4, Teredo) is,
//!   so that a deny on an IPv4 block cannot be sidestepped through IPv6.
//! * **Ports.** An allow rule applies to [`Rule::effective_ports`] (default 80 and 443). A
//!   deny rule without `ports` applies to *every* port: a deny must not be escapable by
//!   choosing another port.
//! * **Methods.** `None` means every method.
//! * **Paths.** `paths` are globs on the canonical path without query (`*` stays inside
//!   one segment, `**` crosses segments); `path_regex` are full matches (`^(?:re)$`) on the
//!   canonical path plus `?` and the query when there is one. A rule with both passes if
//!   either matches; a rule with neither matches every path.
//! * **Unsafe paths.** When the canonicaliser refused the path ([`PathUnsafe`]) and the
//!   host has path rules on that port (any allow rule with `paths`/`path_regex`, a deny
//!   with paths matching host, port and method, or an `mcp` rule on any port), the
//!   request is refused as `path_unsafe`,
//!   even if a rule without paths would allow it (docs/contract.md §3). On a host whose rules
//!   have no path constraints the path does not matter and decides nothing.
//! * **Reasons**, in order: a matching deny → `denied_by_rule` (its id); no allow rule for
//!   the host, or none for the host on this port → `host_not_allowed` (IP literals that no
//!   rule names included); rules for host and port but none with this method →
//!   `method_not_allowed`; otherwise `path_not_allowed`.
//! * **Programs** (`process`, [`crate::programs`]): a rule with a `process` list applies
//!   only to connections whose program is listed; to an unknown program (`None` caller:
//!   `airlock proxy`, a process not found) an allow rule with `process` never applies and
//!   a deny rule with `process` always does. An allow rule for other programs is, for this
//!   one, as if it were not written (the refusal says `host_not_allowed`).
//! * **Tunnels** ([`CompiledPolicy::decide_tunnel`], before any request is seen): refused
//!   by a matching deny rule without methods or paths, or when no allow rule matches host
//!   and port; raw (non-HTTP) TCP is allowed only if a matching allow rule is
//!   destination-only ([`Rule::is_destination_only`]).
//! * **Addresses** ([`CompiledPolicy::check_address`]): a deny `cidr` (or deny IP-literal
//!   host) without methods or paths covering the address — on any port, since the port
//!   is not known here — refuses it as `denied_by_rule`; otherwise a non-global address
//!   ([`net::is_global`]) is refused as `private_address` unless an allow `cidr` covers it
//!   or an allow rule's host is that IP literal. `HostPattern::Any` never exempts an
//!   address. `--resolve` exemptions are the proxy's business.
//! * **Secrets, passthrough, MCP** use the same host matching. An `mcp` rule's path glob
//!   covers the spellings servers route alike (case, trailing slash, `;` parameters:
//!   [`crate::mcp_path`]).
//! * **Routes** ([`CompiledPolicy::route`], for requests to [`crate::route::ROUTE_HOST`]): the longest
//!   `prefix` of the canonical path picks the route (see [`crate::route`]); the route
//!   stands in for an allow rule, but a deny rule matching the upstream request still
//!   refuses it (`denied_by_rule`, or `path_unsafe` as for [`CompiledPolicy::decide`]).

use std::net::IpAddr;
use std::sync::Arc;

use globset::{Candidate, GlobSet};

use crate::canonical::{CanonicalRequest, Host, PathUnsafe};
use crate::decision::{Decision, Reason};
use crate::mcp_path;
use crate::model::{HostPattern, McpRule, Policy, Rule, Secret, Target};
use crate::net;
use crate::programs::Caller;
use crate::route::{CompiledRoutes, Outcome, RouteError, Routed, is_route_host};

mod compiled_rule;
mod host_index;

use compiled_rule::{CompiledRule, PathView, compile_mcp_glob, path_view};
use host_index::{Embedded, HostIndex, canonical_ip};

/// A policy compiled for fast decisions. Cheap to share (`Arc` inside); build a new one
/// when the policy changes.
#[derive(Clone, Debug)]
pub struct CompiledPolicy {
    /// The policy this was compiled from.
    policy: Arc<Policy>,
    /// `network.allow`, compiled, same order.
    allow: Vec<CompiledRule>,
    /// `network.deny`, compiled, same order.
    deny: Vec<CompiledRule>,
    /// Host lookup into `allow`.
    allow_index: HostIndex,
    /// Host lookup into `deny`.
    deny_index: HostIndex,
    /// Host lookup into `network.tls_passthrough`.
    passthrough_index: HostIndex,
    /// Host lookup into `secrets`.
    secret_index: HostIndex,
    /// Host lookup into `mcp`.
    mcp_index: HostIndex,
    /// Host lookup into `dlp.allow`.
    dlp_index: HostIndex,
    /// The path glob of each `mcp` rule, same order.
    mcp_paths: Vec<GlobSet>,
    /// Whether any allow rule has `json_deny` guards (if not, requests skip the lookup).
    has_body_guards: bool,
    /// `routes`, longest prefix first.
    routes: CompiledRoutes,
}

/// Why a policy could not be compiled. The loader validates globs and regexes, so these
/// mean a policy was built by hand or a limit was exceeded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// A path glob does not compile.
    #[error("{rule}: the path glob {glob:?} is invalid: {message}")]
    Glob {
        /// The rule id.
        rule: String,
        /// The glob as written.
        glob: String,
        /// What the glob compiler said.
        message: String,
    },
    /// A path regex does not compile or exceeds the size limit.
    #[error("{rule}: a path_regex is invalid or too large: {message}")]
    Regex {
        /// The rule id.
        rule: String,
        /// What the regex compiler said.
        message: String,
    },
    /// A route's upstream or secret is invalid.
    #[error(transparent)]
    Route(#[from] RouteError),
}

/// The decision on a tunnel (CONNECT, SNI, raw TCP) before any request is seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelDecision {
    /// Allow or deny the tunnel.
    pub decision: Decision,
    /// Whether non-HTTP bytes may pass as raw TCP (some matching allow rule has no
    /// methods, paths or regexes, no matching allow rule has `json_deny` guards and no
    /// `mcp` rule names the host).
    pub raw_tcp_allowed: bool,
    /// Whether the host is `tls_passthrough` (decided by the same policy snapshot, so that
    /// a policy swapped mid-connection cannot split the two answers).
    pub passthrough: bool,
    /// The refusal report mode set aside ([`crate::mode::Mode::apply_tunnel`]); `None`
    /// as decided.
    pub would: Option<Reason>,
}

/// Keep the smaller of two optional indices.
fn lowest(current: Option<usize>, candidate: usize) -> Option<usize> {
    Some(current.map_or(candidate, |c| c.min(candidate)))
}

impl CompiledPolicy {
    /// Compile a policy (a copy is kept). Fails only on globs or regexes the loader should
    /// already have refused, or on regexes above the size limits.
    pub fn compile(policy: &Policy) -> Result<Self, CompileError> {
        let allow = policy
            .network
            .allow
            .iter()
            .map(|rule| CompiledRule::compile(rule, false))
            .collect::<Result<Vec<_>, _>>()?;
        let deny = policy
            .network
            .deny
            .iter()
            .map(|rule| CompiledRule::compile(rule, true))
            .collect::<Result<Vec<_>, _>>()?;
        let mut allow_index = HostIndex::default();
        for (index, rule) in policy.network.allow.iter().enumerate() {
            allow_index.insert_target(rule, index)?;
        }
        let mut deny_index = HostIndex::default();
        for (index, rule) in policy.network.deny.iter().enumerate() {
            deny_index.insert_target(rule, index)?;
        }
        let mut passthrough_index = HostIndex::default();
        for (index, pattern) in policy.network.tls_passthrough.iter().enumerate() {
            passthrough_index.insert_pattern(pattern, index);
        }
        let mut secret_index = HostIndex::default();
        for (index, secret) in policy.secrets.iter().enumerate() {
            for pattern in &secret.hosts {
                secret_index.insert_pattern(pattern, index);
            }
        }
        let mut dlp_index = HostIndex::default();
        for (index, entry) in policy.dlp.allow.iter().enumerate() {
            dlp_index.insert_pattern(&entry.host, index);
        }
        let mut mcp_index = HostIndex::default();
        let mut mcp_paths = Vec::with_capacity(policy.mcp.len());
        for (index, rule) in policy.mcp.iter().enumerate() {
            mcp_index.insert_pattern(&rule.host, index);
            mcp_paths.push(compile_mcp_glob(&rule.id, &rule.path)?);
        }
        Ok(CompiledPolicy {
            policy: Arc::new(policy.clone()),
            allow,
            deny,
            allow_index,
            deny_index,
            passthrough_index,
            secret_index,
            dlp_index,
            mcp_index,
            mcp_paths,
            routes: CompiledRoutes::compile(&policy.routes, &policy.secrets)?,
            has_body_guards: policy
                .network
                .allow
                .iter()
                .any(|rule| !rule.json_deny.is_empty()),
        })
    }

    /// The policy this was compiled from.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Decide an HTTP request (see the module documentation for the rules) from an
    /// unknown program ([`CompiledPolicy::decide_as`]).
    pub fn decide(&self, req: &CanonicalRequest) -> Decision {
        self.decide_as(req, None)
    }

    /// Decide an HTTP request made by `caller` (`None`: unknown; see [`crate::programs`]).
    pub fn decide_as(&self, req: &CanonicalRequest, caller: Caller<'_>) -> Decision {
        let path = path_view(req);
        if let Some(refusal) = self.deny_decision(req, &path, caller) {
            return refusal;
        }
        if path.is_err() && self.has_mcp_rule(&req.host) {
            // An `mcp` rule's path is a path rule too: where the path cannot be read
            // (`/x/..;/mcp`), whether the rule covers it cannot be told (docs/policy.md).
            return Decision::deny(Reason::PathUnsafe, None);
        }
        self.allow_decision(req, &path, caller)
    }

    /// The refusal by a deny rule, if one applies.
    fn deny_decision(
        &self,
        req: &CanonicalRequest,
        path: &Result<PathView<'_>, PathUnsafe>,
        caller: Caller<'_>,
    ) -> Option<Decision> {
        let mut denied: Option<usize> = None;
        let mut undecidable = false;
        self.deny_index.for_each(&req.host, Embedded::Any, |index| {
            let rule = &self.deny[index];
            if !rule.applies_to_port(req.port)
                || !rule.applies_to_method(&req.method)
                || !rule.applies_to_caller(caller, true)
            {
                return;
            }
            match path {
                Ok(view) if rule.matches_path(view) => denied = lowest(denied, index),
                Ok(_) => {}
                Err(_) if rule.has_path_constraints() => undecidable = true,
                Err(_) => denied = lowest(denied, index),
            }
        });
        if let Some(index) = denied {
            return Some(Decision::deny(
                Reason::DeniedByRule,
                Some(self.policy.network.deny[index].id.clone()),
            ));
        }
        undecidable.then(|| Decision::deny(Reason::PathUnsafe, None))
    }

    /// The decision of the allow rules (deny rules have not matched).
    fn allow_decision(
        &self,
        req: &CanonicalRequest,
        path: &Result<PathView<'_>, PathUnsafe>,
        caller: Caller<'_>,
    ) -> Decision {
        let mut allowed: Option<usize> = None;
        let mut host_and_port = false;
        let mut method = false;
        let mut undecidable = false;
        self.allow_index
            .for_each(&req.host, Embedded::Mapped, |index| {
                let rule = &self.allow[index];
                // A rule for other programs is, for this one, as if it were not written.
                if !rule.applies_to_port(req.port) || !rule.applies_to_caller(caller, false) {
                    return;
                }
                host_and_port = true;
                if path.is_err() && rule.has_path_constraints() {
                    // docs/contract.md §3: an unsafe path is refused on every host that has
                    // path rules, even when a rule without paths would allow it.
                    undecidable = true;
                }
                if !rule.applies_to_method(&req.method) {
                    return;
                }
                method = true;
                match path {
                    Ok(view) if rule.matches_path(view) => allowed = lowest(allowed, index),
                    Ok(_) => {}
                    Err(_) if rule.has_path_constraints() => undecidable = true,
                    Err(_) => allowed = lowest(allowed, index),
                }
            });
        if undecidable {
            return Decision::deny(Reason::PathUnsafe, None);
        }
        if let Some(index) = allowed {
            return Decision::allow(self.policy.network.allow[index].id.clone());
        }
        let reason = if !host_and_port {
            Reason::HostNotAllowed
        } else if !method {
            Reason::MethodNotAllowed
        } else {
            Reason::PathNotAllowed
        };
        Decision::deny(reason, None)
    }

    /// The allow rules with body guards (`json_deny`) that match `req` (host, port,
    /// method and path), lowest index first. Every one of them applies to an allowed
    /// request, not only the rule the decision names, so a broader allow rule cannot
    /// switch a guard off. Empty when the policy has no guards (no lookup is made).
    pub fn body_guards(&self, req: &CanonicalRequest) -> Vec<&Rule> {
        if !self.has_body_guards {
            return Vec::new();
        }
        let path = req
            .path
            .as_ref()
            .ok()
            .map(|path| PathView::new(path, req.query.as_deref()));
        let mut indices = Vec::new();
        self.allow_index
            .for_each(&req.host, Embedded::Mapped, |index| {
                let rule = &self.allow[index];
                let matches = rule.applies_to_port(req.port)
                    && rule.applies_to_method(&req.method)
                    && path.as_ref().is_none_or(|view| rule.matches_path(view));
                if matches && !self.policy.network.allow[index].json_deny.is_empty() {
                    indices.push(index);
                }
            });
        indices.sort_unstable();
        indices.dedup();
        indices
            .into_iter()
            .filter_map(|index| self.policy.network.allow.get(index))
            .collect()
    }

    /// Whether an `mcp` rule names `host`: its requests' bodies must be inspected, so a
    /// tunnel to it never passes as raw TCP, however it came to be allowed.
    pub fn has_mcp_rule(&self, host: &Host) -> bool {
        let mut found = false;
        self.mcp_index
            .for_each(host, Embedded::Mapped, |_| found = true);
        found
    }

    /// Decide a tunnel (CONNECT, SNI, raw TCP) to `host:port` before any request is seen,
    /// from an unknown program ([`CompiledPolicy::decide_tunnel_as`]).
    pub fn decide_tunnel(&self, host: &Host, port: u16) -> TunnelDecision {
        self.decide_tunnel_as(host, port, None)
    }

    /// Decide a tunnel to `host:port` opened by `caller` (`None`: unknown).
    pub fn decide_tunnel_as(&self, host: &Host, port: u16, caller: Caller<'_>) -> TunnelDecision {
        let mut denied: Option<usize> = None;
        self.deny_index.for_each(host, Embedded::Any, |index| {
            let rule = &self.deny[index];
            if rule.is_destination_only()
                && rule.applies_to_port(port)
                && rule.applies_to_caller(caller, true)
            {
                denied = lowest(denied, index);
            }
        });
        if let Some(index) = denied {
            return TunnelDecision {
                decision: Decision::deny(
                    Reason::DeniedByRule,
                    Some(self.policy.network.deny[index].id.clone()),
                ),
                raw_tcp_allowed: false,
                passthrough: self.is_passthrough(host),
                would: None,
            };
        }
        let mut allowed: Option<usize> = None;
        let mut raw_tcp_allowed = false;
        let mut inspected = false;
        self.allow_index.for_each(host, Embedded::Mapped, |index| {
            let rule = &self.allow[index];
            if rule.applies_to_port(port) && rule.applies_to_caller(caller, false) {
                allowed = lowest(allowed, index);
                raw_tcp_allowed |= rule.is_destination_only();
                inspected |= !self.policy.network.allow[index].json_deny.is_empty();
            }
        });
        // Bodies a `json_deny` guard or an `mcp` rule must see never pass as raw TCP: a
        // client that waited out the first-bytes timeout would otherwise get a raw relay
        // and speak TLS to the upstream itself, past every guard.
        let raw_tcp_allowed = raw_tcp_allowed && !inspected && !self.has_mcp_rule(host);
        match allowed {
            Some(index) => TunnelDecision {
                decision: Decision::allow(self.policy.network.allow[index].id.clone()),
                raw_tcp_allowed,
                passthrough: self.is_passthrough(host),
                would: None,
            },
            None => TunnelDecision {
                decision: Decision::deny(Reason::HostNotAllowed, None),
                raw_tcp_allowed: false,
                passthrough: self.is_passthrough(host),
                would: None,
            },
        }
    }

    /// Check the address `host` resolved to (or the literal itself) before dialling it.
    ///
    /// Refused: an IP-literal `host` dialled at another address (`host_mismatch`); an
    /// address covered by a deny `cidr` or deny IP-literal host without methods or paths
    /// (`denied_by_rule`, whatever the rule's ports); a non-global address that no allow
    /// `cidr` covers and no allow rule names as its IP-literal host (`private_address`).
    pub fn check_address(&self, host: &Host, addr: IpAddr) -> Result<(), Decision> {
        if let Host::Ip(literal) = host
            && canonical_ip(*literal) != canonical_ip(addr)
        {
            return Err(Decision::deny(Reason::HostMismatch, None));
        }
        let mut denied: Option<usize> = None;
        self.deny_index
            .for_each_address(addr, Embedded::Any, &mut |index| {
                // A deny rule per program was applied, with the program, when the request
                // or tunnel was decided.
                if self.deny[index].is_destination_only() && self.deny[index].process.is_none() {
                    denied = lowest(denied, index);
                }
            });
        if let Some(index) = denied {
            return Err(Decision::deny(
                Reason::DeniedByRule,
                Some(self.policy.network.deny[index].id.clone()),
            ));
        }
        if net::is_global(addr) {
            return Ok(());
        }
        let mut named = false;
        self.allow_index
            .for_each_address(addr, Embedded::Mapped, &mut |_| named = true);
        if named {
            Ok(())
        } else {
            Err(Decision::deny(Reason::PrivateAddress, None))
        }
    }

    /// Whether `host`'s TLS is passed through un-intercepted (`network.tls_passthrough`).
    /// Whether the host is allowed at all is [`CompiledPolicy::decide_tunnel`]'s answer.
    pub fn is_passthrough(&self, host: &Host) -> bool {
        let mut found = false;
        self.passthrough_index
            .for_each(host, Embedded::Mapped, |_| found = true);
        found
    }

    /// Up to `limit` host names that allow rules name exactly, in rule order and each
    /// once, leaving out `tls_passthrough` hosts: the names whose interception leaves are
    /// worth minting before a first handshake asks for one.
    pub fn named_hosts(&self, limit: usize) -> Vec<Host> {
        let mut hosts: Vec<Host> = Vec::new();
        for rule in &self.policy.network.allow {
            if hosts.len() >= limit {
                break;
            }
            // Already canonical: the loader made it from `canonical_host`.
            let Target::Host(HostPattern::Exact(name)) = &rule.target else {
                continue;
            };
            let host = Host::Name(name.clone());
            if !self.is_passthrough(&host) && !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        hosts
    }

    /// The secrets whose `hosts` match `host`, in policy order, each once.
    pub fn secrets_for_host(&self, host: &Host) -> Vec<&Secret> {
        let mut indices = Vec::new();
        self.secret_index
            .for_each(host, Embedded::Mapped, |index| indices.push(index));
        indices.sort_unstable();
        indices.dedup();
        indices
            .into_iter()
            .filter_map(|index| self.policy.secrets.get(index))
            .collect()
    }

    /// The credential kinds `dlp.allow` lets go to `host`: `None` when every kind may,
    /// otherwise the kinds named (possibly none).
    pub fn dlp_kinds_for_host(&self, host: &Host) -> Option<Vec<&str>> {
        let mut kinds: Vec<&str> = Vec::new();
        let mut every = false;
        self.dlp_index.for_each(host, Embedded::Mapped, |index| {
            if let Some(entry) = self.policy.dlp.allow.get(index) {
                every |= entry.kinds.is_empty();
                kinds.extend(entry.kinds.iter().map(String::as_str));
            }
        });
        (!every).then_some(kinds)
    }

    /// Decides a request that arrived over TLS (`tls`) or plain HTTP: a request to
    /// [`crate::route::ROUTE_HOST`] is routed ([`CompiledPolicy::route`]; over TLS it is
    /// `host_not_allowed`), every other one decided ([`CompiledPolicy::decide`]).
    pub fn decide_request(&self, req: &CanonicalRequest, tls: bool) -> Outcome {
        self.decide_request_as(req, tls, None)
    }

    /// [`CompiledPolicy::decide_request`] for a request made by `caller` (`None`: unknown).
    pub fn decide_request_as(
        &self,
        req: &CanonicalRequest,
        tls: bool,
        caller: Caller<'_>,
    ) -> Outcome {
        if !is_route_host(&req.host) {
            return Outcome::Decided(self.decide_as(req, caller));
        }
        if tls {
            return Outcome::Decided(Decision::deny(Reason::HostNotAllowed, None));
        }
        match self.route_as(req, caller) {
            Ok(routed) => Outcome::Routed(routed),
            Err(refusal) => Outcome::Decided(refusal),
        }
    }

    /// Routes a request to [`crate::route::ROUTE_HOST`] (see the module documentation): the upstream
    /// request, or the refusal.
    pub fn route(&self, req: &CanonicalRequest) -> Result<Routed, Decision> {
        self.route_as(req, None)
    }

    /// [`CompiledPolicy::route`] for a request made by `caller` (deny rules per program).
    fn route_as(&self, req: &CanonicalRequest, caller: Caller<'_>) -> Result<Routed, Decision> {
        let routed = self.routes.route(req)?;
        match self.deny_decision(&routed.request, &path_view(&routed.request), caller) {
            Some(refusal) => Err(refusal),
            None => Ok(routed),
        }
    }

    /// The first (lowest-index) MCP rule whose host matches `host` and whose path glob
    /// covers `path` (a canonical path without query) the way servers route it: in any
    /// case, with or without a trailing slash or `;` parameters ([`crate::mcp_path`]).
    pub fn mcp_rule(&self, host: &Host, path: &str) -> Option<&McpRule> {
        let mut indices = Vec::new();
        self.mcp_index
            .for_each(host, Embedded::Mapped, |index| indices.push(index));
        if indices.is_empty() {
            return None;
        }
        let forms = mcp_path::candidates(path);
        let candidates: Vec<Candidate<'_>> = forms
            .iter()
            .map(|form| Candidate::from_bytes(form.as_bytes()))
            .collect();
        indices
            .into_iter()
            .filter(|&index| {
                candidates
                    .iter()
                    .any(|candidate| self.mcp_paths[index].is_match_candidate(candidate))
            })
            .min()
            .and_then(|index| self.policy.mcp.get(index))
    }
}
