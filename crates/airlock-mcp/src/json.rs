//! Strict JSON helpers: batches split into raw messages, objects read with unique keys,
//! values re-serialised with every untouched member kept byte for byte.

use std::fmt;

use serde::Deserialize;
use serde::Deserializer as _;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::Uninspectable;

/// Splits a body into its messages: `(true, messages)` for a batch (an array),
/// `(false, [message])` otherwise.
pub(crate) fn split_batch(text: &str) -> Result<(bool, Vec<&RawValue>), Uninspectable> {
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if trimmed.starts_with('[') {
        let messages: Vec<&RawValue> = parse_text(text)?;
        if messages.is_empty() {
            return Err(Uninspectable::EmptyBatch);
        }
        Ok((true, messages))
    } else {
        Ok((false, vec![parse_text(text)?]))
    }
}

fn parse_text<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, Uninspectable> {
    serde_json::from_str(text).map_err(|e| Uninspectable::Json(e.to_string()))
}

/// Parses one raw value as `T`.
pub(crate) fn parse_as<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Result<T, Uninspectable> {
    parse_text(raw.get())
}

/// A JSON string literal for `text`.
pub(crate) fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""))
}

/// A JSON-RPC id in one spelling, for comparing ids (`"\u0061"` and `"a"` are the same).
pub(crate) fn compact(raw: &str) -> String {
    match serde_json::from_str::<String>(raw) {
        Ok(text) => quote(&text),
        Err(_) => raw.trim().to_owned(),
    }
}

/// Whether a message is a request or notification (has a `method`), not a response.
pub(crate) fn is_request(raw: &RawValue) -> bool {
    Object::parse(raw).is_ok_and(|object| object.get("method").is_some())
}

/// A JSON object read member by member, refusing duplicate keys; members can be replaced.
pub(crate) struct Object<'a> {
    members: Vec<Member<'a>>,
}

struct Member<'a> {
    key: String,
    raw: &'a RawValue,
    replaced: Option<String>,
}

impl<'a> Object<'a> {
    /// Reads `raw` as an object: [`Uninspectable::NotAMessage`] if it is not one,
    /// [`Uninspectable::DuplicateKey`] if a key appears twice.
    pub(crate) fn parse(raw: &'a RawValue) -> Result<Self, Uninspectable> {
        if !raw.get().starts_with('{') {
            return Err(Uninspectable::NotAMessage);
        }
        let mut deserializer = serde_json::Deserializer::from_str(raw.get());
        match deserializer.deserialize_map(ObjectVisitor) {
            Ok(members) => Ok(Object { members }),
            Err(error) => {
                let text = error.to_string();
                match text.strip_prefix(DUPLICATE) {
                    Some(rest) => Err(Uninspectable::DuplicateKey(
                        rest.split(" at line").next().unwrap_or(rest).to_owned(),
                    )),
                    None => Err(Uninspectable::Json(text)),
                }
            }
        }
    }

    /// The raw value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.members.iter().find(|m| m.key == key).map(|m| m.raw)
    }

    /// Every key, decoded, in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.key.as_str())
    }

    /// Replaces the value of the existing member `key` by the JSON text `json`.
    pub(crate) fn set(&mut self, key: &str, json: &str) {
        if let Some(member) = self.members.iter_mut().find(|m| m.key == key) {
            member.replaced = Some(json.to_owned());
        }
    }

    /// The object as compact JSON, untouched members as they came.
    pub(crate) fn to_json(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                let value = m.replaced.as_deref().unwrap_or(m.raw.get());
                format!("{}:{value}", quote(&m.key))
            })
            .collect();
        format!("{{{}}}", members.join(","))
    }
}

const DUPLICATE: &str = "duplicate key ";

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Vec<Member<'de>>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members: Vec<Member<'de>> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if members.iter().any(|m| m.key == key) {
                return Err(de::Error::custom(format!("{DUPLICATE}{key}")));
            }
            let raw: &'de RawValue = map.next_value()?;
            members.push(Member {
                key,
                raw,
                replaced: None,
            });
        }
        Ok(members)
    }
}
