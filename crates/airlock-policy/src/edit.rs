//! Adds one `network.allow` entry to the text of a native policy file (the `save` answer of
//! `--mode ask`, docs/policy.md "Ask mode") without re-serialising it: comments, blank
//! lines, quoting and key order stay as they were; the entry's lines are inserted after the
//! last line of the block-style `allow:` list (or an `allow:` / `network:` section is
//! added). The result is checked with the real loader and matcher before it is handed
//! back: it must load, have exactly one more allow entry, and allow what was asked.
//!
//! Pure: the caller reads and writes the file.

use crate::ask::AskKey;
use crate::canonical::{CanonicalRequest, canonical_host};
use crate::load;
use crate::matcher::CompiledPolicy;

/// Why the entry could not be added.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The file as it stands does not load.
    #[error("{0}: the policy file does not load as it stands; fix it first")]
    Invalid(String),
    /// The `network` or `allow` value is written in flow style (`{...}`, `[a, b]`).
    #[error(
        "{0}: `network.allow` is written in flow style ([...] or {{...}}); add the rule by hand"
    )]
    FlowStyle(String),
    /// The edited text failed the checks (a bug or an unusual layout): nothing is written.
    #[error("{file}: the edited policy did not pass the checks ({why}); add the rule by hand")]
    Check {
        /// The file.
        file: String,
        /// What failed.
        why: String,
    },
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// A line that holds YAML content (not blank, not only a comment).
fn is_content(line: &str) -> bool {
    let trimmed = line.trim();
    !trimmed.is_empty() && !trimmed.starts_with('#')
}

/// What follows `key:` on `line` (at `indent`), without a trailing comment; `None` if the
/// line is not that key.
fn value_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.trim_start_matches(' ').strip_prefix(key)?;
    let rest = rest.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n'])) {
        return None;
    }
    let value = rest.split(" #").next().unwrap_or("").trim();
    Some(if value.starts_with('#') { "" } else { value })
}

/// Adds `entry` (lines as [`AskKey::yaml_lines`] gives them) to the `network.allow` list
/// of `text`.
fn insert_entry(file: &str, text: &str, entry: &[String]) -> Result<String, EditError> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let network = lines
        .iter()
        .position(|line| indent(line) == 0 && value_after(line, "network").is_some());
    let Some(network) = network else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("network:\n  allow:\n");
        for line in entry {
            out.push_str(&format!("    {line}\n"));
        }
        return Ok(out);
    };
    if !value_after(&lines[network], "network")
        .unwrap_or("")
        .is_empty()
    {
        return Err(EditError::FlowStyle(file.to_owned()));
    }
    // The network block: up to the next content line at column 0.
    let block_end = (network + 1..lines.len())
        .find(|i| is_content(&lines[*i]) && indent(&lines[*i]) == 0)
        .unwrap_or(lines.len());
    let child_indent = (network + 1..block_end)
        .find(|i| is_content(&lines[*i]))
        .map_or(2, |i| indent(&lines[i]));
    let allow = (network + 1..block_end)
        .find(|i| indent(&lines[*i]) == child_indent && value_after(&lines[*i], "allow").is_some());
    let Some(allow) = allow else {
        let mut added = vec![format!("{}allow:", " ".repeat(child_indent))];
        let pad = " ".repeat(child_indent + 2);
        added.extend(entry.iter().map(|line| format!("{pad}{line}")));
        lines.splice(network + 1..network + 1, added);
        return Ok(joined(lines, text));
    };
    match value_after(&lines[allow], "allow").unwrap_or("") {
        "" => {}
        "[]" => {
            // An empty flow list becomes a block list.
            lines[allow] = lines[allow].replacen("[]", "", 1).trim_end().to_owned();
        }
        _ => return Err(EditError::FlowStyle(file.to_owned())),
    }
    // The allow list: deeper lines, or `- ` items at the key's own indent.
    let mut last = allow;
    let mut item_indent = None;
    for (i, line) in lines.iter().enumerate().take(block_end).skip(allow + 1) {
        if !is_content(line) {
            continue;
        }
        let own = indent(line);
        let item = line.trim_start().starts_with("- ") || line.trim() == "-";
        if own > child_indent || (own == child_indent && item) {
            if item && item_indent.is_none() {
                item_indent = Some(own);
            }
            last = i;
        } else {
            break;
        }
    }
    let pad = " ".repeat(item_indent.unwrap_or(child_indent + 2));
    let added = entry.iter().map(|line| format!("{pad}{line}"));
    lines.splice(last + 1..last + 1, added);
    Ok(joined(lines, text))
}

/// `lines` joined with newlines, ending with one if `original` did (or was empty).
fn joined(lines: Vec<String>, original: &str) -> String {
    let mut out = lines.join("\n");
    if original.ends_with('\n') || original.is_empty() {
        out.push('\n');
    }
    out
}

