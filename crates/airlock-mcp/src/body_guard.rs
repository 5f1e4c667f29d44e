//! JSON body guards (`json_deny` on `network.allow`): a request body is parsed strictly
//! (UTF-8, one JSON value, unique keys in every object at any depth, serde_json's nesting
//! limit) and each guard's path walked over it; a string at the path matching one of the
//! guard's value globs (or any value, for a guard without `values`) refuses the request.
//! Strings and keys are compared decoded, so `"web\u005fsearch"` is `web_search`.

use std::collections::HashSet;
use std::fmt;

use airlock_policy::json_deny::{JsonDeny, Segment};
use airlock_policy::model::Rule;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::Uninspectable;

/// The first of `rules` (in order) one of whose `json_deny` guards matches `body`, or
/// `None` when the body passes. An empty body passes; anything else must be strict JSON
/// ([`Uninspectable`] otherwise, whatever the guards).
pub fn refusing_rule<'r>(
    body: &[u8],
    rules: &[&'r Rule],
) -> Result<Option<&'r Rule>, Uninspectable> {
    if body.is_empty() {
        return Ok(None);
    }
    let text = std::str::from_utf8(body).map_err(|_| Uninspectable::NotUtf8)?;
    let document = parse(text)?;
    Ok(rules
        .iter()
        .find(|rule| rule.json_deny.iter().any(|guard| matches(&document, guard)))
        .copied())
}

/// A JSON value with every object's members in order (keys known unique).
#[derive(Debug)]
enum Strict {
    /// A string, decoded.
    String(String),
    /// An array.
    Array(Vec<Strict>),
    /// An object.
    Object(Vec<(String, Strict)>),
    /// A number, bool or null (never compared, only found).
    Other,
}

fn parse(text: &str) -> Result<Strict, Uninspectable> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let document = Strict::deserialize(&mut deserializer).map_err(|error| {
        let message = error.to_string();
        match message.strip_prefix(DUPLICATE) {
            Some(rest) => {
                Uninspectable::DuplicateKey(rest.split(" at line").next().unwrap_or(rest).into())
            }
            None => Uninspectable::Json(message),
        }
    })?;
    deserializer
        .end()
        .map_err(|error| Uninspectable::Json(error.to_string()))?;
    Ok(document)
}

const DUPLICATE: &str = "duplicate key ";

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Strict, E> {
        Ok(Strict::Other)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Strict, E> {
        Ok(Strict::String(text.to_owned()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Strict, E> {
        Ok(Strict::String(text))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Strict::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("{DUPLICATE}{key}")));
            }
            members.push((key, map.next_value()?));
        }
        Ok(Strict::Object(members))
    }
}

/// Whether `guard` finds a refused value in `document`.
fn matches(document: &Strict, guard: &JsonDeny) -> bool {
    found(document, &guard.path.segments, guard)
}

