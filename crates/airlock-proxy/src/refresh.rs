//! What the proxy is told about OAuth refreshes of projected logins (docs/secrets.md,
//! "Refreshes"): the logins it watches ([`Watch`]) and the sink the real refreshed tokens
//! go to ([`RefreshSink`]). The proxy does no file I/O about home files: the session's
//! sink writes the host file back.

use std::sync::{Arc, Mutex};

pub use airlock_credfiles::refresh::{Field, NewTokens, Watch};

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
    /// Held while the credential store is replaced after a refresh, so that two refreshes
    /// at once both land.
    pub(crate) swapping: Mutex<()>,
}

impl Refreshes {
    /// Watches `watches`, handing refreshed tokens to `sink`.
    pub fn new(watches: Vec<Watch>, sink: Arc<dyn RefreshSink>) -> Self {
        Refreshes {
            watches,
            sink,
            swapping: Mutex::new(()),
        }
    }
}

impl std::fmt::Debug for Refreshes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refreshes")
            .field("watches", &self.watches)
            .finish_non_exhaustive()
    }
}
