//! MCP argument guards (`mcp[].tools.args`, docs/policy.md "MCP tool rules"): per tool,
//! per argument, the values a `tools/call` may pass. This module owns the model, the
//! compiled patterns and the pure value check; walking a request body lives in
//! `airlock-mcp`.
//!
//! A value passes a guard only when it is a string that matches one of the guard's
//! patterns as a whole (globs with the syntax of `paths`, or `{regex: ...}` fully matched)
//! and has no `..` path segment, whatever the pattern: a value such as
//! `/workspace/../home/u/.ssh/id_rsa` is refused by `/workspace/**` rather than
//! normalised, because only the server knows how it resolves the path (symbolic links,
//! its own working directory). Segments are separated by `/` and `\`, and the value is
//! also looked at percent-decoded (repeatedly), so `%2e%2e` and `..%2f` are `..` too.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use regex::{Regex, RegexBuilder};

/// The largest compiled regex of an argument guard (the same bound as `path_regex`).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// How many rounds of percent-decoding a value is looked at for `..` segments.
const DECODE_ROUNDS: usize = 4;

/// The guards of one argument of one tool: `args: {TOOL: {ARG: [patterns]}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgGuard {
    /// The tool name as written; compared with the called name case-insensitively.
    pub tool: String,
    /// The argument: a top-level key of `arguments`, or a dotted path into nested objects.
    pub argument: ArgPath,
    /// The values allowed (at least one).
    pub patterns: Vec<ArgPattern>,
}

impl ArgGuard {
    /// Whether this guard applies to a call of the tool `name`: compared by Unicode case
    /// folding, so a guard on `read_file` covers `READ_FILE` (as a tool deny does).
    pub fn applies_to(&self, name: &str) -> bool {
        fold(&self.tool) == fold(name)
    }

    /// Whether the string `value` is allowed: it has no `..` segment and one pattern
    /// matches it whole.
    pub fn allows(&self, value: &str) -> bool {
        !has_dot_dot(value) && self.patterns.iter().any(|p| p.matches(value))
    }
}

/// Case folding used for tool and argument names: lower case of the upper case, so
/// `ſ` (long s) and `s`, `K` (Kelvin) and `k` fold alike, as in Go's `EqualFold`.
pub fn fold(text: &str) -> String {
    text.to_uppercase().to_lowercase()
}

/// An argument address: `path`, or `options.path` for a member of a nested object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgPath {
    /// The text as written.
    pub text: String,
    /// The keys, outermost first (at least one, none empty).
    pub keys: Vec<String>,
}

impl fmt::Display for ArgPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why an argument name or pattern is not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// An empty name or an empty dotted segment.
    #[error(
        "an argument is named by its key, or by a dotted path into nested objects (`options.path`); no part may be empty"
    )]
    EmptyKey,
    /// A glob that does not compile.
    #[error("the glob does not compile: {0}")]
    Glob(String),
    /// An empty glob.
    #[error("a glob is empty: write the values to allow, as in `/workspace/**`")]
    EmptyGlob,
    /// A regex that does not compile on its own or exceeds the size limit.
    #[error("the regex does not compile (or is larger than 1 MiB compiled): {0}")]
    Regex(String),
}

/// Parses an argument address: dot-separated keys, none empty.
pub fn parse_arg_path(text: &str) -> Result<ArgPath, ArgError> {
    let keys: Vec<String> = text.split('.').map(str::to_owned).collect();
    if keys.iter().any(String::is_empty) {
        return Err(ArgError::EmptyKey);
    }
    Ok(ArgPath {
        text: text.to_owned(),
        keys,
    })
}

/// One allowed-value pattern, compiled.
#[derive(Clone, Debug)]
pub struct ArgPattern {
    /// The text as written.
    pub text: String,
    matcher: Matcher,
}

#[derive(Clone, Debug)]
enum Matcher {
    Glob(GlobMatcher),
    Regex(Regex),
}

impl PartialEq for ArgPattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.is_regex() == other.is_regex()
    }
}

impl Eq for ArgPattern {}

impl ArgPattern {
    /// A glob with the syntax of `paths` (`*` inside one `/` segment, `**` across, `?`,
    /// `[...]`, `{a,b}`), case-sensitive, matched on the whole value.
    pub fn glob(text: &str) -> Result<Self, ArgError> {
        if text.is_empty() {
            return Err(ArgError::EmptyGlob);
        }
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .build()
            .map_err(|e| ArgError::Glob(e.kind().to_string()))?;
        Ok(ArgPattern {
            text: text.to_owned(),
            matcher: Matcher::Glob(glob.compile_matcher()),
        })
    }

    /// A regex fully matched (`^(?:re)$`) on the value; it must compile on its own.
    pub fn regex(text: &str) -> Result<Self, ArgError> {
        let build = |source: &str| {
            RegexBuilder::new(source)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| ArgError::Regex(regex_gist(&e)))
        };
        build(text)?;
        let regex = build(&format!("^(?:{text})$"))?;
        Ok(ArgPattern {
            text: text.to_owned(),
            matcher: Matcher::Regex(regex),
        })
    }

    /// Whether this is a `{regex: ...}` pattern.
    pub fn is_regex(&self) -> bool {
        matches!(self.matcher, Matcher::Regex(_))
    }

    /// Whether `value` matches the pattern as a whole.
    pub fn matches(&self, value: &str) -> bool {
        match &self.matcher {
            Matcher::Glob(glob) => glob.is_match(value),
            Matcher::Regex(regex) => regex.is_match(value),
        }
    }
}

