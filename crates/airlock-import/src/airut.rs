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
//! * Patterns are Python's `fnmatch` in full ([`fnmatch_regex`]): `*`, `?`, `[seq]`,
//!   `[!seq]`, ranges, a `[` without its `]` literal, exactly as CPython reads them.
//!   airut uses `fnmatch` only when a pattern holds `*` or `?` and compares exactly
//!   otherwise; so does the import.
//! * Hosts: airut lower-cases pattern and host name (host names are case-insensitive)
//!   before comparing. A pattern without `*` or `?` becomes an airlock exact host;
//!   `*.suffix` with nothing else wild an airlock `*.suffix` (one or more labels; never
//!   the apex, as in airut); `*` alone [`HostPattern::Any`]; any other pattern
//!   (`api-*.example.com`, `*github.com`, `h?.example.com`, `[ab]*.x`) a `host_regex`
//!   translated from the lower-cased pattern, fully matched against airlock's canonical
//!   host name (lower-case, IDNA-encoded, no trailing dot) with case-sensitive semantics,
//!   which is `fnmatch(host.lower(), pattern.lower())`.
//! * A path pattern is matched by airut against the request path *including its query*
//!   after one percent-decode, with `fnmatch` (case-sensitive, as on POSIX; `*` and `?`
//!   cross `/`) when it contains `*` or `?`, and exactly otherwise. Both become one
//!   `path_regex`, which airlock fully matches against the canonical path plus `?query`:
//!   exact, no implicit prefix, `/api` and `/api/` distinct.
//! * Methods compare case-insensitively: they are upper-cased.
//! * A `graphql` operation filter inspects request bodies, which airlock's rules cannot
//!   express: such an entry is refused (dropping it would allow more than airut does).
//!
//! Differences, all on the strict side: `*` alone and wildcard host patterns never cover
//! IP-literal hosts (airlock's address rules are separate and the private-address guard
//! always applies); airlock
//! removes dot segments before matching (what the upstream server would do), while airut
//! matches the raw decoded path; the query part of a pattern is matched against the raw
//! (not decoded) query.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::Spanned;

use super::{Problems, at, parse_document, push_unique};
use airlock_policy::load::LoadError;
use airlock_policy::model::{HostPattern, Policy, Rule, Target};
use airlock_policy::rule::{check_host_regex, check_path_regex, is_token, parse_host_pattern};

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
        match host_target(&domain.value) {
            Ok(host) => push_unique(&mut policy.network.allow, rule(host, None, Vec::new())),
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
        let host = match host_target(&host_text.value) {
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
            push_unique(&mut policy.network.allow, rule(host, methods, path_regex));
        }
    }
    super::assign_ids(&mut policy);
    problems.finish(policy)
}

/// An allow rule on `target` with the given methods and regexes and the default ports.
fn rule(target: Target, methods: Option<Vec<String>>, path_regex: Vec<String>) -> Rule {
    Rule {
        id: String::new(),
        target,
        methods,
        paths: Vec::new(),
        path_regex,
        ports: None,
        json_deny: Vec::new(),
        process: None,
    }
}

/// An airut host pattern as the target of an airlock rule, or why it cannot be one.
///
/// airut lower-cases pattern and host (`str.lower()`), compares exactly when the pattern
/// has neither `*` nor `?`, and uses `fnmatch` otherwise. Here: no wildcard → an exact
/// host (canonicalised: IDNA, trailing dot dropped); `*` → [`HostPattern::Any`];
/// `*.suffix` with nothing else wild → [`HostPattern::Wildcard`] (fnmatch would also take
/// an empty first label, which no host name has); anything else → a `host_regex` that is
/// [`fnmatch_regex`] of the lower-cased pattern, matched against airlock's canonical
/// (lower-case) host name.
fn host_target(pattern: &str) -> Result<Target, String> {
    let lower = pattern.to_lowercase();
    if lower == "*" {
        return Ok(Target::Host(HostPattern::Any));
    }
    let wild = |text: &str| text.contains(['*', '?']);
    if !wild(&lower) {
        return parse_host_pattern(&lower)
            .map(Target::Host)
            .map_err(|e| e.to_string());
    }
    if let Some(suffix) = lower.strip_prefix("*.")
        && !wild(suffix)
        && !suffix.contains('[')
        && let Ok(HostPattern::Wildcard(canonical)) = parse_host_pattern(&lower)
        && canonical == suffix
    {
        return Ok(Target::Host(HostPattern::Wildcard(canonical)));
    }
    let regex = fnmatch_regex(&lower);
    check_host_regex(&regex).map_err(|e| format!("cannot be translated to a regex: {e}"))?;
    Ok(Target::HostRegex(regex))
}

