//! The outbound guard (docs/security.md, "Outbound guard"): what the command sends is
//! searched for the real value of every configured secret, in every form a value is known
//! to take (raw, base64 standard and URL-safe at every alignment, URL-encoded,
//! JSON-escaped), and for the well-known credential formats of [`airlock_dlp::FORMATS`].
//! A real value may go only to its secret's hosts, over TLS; a format token that is
//! neither a surrogate nor a configured value only where `dlp.allow` names it.
//!
//! One set of patterns holds every value form and every format prefix; searches are
//! overlapping, so that no match can hide another, and start at the leftmost candidate
//! found by a [`Finder`] (most data holds none). [`GuardStream`] searches a body as it
//! streams, holding back only the last `longest - 1` bytes of what it has seen (the most
//! that could still be the start of a match) and never copying a large chunk.

use std::collections::HashSet;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use airlock_dlp::Verdict;
use airlock_policy::Reason;
use airlock_policy::model::DlpMode;
use bytes::Bytes;
use http::HeaderMap;

use crate::finder::Finder;
use crate::redact::encoded_forms;
pub use crate::released::Released;

/// A chunk shorter than this is joined to the bytes held back instead of searched apart.
const SMALL_CHUNK: usize = 4096;

/// What a pattern of the automaton stands for.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// A form of the real value of secret `secret` (index in policy order).
    Real { secret: usize },
    /// A prefix of `airlock_dlp::FORMATS[format]`.
    Format { format: usize, prefix_len: usize },
}

/// The guard for one set of credentials. Cheap to clone.
#[derive(Clone)]
pub struct OutboundGuard {
    inner: Arc<Inner>,
}

struct Inner {
    /// Every pattern: finds where the first candidate starts, at SIMD speed on any data
    /// (the overlapping search below has no such prefilter).
    first: Finder,
    /// The same patterns, for the overlapping search from that first candidate on.
    matcher: AhoCorasick,
    targets: Vec<Target>,
    /// The longest match or format decision, in bytes.
    longest: usize,
    /// Surrogates and real values: a format token equal to one of them is not "unknown".
    known: HashSet<Box<[u8]>>,
    names: Vec<String>,
}

impl std::fmt::Debug for OutboundGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundGuard").finish_non_exhaustive()
    }
}

/// Where one secret's real value may go, for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueScope {
    /// The destination is one of the secret's hosts, over TLS: the value passes.
    Home,
    /// The destination is one of its hosts, in clear: refused (`"form":"cleartext"`).
    Cleartext,
    /// Anywhere else: refused (`"form":"real"`).
    Foreign,
}

/// What the guard looks for in one request.
#[derive(Clone, Debug)]
pub struct GuardScope {
    /// Per secret, in policy order.
    pub values: Vec<ValueScope>,
    /// `dlp.credentials`.
    pub formats: DlpMode,
    /// The kinds `dlp.allow` lets go to this destination; `None` = every kind.
    pub allowed_kinds: Option<Vec<String>>,
}

/// How a refused credential travelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// A configured secret's real value, towards a host outside its `hosts`.
    Real,
    /// A configured secret's real value (or surrogate), towards its host over plain HTTP.
    Cleartext,
    /// A well-known credential format.
    Format,
}

impl Form {
    /// The audit spelling (`"form"`), `None` for a format token (its line names the kind).
    pub fn as_audit(self) -> Option<&'static str> {
        match self {
            Form::Real => Some("real"),
            Form::Cleartext => Some("cleartext"),
            Form::Format => None,
        }
    }
}

/// A credential found on its way out. Never holds the value itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// `secret_out_of_scope` for a real value, `credential_outbound` for a format token.
    pub reason: Reason,
    /// How it travelled.
    pub form: Form,
    /// The secret whose value it is (real values).
    pub secret: Option<String>,
    /// The format's kind (format tokens).
    pub kind: Option<&'static str>,
}

