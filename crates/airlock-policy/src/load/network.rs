//! Reading `network:` (allow and deny rules, `tls_passthrough`) and `providers:` (the
//! provider bundles and their account pin).

use std::fmt;

use super::node::{Kind, Node};
use super::{Checker, shown};
use crate::json_deny::{self, JsonDeny, check_value_glob};
use crate::model::{HostPattern, Network, Rule, Secret, Target};
use crate::presets;
use crate::providers::{PROVIDER_NAMES, Provider};
use crate::rule;

const PROVIDER_KEYS: &[&str] = &["web_tools"];
const NETWORK_KEYS: &[&str] = &["allow", "deny", "tls_passthrough"];
pub(super) const RULE_KEYS: &[&str] = &[
    "host",
    "host_regex",
    "cidr",
    "methods",
    "paths",
    "path_regex",
    "ports",
    "json_deny",
    "process",
];
const JSON_DENY_KEYS: &[&str] = &["path", "values"];

impl Checker<'_> {
    /// `providers:`: each enabled provider's bundle as allow rules (ids
    /// `providers.NAME[i]`). The provider's API host must be covered by a secret of this
    /// file that refuses foreign credentials in every default credential header (no
    /// `foreign: allow`, no `headers`): the account pin. Otherwise a located error.
    pub(super) fn providers(&mut self, node: &Node, secrets: &[Secret]) -> Vec<Rule> {
        if matches!(node.kind, Kind::Null) {
            return Vec::new();
        }
        let Some(fields) = self.fields(node, "providers", &PROVIDER_NAMES) else {
            return Vec::new();
        };
        let mut rules = Vec::new();
        for (name, key_pos, value) in fields.entries {
            let Some(provider) = Provider::from_name(name) else {
                continue;
            };
            let what = format!("providers.{name}");
            let web_tools = match &value.kind {
                Kind::Bool(false) => continue,
                Kind::Bool(true) => false,
                Kind::Map(_) => {
                    let Some(settings) = self.fields(value, &what, PROVIDER_KEYS) else {
                        continue;
                    };
                    match settings.get("web_tools") {
                        None => false,
                        Some(flag) => match self.boolean(flag, &format!("{what}.web_tools")) {
                            Some(flag) => flag,
                            None => continue,
                        },
                    }
                }
                _ => {
                    self.wrong_type(value, &what, "true, false or `{web_tools: BOOL}`");
                    continue;
                }
            };
            let api_host = HostPattern::Exact(provider.api_host().to_owned());
            // Every header the provider takes a key in must be checked: all of them (no
            // `headers`), or at least those of the provider's preset.
            let preset_headers = presets::preset(provider.name()).map_or(&[][..], |p| p.headers);
            let pinned = secrets.iter().any(|secret| {
                !secret.foreign_allowed
                    && secret.headers.as_ref().is_none_or(|headers| {
                        !preset_headers.is_empty()
                            && preset_headers
                                .iter()
                                .all(|needed| headers.iter().any(|h| h == needed))
                    })
                    && secret.hosts.iter().any(|host| host_covers(host, &api_host))
            });
            if !pinned {
                let message = format!(
                    "{what}: no secret in this file covers {} with foreign credentials refused, so the agent could use an account of its own there: add a secret with `preset: {}`, or with `hosts: [{}]` (without `foreign: allow` or `headers`, so every credential header is checked)",
                    provider.api_host(),
                    provider.name(),
                    provider.api_host()
                );
                self.error(key_pos, message);
                continue;
            }
            rules.extend(provider.rules(web_tools));
        }
        rules
    }

    pub(super) fn network(&mut self, node: &Node) -> Network {
        let mut network = Network::default();
        if matches!(node.kind, Kind::Null) {
            return network;
        }
        let Some(fields) = self.fields(node, "network", NETWORK_KEYS) else {
            return network;
        };
        for (key, rules) in [("allow", &mut network.allow), ("deny", &mut network.deny)] {
            let Some(list_node) = fields.get(key) else {
                continue;
            };
            let what = format!("network.{key}");
            let Some(items) = self.list(list_node, &what, true) else {
                continue;
            };
            for (index, item) in items.iter().enumerate() {
                if let Some(rule) = self.rule(item, format!("network.{key}[{index}]")) {
                    rules.push(rule);
                }
            }
        }
        if let Some(list_node) = fields.get("tls_passthrough")
            && let Some(items) = self.list(list_node, "network.tls_passthrough", true)
        {
            for (index, item) in items.iter().enumerate() {
                let what = format!("network.tls_passthrough[{index}]");
                let Some(host) = self.host(item, &what) else {
                    continue;
                };
                if !passthrough_allowed(&host, &network.allow) {
                    let message = format!(
                        "{what}: {host} is not allowed by any network.allow rule: add `- host: \"{host}\"` under network.allow (passthrough only changes how an allowed host is handled)"
                    );
                    self.error(item.pos, message);
                } else if passthrough_guarded(&host, &network.allow) {
                    let message = format!(
                        "{what}: {host} has a network.allow rule with `json_deny`; passed-through TLS is never decrypted, so the body guard could not be applied: drop one of the two"
                    );
                    self.error(item.pos, message);
                } else if !network.tls_passthrough.contains(&host) {
                    network.tls_passthrough.push(host);
                }
            }
        }
        network
    }

    /// One `network.allow` / `network.deny` entry.
    pub(super) fn rule(&mut self, node: &Node, id: String) -> Option<Rule> {
        let fields = self.fields(node, &id, RULE_KEYS)?;
        let target = match (
            fields.get("host"),
            fields.get("host_regex"),
            fields.get("cidr"),
        ) {
            (Some(host), None, None) => self
                .rule_host(host, &format!("{id}.host"))
                .map(Target::Host),
            (None, Some(regex), None) => self
                .host_regex(regex, &format!("{id}.host_regex"))
                .map(Target::HostRegex),
            (None, None, Some(cidr)) => self.cidr(cidr, &format!("{id}.cidr")).map(Target::Cidr),
            (None, None, None) => {
                self.error(
                    fields.pos,
                    format!(
                        "{id}: a rule needs `host: NAME` or `cidr: ADDRESS/PREFIX` (or `host_regex: REGEX`) to say what it is about"
                    ),
                );
                None
            }
            (_, regex, _) => {
                let (key, message) = if regex.is_some() {
                    ("host_regex", "either `host_regex` or `host`/`cidr`")
                } else {
                    ("cidr", "either `host` or `cidr`")
                };
                let pos = fields.key_pos(key).unwrap_or(fields.pos);
                self.error(
                    pos,
                    format!("{id}: give {message}, not both: write two rules"),
                );
                None
            }
        };
        let methods = fields
            .get("methods")
            .and_then(|node| self.methods(node, &format!("{id}.methods")));
        let paths = fields
            .get("paths")
            .map(|node| self.patterns(node, &format!("{id}.paths"), rule::check_path_glob))
            .unwrap_or_default();
        let path_regex = fields
            .get("path_regex")
            .map(|node| self.patterns(node, &format!("{id}.path_regex"), rule::check_path_regex))
            .unwrap_or_default();
        let ports = fields
            .get("ports")
            .and_then(|node| self.ports(node, &format!("{id}.ports")));
        let json_deny = fields
            .get("json_deny")
            .map(|node| self.json_deny(node, &format!("{id}.json_deny")))
            .unwrap_or_default();
        let process = fields.get("process").map(|node| {
            self.patterns(
                node,
                &format!("{id}.process"),
                crate::programs::check_program,
            )
        });
        Some(Rule {
            id,
            target: target?,
            methods,
            paths,
            path_regex,
            ports,
            json_deny,
            process,
        })
    }

    /// A rule's `json_deny` list (allow rules only): each entry a `path` and optional
    /// non-empty `values` of string globs.
    pub(super) fn json_deny(&mut self, node: &Node, what: &str) -> Vec<JsonDeny> {
        if !what.starts_with("network.allow") {
            let message = format!(
                "{what}: body guards belong on `network.allow` entries (a deny rule refuses the request whatever its body)"
            );
            self.error(node.pos, message);
            return Vec::new();
        }
        let Some(items) = self.non_empty_list(
            node,
            what,
            "remove `json_deny`, or list guards as in `- path: /tools/*/type`",
        ) else {
            return Vec::new();
        };
        let mut guards = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_what = format!("{what}[{index}]");
            let Some(fields) = self.fields(item, &item_what, JSON_DENY_KEYS) else {
                continue;
            };
            let path = match fields.get("path") {
                None => {
                    let message = format!(
                        "{item_what}: `path` is missing: give where to look, as in `path: /tools/*/type`"
                    );
                    self.error(fields.pos, message);
                    None
                }
                Some(path_node) => {
                    let path_what = format!("{item_what}.path");
                    self.string(path_node, &path_what)
                        .and_then(|text| match json_deny::parse_path(text) {
                            Ok(path) => Some(path),
                            Err(problem) => {
                                let message = format!("{path_what} `{}`: {problem}", shown(text));
                                self.error(path_node.pos, message);
                                None
                            }
                        })
                }
            };
            let values = fields.get("values").map(|values_node| {
                self.patterns(
                    values_node,
                    &format!("{item_what}.values"),
                    check_value_glob,
                )
            });
            if let Some(path) = path
                && values.as_ref().is_none_or(|values| !values.is_empty())
            {
                guards.push(JsonDeny { path, values });
            }
        }
        guards
    }

    /// The host of a network rule: a host pattern, or `*` alone for every host name
    /// (what the importers produce for allow-all modes; never an IP literal, and never an
    /// exemption from the private-address guard).
    pub(super) fn rule_host(&mut self, node: &Node, what: &str) -> Option<HostPattern> {
        if let Kind::Str(text) = &node.kind
            && text == "*"
        {
            return Some(HostPattern::Any);
        }
        self.host(node, what)
    }

    /// A rule's `host_regex` (string, checked by [`rule::check_host_regex`]).
    pub(super) fn host_regex(&mut self, node: &Node, what: &str) -> Option<String> {
        let text = self.non_empty_string(node, what)?;
        match rule::check_host_regex(text) {
            Ok(()) => Some(text.to_owned()),
            Err(problem) => {
                self.error(node.pos, format!("{what} `{}`: {problem}", shown(text)));
                None
            }
        }
    }

    /// A host pattern (string).
    pub(super) fn host(&mut self, node: &Node, what: &str) -> Option<HostPattern> {
        let text = self.string(node, what)?;
        match rule::parse_host_pattern(text) {
            Ok(host) => Some(host),
            Err(problem) => {
                self.error(node.pos, format!("{what} `{}`: {problem}", shown(text)));
                None
            }
        }
    }

    pub(super) fn cidr(&mut self, node: &Node, what: &str) -> Option<ipnet::IpNet> {
        let text = self.string(node, what)?;
        match text.parse::<ipnet::IpNet>() {
            Ok(net) if net.trunc() == net => Some(net),
            Ok(net) => {
                let message = format!(
                    "{what} `{text}` has host bits set: write the network address `{}`",
                    net.trunc()
                );
                self.error(node.pos, message);
                None
            }
            Err(_) => {
                let message = match text.parse::<std::net::IpAddr>() {
                    Ok(addr) => {
                        let bits = if addr.is_ipv4() { 32 } else { 128 };
                        format!(
                            "{what} `{text}` has no prefix length: write `{text}/{bits}` for one address, or use `host: {text}`"
                        )
                    }
                    Err(_) => format!(
                        "{what} `{}` is not an address block: write an address and a prefix length, as in `10.20.0.0/16` or `fd00::/8`",
                        shown(text)
                    ),
                };
                self.error(node.pos, message);
                None
            }
        }
    }

    pub(super) fn methods(&mut self, node: &Node, what: &str) -> Option<Vec<String>> {
        let items = self.non_empty_list(
            node,
            what,
            "remove `methods` to allow every method, or list the methods to allow",
        )?;
        let mut methods: Vec<String> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_what = format!("{what}[{index}]");
            let Some(text) = self.string(item, &item_what) else {
                continue;
            };
            match rule::parse_method(text) {
                Ok(method) if methods.contains(&method) => {}
                Ok(method) => methods.push(method),
                Err(problem) => {
                    self.error(
                        item.pos,
                        format!("{item_what} `{}`: {problem}", shown(text)),
                    );
                }
            }
        }
        Some(methods)
    }

    /// A non-empty list of strings each checked by `check` (path globs, regexes).
    pub(super) fn patterns<E: fmt::Display>(
        &mut self,
        node: &Node,
        what: &str,
        check: fn(&str) -> Result<(), E>,
    ) -> Vec<String> {
        let Some(items) = self.non_empty_list(
            node,
            what,
            "remove the key to place no restriction, or list at least one pattern",
        ) else {
            return Vec::new();
        };
        let mut patterns = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_what = format!("{what}[{index}]");
            let Some(text) = self.string(item, &item_what) else {
                continue;
            };
            match check(text) {
                Ok(()) => patterns.push(text.to_owned()),
                Err(problem) => {
                    self.error(
                        item.pos,
                        format!("{item_what} `{}`: {problem}", shown(text)),
                    );
                }
            }
        }
        patterns
    }

    pub(super) fn ports(&mut self, node: &Node, what: &str) -> Option<Vec<u16>> {
        let items = self.non_empty_list(
            node,
            what,
            "remove `ports` for the default 80 and 443, or list the ports, as in `[443]`",
        )?;
        let mut ports = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_what = format!("{what}[{index}]");
            match item.kind {
                Kind::Int(number) => match u16::try_from(number) {
                    Ok(port) if port != 0 => {
                        if !ports.contains(&port) {
                            ports.push(port);
                        }
                    }
                    _ => self.error(
                        item.pos,
                        format!(
                            "{item_what}: port {number} is out of range: a port is a number from 1 to 65535"
                        ),
                    ),
                },
                _ => self.wrong_type(item, &item_what, "a port number from 1 to 65535"),
            }
        }
        Some(ports)
    }
}