/// The `path_regex` equivalent to an airut path pattern (exact unless it holds `*` or `?`).
fn path_pattern_regex(pattern: &str) -> Result<String, String> {
    let regex = if pattern.contains(['*', '?']) {
        fnmatch_regex(pattern)
    } else {
        format!("^{}$", regex::escape(pattern))
    };
    check_path_regex(&regex).map_err(|e| format!("cannot be translated to a regex: {e}"))?;
    Ok(regex)
}

/// A regex (for the `regex` crate) that matches exactly the strings Python's
/// `fnmatch.fnmatchcase(name, pattern)` accepts: `*` any run of characters (`/` and
/// newlines included), `?` one character, `[seq]` one character of the set, `[!seq]` one
/// character outside it, ranges `a-z`, a `]` right after `[` or `[!` literal, a `[` with no
/// closing `]` literal, everything else literal and case-sensitive. Ranges follow CPython
/// to the letter: a `-` right after a range is literal, a `-` first or last is literal, a
/// reversed range (`z-a`) is dropped, a set left empty matches nothing and a negated one
/// left empty matches any character. (`fnmatch.fnmatch` on POSIX is the same:
/// `os.path.normcase` changes nothing there.) The result is anchored and marked
/// case-sensitive, so it means the same in a `path_regex` and in a case-insensitive
/// `host_regex`.
pub fn fnmatch_regex(pattern: &str) -> String {
    let mut out = String::from("^(?s-i:");
    for piece in parse_fnmatch(pattern) {
        match piece {
            Piece::Literal(c) => push_literal(&mut out, c),
            Piece::One => out.push('.'),
            Piece::Star => out.push_str(".*"),
            Piece::Class(Class::Never) => out.push_str(r"[^\x{0}-\x{10FFFF}]"),
            Piece::Class(Class::Any) => out.push('.'),
            Piece::Class(Class::Set { negated, items }) => {
                out.push('[');
                if negated {
                    out.push('^');
                }
                for (low, high) in items {
                    push_class_char(&mut out, low);
                    if high != low {
                        out.push('-');
                        push_class_char(&mut out, high);
                    }
                }
                out.push(']');
            }
        }
    }
    out.push_str(")$");
    out
}

/// One element of an fnmatch pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// A character standing for itself.
    Literal(char),
    /// `?`: any one character.
    One,
    /// A run of `*`: any run of characters, the empty one included.
    Star,
    /// `[...]`: one character of a set.
    Class(Class),
}

/// The set a `[...]` stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Class {
    /// No character: every range was reversed and dropped.
    Never,
    /// Any character: a negated set whose ranges were all dropped.
    Any,
    /// These characters and inclusive ranges (`(c, c)` for one character), or every
    /// character but them.
    Set {
        /// `[!...]`.
        negated: bool,
        /// Inclusive ranges, in pattern order.
        items: Vec<(char, char)>,
    },
}

/// Split an fnmatch pattern into its elements.
fn parse_fnmatch(pattern: &str) -> Vec<Piece> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut pieces = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        i += 1;
        match c {
            '*' => {
                if pieces.last() != Some(&Piece::Star) {
                    pieces.push(Piece::Star);
                }
            }
            '?' => pieces.push(Piece::One),
            '[' => {
                // The set ends at the first `]` that is not its first member.
                let mut end = i;
                if chars.get(end) == Some(&'!') {
                    end += 1;
                }
                if chars.get(end) == Some(&']') {
                    end += 1;
                }
                while chars.get(end).is_some_and(|&x| x != ']') {
                    end += 1;
                }
                if end >= chars.len() {
                    pieces.push(Piece::Literal('['));
                } else {
                    pieces.push(Piece::Class(parse_class(&chars[i..end])));
                    i = end + 1;
                }
            }
            other => pieces.push(Piece::Literal(other)),
        }
    }
    pieces
}

/// One token of a set body once its ranges are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    /// A member character (or a range end).
    Char(char),
    /// The `-` between the two ends of a range.
    To,
}

