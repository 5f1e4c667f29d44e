//! Reading `mcp:`: HTTP and stdio MCP rules, their tool lists and argument guards.

use super::node::{Fields, Kind, Node};
use super::{Checker, shown};
use crate::mcp_args::{self, ArgGuard, ArgPattern};
use crate::model::{McpRule, StdioMcpRule};
use crate::rule;

const MCP_KEYS: &[&str] = &["host", "path", "stdio", "tools"];
/// An `mcp` rule's `tools`: allow, deny, argument guards.
type Tools = (Vec<String>, Vec<String>, Vec<ArgGuard>);
const TOOLS_KEYS: &[&str] = &["allow", "deny", "args"];
const REGEX_KEYS: &[&str] = &["regex"];

impl Checker<'_> {
    /// `mcp:`: HTTP rules (`host` + `path`) and stdio rules (`stdio: NAME`), in file order.
    pub(super) fn mcp(&mut self, node: &Node) -> (Vec<McpRule>, Vec<StdioMcpRule>) {
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
    pub(super) fn mcp_path(&mut self, fields: &Fields<'_>, id: &str) -> Option<String> {
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
    pub(super) fn stdio_server(
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

    pub(super) fn tools(&mut self, node: &Node, what: &str) -> Option<Tools> {
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
    pub(super) fn tool_args(&mut self, node: &Node, what: &str) -> Vec<ArgGuard> {
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
    pub(super) fn arg_patterns(&mut self, node: &Node, what: &str) -> Vec<ArgPattern> {
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
    pub(super) fn arg_regex(&mut self, node: &Node, what: &str) -> Option<ArgPattern> {
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
}