/// Whether some allow rule allows every host `host` can stand for (for `tls_passthrough`).
pub(super) fn passthrough_allowed(host: &HostPattern, allow: &[Rule]) -> bool {
    allow.iter().any(|rule| match (&rule.target, host) {
        (Target::Host(allowed), _) => host_covers(allowed, host),
        (Target::Cidr(net), HostPattern::Ip(addr)) => net.contains(addr),
        (Target::Cidr(_) | Target::HostRegex(_), _) => false,
    })
}

/// Whether a passthrough `host` overlaps the host of an allow rule with body guards.
pub(super) fn passthrough_guarded(host: &HostPattern, allow: &[Rule]) -> bool {
    allow.iter().any(|rule| match &rule.target {
        Target::Host(allowed) if !rule.json_deny.is_empty() => {
            host_covers(allowed, host) || host_covers(host, allowed) || allowed == host
        }
        _ => false,
    })
}

/// Whether pattern `outer` matches every name pattern `inner` matches.
pub(super) fn host_covers(outer: &HostPattern, inner: &HostPattern) -> bool {
    match (outer, inner) {
        (HostPattern::Any, HostPattern::Exact(_) | HostPattern::Wildcard(_)) => true,
        (HostPattern::Wildcard(suffix), HostPattern::Exact(name)) => is_subdomain(name, suffix),
        (HostPattern::Wildcard(suffix), HostPattern::Wildcard(name)) => {
            name == suffix || is_subdomain(name, suffix)
        }
        _ => outer == inner,
    }
}

/// Whether `name` is `suffix` with one or more labels in front.
pub(super) fn is_subdomain(name: &str, suffix: &str) -> bool {
    name.strip_suffix(suffix)
        .is_some_and(|front| front.len() > 1 && front.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_covers_wildcards_and_exact_names() {
        let exact = |s: &str| HostPattern::Exact(s.to_owned());
        let wild = |s: &str| HostPattern::Wildcard(s.to_owned());
        assert!(host_covers(&wild("apple.com"), &exact("a.apple.com")));
        assert!(!host_covers(&wild("apple.com"), &exact("apple.com")));
        assert!(!host_covers(&wild("apple.com"), &exact("pineapple.com")));
        assert!(host_covers(&wild("apple.com"), &wild("apple.com")));
        assert!(host_covers(&wild("apple.com"), &wild("cdn.apple.com")));
        assert!(!host_covers(&exact("apple.com"), &wild("apple.com")));
        assert!(host_covers(&exact("apple.com"), &exact("apple.com")));
    }
}