/// The set between `[` and `]` (`body` may start with `!`), read as CPython does: the
/// body is cut into chunks at each `-` that makes a range (never the first member, never
/// right after a range's end), a trailing `-` stays literal, reversed ranges are dropped
/// by joining their neighbours, and only then is a leading `!` taken as negation.
fn parse_class(body: &[char]) -> Class {
    let mut tokens: Vec<Token> = Vec::new();
    if !body.contains(&'-') {
        tokens.extend(body.iter().map(|&c| Token::Char(c)));
    } else {
        let mut chunks: Vec<Vec<char>> = Vec::new();
        let mut start = 0;
        let mut from = if body.first() == Some(&'!') { 2 } else { 1 };
        while let Some(offset) = body
            .get(from..)
            .and_then(|rest| rest.iter().position(|&c| c == '-'))
        {
            let hyphen = from + offset;
            chunks.push(body[start..hyphen].to_vec());
            start = hyphen + 1;
            from = hyphen + 3;
        }
        let last = &body[start..];
        match chunks.last_mut() {
            Some(previous) if last.is_empty() => previous.push('-'),
            _ => chunks.push(last.to_vec()),
        }
        // Drop reversed ranges, last first: the two chunks lose the range's ends and join.
        for k in (1..chunks.len()).rev() {
            let reversed = matches!(
                (chunks[k - 1].last(), chunks[k].first()),
                (Some(low), Some(high)) if low > high
            );
            if reversed {
                let next = chunks.remove(k);
                let joined = &mut chunks[k - 1];
                joined.pop();
                joined.extend_from_slice(&next[1..]);
            }
        }
        for (index, chunk) in chunks.iter().enumerate() {
            if index > 0 {
                tokens.push(Token::To);
            }
            tokens.extend(chunk.iter().map(|&c| Token::Char(c)));
        }
    }
    let negated = tokens.first() == Some(&Token::Char('!'));
    if tokens.is_empty() {
        return Class::Never;
    }
    if negated && tokens.len() == 1 {
        return Class::Any;
    }
    let members = if negated { &tokens[1..] } else { &tokens[..] };
    // A regex class: `x-y` is a range; a `-` with no character before it is literal.
    let mut items = Vec::new();
    let mut k = 0;
    while let Some(&token) = members.get(k) {
        match (token, members.get(k + 1), members.get(k + 2)) {
            (Token::Char(low), Some(Token::To), Some(&Token::Char(high))) => {
                items.push((low, high));
                k += 3;
            }
            (Token::Char(c), _, _) => {
                items.push((c, c));
                k += 1;
            }
            (Token::To, _, _) => {
                items.push(('-', '-'));
                k += 1;
            }
        }
    }
    Class::Set { negated, items }
}

/// Append `c` as a literal outside a class.
fn push_literal(out: &mut String, c: char) {
    if c.is_control() || (c.is_whitespace() && c != ' ') {
        out.push_str(&format!("\\x{{{:X}}}", u32::from(c)));
    } else {
        out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
    }
}