impl OutboundGuard {
    /// A guard for `(name, real value, surrogate)` per secret in policy order, plus retired
    /// `(index, old value, old surrogate)` that still count as their secret's.
    pub(crate) fn new(
        secrets: &[(&str, &str, &str)],
        retired: &[(usize, &str, &str)],
    ) -> Result<Self, aho_corasick::BuildError> {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut targets = Vec::new();
        let mut known = HashSet::new();
        let values = secrets
            .iter()
            .enumerate()
            .map(|(index, (_, real, surrogate))| (index, *real, *surrogate))
            .chain(retired.iter().copied());
        for (secret, real, surrogate) in values {
            known.insert(Box::from(real.as_bytes()));
            known.insert(Box::from(surrogate.as_bytes()));
            for form in encoded_forms(real) {
                if !form.is_empty() && !patterns.iter().any(|p| p == form.as_bytes()) {
                    patterns.push(form.into_bytes());
                    targets.push(Target::Real { secret });
                }
            }
        }
        for (prefix, format) in airlock_dlp::prefixes() {
            patterns.push(prefix.as_bytes().to_vec());
            targets.push(Target::Format {
                format,
                prefix_len: prefix.len(),
            });
        }
        let longest = patterns
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(0)
            .max(airlock_dlp::lookahead());
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&patterns)?;
        let first = Finder::new(&patterns)?;
        Ok(OutboundGuard {
            inner: Arc::new(Inner {
                first,
                matcher,
                targets,
                longest,
                known,
                names: secrets
                    .iter()
                    .map(|(name, _, _)| (*name).to_owned())
                    .collect(),
            }),
        })
    }

    /// Searches a request's target (path and query, also once percent-decoded) and every
    /// header (name and value, an `Authorization: Basic` value also decoded). Returns the
    /// kinds found that `dlp: {credentials: log}` only logs, or the refusal.
    pub fn check_head(
        &self,
        scope: &GuardScope,
        target: &[u8],
        headers: &HeaderMap,
    ) -> Result<Vec<&'static str>, Finding> {
        let mut logged = Vec::new();
        let mut search = |data: &[u8]| self.inner.search(scope, data, true, &mut logged);
        search(target)?;
        if let Some(decoded) = crate::percent_decode(target) {
            search(&decoded)?;
        }
        for (name, value) in headers {
            search(name.as_str().as_bytes())?;
            search(value.as_bytes())?;
            if let Some(decoded) = crate::basic_credentials(value.as_bytes()) {
                search(&decoded)?;
            }
        }
        Ok(logged)
    }

    /// Searches one whole message (a WebSocket message, a body read whole).
    pub fn check_message(
        &self,
        scope: &GuardScope,
        data: &[u8],
    ) -> Result<Vec<&'static str>, Finding> {
        let mut logged = Vec::new();
        self.inner.search(scope, data, true, &mut logged)?;
        Ok(logged)
    }

    /// A search over a body that arrives in chunks.
    pub fn stream(&self, scope: GuardScope) -> GuardStream {
        GuardStream {
            inner: self.inner.clone(),
            scope,
            carry: Bytes::new(),
            logged: Vec::new(),
        }
    }
}

impl Inner {
    /// Searches `data`; `at_end` says nothing follows it (a format decision that needs more
    /// bytes is otherwise left for a later search that sees them).
    fn search(
        &self,
        scope: &GuardScope,
        data: &[u8],
        at_end: bool,
        logged: &mut Vec<&'static str>,
    ) -> Result<(), Finding> {
        // No match of any pattern starts before the leftmost one: most data holds none at
        // all and costs one prefiltered scan.
        let Some(first) = self.first.find(data) else {
            return Ok(());
        };
        let data = &data[first.start..];
        for found in self.matcher.find_overlapping_iter(data) {
            match self.targets[found.pattern().as_usize()] {
                Target::Real { secret } => self.real(scope, secret)?,
                Target::Format { format, prefix_len } => {
                    let from = &data[found.start()..];
                    self.format(scope, format, from, prefix_len, at_end, logged)?;
                }
            }
        }
        Ok(())
    }

