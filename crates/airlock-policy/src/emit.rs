//! The native policy writer: a [`Policy`] as the `version: 1` YAML of docs/policy.md, which
//! [`crate::load::load_str`] reads back into the same policy (rule ids are given again by
//! position, so they come back as `network.allow[i]`, `network.deny[i]`, `mcp[i]`).
//!
//! This is what `airlock policy import` prints. The YAML is produced by serde-saphyr's
//! serializer from mirror structs below, never formatted by hand, so quoting and escaping
//! are the serializer's. A secret with a literal `value:` source is written out in full:
//! the output is the user's own policy file (the value never appears in `Debug` or in an
//! error). Keys left at their defaults are omitted; an empty policy is `version: 1`.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::mcp_args::ArgGuard;
use crate::model::{HostPattern, McpRule, Policy, Route, Rule, Secret, SecretSource, Target};

/// The native YAML of `policy`, starting with `version: 1`.
pub fn to_yaml(policy: &Policy) -> String {
    let document = Document::from(policy);
    // Serializing plain strings, numbers, lists and maps cannot fail; should the serializer
    // ever refuse, the output is still a valid, empty (allow-nothing) policy.
    serde_saphyr::to_string(&document).unwrap_or_else(|_| "version: 1\n".to_owned())
}

/// The whole document.
#[derive(Serialize)]
struct Document<'a> {
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<NetworkOut>,
    #[serde(skip_serializing_if = "SecretsOut::is_empty")]
    secrets: SecretsOut<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mcp: Vec<McpOut<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<RouteOut<'a>>,
}

impl<'a> From<&'a Policy> for Document<'a> {
    fn from(policy: &'a Policy) -> Self {
        let network = &policy.network;
        let has_network = !network.allow.is_empty()
            || !network.deny.is_empty()
            || !network.tls_passthrough.is_empty();
        Document {
            version: 1,
            network: has_network.then(|| NetworkOut {
                allow: network.allow.iter().map(RuleOut::from).collect(),
                deny: network.deny.iter().map(RuleOut::from).collect(),
                tls_passthrough: network
                    .tls_passthrough
                    .iter()
                    .map(HostPattern::to_string)
                    .collect(),
            }),
            secrets: SecretsOut(policy.secrets.iter().map(SecretOut::from).collect()),
            mcp: policy.mcp.iter().map(McpOut::from).collect(),
            routes: policy.routes.iter().map(RouteOut::from).collect(),
        }
    }
}

/// `network`.
#[derive(Serialize)]
struct NetworkOut {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allow: Vec<RuleOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    deny: Vec<RuleOut>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tls_passthrough: Vec<String>,
}

/// One allow or deny entry.
#[derive(Serialize)]
struct RuleOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_regex: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cidr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    methods: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    paths: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    path_regex: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<Vec<u16>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    json_deny: Vec<JsonDenyOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    process: Option<Vec<String>>,
}

/// One body guard of an allow entry.
#[derive(Serialize)]
struct JsonDenyOut {
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    values: Option<Vec<String>>,
}

impl From<&Rule> for RuleOut {
    fn from(rule: &Rule) -> Self {
        let (host, host_regex, cidr) = match &rule.target {
            Target::Host(host) => (Some(host.to_string()), None, None),
            Target::HostRegex(regex) => (None, Some(regex.clone()), None),
            Target::Cidr(net) => (None, None, Some(net.to_string())),
        };
        RuleOut {
            host,
            host_regex,
            cidr,
            methods: rule.methods.clone(),
            paths: rule.paths.clone(),
            path_regex: rule.path_regex.clone(),
            ports: rule.ports.clone(),
            json_deny: rule
                .json_deny
                .iter()
                .map(|guard| JsonDenyOut {
                    path: guard.path.text.clone(),
                    values: guard.values.clone(),
                })
                .collect(),
            process: rule.process.clone(),
        }
    }
}

/// `secrets`: a mapping from name to secret, in the policy's order.
struct SecretsOut<'a>(Vec<(&'a str, SecretOut<'a>)>);

impl SecretsOut<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for SecretsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, secret) in &self.0 {
            map.serialize_entry(name, secret)?;
        }
        map.end()
    }
}

/// One secret.
#[derive(Serialize)]
struct SecretOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a [String]>,
    hosts: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inject: Option<InjectOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    surrogate: Option<&'a str>,
    #[serde(skip_serializing_if = "is_false")]
    body: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    foreign: Option<&'static str>,
}

