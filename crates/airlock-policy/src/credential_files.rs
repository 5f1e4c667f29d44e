//! The `credentials` section (docs/policy.md, "credentials"): which of the user's
//! credential files the command sees projected with surrogates (`files`), and which it
//! never sees at all (`hide`). The stores themselves (paths, formats, hosts) are the
//! `airlock-credfiles` crate's table; this module only knows their names.

/// The stores a policy may name, in the table's order (`airlock-credfiles` checks that
/// its table has exactly these).
pub const STORE_NAMES: [&str; 8] = [
    "claude", "codex", "gh", "git", "docker", "npm", "pypi", "netrc",
];

/// The `credentials` section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CredentialFiles {
    /// Stores projected with surrogates (`files:`), in [`STORE_NAMES`] order.
    pub projected: Vec<String>,
    /// Stores hidden outright (`hide:`): wins over `files` of every source, agent
    /// profiles included.
    pub hidden: Vec<String>,
}

impl CredentialFiles {
    /// Adds another source's section: both lists are joined.
    pub fn merge(&mut self, other: CredentialFiles) {
        for name in other.projected {
            if !self.projected.contains(&name) {
                self.projected.push(name);
            }
        }
        for name in other.hidden {
            if !self.hidden.contains(&name) {
                self.hidden.push(name);
            }
        }
        self.projected
            .sort_by_key(|name| STORE_NAMES.iter().position(|known| known == name));
        self.hidden
            .sort_by_key(|name| STORE_NAMES.iter().position(|known| known == name));
    }

    /// Whether the store `name` is projected (named in `files`, not in `hide`).
    pub fn is_projected(&self, name: &str) -> bool {
        self.projected.iter().any(|n| n == name) && !self.is_hidden(name)
    }

    /// Whether the store `name` is hidden (named in `hide`).
    pub fn is_hidden(&self, name: &str) -> bool {
        self.hidden.iter().any(|n| n == name)
    }

    /// Whether the section says nothing.
    pub fn is_empty(&self) -> bool {
        self.projected.is_empty() && self.hidden.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hide_wins_over_files_of_every_source() {
        let mut section = CredentialFiles {
            projected: vec!["gh".into(), "claude".into()],
            hidden: Vec::new(),
        };
        section.merge(CredentialFiles {
            projected: vec!["claude".into()],
            hidden: vec!["gh".into()],
        });
        assert_eq!(section.projected, ["claude", "gh"]);
        assert!(section.is_projected("claude"));
        assert!(!section.is_projected("gh") && section.is_hidden("gh"));
        assert!(!section.is_projected("npm"));
    }

    #[test]
    fn policies_read_the_section() {
        let policy = crate::load::load_str(
            "p.yaml",
            "version: 1\ncredentials:\n  files: all\n  hide: [netrc]\n",
        )
        .expect("policy");
        assert_eq!(policy.credentials.projected.len(), STORE_NAMES.len());
        assert!(!policy.credentials.is_projected("netrc"));
        let policy =
            crate::load::load_str("p.yaml", "version: 1\ncredentials:\n  files: [gh, npm]\n")
                .expect("policy");
        assert_eq!(policy.credentials.projected, ["gh", "npm"]);
        let error =
            crate::load::load_str("p.yaml", "version: 1\ncredentials:\n  files: [github]\n")
                .expect_err("unknown store");
        assert!(
            error.to_string().contains("not a credential store"),
            "{error}"
        );
        assert!(
            crate::load::load_str("p.yaml", "version: 1\ncredentials:\n  file: [gh]\n").is_err()
        );
    }
}