/// Append `c` as a literal inside a class.
fn push_class_char(out: &mut String, c: char) {
    if c.is_control() || c.is_whitespace() {
        out.push_str(&format!("\\x{{{:X}}}", u32::from(c)));
    } else {
        if matches!(c, '\\' | '[' | ']' | '^' | '-' | '&' | '~') {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn full(regex: &str, text: &str) -> bool {
        regex::Regex::new(regex).unwrap().is_match(text)
    }

    /// Whether `name` matches `pattern` by the translated regex.
    fn fnmatch(name: &str, pattern: &str) -> bool {
        full(&fnmatch_regex(pattern), name)
    }

    #[test]
    fn fnmatch_translation_matches_python_semantics() {
        let r = fnmatch_regex("/repos/foo*");
        assert!(full(&r, "/repos/foo"));
        assert!(full(&r, "/repos/foobar"));
        assert!(full(&r, "/repos/foo/bar?x=1"));
        assert!(!full(&r, "/repos/fo"));
        let r = fnmatch_regex("/v?/[!x]a[]b]");
        assert!(full(&r, "/v1/ya]"));
        assert!(full(&r, "/v//yab"));
        assert!(!full(&r, "/v1/xa]"));
        let r = fnmatch_regex("/a[b*");
        assert!(full(&r, "/a[bzzz"));
        let r = fnmatch_regex("/x.[a-c-]*");
        assert!(full(&r, "/x.b"));
        assert!(full(&r, "/x.-"));
        assert!(!full(&r, "/xyb"));
    }

    /// Each row checked against CPython 3.11's `fnmatch.fnmatch(name, pattern)`.
    #[test]
    fn cpython_corner_cases() {
        let rows: &[(&str, &str, bool)] = &[
            ("[z-a]", "a", false),
            ("[z-a]x", "x", false),
            ("[!z-a]", "q", true),
            ("[!z-a]", "\n", true),
            ("[a-c-e]", "-", true),
            ("[a-c-e]", "d", false),
            ("[a-c-e]", "e", true),
            // The reversed range goes, and the `!` it uncovers then negates the set.
            ("[z-a!b]", "b", false),
            ("[z-a!b]", "c", true),
            ("[]-a]", "^", true),
            ("[!]", "!", false),
            ("[!]", "[!]", true),
            ("[]", "[]", true),
            ("[^a]", "^", true),
            ("[^a]", "b", false),
            ("[a-]", "-", true),
            ("[-a]", "-", true),
            ("[--0]", ".", true),
            ("[!--0]", ".", false),
            ("[!--0]", "a", true),
            ("a*b*c", "aXbYc", true),
            ("[\\]", "\\", true),
            ("[a&&b]", "&", true),
            ("*", "a\nb", true),
            ("?", "\n", true),
            ("A", "a", false),
            ("[A-Z]", "a", false),
        ];
        for (pattern, name, expected) in rows {
            assert_eq!(
                fnmatch(name, pattern),
                *expected,
                "fnmatch({name:?}, {pattern:?}) via {}",
                fnmatch_regex(pattern)
            );
        }
    }

    #[test]
    fn exact_paths_are_escaped() {
        let r = path_pattern_regex("/a.b[1]").unwrap();
        assert!(full(&r, "/a.b[1]"));
        assert!(!full(&r, "/axb[1]"));
        assert!(!full(&r, "/a.b[1]?q"));
    }

    #[test]
    fn host_targets() {
        let host = |p: &str| {
            host_target(p).map(|t| match t {
                Target::Host(h) => h.to_string(),
                Target::HostRegex(r) => format!("regex {r}"),
                Target::Cidr(n) => format!("cidr {n}"),
            })
        };
        assert_eq!(host("*"), Ok("*".into()));
        assert_eq!(host("*.GitHub.com"), Ok("*.github.com".into()));
        assert_eq!(host("api.github.com"), Ok("api.github.com".into()));
        assert_eq!(
            host("api-*.GitHub.com"),
            Ok(r"regex ^(?s-i:api\-.*\.github\.com)$".into())
        );
        assert_eq!(
            host("*github.com"),
            Ok(r"regex ^(?s-i:.*github\.com)$".into())
        );
        assert_eq!(
            host("*.*.github.com"),
            Ok(r"regex ^(?s-i:.*\..*\.github\.com)$".into())
        );
        assert_eq!(host("H?.x"), Ok(r"regex ^(?s-i:h.\.x)$".into()));
        assert_eq!(host("*.[ab].x"), Ok(r"regex ^(?s-i:.*\.[ab]\.x)$".into()));
        assert!(host("a/b").is_err());
    }

    /// An independent reading of fnmatch without sets: `*` any run, `?` one character.
    fn reference(name: &[char], pattern: &[char]) -> bool {
        match pattern.split_first() {
            None => name.is_empty(),
            Some(('*', rest)) => (0..=name.len()).any(|skip| reference(&name[skip..], rest)),
            Some(('?', rest)) => !name.is_empty() && reference(&name[1..], rest),
            Some((c, rest)) => name.first() == Some(c) && reference(&name[1..], rest),
        }
    }

    proptest! {
        #[test]
        fn every_pattern_translates_to_a_valid_path_regex(pattern in "[-a-c!\\[\\]*?^\\\\&~.é\n/]{0,12}") {
            let regex = fnmatch_regex(&pattern);
            prop_assert!(check_path_regex(&regex).is_ok(), "{pattern:?} -> {regex}");
            prop_assert!(check_host_regex(&regex).is_ok(), "{pattern:?} -> {regex}");
        }

        #[test]
        fn star_and_question_agree_with_a_reference(
            pattern in "[ab*?./]{0,8}",
            name in "[ab./\n]{0,8}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let n: Vec<char> = name.chars().collect();
            prop_assert_eq!(fnmatch(&name, &pattern), reference(&n, &p));
        }

        #[test]
        fn a_pattern_without_wildcards_is_itself(text in "[-a-z.!^&~\\]/é]{0,10}") {
            prop_assert!(fnmatch(&text, &text));
            let longer = format!("{text}x");
            prop_assert!(!fnmatch(&longer, &text));
        }

        #[test]
        fn a_one_character_set_is_that_character(c in any::<char>(), other in any::<char>()) {
            prop_assume!(!matches!(c, '!' | ']' | '-') && c != other);
            let pattern = format!("[{c}]");
            prop_assert!(fnmatch(&c.to_string(), &pattern));
            prop_assert!(!fnmatch(&other.to_string(), &pattern));
            let negated = format!("[!{c}]");
            prop_assert!(!fnmatch(&c.to_string(), &negated));
            prop_assert!(fnmatch(&other.to_string(), &negated));
        }

        #[test]
        fn a_range_is_inclusive(a in any::<char>(), b in any::<char>(), probe in any::<char>()) {
            let (low, high) = if a <= b { (a, b) } else { (b, a) };
            // `!` first negates, `]` first is a member and `]` last closes the set, `-`
            // next to the range's own `-` changes the chunks: those are other tests' cases.
            if !matches!(low, '!' | ']' | '-') && !matches!(high, '-' | ']') {
                let pattern = format!("[{low}-{high}]");
                prop_assert_eq!(
                    fnmatch(&probe.to_string(), &pattern),
                    (low..=high).contains(&probe)
                );
            }
        }
    }
}