    fn real(&self, scope: &GuardScope, secret: usize) -> Result<(), Finding> {
        let form = match scope.values.get(secret) {
            Some(ValueScope::Home) => return Ok(()),
            Some(ValueScope::Cleartext) => Form::Cleartext,
            Some(ValueScope::Foreign) | None => Form::Real,
        };
        Err(Finding {
            reason: Reason::SecretOutOfScope,
            form,
            secret: self.names.get(secret).cloned(),
            kind: None,
        })
    }

    fn format(
        &self,
        scope: &GuardScope,
        format: usize,
        from: &[u8],
        prefix_len: usize,
        at_end: bool,
        logged: &mut Vec<&'static str>,
    ) -> Result<(), Finding> {
        if scope.formats == DlpMode::Off {
            return Ok(());
        }
        let Verdict::Token { len } = airlock_dlp::examine(format, from, prefix_len, at_end) else {
            return Ok(());
        };
        let kind = airlock_dlp::FORMATS[format].kind;
        let allowed = scope
            .allowed_kinds
            .as_ref()
            .is_none_or(|kinds| kinds.iter().any(|k| k == kind));
        if allowed || self.known.contains(&from[..len]) {
            return Ok(());
        }
        if scope.formats == DlpMode::Log {
            if !logged.contains(&kind) {
                logged.push(kind);
            }
            return Ok(());
        }
        Err(Finding {
            reason: Reason::CredentialOutbound,
            form: Form::Format,
            secret: None,
            kind: Some(kind),
        })
    }
}

/// Searches a body chunk by chunk ([`OutboundGuard::stream`]): a credential split across
/// chunks (HTTP/1.1 chunks, HTTP/2 DATA frames) is found before any byte of it is released.
pub struct GuardStream {
    inner: Arc<Inner>,
    scope: GuardScope,
    /// The bytes seen but not yet released: at most `longest - 1`.
    carry: Bytes,
    logged: Vec<&'static str>,
}

impl GuardStream {
    /// Takes the next chunk; returns what may be sent on now, or the refusal (nothing of
    /// the credential released).
    pub fn push(&mut self, chunk: Bytes) -> Result<Released, Finding> {
        let hold = self.inner.longest.saturating_sub(1);
        if chunk.len() < SMALL_CHUNK.max(hold) {
            return self.push_small(&chunk, hold);
        }
        if !self.carry.is_empty() {
            // The seam: anything starting in the held bytes ends within `hold` bytes.
            let mut seam = Vec::with_capacity(self.carry.len() + hold);
            seam.extend_from_slice(&self.carry);
            seam.extend_from_slice(&chunk[..hold]);
            self.inner
                .search(&self.scope, &seam, false, &mut self.logged)?;
        }
        self.inner
            .search(&self.scope, &chunk, false, &mut self.logged)?;
        let split = chunk.len() - hold;
        Ok(Released {
            first: std::mem::replace(&mut self.carry, chunk.slice(split..)),
            second: chunk.slice(..split),
        })
    }

    fn push_small(&mut self, chunk: &[u8], hold: usize) -> Result<Released, Finding> {
        let mut pending = Vec::with_capacity(self.carry.len() + chunk.len());
        pending.extend_from_slice(&self.carry);
        pending.extend_from_slice(chunk);
        self.inner
            .search(&self.scope, &pending, false, &mut self.logged)?;
        let mut pending = Bytes::from(pending);
        let split = pending.len().saturating_sub(hold);
        self.carry = pending.split_off(split);
        Ok(Released {
            first: pending,
            second: Bytes::new(),
        })
    }

    /// Ends the body: the held-back bytes, searched as the end of the data.
    pub fn finish(&mut self) -> Result<Bytes, Finding> {
        let carry = std::mem::take(&mut self.carry);
        self.inner
            .search(&self.scope, &carry, true, &mut self.logged)?;
        Ok(carry)
    }

    /// Searches one whole message (a WebSocket message) with this stream's scope, apart
    /// from the body bytes it holds.
    pub fn check_message(&mut self, data: &[u8]) -> Result<(), Finding> {
        self.inner.search(&self.scope, data, true, &mut self.logged)
    }

    /// The kinds found that `dlp: {credentials: log}` only logs.
    pub fn logged(&self) -> &[&'static str] {
        &self.logged
    }
}

#[cfg(test)]
mod tests;