/// The last line of the regex crate's (multi-line) error.
fn regex_gist(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .unwrap_or_else(|| text.lines().last().unwrap_or("syntax error"))
        .trim()
        .to_owned()
}

/// Whether `value` has a `..` segment (separated by `/` or `\`), as written or after one
/// to four rounds of percent-decoding.
pub fn has_dot_dot(value: &str) -> bool {
    let mut bytes = value.as_bytes().to_vec();
    for _ in 0..=DECODE_ROUNDS {
        if bytes
            .split(|b| *b == b'/' || *b == b'\\')
            .any(|s| s == b"..")
        {
            return true;
        }
        let decoded = percent_decode(&bytes);
        if decoded == bytes {
            return false;
        }
        bytes = decoded;
    }
    true
}

/// One round of percent-decoding (`%XX` with two hex digits; anything else kept).
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn guard(patterns: &[&str]) -> ArgGuard {
        ArgGuard {
            tool: "read_file".into(),
            argument: parse_arg_path("path").unwrap(),
            patterns: patterns
                .iter()
                .map(|p| ArgPattern::glob(p).unwrap())
                .collect(),
        }
    }

    #[test]
    fn globs_match_like_paths() {
        let g = guard(&["/workspace/**"]);
        assert!(g.allows("/workspace/a"));
        assert!(g.allows("/workspace/a/b/c.txt"));
        assert!(!g.allows("/workspace"));
        assert!(!g.allows("/workspaces/a"));
        assert!(!g.allows("/Workspace/a"));
        assert!(!g.allows("/home/u/.ssh/id_ed25519"));
        assert!(!g.allows("workspace/a"));
        let g = guard(&["/workspace/*.txt", "/tmp/?"]);
        assert!(g.allows("/workspace/a.txt"));
        assert!(!g.allows("/workspace/a/b.txt"));
        assert!(g.allows("/tmp/x"));
        assert!(!g.allows("/tmp/xy"));
    }

    #[test]
    fn dot_dot_segments_are_refused_in_every_spelling() {
        let g = guard(&["/workspace/**"]);
        for value in [
            "/workspace/../home/u/.ssh/id_rsa",
            "/workspace/a/../../etc/passwd",
            "/workspace/..",
            "/workspace/a\\..\\..\\etc",
            "/workspace/%2e%2e/etc",
            "/workspace/%2E./etc",
            "/workspace/..%2f..%2fetc",
            "/workspace/%252e%252e/etc",
        ] {
            assert!(!g.allows(value), "{value}");
        }
        for value in [
            "/workspace/a..b",
            "/workspace/...",
            "/workspace/.x",
            "/workspace/./a",
        ] {
            assert!(g.allows(value), "{value}");
        }
    }

    #[test]
    fn regexes_are_anchored() {
        let g = ArgGuard {
            patterns: vec![ArgPattern::regex("/workspace/[a-z]+").unwrap()],
            ..guard(&["/x"])
        };
        assert!(g.allows("/workspace/abc"));
        assert!(!g.allows("/etc/workspace/abc"));
        assert!(!g.allows("/workspace/abc/"));
        assert!(ArgPattern::regex("a)|(b").is_err());
        assert!(ArgPattern::regex("(").is_err());
    }

    #[test]
    fn names_and_bad_patterns() {
        assert_eq!(parse_arg_path("a.b").unwrap().keys, vec!["a", "b"]);
        assert_eq!(parse_arg_path(""), Err(ArgError::EmptyKey));
        assert_eq!(parse_arg_path("a..b"), Err(ArgError::EmptyKey));
        assert_eq!(parse_arg_path(".a"), Err(ArgError::EmptyKey));
        assert!(matches!(ArgPattern::glob("/a/[b"), Err(ArgError::Glob(_))));
        assert_eq!(ArgPattern::glob("").unwrap_err(), ArgError::EmptyGlob);
        let g = guard(&["/x"]);
        assert!(g.applies_to("READ_FILE"));
        assert!(g.applies_to("read_file"));
        assert!(!g.applies_to("read_files"));
        assert_eq!(fold("ſ"), fold("S"));
        assert_eq!(fold("\u{212a}"), fold("k"));
    }

    proptest! {
        /// Whatever surrounds it, a value with a `..` segment never passes `/workspace/**`.
        #[test]
        fn dot_dot_never_matches_the_workspace(
            before in proptest::collection::vec("[a-zA-Z0-9._%-]{0,6}", 0..4),
            after in proptest::collection::vec("[a-zA-Z0-9._%-]{0,6}", 0..4),
            separator in prop_oneof![Just("/"), Just("\\"), Just("%2f"), Just("%5C")],
            dots in prop_oneof![Just(".."), Just("%2e%2e"), Just(".%2E"), Just("%252e.")],
        ) {
            let mut parts = vec!["".to_owned(), "workspace".to_owned()];
            parts.extend(before);
            let head = parts.join("/");
            let tail = after.join("/");
            let value = format!("{head}{separator}{dots}{separator}{tail}");
            prop_assert!(!guard(&["/workspace/**"]).allows(&value), "{}", value);
        }

        /// Any string is decided without panicking.
        #[test]
        fn any_string_is_decided(value in any::<String>()) {
            let _ = guard(&["/workspace/**", "*"]).allows(&value);
            let _ = has_dot_dot(&value);
        }
    }
}
