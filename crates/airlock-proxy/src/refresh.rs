//! What the proxy is told about OAuth refreshes of projected logins (docs/secrets.md,
//! "Refreshes"): the logins it watches ([`Watch`]), the sink the real refreshed tokens
//! go to ([`RefreshSink`]), the scopes each login's host file records (read once, as the
//! session builds [`Refreshes`]: the proxy itself does no file I/O about home files; the
//! session's sink writes the host file back), and one turn per login, so that two
//! refreshes of one login are never in flight at once.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

pub use airlock_credfiles::refresh::{Field, NewTokens, Watch};
use airlock_credfiles::refresh::{Login, scope};

/// Takes the tokens of each successful refresh the proxy carried out for the command, in
/// the order the proxy swapped its credentials, before the command gets the answer.
/// Called on the request's task (a small file write is fine; nothing long). Only an
/// unambiguous refresh grant of the projected refresh token at its login's token endpoint
/// reaches it: every other request carrying a projected token to a token host is refused
/// 403, every other 2xx from a token host holding token fields 502 (docs/secrets.md).
pub trait RefreshSink: Send + Sync {
    /// `real` (real values) replace `watch`'s login's tokens, `shown` are their new
    /// surrogates (what the command got). `host` says whether the request was a refresh
    /// grant of the projected refresh token: only then may the host's file change; the
    /// command's projected copy follows `shown` either way.
    fn refreshed(&self, watch: &Watch, real: NewTokens, shown: NewTokens, host: bool);
}

/// The refreshes a proxy carries out: the watched logins and the sink.
pub struct Refreshes {
    /// The watched logins.
    pub watches: Vec<Watch>,
    /// Where the real tokens go.
    pub sink: Arc<dyn RefreshSink>,
    /// Per watch, the scopes its host file records (`None`: none recorded, `scope` is
    /// not compared): a refresh grant's `scope` must keep them all.
    pub(crate) scopes: Vec<Option<Vec<String>>>,
    /// Per watch, its turn: held by a refresh grant from the moment it is screened until
    /// its answer is taken in (or it failed), so that a second grant of the same login
    /// waits and then finds its surrogate retired (docs/secrets.md, "Refreshes").
    pub(crate) turns: Vec<Arc<tokio::sync::Mutex<()>>>,
    /// Held while the credential store is replaced after a refresh, so that two refreshes
    /// at once both land.
    pub(crate) swapping: Mutex<()>,
}

/// The largest host file read for its scopes.
const MAX_FILE: u64 = airlock_credfiles::MAX_FILE_SIZE;

impl Refreshes {
    /// Watches `watches`, handing refreshed tokens to `sink`. Reads each watch's host
    /// file once for the scopes it records (a file that cannot be read records none).
    pub fn new(watches: Vec<Watch>, sink: Arc<dyn RefreshSink>) -> Self {
        let scopes = watches
            .iter()
            .map(|watch| recorded_scopes(watch.login, &watch.file))
            .collect();
        let turns = watches.iter().map(|_| Arc::default()).collect();
        Refreshes {
            watches,
            sink,
            scopes,
            turns,
            swapping: Mutex::new(()),
        }
    }
}

/// The scopes `file` (a host file of `login`) records: read without following a link or
/// blocking, a regular file of at most [`MAX_FILE`] bytes, else none.
fn recorded_scopes(login: Login, file: &Path) -> Option<Vec<String>> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(file)
        .ok()?;
    if !opened.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    opened.take(MAX_FILE + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > MAX_FILE {
        return None;
    }
    scope::recorded_scopes(login, &bytes)
}

impl std::fmt::Debug for Refreshes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refreshes")
            .field("watches", &self.watches)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl RefreshSink for Nowhere {
        fn refreshed(&self, _: &Watch, _: NewTokens, _: NewTokens, _: bool) {}
    }

    fn watch(login: Login, file: &Path) -> Watch {
        Watch {
            login,
            file: file.to_owned(),
            copy: None,
            secrets: Vec::new(),
        }
    }

    /// rereview35 G8: the scopes are read once from the host file, never through a link.
    #[test]
    fn the_host_files_scopes_are_read_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(".credentials.json");
        let text = br#"{"claudeAiOauth":{"accessToken":"a","scopes":["user:inference"]}}"#;
        std::fs::write(&file, text).expect("write");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        let watches = vec![
            watch(Login::Claude, &file),
            watch(Login::Codex, &file),
            watch(Login::Claude, &link),
            watch(Login::Claude, &dir.path().join("absent.json")),
        ];
        let refreshes = Refreshes::new(watches, Arc::new(Nowhere));
        assert_eq!(
            refreshes.scopes,
            [Some(vec!["user:inference".to_owned()]), None, None, None]
        );
        assert_eq!(refreshes.turns.len(), 4);
    }
}
