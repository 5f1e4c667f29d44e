//! The native policy loader: a `version: 1` document (YAML, or JSON of the same structure)
//! becomes a validated [`Policy`], or every error in it, each located at `file:line:col`.
//!
//! The document is first read by serde-saphyr into a small tree of located nodes ([`Node`]);
//! a syntax error there is the only error reported. Everything else is checked by walking
//! that tree, so one bad entry never hides the next: the caller gets all of them at once and
//! nothing is ever half-loaded. Rule ids (`network.allow[0]`, `network.deny[1]`, `mcp[0]`)
//! are counted in file order and are not prefixed here (see [`Policy::combine`]).

use std::fmt;

mod checker;
mod credentials;
mod dlp;
mod filesystem;
mod limits;
mod mcp;
mod network;
mod node;
mod routes;
mod secrets;

use crate::model::Policy;
use checker::{Checker, nearest};
use node::{Kind, Node};

/// One error with the place in a document it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The name of the document (as given to [`load_str`]).
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column (in characters).
    pub column: u32,
    /// What is wrong and how to fix it; a single line.
    pub message: String,
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

/// A document that could not be loaded, with every error found in it (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The errors, in document order.
    pub errors: Vec<Located>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.errors.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

/// Load a native policy document. `file` is the name used in error messages; `text` is
/// YAML (`version: 1`) or JSON of the same structure. Returns the validated policy, or
/// every error found, each located.
pub fn load_str(file: &str, text: &str) -> Result<Policy, LoadError> {
    let options = serde_saphyr::options! {
        with_snippet: false,
        strict_booleans: true,
    };
    let root = match serde_saphyr::from_str_with_options::<Option<Node>>(text, options) {
        Ok(root) => root,
        Err(error) => {
            return Err(LoadError {
                errors: vec![syntax_error(file, &error)],
            });
        }
    };
    let mut checker = Checker {
        file,
        errors: Vec::new(),
    };
    let policy = checker.policy(root.as_ref());
    checker
        .errors
        .sort_by_key(|error| (error.line, error.column));
    if checker.errors.is_empty() {
        Ok(policy)
    } else {
        Err(LoadError {
            errors: checker.errors,
        })
    }
}

/// Turn a serde-saphyr error into one located error with a message a user can act on.
fn syntax_error(file: &str, error: &serde_saphyr::Error) -> Located {
    let (line, column) = error.location().map_or((1, 1), |location| {
        (to_u32(location.line()), to_u32(location.column()))
    });
    let mut original = error;
    while let serde_saphyr::Error::AliasError { error: inner, .. }
    | serde_saphyr::Error::WithSnippet { error: inner, .. } = original
    {
        original = inner;
    }
    let message = match original {
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => match key {
            Some(key) => format!(
                "the key `{}` appears twice in the same mapping: keep only one",
                shown(key)
            ),
            None => "a key appears twice in the same mapping: keep only one".to_owned(),
        },
        serde_saphyr::Error::MultipleDocuments { .. } => {
            "a policy is one YAML document: remove the second `---` and everything after it, or split it into another file".to_owned()
        }
        serde_saphyr::Error::Budget { breach, .. } => format!(
            "the document is too large, too deeply nested or expands too many aliases for a policy ({}): write it out plainly",
            shown(&format!("{breach:?}"))
        ),
        other => {
            let formatter = serde_saphyr::DefaultMessageFormatter;
            let text = serde_saphyr::MessageFormatter::format_message(&formatter, other);
            format!("syntax error: {}: fix the YAML (or JSON) here", shown(&text))
        }
    };
    Located {
        file: file.to_owned(),
        line,
        column,
        message,
    }
}

/// A 1-based position that saphyr reports as `u64` (0 when unknown: shown as 1).
fn to_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX).max(1)
}

/// User text inside a one-line message: control characters escaped, at most 120 characters.
fn shown(text: &str) -> String {
    const MAX_CHARS: usize = 120;
    let mut out: String = text.chars().take(MAX_CHARS).collect::<String>();
    if text.chars().nth(MAX_CHARS).is_some() {
        out.push('…');
    }
    out.escape_debug().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_and_truncates() {
        assert_eq!(shown("a\nb"), "a\\nb");
        assert_eq!(shown(&"x".repeat(500)).chars().count(), 121);
    }
}
