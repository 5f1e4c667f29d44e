//! airut's `.airut/network-allowlist.yaml` (the mitmproxy network sandbox with a DNS
//! responder and masked secrets):
//!
//! ```yaml
//! domains:
//!   - "*.github.com"            # every method, every path
//! url_prefixes:
//!   - host: api.anthropic.com
//!     path: /v1/messages*       # fnmatch on path + query; empty or absent = every path
//!     methods: [POST]           # optional; empty or absent = every method
//! ```
//!
//! How airut decides, and how each part is translated:
//!
//! * A host pattern without `*` or `?` is compared exactly (case-insensitively): an
//!   airlock exact host. `*.suffix` with nothing else wild is an airlock `*.suffix` (one or
//!   more labels; never the apex, as in airut). `*` alone is [`HostPattern::Any`]. Any
//!   other fnmatch host pattern (`api-*.example.com`, `*github.com`, `foo?.x`) cannot be a
//!   host pattern and the import fails naming it.
//! * A path pattern is matched by airut against the request path *including its query*
//!   after one percent-decode, with Python's `fnmatch` (`*` and `?` cross `/`, `[...]`
//!   classes) when it contains `*` or `?`, and exactly otherwise. Both become one
//!   `path_regex`, which airlock fully matches against the canonical path plus `?query`:
//!   exact, no implicit prefix, `/api` and `/api/` distinct.
//! * Methods compare case-insensitively: they are upper-cased.
//! * A `graphql` operation filter inspects request bodies, which airlock's rules cannot
//!   express: such an entry is refused (dropping it would allow more than airut does).
//!
//! Differences, all on the strict side: `*` alone does not cover IP-literal hosts (airlock's
//! address rules are separate and the private-address guard always applies); airlock
//! removes dot segments before matching (what the upstream server would do), while airut
//! matches the raw decoded path; the query part of a pattern is matched against the raw
//! (not decoded) query.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::Spanned;

use super::{Problems, at, host_rule, parse_document, push_unique};
use crate::load::LoadError;
use crate::model::{HostPattern, Policy};
use crate::rule::{check_path_regex, is_token, parse_host_pattern};

/// The whole file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Allowlist {
    domains: Option<Vec<Spanned<String>>>,
    url_prefixes: Option<Vec<Spanned<UrlPrefix>>>,
}

/// One `url_prefixes` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UrlPrefix {
    host: Option<Spanned<String>>,
    path: Option<Spanned<String>>,
    methods: Option<Vec<Spanned<String>>>,
    graphql: Option<Spanned<IgnoredAny>>,
}

/// Import an airut network allowlist.
pub fn import(file: &str, text: &str) -> Result<Policy, LoadError> {
    let Some(allowlist) = parse_document::<Allowlist>(file, text)? else {
        return Ok(Policy::default());
    };
    let mut problems = Problems::new(file);
    let mut policy = Policy::default();
    for (index, domain) in allowlist.domains.iter().flatten().enumerate() {
        match host_pattern(&domain.value) {
            Ok(host) => push_unique(&mut policy.network.allow, host_rule(host, None, Vec::new())),
            Err(message) => problems.at(
                at(domain),
                format!("domains[{index}] {:?}: {message}", domain.value),
            ),
        }
    }
    for (index, entry) in allowlist.url_prefixes.iter().flatten().enumerate() {
        let name = format!("url_prefixes[{index}]");
        let prefix = &entry.value;
        if let Some(graphql) = &prefix.graphql {
            problems.at(
                at(graphql),
                format!(
                    "{name}: the `graphql` operation filter inspects request bodies, which airlock rules cannot express; remove it (airlock would then allow every operation) or keep this host under airut"
                ),
            );
        }
        let Some(host_text) = &prefix.host else {
            problems.at(at(entry), format!("{name}: `host` is required"));
            continue;
        };
        let host = match host_pattern(&host_text.value) {
            Ok(host) => Some(host),
            Err(message) => {
                problems.at(
                    at(host_text),
                    format!("{name} host {:?}: {message}", host_text.value),
                );
                None
            }
        };
        let mut methods = Vec::new();
        for method in prefix.methods.iter().flatten() {
            let upper = method.value.to_ascii_uppercase();
            if is_token(&upper) {
                if !methods.contains(&upper) {
                    methods.push(upper);
                }
            } else {
                problems.at(
                    at(method),
                    format!(
                        "{name}: method {:?} is not an HTTP method (one word of letters, such as GET)",
                        method.value
                    ),
                );
            }
        }
        let mut path_regex = Vec::new();
        if let Some(path) = prefix.path.as_ref().filter(|p| !p.value.is_empty()) {
            match path_pattern_regex(&path.value) {
                Ok(regex) => path_regex.push(regex),
                Err(message) => {
                    problems.at(at(path), format!("{name} path {:?}: {message}", path.value))
                }
            }
        }
        if let Some(host) = host {
            let methods = (!methods.is_empty()).then_some(methods);
            push_unique(
                &mut policy.network.allow,
                host_rule(host, methods, path_regex),
            );
        }
    }
    super::assign_ids(&mut policy);
    problems.finish(policy)
}