/// The text of the native policy `text` (file `file`) with an allow entry for `key` added,
/// checked: it loads, has exactly one more `network.allow` entry than before, and its
/// policy allows `key` for host, method and path.
pub fn add_allow(file: &str, text: &str, key: &AskKey) -> Result<String, EditError> {
    let before = load::load_str(file, text).map_err(|_| EditError::Invalid(file.to_owned()))?;
    let edited = insert_entry(file, text, &key.yaml_lines())?;
    let check = |why: String| EditError::Check {
        file: file.to_owned(),
        why,
    };
    let after = load::load_str(file, &edited).map_err(|e| check(e.to_string()))?;
    if after.network.allow.len() != before.network.allow.len() + 1 {
        return Err(check("the allow list did not grow by one entry".to_owned()));
    }
    let compiled = CompiledPolicy::compile(&after).map_err(|e| check(e.to_string()))?;
    let host = canonical_host(&key.host).map_err(|e| check(e.to_string()))?;
    let decision = match &key.path {
        None => compiled.decide_tunnel(&host, key.port).decision,
        Some(path) => compiled.decide(&CanonicalRequest::new(&key.method, host, key.port, path)),
    };
    match decision.reason {
        Some(reason) if crate::mode::relaxable(reason) => {
            Err(check(format!("the new rule does not allow it ({reason})")))
        }
        _ => Ok(edited),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: Option<&str>) -> AskKey {
        AskKey {
            method: "GET".to_owned(),
            host: "new.example.test".to_owned(),
            port: 8443,
            path: path.map(str::to_owned),
        }
    }

    const COMMENTED: &str = "# my policy\nversion: 1\nnetwork:\n  # the hosts\n  allow:\n    - host: a.example.test   # first\n      methods: [GET]\n\n    # b is for builds\n    - host: b.example.test\n  deny:\n    - host: gist.github.com\nsecrets: {}\n";

    #[test]
    fn appends_after_the_last_item_keeping_comments() {
        let edited = add_allow("p.yaml", COMMENTED, &key(Some("/x"))).expect("edit");
        let expected = "# my policy\nversion: 1\nnetwork:\n  # the hosts\n  allow:\n    - host: a.example.test   # first\n      methods: [GET]\n\n    # b is for builds\n    - host: b.example.test\n    - host: \"new.example.test\"\n      ports: [8443]\n      methods: [\"GET\"]\n      paths: [\"/x\"]\n  deny:\n    - host: gist.github.com\nsecrets: {}\n";
        assert_eq!(edited, expected);
    }

    #[test]
    fn items_at_the_key_indent_and_a_missing_allow_or_network() {
        let flush = "version: 1\nnetwork:\n  allow:\n  - host: a.example.test\n";
        let edited = add_allow("p.yaml", flush, &key(None)).expect("edit");
        assert!(
            edited.ends_with(
                "  - host: a.example.test\n  - host: \"new.example.test\"\n    ports: [8443]\n"
            ),
            "{edited}"
        );
        let no_allow = "version: 1\nnetwork:\n  deny:\n    - host: x.example.test\n";
        let edited = add_allow("p.yaml", no_allow, &key(None)).expect("edit");
        assert!(
            edited
                .starts_with("version: 1\nnetwork:\n  allow:\n    - host: \"new.example.test\"\n"),
            "{edited}"
        );
        let no_network = "version: 1 # v\n";
        let edited = add_allow("p.yaml", no_network, &key(Some("/y"))).expect("edit");
        assert!(
            edited.starts_with("version: 1 # v\nnetwork:\n  allow:\n    - host:"),
            "{edited}"
        );
        let empty_flow = "version: 1\nnetwork:\n  allow: []  # none yet\n";
        let edited = add_allow("p.yaml", empty_flow, &key(None)).expect("edit");
        assert!(
            edited.contains("  allow:   # none yet\n    - host:"),
            "{edited}"
        );
    }

    #[test]
    fn flow_style_and_invalid_files_are_refused() {
        let flow = "version: 1\nnetwork:\n  allow: [{host: a.example.test}]\n";
        assert!(matches!(
            add_allow("p.yaml", flow, &key(None)),
            Err(EditError::FlowStyle(_))
        ));
        let broken = "version: 1\nnetwork:\n  allow:\n    - hots: a\n";
        assert!(matches!(
            add_allow("p.yaml", broken, &key(None)),
            Err(EditError::Invalid(_))
        ));
    }

    #[test]
    fn a_literal_star_is_matched_literally() {
        let text = "version: 1\n";
        let edited = add_allow("p.yaml", text, &key(Some("/a*b"))).expect("edit");
        assert!(edited.contains("path_regex"), "{edited}");
    }
}
