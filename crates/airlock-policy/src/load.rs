//! The native policy loader: a `version: 1` document (YAML, or JSON of the same structure)
//! becomes a validated [`Policy`], or every error in it, each located at `file:line:col`.
//!
//! The document is first read by serde-saphyr into a small tree of located nodes ([`Node`]);
//! a syntax error there is the only error reported. Everything else is checked by walking
//! that tree, so one bad entry never hides the next: the caller gets all of them at once and
//! nothing is ever half-loaded. Rule ids (`network.allow[0]`, `network.deny[1]`, `mcp[0]`)
//! are counted in file order and are not prefixed here (see [`Policy::combine`]).

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::canonical::{self, Host};
use crate::json_deny::{self, JsonDeny, check_value_glob};
use crate::mcp_args::{self, ArgGuard, ArgPattern};
use crate::model::{
    HostPattern, Inject, McpRule, Network, Policy, Route, Rule, Secret, SecretSource, StdioMcpRule,
    Target,
};
use crate::presets;
use crate::providers::{PROVIDER_NAMES, Provider};
use crate::rule;

/// One error with the place in a document it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The name of the document (as given to [`load_str`]).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column (in characters).
    pub column: u32,
    /// What is wrong and how to fix it; a single line.
    pub message: String,
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

/// A document that could not be loaded, with every error found in it (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The errors, in document order.
    pub errors: Vec<Located>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.errors.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

/// Load a native policy document. `file` is the name used in error messages; `text` is
/// YAML (`version: 1`) or JSON of the same structure. Returns the validated policy, or
/// every error found, each located.
pub fn load_str(file: &str, text: &str) -> Result<Policy, LoadError> {
    let options = serde_saphyr::options! {
        with_snippet: false,
        strict_booleans: true,
    };
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, options) {
        Ok(root) => root,
        Err(error) => {
            return Err(LoadError {
                errors: vec![syntax_error(file, &error)],
            });
        }
    };
    let mut checker = Checker {
        file,
        errors: Vec::new(),
    };
    let policy = checker.policy(root.as_ref());
    checker
        .errors
        .sort_by_key(|error| (error.line, error.column));
    if checker.errors.is_empty() {
        Ok(policy)
    } else {
        Err(LoadError {
            errors: checker.errors,
        })
    }
}

/// Turn a serde-saphyr error into one located error with a message a user can act on.
fn syntax_error(file: &str, error: &serde_saphyr::Error) -> Located {
    let (line, column) = error.location().map_or((1, 1), |location| {
        (to_u32(location.line()), to_u32(location.column()))
    });
    let mut original = error;
    while let serde_saphyr::Error::AliasError { error: inner, .. }
    | serde_saphyr::Error::WithSnippet { error: inner, .. } = original
    {
        original = inner;
    }
    let message = match original {
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => match key {
            Some(key) => format!(
                "the key `{}` appears twice in the same mapping: keep only one",
                shown(key)
            ),
            None => "a key appears twice in the same mapping: keep only one".to_owned(),
        },
        serde_saphyr::Error::MultipleDocuments { .. } => {
            "a policy is one YAML document: remove the second `---` and everything after it, or split it into another file".to_owned()
        }
        serde_saphyr::Error::Budget { breach, .. } => format!(
            "the document is too large, too deeply nested or expands too many aliases for a policy ({}): write it out plainly",
            shown(&format!("{breach:?}"))
        ),
        other => {
            let formatter = serde_saphyr::DefaultMessageFormatter;
            let text = serde_saphyr::MessageFormatter::format_message(&formatter, other);
            format!("syntax error: {}: fix the YAML (or JSON) here", shown(&text))
        }
    };
    Located {
        file: file.to_owned(),
        line,
        column,
        message,
    }
}

/// A 1-based position that saphyr reports as `u64` (0 when unknown: shown as 1).
fn to_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX).max(1)
}

/// User text inside a one-line message: control characters escaped, at most 120 characters.
fn shown(text: &str) -> String {
    const MAX_CHARS: usize = 120;
    let mut out: String = text.chars().take(MAX_CHARS).collect::<String>();
    if text.chars().nth(MAX_CHARS).is_some() {
        out.push('…');
    }
    out.escape_debug().to_string()
}

/// Where a node starts in the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pos {
    line: u32,
    column: u32,
}

/// A located YAML node: the generic tree validation walks.
#[derive(Debug)]
struct Node {
    pos: Pos,
    kind: Kind,
}

