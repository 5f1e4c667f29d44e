//! The located node tree a policy document is read into (serde-saphyr builds it), and a
//! mapping's string-keyed entries.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::to_u32;

/// Where a node starts in the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Pos {
    pub(super) line: u32,
    pub(super) column: u32,
}

/// A located YAML node: the generic tree validation walks.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) pos: Pos,
    pub(super) kind: Kind,
}

/// What a node holds.
#[derive(Debug)]
pub(super) enum Kind {
    Null,
    Bool(bool),
    Int(i128),
    /// A number that is not an integer (its value is never needed: no field takes one).
    Float,
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Kind {
    /// How a value of this kind is named in messages (never its content).
    pub(super) fn described(&self) -> &'static str {
        match self {
            Kind::Null => "empty",
            Kind::Bool(_) => "true/false",
            Kind::Int(_) | Kind::Float => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<Kind>::deserialize(deserializer)?;
        Ok(Node {
            pos: Pos {
                line: to_u32(spanned.referenced.line()),
                column: to_u32(spanned.referenced.column()),
            },
            kind: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

/// Builds a [`Kind`] from whatever YAML value comes.
pub(super) struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Kind, D::Error> {
        Kind::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Kind, E> {
        Ok(Kind::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Kind, E> {
        Ok(Kind::Int(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Kind, E> {
        Ok(Kind::Int(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Kind, E> {
        Ok(Kind::Int(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Kind, E> {
        Ok(i128::try_from(value).map_or(Kind::Float, Kind::Int))
    }

    fn visit_f64<E: de::Error>(self, _value: f64) -> Result<Kind, E> {
        Ok(Kind::Float)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Kind, E> {
        Ok(Kind::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Kind, E> {
        Ok(Kind::Str(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Kind::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Kind::Map(entries))
    }
}

/// A mapping's entries with string keys: `(key, key position, value)`.
pub(super) struct Fields<'n> {
    pub(super) pos: Pos,
    pub(super) entries: Vec<(&'n str, Pos, &'n Node)>,
}

impl<'n> Fields<'n> {
    pub(super) fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(name, _, _)| *name == key)
            .map(|(_, _, node)| *node)
    }

    pub(super) fn key_pos(&self, key: &str) -> Option<Pos> {
        self.entries
            .iter()
            .find(|(name, _, _)| *name == key)
            .map(|(_, pos, _)| *pos)
    }
}
