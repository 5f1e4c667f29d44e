//! Where values sit in a JSON document, by byte: a small walker over a document that
//! `serde_json` already accepted, recording the span of every object and scalar value
//! under its key path, so that a rewrite can replace exactly those bytes and leave every
//! other byte (key order, spacing, unknown fields) as it was.

use std::ops::Range;

/// How deep the walker follows nesting; deeper documents are refused.
const MAX_DEPTH: usize = 64;

/// One value found in the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// The object keys leading to the value (array elements are not followed).
    pub(crate) path: Vec<String>,
    /// The value's bytes (for an object: from `{` to `}` included).
    pub(crate) range: Range<usize>,
    /// What the value is.
    pub(crate) kind: Kind,
}

/// The kind of a value found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    String,
    /// A number, `true`, `false` or `null`.
    Other,
    Array,
}

/// Every value of `document` reached through object keys only, in document order.
/// `None` when the document is not one JSON value (checked with `serde_json` first) or
/// nests deeper than [`MAX_DEPTH`].
pub(crate) fn spans(document: &[u8]) -> Option<Vec<Span>> {
    serde_json::from_slice::<serde_json::Value>(document).ok()?;
    let mut walker = Walker {
        bytes: document,
        at: 0,
        found: Vec::new(),
    };
    walker.skip_space();
    walker.value(&mut Vec::new(), 0)?;
    Some(walker.found)
}

struct Walker<'a> {
    bytes: &'a [u8],
    at: usize,
    found: Vec<Span>,
}

impl Walker<'_> {
    fn skip_space(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn value(&mut self, path: &mut Vec<String>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let start = self.at;
        let kind =
            match *self.bytes.get(self.at)? {
                b'{' => {
                    self.object(path, depth)?;
                    Kind::Object
                }
                b'[' => {
                    self.array(depth)?;
                    Kind::Array
                }
                b'"' => {
                    self.string()?;
                    Kind::String
                }
                _ => {
                    while self.bytes.get(self.at).is_some_and(|b| {
                        !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace()
                    }) {
                        self.at += 1;
                    }
                    Kind::Other
                }
            };
        self.found.push(Span {
            path: path.clone(),
            range: start..self.at,
            kind,
        });
        Some(())
    }

    fn object(&mut self, path: &mut Vec<String>, depth: usize) -> Option<()> {
        self.at += 1;
        loop {
            self.skip_space();
            match *self.bytes.get(self.at)? {
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                b',' => {
                    self.at += 1;
                    continue;
                }
                _ => {}
            }
            let key_start = self.at;
            self.string()?;
            let key: String = serde_json::from_slice(&self.bytes[key_start..self.at]).ok()?;
            self.skip_space();
            (self.bytes.get(self.at)? == &b':').then_some(())?;
            self.at += 1;
            self.skip_space();
            path.push(key);
            let walked = self.value(path, depth + 1);
            path.pop();
            walked?;
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.at += 1;
        // Array elements are walked for their extent only: nothing inside is recorded.
        let recorded = self.found.len();
        loop {
            self.skip_space();
            match *self.bytes.get(self.at)? {
                b']' => {
                    self.at += 1;
                    self.found.truncate(recorded);
                    return Some(());
                }
                b',' => self.at += 1,
                _ => self.value(&mut vec!["[]".to_owned()], depth + 1)?,
            }
        }
    }

    fn string(&mut self) -> Option<()> {
        (self.bytes.get(self.at)? == &b'"').then_some(())?;
        self.at += 1;
        loop {
            match *self.bytes.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                _ => self.at += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_values_with_their_bytes() {
        let doc = br#" {"a": {"b\"c": "x\"y", "n": 12, "l": [ {"z": "q"} ]}, "t": true } "#;
        let found = spans(doc).expect("spans");
        let at = |path: &[&str]| {
            let span = found
                .iter()
                .find(|s| s.path == path)
                .unwrap_or_else(|| panic!("{path:?}"));
            std::str::from_utf8(&doc[span.range.clone()]).unwrap()
        };
        assert_eq!(at(&["a", "b\"c"]), r#""x\"y""#);
        assert_eq!(at(&["a", "n"]), "12");
        assert_eq!(at(&["a", "l"]), r#"[ {"z": "q"} ]"#);
        assert_eq!(at(&["t"]), "true");
        assert!(at(&["a"]).starts_with('{') && at(&["a"]).ends_with('}'));
        assert!(!found.iter().any(|s| s.path.iter().any(|k| k == "z")));
    }

    #[test]
    fn refuses_what_is_not_json() {
        assert!(spans(b"{\"a\": }").is_none());
        assert!(spans(b"").is_none());
        let deep = format!(
            "{}{}",
            "{\"a\":".repeat(100),
            "1".to_owned() + &"}".repeat(100)
        );
        assert!(spans(deep.as_bytes()).is_none());
    }
}
