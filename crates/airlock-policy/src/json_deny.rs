//! JSON body guards (`json_deny:` on a `network.allow` entry): the parsed form of a guard's
//! path (JSON-pointer-like, with `*` for any array index or object key) and value globs,
//! and the pure string matching both use. Walking a request body lives in `airlock-mcp`
//! next to the strict JSON parser; this module only owns the syntax and comparisons.
//!
//! Comparisons are exact and case-sensitive: object keys and string values are compared
//! byte for byte on the decoded JSON strings (after `\uXXXX` escapes are resolved), with
//! no case folding or Unicode normalisation.

use std::fmt;

/// One `json_deny` entry: refuse a request whose JSON body has a value at `path`
/// that matches one of `values` (or any value at all when `values` is `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonDeny {
    /// Where to look in the body.
    pub path: JsonPath,
    /// String globs (`*` = any run of characters); `None` = the path existing is enough.
    pub values: Option<Vec<String>>,
}

impl JsonDeny {
    /// Whether a string found at the path is refused.
    pub fn refuses_string(&self, text: &str) -> bool {
        self.values
            .as_ref()
            .is_none_or(|globs| globs.iter().any(|glob| glob_matches(glob, text)))
    }

    /// Whether a non-string value (number, bool, null, array, object) found at the path
    /// is refused: only when no `values` are given (value globs match strings only).
    pub fn refuses_non_string(&self) -> bool {
        self.values.is_none()
    }
}

