//! Sandbox names: what may name a directory, a container and a label safely.

use crate::SandboxError;

/// A validated sandbox name: 1 to 63 characters of `a-z`, `0-9`, `-`, `_` and `.`,
/// starting with a letter or digit (safe as a directory, a container name and a label).
/// Serialised as its text; deserialising checks it as [`SandboxName::parse`] does.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct SandboxName(String);

impl SandboxName {
    /// Checks `text`.
    pub fn parse(text: &str) -> Result<SandboxName, SandboxError> {
        let valid_first = text
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let valid_rest = text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
        if valid_first && valid_rest && text.len() <= 63 {
            Ok(SandboxName(text.to_owned()))
        } else {
            Err(SandboxError::InvalidName(text.to_owned()))
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SandboxName {
    type Error = SandboxError;

    fn try_from(text: String) -> Result<SandboxName, SandboxError> {
        SandboxName::parse(&text)
    }
}

impl From<SandboxName> for String {
    fn from(name: SandboxName) -> String {
        name.0
    }
}

impl std::fmt::Display for SandboxName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["a", "task-1", "t.2_x", "0abc"] {
            assert!(SandboxName::parse(good).is_ok(), "{good}");
        }
        let long = "a".repeat(64);
        for bad in ["", "-a", ".a", "A", "a/b", "..", "a b", "ä", long.as_str()] {
            assert!(SandboxName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_deserialised_name_is_checked() {
        let name: SandboxName = serde_json::from_str("\"task-1\"").expect("good");
        assert_eq!(name.as_str(), "task-1");
        assert_eq!(serde_json::to_string(&name).expect("json"), "\"task-1\"");
        assert!(serde_json::from_str::<SandboxName>("\"../x\"").is_err());
    }
}
