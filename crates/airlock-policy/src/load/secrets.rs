//! Reading `secrets:`: each secret's source, presets, hosts, headers and injection.

use std::path::PathBuf;

use super::node::{Fields, Kind, Node};
use super::{Checker, nearest, shown};
use crate::model::{HostPattern, Inject, Secret, SecretSource};
use crate::presets;
use crate::rule;

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

impl Checker<'_> {
    /// The valid secrets, and the names of all secrets (valid or not, so that a route
    /// naming a secret with an error is not reported a second time).
    pub(super) fn secrets(&mut self, node: &Node) -> (Vec<Secret>, Vec<String>) {
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

    pub(super) fn secret(&mut self, name: &str, node: &Node) -> Option<Secret> {
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
    pub(super) fn secret_source_of(
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
    pub(super) fn secret_hosts(
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
    pub(super) fn preset(&mut self, node: &Node, what: &str) -> Option<&'static presets::Preset> {
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
    pub(super) fn secret_source(
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
    pub(super) fn header_name(&mut self, node: &Node, what: &str) -> Option<String> {
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

    pub(super) fn header_names(&mut self, node: &Node, what: &str) -> Option<Vec<String>> {
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

    pub(super) fn inject(&mut self, node: &Node, what: &str) -> Option<Inject> {
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
}