fn found(value: &Strict, segments: &[Segment], guard: &JsonDeny) -> bool {
    let Some((segment, rest)) = segments.split_first() else {
        return match value {
            Strict::String(text) => guard.refuses_string(text),
            _ => guard.refuses_non_string(),
        };
    };
    match value {
        Strict::Object(members) => members
            .iter()
            .filter(|(key, _)| segment.selects_key(key))
            .any(|(_, member)| found(member, rest, guard)),
        Strict::Array(items) => items
            .iter()
            .enumerate()
            .filter(|(index, _)| segment.selects_index(*index))
            .any(|(_, item)| found(item, rest, guard)),
        Strict::String(_) | Strict::Other => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::load::load_str;
    use proptest::prelude::*;

    /// The allow rules of a policy with one rule on a.com guarded by `guards` (YAML flow).
    fn rules(guards: &str) -> Vec<Rule> {
        let text = format!(
            "version: 1\nnetwork:\n  allow:\n    - host: a.com\n      json_deny: {guards}\n"
        );
        load_str("p.yaml", &text).unwrap().network.allow
    }

    fn refused(body: &str, guards: &str) -> Result<bool, Uninspectable> {
        let rules = rules(guards);
        let refs: Vec<&Rule> = rules.iter().collect();
        refusing_rule(body.as_bytes(), &refs).map(|rule| rule.is_some())
    }

    const TOOLS: &str =
        r#"[{path: "/tools/*/type", values: ["web_search", "web_search_preview*"]}]"#;

    #[test]
    fn the_issue_example() {
        let ok = r#"{"model":"m","tools":[{"type":"function","name":"web_search"}]}"#;
        assert_eq!(refused(ok, TOOLS), Ok(false));
        let bad = r#"{"model":"m","tools":[{"type":"function"},{"type":"web_search"}]}"#;
        assert_eq!(refused(bad, TOOLS), Ok(true));
        let preview = r#"{"tools":[{"type":"web_search_preview_2025_03_11"}]}"#;
        assert_eq!(refused(preview, TOOLS), Ok(true));
        let escaped = r#"{"tools":[{"type":"web\u005fsearch"}]}"#;
        assert_eq!(refused(escaped, TOOLS), Ok(true));
        let escaped_key = r#"{"t\u006fols":[{"typ\u0065":"web_search"}]}"#;
        assert_eq!(refused(escaped_key, TOOLS), Ok(true));
        let case = r#"{"tools":[{"type":"Web_Search"}]}"#;
        assert_eq!(refused(case, TOOLS), Ok(false));
        // `*` covers object members too.
        let object = r#"{"tools":{"x":{"type":"web_search"}}}"#;
        assert_eq!(refused(object, TOOLS), Ok(true));
    }

    #[test]
    fn a_guard_without_values_refuses_any_value_at_the_path() {
        let guards = r#"[{path: "/stream"}]"#;
        assert_eq!(refused(r#"{"stream":false}"#, guards), Ok(true));
        assert_eq!(refused(r#"{"stream":null}"#, guards), Ok(true));
        assert_eq!(refused(r#"{"streams":true}"#, guards), Ok(false));
        assert_eq!(refused(r#"[{"stream":true}]"#, guards), Ok(false));
        assert_eq!(refused("", guards), Ok(false));
    }

    #[test]
    fn values_match_strings_only_and_indexes_are_exact() {
        let guards = r#"[{path: "/a/1", values: ["1", "*"]}]"#;
        assert_eq!(refused(r#"{"a":[0, 1]}"#, guards), Ok(false));
        assert_eq!(refused(r#"{"a":["x", "y"]}"#, guards), Ok(true));
        assert_eq!(refused(r#"{"a":["x"]}"#, guards), Ok(false));
        assert_eq!(refused(r#"{"a":{"1":"y"}}"#, guards), Ok(true));
        assert_eq!(refused(r#"{"a":{"01":"y"}}"#, guards), Ok(false));
    }

    #[test]
    fn escaped_path_segments() {
        let guards = r#"[{path: "/a~1b/~0c"}]"#;
        assert_eq!(refused(r#"{"a/b":{"~c":1}}"#, guards), Ok(true));
        assert_eq!(refused(r#"{"a":{"b":{"~c":1}}}"#, guards), Ok(false));
    }

    #[test]
    fn bodies_that_are_not_strict_json_are_uninspectable() {
        for body in [
            r#"{"tools":[{"type":"function","type":"web_search"}]}"#,
            r#"{"a":1,"a":1}"#,
            r#"{"x":[{"deep":{"k":1,"k":2}}]}"#,
            r#"{"a":1} {"b":2}"#,
            r#"{"a":1,}"#,
            "\u{feff}{}",
            "{'a':1}",
            r#"{"a":"\ud800"}"#,
            " ",
            "nul",
        ] {
            assert!(refused(body, TOOLS).is_err(), "{body:?} passed");
        }
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(refused(&too_deep, TOOLS).is_err());
        let rules = rules(TOOLS);
        let refs: Vec<&Rule> = rules.iter().collect();
        assert_eq!(
            refusing_rule(b"{\"a\":\"\xff\"}", &refs),
            Err(Uninspectable::NotUtf8)
        );
        assert!(matches!(
            refused(r#"{"k":1,"k":2}"#, TOOLS),
            Err(Uninspectable::DuplicateKey(key)) if key == "k"
        ));
    }

    #[test]
    fn the_first_refusing_rule_is_named() {
        let text = "version: 1\nnetwork:\n  allow:\n    - host: a.com\n      json_deny: [{path: /a}]\n    - host: a.com\n      json_deny: [{path: /b}]\n";
        let rules = load_str("p.yaml", text).unwrap().network.allow;
        let refs: Vec<&Rule> = rules.iter().collect();
        let id = |body: &str| {
            refusing_rule(body.as_bytes(), &refs)
                .unwrap()
                .map(|r| r.id.clone())
        };
        assert_eq!(id(r#"{"b":1}"#).as_deref(), Some("network.allow[1]"));
        assert_eq!(id(r#"{"a":1,"b":1}"#).as_deref(), Some("network.allow[0]"));
        assert_eq!(id(r#"{"c":1}"#), None);
    }

    proptest! {
        /// However the denied value is spelled (any character `\u`-escaped) and wherever
        /// its tool sits among others, it is refused; other values pass.
        #[test]
        fn escaped_spellings_are_caught(
            escape in proptest::collection::vec(any::<bool>(), 10),
            before in 0usize..4,
            other in "[a-z_]{1,12}",
        ) {
            let spelled: String = "web_search"
                .chars()
                .zip(escape)
                .map(|(c, e)| if e { format!("\\u{:04x}", c as u32) } else { c.to_string() })
                .collect();
            let filler = r#"{"type":"function"},"#.repeat(before);
            let body = format!(r#"{{"tools":[{filler}{{"type":"{spelled}"}}]}}"#);
            prop_assert_eq!(refused(&body, TOOLS), Ok(true));
            let fine = format!(r#"{{"tools":[{filler}{{"type":"x{other}"}}]}}"#);
            prop_assert_eq!(refused(&fine, TOOLS), Ok(false));
        }

        /// Any JSON serde_json writes from a map without duplicates parses; adding a
        /// duplicate of any key makes it uninspectable.
        #[test]
        fn duplicates_anywhere_are_refused(keys in proptest::collection::btree_set("[a-z]{1,4}", 1..5), depth in 0usize..4) {
            let members: Vec<String> = keys.iter().map(|k| format!("\"{k}\":1")).collect();
            let object = format!("{{{}}}", members.join(","));
            let wrap = |inner: String| (0..depth).fold(inner, |acc, _| format!("{{\"w\":[{acc}]}}"));
            prop_assert!(refused(&wrap(object.clone()), TOOLS).is_ok());
            let first = keys.iter().next().unwrap();
            let duplicated = format!("{{{},\"{first}\":2}}", members.join(","));
            prop_assert!(refused(&wrap(duplicated), TOOLS).is_err());
        }
    }
}
