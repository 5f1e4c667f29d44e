//! sandbox0's `protocolRules` (`protocol: mcp`) into airlock `mcp` rules: one per domain
//! and path, `httpMatch` paths and prefixes as globs, the tool lists as allow and deny.

use serde_saphyr::Spanned;

use super::super::{Problems, at};
use super::{HttpMatch, McpSpec, ProtocolRule, read_domains, read_ports, rule_label};
use airlock_policy::model::{McpRule, Policy};
use airlock_policy::rule::check_path_glob;

/// One `protocolRules` entry into `mcp` rules.
pub(super) fn translate_protocol_rule(
    index: usize,
    rule: &Spanned<ProtocolRule>,
    policy: &mut Policy,
    problems: &mut Problems,
) {
    let spec = &rule.value;
    let label = rule_label("egress.protocolRules", index, spec.name.as_deref());
    let before = problems.len();
    match spec.protocol.as_ref().map(|p| p.value.as_str()) {
        Some("mcp") => {}
        Some("http") => {
            problems.at(
                at(rule),
                format!(
                    "{label}: protocol http rules are not imported: express their method and path limits as airlock allow rules (`methods:`, `paths:`)"
                ),
            );
            return;
        }
        Some(other) => {
            problems.at(at(rule), format!("{label}: protocol {other:?} is not mcp"));
            return;
        }
        None => {
            problems.at(at(rule), format!("{label}: `protocol` (mcp) is required"));
            return;
        }
    }
    if let Some(http) = &spec.http {
        problems.at(
            at(http),
            format!("{label}: `http` is not allowed on an mcp rule"),
        );
    }
    if let Some(mode) = &spec.tls_mode
        && !matches!(mode.value.as_str(), "" | "terminate-reoriginate")
    {
        problems.at(
            at(mode),
            format!(
                "{label}: tlsMode {:?} is not terminate-reoriginate",
                mode.value
            ),
        );
    }
    let _ = read_ports(
        &label,
        spec.ports.as_deref().unwrap_or_default(),
        false,
        problems,
    );
    let hosts = read_domains(
        &label,
        spec.domains.as_deref().unwrap_or_default(),
        problems,
    );
    if hosts.is_empty() {
        problems.at(
            at(rule),
            format!("{label}: name the MCP servers' domains (a rule for every destination cannot be expressed exactly)"),
        );
    }
    let (applies, paths) = match &spec.http_match {
        Some(http_match) => read_http_match(&label, http_match, problems),
        None => (true, vec!["/**".to_owned()]),
    };
    let (allow, deny) = match &spec.mcp {
        Some(mcp) => read_tools(&label, &mcp.value, problems),
        None => {
            problems.at(
                at(rule),
                format!("{label}: an mcp rule needs `mcp: {{tools: ...}}`"),
            );
            (Vec::new(), Vec::new())
        }
    };
    if problems.len() != before || !applies || (allow.is_empty() && deny.is_empty()) {
        return;
    }
    for host in &hosts {
        for path in &paths {
            let mcp_rule = McpRule {
                id: String::new(),
                host: host.clone(),
                path: path.clone(),
                allow: allow.clone(),
                deny: deny.clone(),
                args: Vec::new(),
            };
            if !policy.mcp.contains(&mcp_rule) {
                policy.mcp.push(mcp_rule);
            }
        }
    }
}

/// `httpMatch`: whether the rule can see a `tools/call` (a POST) and its path globs.
fn read_http_match(
    label: &str,
    http_match: &Spanned<HttpMatch>,
    problems: &mut Problems,
) -> (bool, Vec<String>) {
    let spec = &http_match.value;
    for (key, list) in [("query", &spec.query), ("headers", &spec.headers)] {
        if let Some(list) = list.as_ref().filter(|l| !l.value.is_empty()) {
            problems.at(
                at(list),
                format!("{label}: httpMatch.{key} matchers cannot be expressed on airlock mcp rules: remove them"),
            );
        }
    }
    let methods: Vec<String> = spec
        .methods
        .iter()
        .flatten()
        .map(|m| m.value.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
        .collect();
    let applies = methods.is_empty() || methods.iter().any(|m| m == "POST");
    let mut globs = Vec::new();
    for path in spec.paths.iter().flatten() {
        if path_ok(label, path, problems) {
            globs.push(glob_escape(&path.value));
        }
    }
    for prefix in spec.path_prefixes.iter().flatten() {
        if path_ok(label, prefix, problems) {
            let escaped = glob_escape(&prefix.value);
            if prefix.value.ends_with('/') {
                globs.push(format!("{escaped}**"));
            } else {
                globs.push(format!("{escaped}*"));
                globs.push(format!("{escaped}*/**"));
            }
        }
    }
    if globs.is_empty() {
        globs.push("/**".to_owned());
    }
    for glob in &globs {
        if let Err(error) = check_path_glob(glob) {
            problems.at(
                at(http_match),
                format!("{label}: path {glob:?} cannot be used: {error}"),
            );
        }
    }
    (applies, globs)
}

/// A path or prefix starts with `/`.
fn path_ok(label: &str, path: &Spanned<String>, problems: &mut Problems) -> bool {
    let ok = path.value.starts_with('/');
    if !ok {
        problems.at(
            at(path),
            format!("{label}: httpMatch path {:?} must start with /", path.value),
        );
    }
    ok
}

/// `text` as a glob that matches exactly `text`.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `mcp.tools`: the allowed and denied tool names (trimmed, distinct, non-empty).
fn read_tools(label: &str, mcp: &McpSpec, problems: &mut Problems) -> (Vec<String>, Vec<String>) {
    let Some(tools) = &mcp.tools else {
        return (Vec::new(), Vec::new());
    };
    let mut read = |key: &str, list: &Option<Vec<Spanned<String>>>| {
        let mut names: Vec<String> = Vec::new();
        for tool in list.iter().flatten() {
            let name = tool.value.trim();
            if name.is_empty() {
                problems.at(
                    at(tool),
                    format!("{label}: mcp.tools.{key} has an empty name"),
                );
            } else if names.iter().any(|n| n == name) {
                problems.at(
                    at(tool),
                    format!("{label}: mcp.tools.{key} repeats {name:?}"),
                );
            } else {
                names.push(name.to_owned());
            }
        }
        names
    };
    let allowed = read("allowed", &tools.allowed);
    let denied = read("denied", &tools.denied);
    (allowed, denied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_escape_keeps_literals_literal() {
        let glob = glob_escape("/a*b?[c]{d}");
        let matcher = globset::GlobBuilder::new(&glob)
            .literal_separator(true)
            .build()
            .unwrap()
            .compile_matcher();
        assert!(matcher.is_match("/a*b?[c]{d}"));
        assert!(!matcher.is_match("/axb?[c]{d}"));
    }
}
