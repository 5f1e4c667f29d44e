//! airlock's credential files (docs/secrets.md, "Credential files"): the table of the
//! stores developers' tools keep their logins in, a parser for each, the projection the
//! command inside sees (the same file, same shape, every token a surrogate), and the
//! write-back of tokens an OAuth refresh brought. Pure: the caller reads and writes files.
//!
//! A projection parses the file to *find* its tokens and where they belong, replaces each
//! token's exact occurrences in the bytes by its surrogate (so everything else, key order,
//! comments and spacing included, is kept), then parses the result again and checks that
//! every token it finds is a surrogate and that no real value is left. Anything else is an
//! error, and the caller hides the file: it is never shown raw.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

mod formats;
mod json_stores;
mod project;
pub mod refresh;
pub mod stores;
mod sweep;
mod text_stores;
pub mod token;

use std::fmt;

pub use project::{Projection, Token, project};
pub use token::token_surrogate;

/// Every projected secret's name starts with this: such a secret is never put in the
/// command's environment (its name is not a variable name).
pub const SECRET_PREFIX: &str = "file:";

/// Files larger than this are hidden rather than projected.
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// A store of logins in the user's home that airlock knows how to project.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Store {
    /// Claude Code: `~/.claude/.credentials.json`.
    Claude,
    /// OpenAI Codex: `~/.codex/auth.json`.
    Codex,
    /// GitHub CLI: `~/.config/gh/hosts.yml`.
    Gh,
    /// git's `store` credential helper: `~/.git-credentials`.
    Git,
    /// Docker: `~/.docker/config.json`.
    Docker,
    /// npm: `~/.npmrc`.
    Npm,
    /// Python packaging (twine): `~/.pypirc`.
    Pypi,
    /// curl, git and others: `~/.netrc`.
    Netrc,
}

impl Store {
    /// Every store, in table order.
    pub const ALL: [Store; 8] = [
        Store::Claude,
        Store::Codex,
        Store::Gh,
        Store::Git,
        Store::Docker,
        Store::Npm,
        Store::Pypi,
        Store::Netrc,
    ];

    /// The store's name in policies and messages.
    pub fn name(self) -> &'static str {
        match self {
            Store::Claude => "claude",
            Store::Codex => "codex",
            Store::Gh => "gh",
            Store::Git => "git",
            Store::Docker => "docker",
            Store::Npm => "npm",
            Store::Pypi => "pypi",
            Store::Netrc => "netrc",
        }
    }

    /// The store named `name`, if any.
    pub fn from_name(name: &str) -> Option<Store> {
        Store::ALL.into_iter().find(|store| store.name() == name)
    }

    /// The store's file, relative to the home directory.
    pub fn home_path(self) -> &'static str {
        stores::spec(self).path
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a file cannot be projected (and is hidden). Never holds a value from the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectError {
    /// The file is not in its store's format.
    #[error("cannot be parsed as {0}")]
    Parse(&'static str),
    /// A field that looks like a credential the table does not say where to send.
    #[error("holds a credential airlock does not know where to send ({0})")]
    Unplaced(String),
    /// A token too short (or without letters or digits) to be given a surrogate.
    #[error("holds a token too short to be given a surrogate ({0})")]
    TooShort(String),
    /// The surrogate could not be put in place of the token, or a real value was left.
    #[error("its tokens could not all be replaced ({0})")]
    NotReplaced(String),
    /// A host named in the file is not a host name.
    #[error("names a host that is not valid ({0})")]
    BadHost(String),
}