/// A parsed guard path: `/tools/*/type` is `[Key("tools"), Any, Key("type")]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath {
    /// The text as written in the policy.
    pub text: String,
    /// The segments, outermost first.
    pub segments: Vec<Segment>,
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One step of a [`JsonPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// `*`: every member of an object, every element of an array.
    Any,
    /// A key (escapes `~1` → `/`, `~0` → `~` resolved); on an array it names the element
    /// whose index is written in canonical decimal (`0`, `12`, never `012`).
    Key(String),
}

impl Segment {
    /// Whether this segment selects the array element at `index`.
    pub fn selects_index(&self, index: usize) -> bool {
        match self {
            Segment::Any => true,
            Segment::Key(key) => *key == index.to_string(),
        }
    }

    /// Whether this segment selects the object member `key` (case-sensitive).
    pub fn selects_key(&self, key: &str) -> bool {
        match self {
            Segment::Any => true,
            Segment::Key(own) => own == key,
        }
    }
}

/// Why a guard path or value glob is not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonDenyError {
    /// The path does not start with `/`.
    #[error("a path starts with `/`, as in `/tools/*/type`")]
    PathNotAbsolute,
    /// The path is `/` alone or has an empty segment.
    #[error("a path segment is empty: write `/a/b`, not `/a//b` or a trailing `/`")]
    EmptySegment,
    /// A `~` not followed by `0` or `1`.
    #[error("`~` starts an escape: write `~0` for `~` and `~1` for `/`")]
    BadEscape,
    /// `*` used inside a segment together with other characters.
    #[error("`*` in a path stands for a whole segment (any key or index): write `/a/*/b`")]
    PartialStar,
    /// An empty value glob.
    #[error("a value glob is empty: write the string to refuse, `*` for any string")]
    EmptyValue,
}

/// Parses a guard path: `/`-separated segments, `*` alone = any key or index, RFC 6901
/// escapes `~1` (`/`) and `~0` (`~`).
pub fn parse_path(text: &str) -> Result<JsonPath, JsonDenyError> {
    let rest = text
        .strip_prefix('/')
        .ok_or(JsonDenyError::PathNotAbsolute)?;
    let mut segments = Vec::new();
    for raw in rest.split('/') {
        if raw.is_empty() {
            return Err(JsonDenyError::EmptySegment);
        }
        if raw == "*" {
            segments.push(Segment::Any);
            continue;
        }
        if raw.contains('*') {
            return Err(JsonDenyError::PartialStar);
        }
        segments.push(Segment::Key(unescape(raw)?));
    }
    Ok(JsonPath {
        text: text.to_owned(),
        segments,
    })
}

fn unescape(raw: &str) -> Result<String, JsonDenyError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            _ => return Err(JsonDenyError::BadEscape),
        }
    }
    Ok(out)
}

/// Checks a value glob (any non-empty string; `*` = any run of characters).
pub fn check_value_glob(text: &str) -> Result<(), JsonDenyError> {
    if text.is_empty() {
        return Err(JsonDenyError::EmptyValue);
    }
    Ok(())
}

/// Whether `text` matches `glob`, where `*` is any run of characters (also none) and
/// every other character matches itself exactly (case-sensitive).
pub fn glob_matches(glob: &str, text: &str) -> bool {
    let mut parts = glob.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = parts.collect();
    let Some((last, middle)) = middle.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn paths_parse_with_stars_and_escapes() {
        let path = parse_path("/tools/*/a~1b~0c").unwrap();
        assert_eq!(
            path.segments,
            vec![
                Segment::Key("tools".into()),
                Segment::Any,
                Segment::Key("a/b~c".into())
            ]
        );
        assert_eq!(parse_path("tools"), Err(JsonDenyError::PathNotAbsolute));
        assert_eq!(parse_path(""), Err(JsonDenyError::PathNotAbsolute));
        assert_eq!(parse_path("/"), Err(JsonDenyError::EmptySegment));
        assert_eq!(parse_path("/a//b"), Err(JsonDenyError::EmptySegment));
        assert_eq!(parse_path("/a/"), Err(JsonDenyError::EmptySegment));
        assert_eq!(parse_path("/a~2"), Err(JsonDenyError::BadEscape));
        assert_eq!(parse_path("/a~"), Err(JsonDenyError::BadEscape));
        assert_eq!(parse_path("/to*ls"), Err(JsonDenyError::PartialStar));
    }

    #[test]
    fn segments_select_canonical_indexes_only() {
        let key = Segment::Key("1".into());
        assert!(key.selects_index(1));
        assert!(!Segment::Key("01".into()).selects_index(1));
        assert!(!key.selects_index(0));
        assert!(Segment::Any.selects_index(7));
        assert!(Segment::Any.selects_key("x"));
        assert!(!Segment::Key("Type".into()).selects_key("type"));
    }

    #[test]
    fn globs_match_runs_and_are_case_sensitive() {
        assert!(glob_matches("web_search", "web_search"));
        assert!(!glob_matches("web_search", "web_search_preview"));
        assert!(glob_matches("web_search_preview*", "web_search_preview"));
        assert!(glob_matches(
            "web_search_preview*",
            "web_search_preview_2025"
        ));
        assert!(!glob_matches("web_search", "Web_Search"));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("a*b*c", "abc"));
        assert!(glob_matches("a*b*c", "a-b-b-c"));
        assert!(!glob_matches("a*b*c", "a-c-b"));
        assert!(!glob_matches("ab*ba", "aba"));
        assert!(glob_matches("*é*", "café!"));
    }

    #[test]
    fn without_values_every_value_is_refused() {
        let deny = JsonDeny {
            path: parse_path("/a").unwrap(),
            values: None,
        };
        assert!(deny.refuses_string("anything"));
        assert!(deny.refuses_non_string());
        let deny = JsonDeny {
            values: Some(vec!["x*".into()]),
            ..deny
        };
        assert!(deny.refuses_string("xy"));
        assert!(!deny.refuses_string("yx"));
        assert!(!deny.refuses_non_string());
    }

    proptest! {
        #[test]
        fn a_literal_glob_matches_only_itself(glob in "[a-z_]{0,8}", text in "[a-z_]{0,8}") {
            prop_assert_eq!(glob_matches(&glob, &text), glob == text);
        }

        #[test]
        fn a_star_pattern_matches_what_it_was_cut_from(
            prefix in "[a-zé_]{0,5}", middle in "[a-z_*]{0,5}", suffix in "[a-zé_]{0,5}",
        ) {
            let text = format!("{prefix}{middle}{suffix}");
            let glob = format!("{prefix}*{suffix}");
            prop_assert!(glob_matches(&glob, &text));
            prop_assert!(glob_matches("*", &text));
        }

        #[test]
        fn glob_agrees_with_a_regex(glob in "[ab*]{0,6}", text in "[ab]{0,8}") {
            let pattern = format!("^{}$", glob.split('*').map(regex::escape).collect::<Vec<_>>().join(".*"));
            let regex = regex::Regex::new(&pattern).unwrap();
            prop_assert_eq!(glob_matches(&glob, &text), regex.is_match(&text));
        }

        #[test]
        fn escaped_keys_round_trip(key in "[a-z/~]{1,8}") {
            let escaped = key.replace('~', "~0").replace('/', "~1");
            let path = parse_path(&format!("/{escaped}")).unwrap();
            prop_assert_eq!(path.segments, vec![Segment::Key(key)]);
        }
    }
}