/// An airut host pattern as an airlock host pattern, or why it cannot be one.
fn host_pattern(pattern: &str) -> Result<HostPattern, String> {
    let lower = pattern.to_lowercase();
    let wild = |text: &str| text.contains(['*', '?']);
    if lower == "*" {
        return Ok(HostPattern::Any);
    }
    if let Some(suffix) = lower.strip_prefix("*.") {
        if !wild(suffix) && !suffix.contains('[') {
            return parse_host_pattern(&lower).map_err(|e| e.to_string());
        }
    } else if !wild(&lower) {
        return parse_host_pattern(&lower).map_err(|e| e.to_string());
    }
    Err("this fnmatch pattern has a wildcard that airlock host patterns cannot express (they are an exact name, `*.suffix` or `*`): list the hosts it should match instead".to_owned())
}

/// The `path_regex` equivalent to an airut path pattern (exact unless it holds `*` or `?`).
fn path_pattern_regex(pattern: &str) -> Result<String, String> {
    let regex = if pattern.contains(['*', '?']) {
        fnmatch_regex(pattern).ok_or_else(|| {
            "this fnmatch character class cannot be translated: write the class out".to_owned()
        })?
    } else {
        format!("^{}$", regex::escape(pattern))
    };
    check_path_regex(&regex).map_err(|e| format!("cannot be translated to a regex: {e}"))?;
    Ok(regex)
}

/// Python's `fnmatch.translate` for the regex crate: `*` is `.*`, `?` is `.`, `[...]` a
/// class (`[!...]` negated; a `]` right after the opening bracket is literal; a `[` with no
/// closing `]` is literal), everything else literal; the whole anchored, `.` matching
/// newlines as in fnmatch. `None` for a class that has no regex equivalent.
fn fnmatch_regex(pattern: &str) -> Option<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from("^(?s:");
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        i += 1;
        match c {
            '*' => {
                while chars.get(i) == Some(&'*') {
                    i += 1;
                }
                out.push_str(".*");
            }
            '?' => out.push('.'),
            '[' => {
                let mut j = i;
                if chars.get(j) == Some(&'!') {
                    j += 1;
                }
                if chars.get(j) == Some(&']') {
                    j += 1;
                }
                while chars.get(j).is_some_and(|&x| x != ']') {
                    j += 1;
                }
                if j >= chars.len() {
                    out.push_str("\\[");
                } else {
                    out.push_str(&fnmatch_class(&chars[i..j])?);
                    i = j + 1;
                }
            }
            other => out.push_str(&regex::escape(other.encode_utf8(&mut [0; 4]))),
        }
    }
    out.push_str(")$");
    Some(out)
}

/// One fnmatch class body (between the brackets) as a regex class.
fn fnmatch_class(body: &[char]) -> Option<String> {
    let (negated, members) = match body.split_first() {
        Some(('!', rest)) => (true, rest),
        Some(_) => (false, body),
        None => return None,
    };
    if negated && members.is_empty() {
        return Some(".".to_owned());
    }
    let mut class = String::from(if negated { "[^" } else { "[" });
    let last = members.len().saturating_sub(1);
    for (k, &c) in members.iter().enumerate() {
        if c == '-' && k > 0 && k < last {
            class.push('-');
        } else {
            if matches!(c, '\\' | '[' | ']' | '^' | '-' | '&' | '~') {
                class.push('\\');
            }
            class.push(c);
        }
    }
    class.push(']');
    Some(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(regex: &str, text: &str) -> bool {
        regex::Regex::new(regex).unwrap().is_match(text)
    }

    #[test]
    fn fnmatch_translation_matches_python_semantics() {
        let r = fnmatch_regex("/repos/foo*").unwrap();
        assert!(full(&r, "/repos/foo"));
        assert!(full(&r, "/repos/foobar"));
        assert!(full(&r, "/repos/foo/bar?x=1"));
        assert!(!full(&r, "/repos/fo"));
        let r = fnmatch_regex("/v?/[!x]a[]b]").unwrap();
        assert!(full(&r, "/v1/ya]"));
        assert!(full(&r, "/v//yab"));
        assert!(!full(&r, "/v1/xa]"));
        let r = fnmatch_regex("/a[b*").unwrap();
        assert!(full(&r, "/a[bzzz"));
        let r = fnmatch_regex("/x.[a-c-]*").unwrap();
        assert!(full(&r, "/x.b"));
        assert!(full(&r, "/x.-"));
        assert!(!full(&r, "/xyb"));
    }

    #[test]
    fn exact_paths_are_escaped() {
        let r = path_pattern_regex("/a.b[1]").unwrap();
        assert!(full(&r, "/a.b[1]"));
        assert!(!full(&r, "/axb[1]"));
        assert!(!full(&r, "/a.b[1]?q"));
    }

    #[test]
    fn host_patterns() {
        assert_eq!(host_pattern("*"), Ok(HostPattern::Any));
        assert_eq!(
            host_pattern("*.GitHub.com"),
            Ok(HostPattern::Wildcard("github.com".into()))
        );
        assert_eq!(
            host_pattern("api.github.com"),
            Ok(HostPattern::Exact("api.github.com".into()))
        );
        assert!(host_pattern("api-*.github.com").is_err());
        assert!(host_pattern("*github.com").is_err());
        assert!(host_pattern("*.*.github.com").is_err());
        assert!(host_pattern("gith?b.com").is_err());
    }
}