impl<'a> SecretOut<'a> {
    /// Name and mirror of one secret.
    fn from(secret: &'a Secret) -> (&'a str, SecretOut<'a>) {
        let mut out = SecretOut {
            env: None,
            file: None,
            value: None,
            command: None,
            hosts: secret.hosts.iter().map(HostPattern::to_string).collect(),
            headers: secret.headers.as_deref(),
            inject: secret.inject.as_ref().map(|inject| InjectOut {
                header: &inject.header,
                format: &inject.format,
            }),
            surrogate: secret.surrogate.as_deref(),
            body: secret.body,
            foreign: secret.foreign_allowed.then_some("allow"),
        };
        match &secret.source {
            SecretSource::Env(name) => out.env = Some(name),
            // A path that is not UTF-8 cannot be written in YAML; it is written lossily.
            SecretSource::File(path) => out.file = Some(path.to_string_lossy().into_owned()),
            SecretSource::Value(value) => out.value = Some(value),
            SecretSource::Command(argv) => out.command = Some(argv),
        }
        (secret.name.as_str(), out)
    }
}

/// serde's `skip_serializing_if` for `body: false`.
fn is_false(value: &bool) -> bool {
    !*value
}

/// `inject`.
#[derive(Serialize)]
struct InjectOut<'a> {
    header: &'a str,
    format: &'a str,
}

/// One `mcp` entry.
#[derive(Serialize)]
struct McpOut<'a> {
    host: String,
    path: &'a str,
    tools: ToolsOut<'a>,
}

/// `tools`.
#[derive(Serialize)]
struct ToolsOut<'a> {
    allow: &'a [String],
    deny: &'a [String],
    #[serde(skip_serializing_if = "Ordered::is_empty")]
    args: Ordered<&'a str, Ordered<&'a str, Vec<PatternOut<'a>>>>,
}

/// A mapping written in the order of its entries.
struct Ordered<K, V>(Vec<(K, V)>);

impl<K, V> Ordered<K, V> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Serialize, V: Serialize> Serialize for Ordered<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// One allowed value of an argument guard: a glob, or `{regex: RE}`.
#[derive(Serialize)]
#[serde(untagged)]
enum PatternOut<'a> {
    Glob(&'a str),
    Regex { regex: &'a str },
}

/// `tools.args`, grouped by tool in the order the guards came.
fn args_out(guards: &[ArgGuard]) -> Ordered<&str, Ordered<&str, Vec<PatternOut<'_>>>> {
    let mut tools: Vec<(&str, Ordered<&str, Vec<PatternOut<'_>>>)> = Vec::new();
    for guard in guards {
        let patterns = guard
            .patterns
            .iter()
            .map(|p| {
                if p.is_regex() {
                    PatternOut::Regex { regex: &p.text }
                } else {
                    PatternOut::Glob(&p.text)
                }
            })
            .collect();
        let entry = (guard.argument.text.as_str(), patterns);
        match tools.iter_mut().find(|(tool, _)| *tool == guard.tool) {
            Some((_, arguments)) => arguments.0.push(entry),
            None => tools.push((&guard.tool, Ordered(vec![entry]))),
        }
    }
    Ordered(tools)
}

impl<'a> From<&'a McpRule> for McpOut<'a> {
    fn from(rule: &'a McpRule) -> Self {
        McpOut {
            host: rule.host.to_string(),
            path: &rule.path,
            tools: ToolsOut {
                allow: &rule.allow,
                deny: &rule.deny,
                args: args_out(&rule.args),
            },
        }
    }
}

/// One `routes` entry.
#[derive(Serialize)]
struct RouteOut<'a> {
    prefix: &'a str,
    upstream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<&'a str>,
}

impl<'a> From<&'a Route> for RouteOut<'a> {
    fn from(route: &'a Route) -> Self {
        RouteOut {
            prefix: &route.prefix,
            upstream: &route.upstream,
            secret: route.secret.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_policy_is_version_only() {
        assert_eq!(to_yaml(&Policy::default()).trim_end(), "version: 1");
    }

    #[test]
    fn version_comes_first() {
        let mut policy = Policy::default();
        policy.routes.push(Route {
            prefix: "/llm/".into(),
            upstream: "https://example.com/".into(),
            secret: None,
        });
        assert!(to_yaml(&policy).starts_with("version: 1\n"));
    }
}
