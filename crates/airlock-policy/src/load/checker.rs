//! The walker: [`Checker`] with the typed readers every section uses (string, list, a
//! mapping with known keys, ...), the top of the document (`version` and the sections),
//! and the "did you mean" suggestion for unknown keys.

use super::network::passthrough_guarded;
use super::node::{Fields, Kind, Node, Pos};
use super::{Located, shown};
use crate::model::Policy;

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
    "audit",
    "credentials",
];

/// Walks the node tree, building the policy and collecting every error.
pub(super) struct Checker<'f> {
    pub(super) file: &'f str,
    pub(super) errors: Vec<Located>,
}

impl Checker<'_> {
    pub(super) fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.errors.push(Located {
            file: self.file.to_owned(),
            line: pos.line,
            column: pos.column,
            message: message.into(),
        });
    }

    pub(super) fn wrong_type(&mut self, node: &Node, what: &str, expected: &str) {
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

    pub(super) fn string<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n str> {
        match &node.kind {
            Kind::Str(text) => Some(text),
            _ => {
                self.wrong_type(node, what, "a string");
                None
            }
        }
    }

    /// A string that must not be empty.
    pub(super) fn non_empty_string<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n str> {
        let text = self.string(node, what)?;
        if text.is_empty() {
            self.error(node.pos, format!("{what} is empty: give a value"));
            return None;
        }
        Some(text)
    }

    pub(super) fn boolean(&mut self, node: &Node, what: &str) -> Option<bool> {
        match node.kind {
            Kind::Bool(value) => Some(value),
            _ => {
                self.wrong_type(node, what, "true or false");
                None
            }
        }
    }

    /// A list; `null` counts as an empty list where `null_is_empty`.
    pub(super) fn list<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        null_is_empty: bool,
    ) -> Option<&'n [Node]> {
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
    pub(super) fn non_empty_list<'n>(
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
    pub(super) fn entries<'n>(&mut self, node: &'n Node, what: &str) -> Option<Fields<'n>> {
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
    pub(super) fn fields<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        allowed: &[&str],
    ) -> Option<Fields<'n>> {
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

    pub(super) fn policy(&mut self, root: Option<&Node>) -> Policy {
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
        if let Some(node) = top.get("audit") {
            policy.audit = self.audit(node);
        }
        if let Some(node) = top.get("limits") {
            policy.limits = self.limits(node);
        }
        if let Some(node) = top.get("credentials") {
            policy.credentials = self.credentials(node);
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
}

/// The allowed key closest to `key` (edit distance at most 2, or a case difference).
pub(super) fn nearest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
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
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
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
    use crate::load::network::RULE_KEYS;

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
}