/// What a node holds.
#[derive(Debug)]
enum Kind {
    Null,
    Bool(bool),
    Int(i128),
    /// A number that is not an integer (its value is never needed: no field takes one).
    Float,
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Kind {
    /// How a value of this kind is named in messages (never its content).
    fn described(&self) -> &'static str {
        match self {
            Kind::Null => "empty",
            Kind::Bool(_) => "true/false",
            Kind::Int(_) | Kind::Float => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<Kind>::deserialize(deserializer)?;
        Ok(Node {
            pos: Pos {
                line: to_u32(spanned.referenced.line()),
                column: to_u32(spanned.referenced.column()),
            },
            kind: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

/// Builds a [`Kind`] from whatever YAML value comes.
struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Kind, D::Error> {
        Kind::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Kind, E> {
        Ok(Kind::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Kind, E> {
        Ok(Kind::Int(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Kind, E> {
        Ok(Kind::Int(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Kind, E> {
        Ok(Kind::Int(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Kind, E> {
        Ok(i128::try_from(value).map_or(Kind::Float, Kind::Int))
    }

    fn visit_f64<E: de::Error>(self, _value: f64) -> Result<Kind, E> {
        Ok(Kind::Float)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Kind, E> {
        Ok(Kind::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Kind, E> {
        Ok(Kind::Str(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Kind::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Kind::Map(entries))
    }
}

/// A mapping's entries with string keys: `(key, key position, value)`.
struct Fields<'n> {
    pos: Pos,
    entries: Vec<(&'n str, Pos, &'n Node)>,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(name, _, _)| *name == key)
            .map(|(_, _, node)| *node)
    }

    fn key_pos(&self, key: &str) -> Option<Pos> {
        self.entries
            .iter()
            .find(|(name, _, _)| *name == key)
            .map(|(_, pos, _)| *pos)
    }
}

const TOP_KEYS: &[&str] = &[
    "version",
    "network",
    "secrets",
    "mcp",
    "routes",
    "providers",
    "filesystem",
    "dlp",
    "limits",
];
const LIMITS_KEYS: &[&str] = &[
    "body_timeout",
    "idle_timeout",
    "buffer_memory",
    "connections_per_client",
    "connections",
];
const DLP_KEYS: &[&str] = &["credentials", "allow"];
const DLP_ALLOW_KEYS: &[&str] = &["host", "kinds"];
const FILESYSTEM_KEYS: &[&str] = &["writable", "hidden", "readable", "protected"];
const PROVIDER_KEYS: &[&str] = &["web_tools"];
const NETWORK_KEYS: &[&str] = &["allow", "deny", "tls_passthrough"];
const RULE_KEYS: &[&str] = &[
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
const SECRET_KEYS: &[&str] = &[
    "preset",
    "env",
    "file",
    "value",
    "command",
    "hosts",
    "headers",
    "inject",
    "surrogate",
    "body",
    "foreign",
];
const SECRET_SOURCES: &[&str] = &["env", "file", "value", "command"];
const INJECT_KEYS: &[&str] = &["header", "format"];
const MCP_KEYS: &[&str] = &["host", "path", "stdio", "tools"];

/// An `mcp` rule's `tools`: allow, deny, argument guards.
type Tools = (Vec<String>, Vec<String>, Vec<ArgGuard>);
const TOOLS_KEYS: &[&str] = &["allow", "deny", "args"];
const REGEX_KEYS: &[&str] = &["regex"];
const ROUTE_KEYS: &[&str] = &["prefix", "upstream", "secret"];

/// Walks the node tree, building the policy and collecting every error.
struct Checker<'f> {
    file: &'f str,
    errors: Vec<Located>,
}

impl Checker<'_> {
    fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push(Located {
            file: self.file.to_owned(),
            line: pos.line,
            column: pos.column,
            message: message.into(),
        });
    }

    fn wrong_type(&mut self, node: &Node, what: &str, expected: &str) {
        let hint = match node.kind {
            Kind::Int(_) | Kind::Float | Kind::Bool(_) if expected == "a string" => {
                ": put it in quotes"
            }
            _ => "",
        };
        let message = format!(
            "{what} must be {expected}, not {}{hint}",
            node.kind.described()
        );
        self.error(node.pos, message);
    }

    fn string<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n str> {
        match &node.kind {
            Kind::Str(text) => Some(text),
            _ => {
                self.wrong_type(node, what, "a string");
                None
            }
        }
    }

    /// A string that must not be empty.
    fn non_empty_string<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n str> {
        let text = self.string(node, what)?;
        if text.is_empty() {
            self.error(node.pos, format!("{what} is empty: give a value"));
            return None;
        }
        Some(text)
    }

    fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
        match node.kind {
            Kind::Bool(value) => Some(value),
            _ => {
                self.wrong_type(node, what, "true or false");
                None
            }
        }
    }

    /// A list; `null` counts as an empty list where `null_is_empty`.
    fn list<'n>(&mut self, node: &'n Node, what: &str, null_is_empty: bool) -> Option<&'n [Node]> {
        match &node.kind {
            Kind::Seq(items) => Some(items),
            Kind::Null if null_is_empty => Some(&[]),
            _ => {
                self.wrong_type(node, what, "a list, as in `[a, b]`");
                None
            }
        }
    }

    /// A list that must hold at least one item; `removal` says what to do instead.
    fn non_empty_list<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        removal: &str,
    ) -> Option<&'n [Node]> {
        let items = self.list(node, what, false)?;
        if items.is_empty() {
            self.error(node.pos, format!("{what} is an empty list: {removal}"));
            return None;
        }
        Some(items)
    }

    /// A mapping's entries, each key checked to be a string.
    fn entries<'n>(&mut self, node: &'n Node, what: &str) -> Option<Fields<'n>> {
        let Kind::Map(pairs) = &node.kind else {
            self.wrong_type(node, what, "a mapping of `key: value` entries");
            return None;
        };
        let mut entries = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            match &key.kind {
                Kind::Str(name) => entries.push((name.as_str(), key.pos, value)),
                other => {
                    let message = format!(
                        "{what}: a key must be a word, not {}: write `name: value`",
                        other.described()
                    );
                    self.error(key.pos, message);
                }
            }
        }
        Some(Fields {
            pos: node.pos,
            entries,
        })
    }

    /// A mapping whose keys must be among `allowed`: unknown keys are reported (with the
    /// nearest allowed key) and dropped.
    fn fields<'n>(&mut self, node: &'n Node, what: &str, allowed: &[&str]) -> Option<Fields<'n>> {
        let mut fields = self.entries(node, what)?;
        let mut unknown = Vec::new();
        fields.entries.retain(|(key, pos, _)| {
            let known = allowed.contains(key);
            if !known {
                unknown.push((key.to_string(), *pos));
            }
            known
        });
        for (key, pos) in unknown {
            let suggestion = nearest(&key, allowed)
                .map(|near| format!(" (did you mean `{near}`?)"))
                .unwrap_or_default();
            let message = format!(
                "{what}: unknown key `{}`{suggestion}; the keys allowed here are {}",
                shown(&key),
                allowed
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            self.error(pos, message);
        }
        Some(fields)
    }

    fn policy(&mut self, root: Option<&Node>) -> Policy {
        let mut policy = Policy::default();
        let Some(root) = root else {
            self.error(
                Pos { line: 1, column: 1 },
                "the policy is empty: a policy starts with `version: 1` (an empty policy allows nothing; write `version: 1` alone for that)",
            );
            return policy;
        };
        if matches!(root.kind, Kind::Null) {
            self.error(
                root.pos,
                "the policy is empty: a policy starts with `version: 1`",
            );
            return policy;
        }
        let Some(top) = self.fields(root, "the policy", TOP_KEYS) else {
            return policy;
        };
        match top.get("version") {
            None => self.error(
                top.pos,
                "`version` is missing: add `version: 1` as the first line",
            ),
            Some(node) => match node.kind {
                Kind::Int(1) => {}
                Kind::Int(other) => self.error(
                    node.pos,
                    format!("unsupported version {other}: this airlock reads `version: 1`"),
                ),
                _ => self.error(
                    node.pos,
                    format!(
                        "version must be the number 1, not {}: write `version: 1`",
                        node.kind.described()
                    ),
                ),
            },
        }
        if let Some(node) = top.get("network") {
            policy.network = self.network(node);
        }
        let mut secret_names = Vec::new();
        if let Some(node) = top.get("secrets") {
            (policy.secrets, secret_names) = self.secrets(node);
        }
        if let Some(node) = top.get("mcp") {
            (policy.mcp, policy.mcp_stdio) = self.mcp(node);
        }
        if let Some(node) = top.get("routes") {
            policy.routes = self.routes(node, &secret_names, &policy.secrets);
        }
        if let Some(node) = top.get("filesystem") {
            policy.filesystem = self.filesystem(node);
        }
        if let Some(node) = top.get("dlp") {
            policy.dlp = self.dlp(node);
        }
        if let Some(node) = top.get("limits") {
            policy.limits = self.limits(node);
        }
        if let Some(node) = top.get("providers") {
            let rules = self.providers(node, &policy.secrets);
            if let Some(host) = policy
                .network
                .tls_passthrough
                .iter()
                .find(|host| passthrough_guarded(host, &rules))
            {
                let message = format!(
                    "providers: {host} is in network.tls_passthrough, so the bundle's web-tool guard could not be applied: drop it from tls_passthrough"
                );
                self.error(node.pos, message);
            }
            policy.network.allow.extend(rules);
        }
        policy
    }

    /// `providers:`: each enabled provider's bundle as allow rules (ids
    /// `providers.NAME[i]`). The provider's API host must be covered by a secret of this
    /// file that refuses foreign credentials in every default credential header (no
    /// `foreign: allow`, no `headers`): the account pin. Otherwise a located error.
    fn providers(&mut self, node: &Node, secrets: &[Secret]) -> Vec<Rule> {
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

    fn network(&mut self, node: &Node) -> Network {
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
    fn rule(&mut self, node: &Node, id: String) -> Option<Rule> {
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
    fn json_deny(&mut self, node: &Node, what: &str) -> Vec<JsonDeny> {
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
    fn rule_host(&mut self, node: &Node, what: &str) -> Option<HostPattern> {
        if let Kind::Str(text) = &node.kind
            && text == "*"
        {
            return Some(HostPattern::Any);
        }
        self.host(node, what)
    }

    /// A rule's `host_regex` (string, checked by [`rule::check_host_regex`]).
    fn host_regex(&mut self, node: &Node, what: &str) -> Option<String> {
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
    fn host(&mut self, node: &Node, what: &str) -> Option<HostPattern> {
        let text = self.string(node, what)?;
        match rule::parse_host_pattern(text) {
            Ok(host) => Some(host),
            Err(problem) => {
                self.error(node.pos, format!("{what} `{}`: {problem}", shown(text)));
                None
            }
        }
    }

    fn cidr(&mut self, node: &Node, what: &str) -> Option<ipnet::IpNet> {
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

    fn methods(&mut self, node: &Node, what: &str) -> Option<Vec<String>> {
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
    fn patterns<E: fmt::Display>(
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

    fn ports(&mut self, node: &Node, what: &str) -> Option<Vec<u16>> {
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

    /// The valid secrets, and the names of all secrets (valid or not, so that a route
    /// naming a secret with an error is not reported a second time).
    fn secrets(&mut self, node: &Node) -> (Vec<Secret>, Vec<String>) {
        if matches!(node.kind, Kind::Null) {
            return (Vec::new(), Vec::new());
        }
        let Some(fields) = self.entries(node, "secrets") else {
            return (Vec::new(), Vec::new());
        };
        let mut secrets = Vec::new();
        let mut names = Vec::new();
        for (name, key_pos, value) in fields.entries {
            names.push(name.to_owned());
            if !rule::is_env_name(name) {
                let message = format!(
                    "secrets: the name `{}` is not usable as an environment variable: use letters, digits and `_`, not starting with a digit, e.g. GH_TOKEN",
                    shown(name)
                );
                self.error(key_pos, message);
            }
            if let Some(secret) = self.secret(name, value) {
                secrets.push(secret);
            }
        }
        (secrets, names)
    }

    fn secret(&mut self, name: &str, node: &Node) -> Option<Secret> {
        let what = format!("secrets.{}", shown(name));
        let fields = self.fields(node, &what, SECRET_KEYS)?;
        let preset = fields
            .get("preset")
            .map(|node| self.preset(node, &format!("{what}.preset")));
        let source = self.secret_source_of(name, &what, &fields, preset.is_some());
        let hosts = self.secret_hosts(&what, &fields, preset);
        let headers = match fields.get("headers") {
            Some(node) => self.header_names(node, &format!("{what}.headers")),
            None => preset
                .flatten()
                .map(|preset| preset.headers.iter().map(|h| (*h).to_owned()).collect()),
        };
        let inject = fields
            .get("inject")
            .and_then(|node| self.inject(node, &format!("{what}.inject")));
        let surrogate = fields.get("surrogate").and_then(|node| {
            let text = self.non_empty_string(node, &format!("{what}.surrogate"))?;
            if matches!(&source, Some(SecretSource::Value(value)) if value == text) {
                self.error(
                    node.pos,
                    format!(
                        "{what}.surrogate is the same as the value: the sandbox would hold the real secret; choose another surrogate or remove it to have one generated"
                    ),
                );
            }
            Some(text.to_owned())
        });
        let body = fields
            .get("body")
            .and_then(|node| self.boolean(node, &format!("{what}.body")))
            .unwrap_or(false);
        let foreign_allowed = fields
            .get("foreign")
            .and_then(|node| {
                let foreign_what = format!("{what}.foreign");
                match self.string(node, &foreign_what)? {
                    "allow" => Some(true),
                    "deny" => Some(false),
                    other => {
                        self.error(
                            node.pos,
                            format!(
                                "{foreign_what} `{}` is neither `allow` nor `deny` (the default, which refuses other credentials on the secret's hosts)",
                                shown(other)
                            ),
                        );
                        None
                    }
                }
            })
            .unwrap_or(false);
        if let Some(None) = preset {
            return None;
        }
        Some(Secret {
            name: name.to_owned(),
            source: source?,
            hosts,
            headers,
            inject,
            surrogate,
            body,
            foreign_allowed,
        })
    }

    /// A secret's source: its one `env`/`file`/`value`/`command` key, or with a preset and
    /// none of them, the variable named after the secret.
    fn secret_source_of(
        &mut self,
        name: &str,
        what: &str,
        fields: &Fields<'_>,
        has_preset: bool,
    ) -> Option<SecretSource> {
        let given: Vec<&str> = SECRET_SOURCES
            .iter()
            .copied()
            .filter(|key| fields.get(key).is_some())
            .collect();
        match given.as_slice() {
            // A preset without a source reads the variable the secret is named after.
            [] if has_preset => Some(SecretSource::Env(name.to_owned())),
            [] => {
                self.error(
                    fields.pos,
                    format!(
                        "{what}: say where the value comes from with one of `env: VAR`, `file: PATH`, `value: \"...\"` or `command: [PROGRAM, ARGS...]`"
                    ),
                );
                None
            }
            [key] => self.secret_source(what, key, fields),
            [first, second, ..] => {
                let pos = fields.key_pos(second).unwrap_or(fields.pos);
                self.error(
                    pos,
                    format!("{what}: give one source only, not both `{first}` and `{second}`"),
                );
                None
            }
        }
    }

    /// A secret's `hosts` (deduplicated), or its preset's when it has none.
    fn secret_hosts(
        &mut self,
        what: &str,
        fields: &Fields<'_>,
        preset: Option<Option<&'static presets::Preset>>,
    ) -> Vec<HostPattern> {
        match fields.get("hosts") {
            None if preset.is_some() => preset
                .flatten()
                .map(|preset| {
                    preset
                        .hosts
                        .iter()
                        .map(|host| rule::parse_host_pattern(host).expect("preset hosts parse"))
                        .collect()
                })
                .unwrap_or_default(),
            None => {
                self.error(
                    fields.pos,
                    format!(
                        "{what}: `hosts` is missing: list the hosts the real value may be sent to, as in `hosts: [api.github.com]`"
                    ),
                );
                Vec::new()
            }
            Some(hosts_node) => {
                let hosts_what = format!("{what}.hosts");
                let items = self
                    .non_empty_list(
                        hosts_node,
                        &hosts_what,
                        "list the hosts the real value may be sent to",
                    )
                    .unwrap_or_default();
                let mut hosts = Vec::new();
                for (index, item) in items.iter().enumerate() {
                    if let Some(host) = self.host(item, &format!("{hosts_what}[{index}]"))
                        && !hosts.contains(&host)
                    {
                        hosts.push(host);
                    }
                }
                hosts
            }
        }
    }

    /// A secret's `preset` (see [`crate::presets`]): `None` after reporting an unknown name.
    fn preset(&mut self, node: &Node, what: &str) -> Option<&'static presets::Preset> {
        let text = self.string(node, what)?;
        let found = presets::preset(text);
        if found.is_none() {
            let names: Vec<&str> = presets::PRESETS.iter().map(|p| p.name).collect();
            let hint = nearest(text, &names)
                .map(|name| format!(" (did you mean `{name}`?)"))
                .unwrap_or_default();
            self.error(
                node.pos,
                format!(
                    "{what} `{}` is not a preset{hint}: use one of {}, or give `hosts` (and `headers`) yourself",
                    shown(text),
                    presets::names()
                ),
            );
        }
        found
    }

    /// The one source key of a secret. A literal `value` is never repeated in a message.
    fn secret_source(
        &mut self,
        what: &str,
        key: &str,
        fields: &Fields<'_>,
    ) -> Option<SecretSource> {
        let node = fields.get(key)?;
        let key_what = format!("{what}.{key}");
        match key {
            "env" => {
                let text = self.string(node, &key_what)?;
                if rule::is_env_name(text) {
                    Some(SecretSource::Env(text.to_owned()))
                } else {
                    self.error(
                        node.pos,
                        format!(
                            "{key_what} `{}` is not an environment variable name: use letters, digits and `_`, not starting with a digit",
                            shown(text)
                        ),
                    );
                    None
                }
            }
            "file" => self
                .non_empty_string(node, &key_what)
                .map(|path| SecretSource::File(PathBuf::from(path))),
            "value" => self
                .non_empty_string(node, &key_what)
                .map(|value| SecretSource::Value(value.to_owned())),
            _ => {
                let items = self.non_empty_list(
                    node,
                    &key_what,
                    "give the program and its arguments, as in `[pass, show, gh-token]`",
                )?;
                let mut argv = Vec::new();
                for (index, item) in items.iter().enumerate() {
                    let item_what = format!("{key_what}[{index}]");
                    let text = if index == 0 {
                        self.non_empty_string(item, &item_what)
                    } else {
                        self.string(item, &item_what)
                    };
                    argv.push(text?.to_owned());
                }
                Some(SecretSource::Command(argv))
            }
        }
    }

    /// A header name: an RFC 9110 token, stored lower-case.
    fn header_name(&mut self, node: &Node, what: &str) -> Option<String> {
        let text = self.string(node, what)?;
        if rule::is_token(text) {
            Some(text.to_ascii_lowercase())
        } else {
            self.error(
                node.pos,
                format!(
                    "{what} `{}` is not a header name: use letters, digits and `-`, as in `Authorization` or `X-Api-Key`",
                    shown(text)
                ),
            );
            None
        }
    }

    fn header_names(&mut self, node: &Node, what: &str) -> Option<Vec<String>> {
        let items = self.non_empty_list(
            node,
            what,
            "remove `headers` to swap the surrogate in every header, or list the headers",
        )?;
        let mut names: Vec<String> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            if let Some(name) = self.header_name(item, &format!("{what}[{index}]"))
                && !names.contains(&name)
            {
                names.push(name);
            }
        }
        Some(names)
    }

    fn inject(&mut self, node: &Node, what: &str) -> Option<Inject> {
        let fields = self.fields(node, what, INJECT_KEYS)?;
        let header = match fields.get("header") {
            Some(node) => self.header_name(node, &format!("{what}.header")),
            None => {
                self.error(
                    fields.pos,
                    format!("{what}: `header` is missing, as in `{{header: Authorization, format: \"Bearer {{value}}\"}}`"),
                );
                None
            }
        };
        let format = match fields.get("format") {
            Some(node) => {
                let format_what = format!("{what}.format");
                let text = self.string(node, &format_what);
                match text {
                    Some(text) if text.matches("{value}").count() == 1 => Some(text.to_owned()),
                    Some(_) => {
                        self.error(
                            node.pos,
                            format!(
                                "{format_what} must contain `{{value}}` exactly once, where the real value goes, as in `Bearer {{value}}`"
                            ),
                        );
                        None
                    }
                    None => None,
                }
            }
            None => {
                self.error(
                    fields.pos,
                    format!("{what}: `format` is missing, as in `format: \"Bearer {{value}}\"`"),
                );
                None
            }
        };
        Some(Inject {
            header: header?,
            format: format?,
        })
    }

    /// `mcp:`: HTTP rules (`host` + `path`) and stdio rules (`stdio: NAME`), in file order.
    fn mcp(&mut self, node: &Node) -> (Vec<McpRule>, Vec<StdioMcpRule>) {
        let Some(items) = self.list(node, "mcp", true) else {
            return (Vec::new(), Vec::new());
        };
        let mut rules = Vec::new();
        let mut stdio_rules: Vec<StdioMcpRule> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let id = format!("mcp[{index}]");
            let Some(fields) = self.fields(item, &id, MCP_KEYS) else {
                continue;
            };
            let tools = match fields.get("tools") {
                Some(node) => self.tools(node, &format!("{id}.tools")),
                None => {
                    self.error(
                        fields.pos,
                        format!(
                            "{id}: `tools` is missing: write `tools: {{allow: [...], deny: [...]}}` (deny is checked first; an empty allow allows every tool not denied)"
                        ),
                    );
                    None
                }
            };
            if let Some(stdio) = fields.get("stdio") {
                let server = self.stdio_server(&fields, stdio, &id, &stdio_rules);
                if let (Some(server), Some((allow, deny, args))) = (server, tools) {
                    stdio_rules.push(StdioMcpRule {
                        id,
                        server,
                        allow,
                        deny,
                        args,
                    });
                }
                continue;
            }
            let host = match fields.get("host") {
                Some(node) => self.host(node, &format!("{id}.host")),
                None => {
                    self.error(
                        fields.pos,
                        format!(
                            "{id}: `host` is missing: name the MCP server's host, or write `stdio: NAME` for a server run by `airlock mcp`"
                        ),
                    );
                    None
                }
            };
            let path = self.mcp_path(&fields, &id);
            if let (Some(host), Some(path), Some((allow, deny, args))) = (host, path, tools) {
                rules.push(McpRule {
                    id,
                    host,
                    path,
                    allow,
                    deny,
                    args,
                });
            }
        }
        (rules, stdio_rules)
    }

    /// An HTTP `mcp` rule's `path`.
    fn mcp_path(&mut self, fields: &Fields<'_>, id: &str) -> Option<String> {
        let Some(node) = fields.get("path") else {
            self.error(
                fields.pos,
                format!(
                    "{id}: `path` is missing: give the MCP endpoint's path, as in `path: /mcp`"
                ),
            );
            return None;
        };
        let path_what = format!("{id}.path");
        let text = self.string(node, &path_what)?;
        match rule::check_path_glob(text) {
            Ok(()) => Some(text.to_owned()),
            Err(problem) => {
                self.error(
                    node.pos,
                    format!("{path_what} `{}`: {problem}", shown(text)),
                );
                None
            }
        }
    }

    /// A stdio `mcp` rule's server name: a non-empty name without `/`, whitespace or
    /// control characters, given once in the file, and no `host` or `path` beside it.
    fn stdio_server(
        &mut self,
        fields: &Fields<'_>,
        node: &Node,
        id: &str,
        known: &[StdioMcpRule],
    ) -> Option<String> {
        for key in ["host", "path"] {
            if let Some(pos) = fields.key_pos(key) {
                self.error(
                    pos,
                    format!(
                        "{id}: `{key}` cannot stand beside `stdio`: a stdio server has no host or path; write one rule per server"
                    ),
                );
            }
        }
        let what = format!("{id}.stdio");
        let name = self.non_empty_string(node, &what)?;
        if name.contains('/') || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            let message = format!(
                "{what} `{}` is not a server name: give the name `airlock mcp --name` uses (default the command's basename), without `/`, spaces or control characters",
                shown(name)
            );
            self.error(node.pos, message);
            return None;
        }
        if let Some(first) = known.iter().find(|rule| rule.server == name) {
            let message = format!(
                "{what}: the stdio server `{}` already has a rule ({}): give each server one rule",
                shown(name),
                first.id
            );
            self.error(node.pos, message);
            return None;
        }
        Some(name.to_owned())
    }

    /// `dlp:`: the mode for well-known credential formats and where they may go
    /// (docs/policy.md, "dlp").
    fn dlp(&mut self, node: &Node) -> crate::model::Dlp {
        let mut out = crate::model::Dlp::default();
        let Some(fields) = self.fields(node, "dlp", DLP_KEYS) else {
            return out;
        };
        if let Some(mode) = fields.get("credentials") {
            out.credentials = self.dlp_mode(mode);
        }
        if let Some(list) = fields.get("allow")
            && let Some(items) = self.list(list, "dlp.allow", true)
        {
            for (index, item) in items.iter().enumerate() {
                if let Some(entry) = self.dlp_allow(item, &format!("dlp.allow[{index}]")) {
                    out.allow.push(entry);
                }
            }
        }
        out
    }

    fn dlp_mode(&mut self, node: &Node) -> Option<crate::model::DlpMode> {
        use crate::model::DlpMode;
        let text = self.string(node, "dlp.credentials")?;
        let mode = [DlpMode::Refuse, DlpMode::Log, DlpMode::Off]
            .into_iter()
            .find(|mode| mode.as_str() == text);
        if mode.is_none() {
            let message = format!(
                "dlp.credentials `{}` is not a mode: write refuse, log or off",
                shown(text)
            );
            self.error(node.pos, message);
        }
        mode
    }

    fn dlp_allow(&mut self, node: &Node, what: &str) -> Option<crate::model::DlpAllow> {
        let fields = self.fields(node, what, DLP_ALLOW_KEYS)?;
        let Some(host_node) = fields.get("host") else {
            self.error(node.pos, format!("{what} needs a `host`"));
            return None;
        };
        let host = self.host(host_node, &format!("{what}.host"))?;
        let mut kinds = Vec::new();
        if let Some(list) = fields.get("kinds") {
            let known = airlock_dlp::kinds();
            for (index, item) in self
                .list(list, &format!("{what}.kinds"), true)?
                .iter()
                .enumerate()
            {
                let item_what = format!("{what}.kinds[{index}]");
                let Some(kind) = self.non_empty_string(item, &item_what) else {
                    continue;
                };
                if known.contains(&kind) {
                    kinds.push(kind.to_owned());
                } else {
                    let message = format!(
                        "{item_what} `{}` is not a credential kind: write one of {}",
                        shown(kind),
                        known.join(", ")
                    );
                    self.error(item.pos, message);
                }
            }
        }
        Some(crate::model::DlpAllow { host, kinds })
    }

    /// `limits:`: timeouts, the inspection memory budget and the per-client connection
    /// cap (docs/policy.md, "limits").
    fn limits(&mut self, node: &Node) -> crate::limits::Limits {
        use crate::limits::parse_duration;
        let mut out = crate::limits::Limits::default();
        if matches!(node.kind, Kind::Null) {
            return out;
        }
        let Some(fields) = self.fields(node, "limits", LIMITS_KEYS) else {
            return out;
        };
        if let Some(value) = fields.get("body_timeout") {
            out.body_timeout = self.limit_value(value, "limits.body_timeout", parse_duration);
        }
        if let Some(value) = fields.get("idle_timeout") {
            out.idle_timeout = self.limit_value(value, "limits.idle_timeout", parse_duration);
        }
        if let Some(value) = fields.get("buffer_memory") {
            out.buffer_memory = self.limit_value(value, "limits.buffer_memory", |text| {
                airlock_audit::parse_size(text)
                    .map_err(|_| "is not a size: write a number and a unit, as in 64MiB".into())
            });
        }
        if let Some(value) = fields.get("connections_per_client") {
            out.connections_per_client = self.count_limit(value, "limits.connections_per_client");
        }
        if let Some(value) = fields.get("connections") {
            out.connections = self.count_limit(value, "limits.connections");
        }
        if let (Some(value), Some(per_client)) = (
            fields.get("connections_per_client"),
            out.connections_per_client,
        ) {
            self.client_share_check(value, per_client, out.connections);
        }
        out
    }

    /// A `connections_per_client` over a quarter of `connections` (as written in the same
    /// section, or the default) would let three clients refuse every other: refused at
    /// its place (docs/policy.md, "limits").
    fn client_share_check(&mut self, value: &Node, per_client: u32, connections: Option<u32>) {
        use crate::limits::{DEFAULT_CONNECTIONS, client_share};
        let total = connections.unwrap_or(DEFAULT_CONNECTIONS);
        let share = client_share(total);
        if per_client > share {
            self.error(
                value.pos,
                format!(
                    "limits.connections_per_client {per_client} is more than a quarter of \
                     limits.connections ({total}): a few clients could hold every connection \
                     and refuse all others; write at most {share}, or raise \
                     limits.connections to at least {}",
                    u64::from(per_client) * 4
                ),
            );
        }
    }

    /// A `limits` count (`connections`, `connections_per_client`): 1 to 1,000,000.
    fn count_limit(&mut self, value: &Node, key: &str) -> Option<u32> {
        match value.kind {
            Kind::Int(number) if (1..=1_000_000).contains(&number) => u32::try_from(number).ok(),
            Kind::Int(number) => {
                self.error(
                    value.pos,
                    format!("{key} {number} is out of range: write a number from 1 to 1000000"),
                );
                None
            }
            _ => {
                self.wrong_type(value, key, "a number");
                None
            }
        }
    }

    /// A `limits` value written as a string (`30s`, `64MiB`) and read by `parse`.
    fn limit_value<T>(
        &mut self,
        node: &Node,
        what: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let text = self.string(node, what)?;
        match parse(text) {
            Ok(value) => Some(value),
            Err(problem) => {
                self.error(node.pos, format!("{what} `{}` {problem}", shown(text)));
                None
            }
        }
    }

    /// `filesystem:`: four lists of paths (docs/policy.md, "filesystem").
    fn filesystem(&mut self, node: &Node) -> crate::model::Filesystem {
        let mut out = crate::model::Filesystem::default();
        let Some(fields) = self.fields(node, "filesystem", FILESYSTEM_KEYS) else {
            return out;
        };
        for key in FILESYSTEM_KEYS {
            let Some(list_node) = fields.get(key) else {
                continue;
            };
            let what = format!("filesystem.{key}");
            let Some(items) = self.list(list_node, &what, true) else {
                continue;
            };
            let mut paths = Vec::new();
            for (index, item) in items.iter().enumerate() {
                let item_what = format!("{what}[{index}]");
                let Some(text) = self.non_empty_string(item, &item_what) else {
                    continue;
                };
                match crate::filesystem::check_entry(key, text) {
                    Ok(()) if !paths.iter().any(|known: &String| known == text) => {
                        paths.push(text.to_owned());
                    }
                    Ok(()) => {}
                    Err(problem) => {
                        self.error(
                            item.pos,
                            format!("{item_what} `{}`: {problem}", shown(text)),
                        );
                    }
                }
            }
            match *key {
                "writable" => out.writable = Some(paths),
                "hidden" => out.hidden = paths,
                "readable" => out.readable = paths,
                _ => out.protected = paths,
            }
        }
        out
    }

    fn tools(&mut self, node: &Node, what: &str) -> Option<Tools> {
        let fields = self.fields(node, what, TOOLS_KEYS)?;
        let mut lists = [Vec::new(), Vec::new()];
        for (key, names) in ["allow", "deny"].iter().zip(lists.iter_mut()) {
            let Some(list_node) = fields.get(key) else {
                continue;
            };
            let list_what = format!("{what}.{key}");
            let Some(items) = self.list(list_node, &list_what, true) else {
                continue;
            };
            for (index, item) in items.iter().enumerate() {
                if let Some(name) = self.non_empty_string(item, &format!("{list_what}[{index}]"))
                    && !names.iter().any(|known: &String| known == name)
                {
                    names.push(name.to_owned());
                }
            }
        }
        let [allow, deny] = lists;
        let args = fields
            .get("args")
            .map(|args| self.tool_args(args, &format!("{what}.args")))
            .unwrap_or_default();
        Some((allow, deny, args))
    }

    /// `tools.args`: `{TOOL: {ARGUMENT: [glob | {regex: RE}, ...] | {regex: RE}}}`
    /// (docs/policy.md, "MCP tool rules").
    fn tool_args(&mut self, node: &Node, what: &str) -> Vec<ArgGuard> {
        let Some(tools) = self.entries(node, what) else {
            return Vec::new();
        };
        let mut guards = Vec::new();
        for (tool, _, tool_node) in tools.entries {
            let tool_what = format!("{what}.{}", shown(tool));
            let Some(arguments) = self.entries(tool_node, &tool_what) else {
                continue;
            };
            if arguments.entries.is_empty() {
                let message = format!(
                    "{tool_what} names no argument: guard one, as in `{{path: [\"/workspace/**\"]}}`, or remove the tool"
                );
                self.error(tool_node.pos, message);
            }
            for (name, pos, value) in arguments.entries {
                let arg_what = format!("{tool_what}.{}", shown(name));
                let argument = match mcp_args::parse_arg_path(name) {
                    Ok(argument) => argument,
                    Err(problem) => {
                        self.error(pos, format!("{arg_what}: {problem}"));
                        continue;
                    }
                };
                let patterns = self.arg_patterns(value, &arg_what);
                if !patterns.is_empty() {
                    guards.push(ArgGuard {
                        tool: tool.to_owned(),
                        argument,
                        patterns,
                    });
                }
            }
        }
        guards
    }

    /// One argument's allowed values: a non-empty list of globs and `{regex: RE}`, or one
    /// `{regex: RE}`.
    fn arg_patterns(&mut self, node: &Node, what: &str) -> Vec<ArgPattern> {
        if let Kind::Map(_) = node.kind {
            return self.arg_regex(node, what).into_iter().collect();
        }
        let Some(items) = self.non_empty_list(
            node,
            what,
            "list the values allowed, as in `[\"/workspace/**\"]` or `[{regex: \"...\"}]`",
        ) else {
            return Vec::new();
        };
        let mut patterns = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let item_what = format!("{what}[{index}]");
            let pattern = match &item.kind {
                Kind::Map(_) => self.arg_regex(item, &item_what),
                _ => self.string(item, &item_what).and_then(|text| {
                    ArgPattern::glob(text)
                        .map_err(|problem| {
                            let message = format!("{item_what} `{}`: {problem}", shown(text));
                            self.error(item.pos, message);
                        })
                        .ok()
                }),
            };
            patterns.extend(pattern);
        }
        patterns
    }

    /// `{regex: RE}`: a regex fully matched on the value.
    fn arg_regex(&mut self, node: &Node, what: &str) -> Option<ArgPattern> {
        let fields = self.fields(node, what, REGEX_KEYS)?;
        let Some(regex_node) = fields.get("regex") else {
            // An unknown key was reported already; `{}` is reported here.
            if matches!(&node.kind, Kind::Map(pairs) if pairs.is_empty()) {
                let message = format!("{what}: `regex` is missing: write `{{regex: \"...\"}}`");
                self.error(fields.pos, message);
            }
            return None;
        };
        let regex_what = format!("{what}.regex");
        let text = self.non_empty_string(regex_node, &regex_what)?;
        ArgPattern::regex(text)
            .map_err(|problem| {
                let message = format!("{regex_what} `{}`: {problem}", shown(text));
                self.error(regex_node.pos, message);
            })
            .ok()
    }

    fn routes(&mut self, node: &Node, secret_names: &[String], secrets: &[Secret]) -> Vec<Route> {
        let Some(items) = self.list(node, "routes", true) else {
            return Vec::new();
        };
        let mut routes: Vec<Route> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let what = format!("routes[{index}]");
            let Some(fields) = self.fields(item, &what, ROUTE_KEYS) else {
                continue;
            };
            let prefix = match fields.get("prefix") {
                Some(node) => {
                    let prefix_what = format!("{what}.prefix");
                    self.string(node, &prefix_what).and_then(|text| {
                        if text.len() < 2 || !text.starts_with('/') || !text.ends_with('/') {
                            self.error(
                                node.pos,
                                format!(
                                    "{prefix_what} `{}` must start and end with `/`, as in `/llm/openrouter/`",
                                    shown(text)
                                ),
                            );
                            None
                        } else if routes.iter().any(|route| route.prefix == text) {
                            self.error(
                                node.pos,
                                format!(
                                    "{prefix_what} `{}` is already used by an earlier route: give each route its own prefix",
                                    shown(text)
                                ),
                            );
                            None
                        } else {
                            Some(text.to_owned())
                        }
                    })
                }
                None => {
                    self.error(
                        fields.pos,
                        format!("{what}: `prefix` is missing, as in `prefix: /llm/openrouter/`"),
                    );
                    None
                }
            };
            let upstream = match fields.get("upstream") {
                Some(node) => {
                    let upstream_what = format!("{what}.upstream");
                    self.string(node, &upstream_what).and_then(|text| {
                        match canonical_upstream(text) {
                            Ok(url) => Some(url),
                            Err(problem) => {
                                self.error(
                                    node.pos,
                                    format!("{upstream_what} `{}` {problem}", shown(text)),
                                );
                                None
                            }
                        }
                    })
                }
                None => {
                    self.error(
                        fields.pos,
                        format!(
                            "{what}: `upstream` is missing, as in `upstream: https://openrouter.ai/api/v1/`"
                        ),
                    );
                    None
                }
            };
            let secret = fields.get("secret").and_then(|node| {
                let secret_what = format!("{what}.secret");
                let name = self.string(node, &secret_what)?;
                let without_inject = secrets
                    .iter()
                    .any(|secret| secret.name == name && secret.inject.is_none());
                if without_inject {
                    self.error(
                        node.pos,
                        format!(
                            "{secret_what}: the secret `{}` has no `inject`, so the route could not set it: give it one, as in `inject: {{header: Authorization, format: \"Bearer {{value}}\"}}`",
                            shown(name)
                        ),
                    );
                    None
                } else if secret_names.iter().any(|known| known == name) {
                    Some(name.to_owned())
                } else {
                    self.error(
                        node.pos,
                        format!(
                            "{secret_what}: no secret named `{}` is defined under `secrets:`: define it there or fix the name",
                            shown(name)
                        ),
                    );
                    None
                }
            });
            if let (Some(prefix), Some(upstream)) = (prefix, upstream) {
                routes.push(Route {
                    prefix,
                    upstream,
                    secret,
                });
            }
        }
        routes
    }
}

/// Whether some allow rule allows every host `host` can stand for (for `tls_passthrough`).
fn passthrough_allowed(host: &HostPattern, allow: &[Rule]) -> bool {
    allow.iter().any(|rule| match (&rule.target, host) {
        (Target::Host(allowed), _) => host_covers(allowed, host),
        (Target::Cidr(net), HostPattern::Ip(addr)) => net.contains(addr),
        (Target::Cidr(_) | Target::HostRegex(_), _) => false,
    })
}

/// Whether a passthrough `host` overlaps the host of an allow rule with body guards.
fn passthrough_guarded(host: &HostPattern, allow: &[Rule]) -> bool {
    allow.iter().any(|rule| match &rule.target {
        Target::Host(allowed) if !rule.json_deny.is_empty() => {
            host_covers(allowed, host) || host_covers(host, allowed) || allowed == host
        }
        _ => false,
    })
}

/// Whether pattern `outer` matches every name pattern `inner` matches.
fn host_covers(outer: &HostPattern, inner: &HostPattern) -> bool {
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
fn is_subdomain(name: &str, suffix: &str) -> bool {
    name.strip_suffix(suffix)
        .is_some_and(|front| front.len() > 1 && front.ends_with('.'))
}

/// Check a route's upstream (`https://HOST[:PORT]/PATH/`) and return it with its host
/// canonicalised; the error completes the sentence "upstream `...` ...".
fn canonical_upstream(text: &str) -> Result<String, &'static str> {
    let rest = text
        .get(..8)
        .filter(|scheme| scheme.eq_ignore_ascii_case("https://"))
        .and_then(|_| text.get(8..))
        .ok_or("must be an https:// URL, as in `https://openrouter.ai/api/v1/`")?;
    if rest.contains(['?', '#']) {
        return Err("cannot carry a query or a fragment: give the base URL, ending with `/`");
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(
            "cannot carry credentials: name a secret with `secret:` and give it an `inject`",
        );
    }
    if !path.ends_with('/') {
        return Err("must end with `/`, as in `https://openrouter.ai/api/v1/`");
    }
    let (host, port) = canonical::parse_authority(authority, 443)
        .map_err(|_| "has no valid host[:port] after `https://`")?;
    let host = match host {
        Host::Name(name) => name,
        Host::Ip(std::net::IpAddr::V4(addr)) => addr.to_string(),
        Host::Ip(std::net::IpAddr::V6(addr)) => format!("[{addr}]"),
    };
    let port = if port == 443 {
        String::new()
    } else {
        format!(":{port}")
    };
    Ok(format!("https://{host}{port}{path}"))
}

/// The allowed key closest to `key` (edit distance at most 2, or a case difference).
fn nearest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    const MAX_COMPARED_LEN: usize = 40;
    if key.chars().count() > MAX_COMPARED_LEN {
        return None;
    }
    let lower = key.to_lowercase();
    allowed
        .iter()
        .map(|candidate| (edit_distance(&lower, candidate), *candidate))
        .filter(|(distance, _)| *distance <= 2)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance between two short strings.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = Vec::with_capacity(b.len() + 1);
        current.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("host", "host"), 0);
        assert_eq!(edit_distance("hosts", "host"), 1);
        assert_eq!(edit_distance("mehtods", "methods"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn nearest_suggests_close_keys_only() {
        assert_eq!(nearest("hosts", RULE_KEYS), Some("host"));
        assert_eq!(nearest("Methods", RULE_KEYS), Some("methods"));
        assert_eq!(nearest("completely_else", RULE_KEYS), None);
    }

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

    #[test]
    fn upstream_is_canonicalised_and_checked() {
        assert_eq!(
            canonical_upstream("https://OpenRouter.AI/api/v1/"),
            Ok("https://openrouter.ai/api/v1/".to_owned())
        );
        assert_eq!(
            canonical_upstream("https://example.com:8443/"),
            Ok("https://example.com:8443/".to_owned())
        );
        assert!(canonical_upstream("http://example.com/").is_err());
        assert!(canonical_upstream("https://example.com/v1").is_err());
        assert!(canonical_upstream("https://example.com").is_err());
        assert!(canonical_upstream("https://user:pw@example.com/").is_err());
        assert!(canonical_upstream("https://example.com/?q=1/").is_err());
        assert!(canonical_upstream("https:///").is_err());
    }

    #[test]
    fn shown_escapes_and_truncates() {
        assert_eq!(shown("a\nb"), "a\\nb");
        assert_eq!(shown(&"x".repeat(500)).chars().count(), 121);
    }
}
