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
//! that could still be the start of a match; twice the longest base64 form when values
//! are configured, for wrapped base64) and never copying a large chunk for the search of
//! the data as it is (the search for wrapped base64, when values are configured, works on
//! a copy of each chunk with its white space taken out).
//!
//! Where a value arrives changed ([`variants`]): host names and header names are compared
//! with every form ASCII case ignored; base64 broken by line breaks or spaces is found by
//! searching the data once more with white space taken out. Several header lines are also
//! searched joined: every value of one name joined as a server joins them (`, `, `; ` for
//! `Cookie`), and every value concatenated as it is, so that a value split over two lines
//! is found whatever the receiver does with them.

use std::collections::HashSet;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use airlock_dlp::Verdict;
use airlock_policy::Reason;
use airlock_policy::model::DlpMode;
use bytes::Bytes;
use http::HeaderMap;

use crate::finder::Finder;
use crate::redact::{base64_forms, encoded_forms};
pub use crate::released::Released;

mod variants;

use variants::{Squeezer, ValueMatcher};

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
    /// Surrogates and real values: a format token equal to one of them is not "unknown".
    known: HashSet<Box<[u8]>>,
    /// The most bytes from a format's prefix on that a format decision looks at: enough
    /// for [`airlock_dlp::examine`] to decide, and one more than the longest `known`
    /// value a token of open length could equal ([`longest_open_ended`]), so that a
    /// longer token is unknown however long its run. Looking further would count a run
    /// again from every prefix inside it.
    decide_within: usize,
    names: Vec<String>,
    /// Every form of every value, ASCII case ignored (host and header names).
    insensitive: Option<ValueMatcher>,
    /// The base64 forms, searched in data with its white space taken out.
    wrapped: Option<ValueMatcher>,
    /// What a stream holds back: enough for the longest match, for the longest known
    /// value of open length (a token that may still become one is decided later), and for
    /// a wrapped base64 form with as much white space as base64 (one space or line break
    /// per character).
    hold: usize,
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

impl GuardScope {
    /// Whether every value may go here (nothing to search the wrapped forms for).
    fn all_home(&self) -> bool {
        self.values.iter().all(|value| *value == ValueScope::Home)
    }
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

impl Finding {
    /// What to show instead of a name that carried the credential (a host name in the
    /// audit log and the refusal): `[REDACTED:NAME]` for a secret's real value,
    /// `[REDACTED:kind]` for a format token.
    pub fn placeholder(&self) -> String {
        let what = self.secret.as_deref().or(self.kind).unwrap_or("credential");
        format!("[REDACTED:{what}]")
    }
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
        let mut all_forms: Vec<(usize, String)> = Vec::new();
        let mut wrapped_forms: Vec<(usize, String)> = Vec::new();
        let values = secrets
            .iter()
            .enumerate()
            .map(|(index, (_, real, surrogate))| (index, *real, *surrogate))
            .chain(retired.iter().copied());
        for (secret, real, surrogate) in values {
            known.insert(Box::from(real.as_bytes()));
            known.insert(Box::from(surrogate.as_bytes()));
            wrapped_forms.extend(base64_forms(real).into_iter().map(|f| (secret, f)));
            for form in encoded_forms(real) {
                all_forms.push((secret, form.clone()));
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
        let open_ended = longest_open_ended(&known);
        let decide_within = airlock_dlp::lookahead().max(open_ended + 1);
        let wrapped = ValueMatcher::wrapped(&wrapped_forms)?;
        // `open_ended`: a token that may still grow into a known value is decided once more
        // bytes come ([`Inner::format`]), so its start must stay in the held-back bytes.
        let hold = (longest.saturating_sub(1))
            .max(open_ended)
            .max(wrapped.as_ref().map_or(0, |w| 2 * w.longest));
        Ok(OutboundGuard {
            inner: Arc::new(Inner {
                first,
                matcher,
                targets,
                known,
                decide_within,
                names: secrets
                    .iter()
                    .map(|(name, _, _)| (*name).to_owned())
                    .collect(),
                insensitive: ValueMatcher::insensitive(&all_forms)?,
                wrapped,
                hold,
            }),
        })
    }

    /// Searches a request's target (path and query, also once percent-decoded) and every
    /// header ([`Self::check_fields`]). Returns the kinds found that
    /// `dlp: {credentials: log}` only logs, or the refusal.
    pub fn check_head(
        &self,
        scope: &GuardScope,
        target: &[u8],
        headers: &HeaderMap,
    ) -> Result<Vec<&'static str>, Finding> {
        let mut logged = Vec::new();
        self.inner.search(scope, target, true, &mut logged)?;
        if let Some(decoded) = crate::percent_decode(target) {
            self.inner.search(scope, &decoded, true, &mut logged)?;
        }
        self.inner.check_fields(scope, headers, &mut logged)?;
        Ok(logged)
    }

    /// Searches header fields (a request's headers or trailers): each name (also against
    /// the lower-cased forms of the values), each value (an `Authorization: Basic` value
    /// also decoded, base64 also with its white space taken out), and the lines joined
    /// (every value of a name joined as a server joins them, every value concatenated),
    /// these for the real values only.
    pub fn check_fields(
        &self,
        scope: &GuardScope,
        fields: &HeaderMap,
    ) -> Result<Vec<&'static str>, Finding> {
        let mut logged = Vec::new();
        self.inner.check_fields(scope, fields, &mut logged)?;
        Ok(logged)
    }

    /// Searches a host name the request names (a CONNECT target, an SNI, a `Host` header
    /// or `:authority`, an absolute URI's host) before it is resolved or dialled: a name is
    /// sent in clear (the DNS query, the SNI) and read by resolvers on the way, so a real
    /// value is refused there whatever the destination (`secret_out_of_scope`,
    /// `"form":"real"`), compared ASCII case ignored (host names are lower-cased); a
    /// well-known credential format is refused `credential_outbound` unless `formats`
    /// is `log` or `off` (no `dlp.allow` applies: the name goes to resolvers too).
    pub fn check_authority(&self, formats: DlpMode, name: &[u8]) -> Result<(), Finding> {
        let scope = GuardScope {
            values: vec![ValueScope::Foreign; self.inner.names.len()],
            formats,
            allowed_kinds: Some(Vec::new()),
        };
        self.inner.search(&scope, name, true, &mut Vec::new())?;
        self.inner.search_insensitive(&scope, name)?;
        // A value spread over several labels (a label holds at most 63 bytes): the name
        // with its dots taken out.
        let joined: Vec<u8> = name.iter().copied().filter(|b| *b != b'.').collect();
        if joined.len() == name.len() {
            return Ok(());
        }
        self.inner.search(&scope, &joined, true, &mut Vec::new())?;
        self.inner.search_insensitive(&scope, &joined)
    }

    /// Searches one whole message (a WebSocket message, a body read whole).
    pub fn check_message(
        &self,
        scope: &GuardScope,
        data: &[u8],
    ) -> Result<Vec<&'static str>, Finding> {
        let mut logged = Vec::new();
        self.inner.search(scope, data, true, &mut logged)?;
        self.inner.search_wrapped(scope, data)?;
        Ok(logged)
    }

    /// A search over a body that arrives in chunks.
    pub fn stream(&self, scope: GuardScope) -> GuardStream {
        GuardStream {
            inner: self.inner.clone(),
            scope,
            carry: Bytes::new(),
            logged: Vec::new(),
            squeezer: Squeezer::default(),
            squeezed: Vec::new(),
        }
    }
}

impl Inner {
    /// See [`OutboundGuard::check_fields`].
    fn check_fields(
        &self,
        scope: &GuardScope,
        fields: &HeaderMap,
        logged: &mut Vec<&'static str>,
    ) -> Result<(), Finding> {
        for (name, value) in fields {
            self.search(scope, name.as_str().as_bytes(), true, logged)?;
            self.search_insensitive(scope, name.as_str().as_bytes())?;
            self.search(scope, value.as_bytes(), true, logged)?;
            self.search_wrapped(scope, value.as_bytes())?;
            if let Some(decoded) = crate::basic_credentials(value.as_bytes()) {
                self.search(scope, &decoded, true, logged)?;
            }
        }
        if fields.len() < 2 {
            return Ok(());
        }
        // Joined lines are searched for the real values only: a format token followed by
        // the next line's value would read as a longer, unknown token.
        let scope = &GuardScope {
            values: scope.values.clone(),
            formats: DlpMode::Off,
            allowed_kinds: None,
        };
        let mut concatenated = Vec::new();
        for name in fields.keys() {
            let separator: &[u8] = if name == http::header::COOKIE {
                b"; "
            } else {
                b", "
            };
            let mut joined = Vec::new();
            for (index, value) in fields.get_all(name).iter().enumerate() {
                if index > 0 {
                    joined.extend_from_slice(separator);
                }
                joined.extend_from_slice(value.as_bytes());
                concatenated.extend_from_slice(value.as_bytes());
            }
            if joined.len() > fields.get(name).map_or(0, |v| v.len()) {
                self.search(scope, &joined, true, logged)?;
                self.search_wrapped(scope, &joined)?;
            }
        }
        self.search(scope, &concatenated, true, logged)?;
        self.search_wrapped(scope, &concatenated)
    }

    /// Searches `data` for the forms of the real values, ASCII case ignored.
    fn search_insensitive(&self, scope: &GuardScope, data: &[u8]) -> Result<(), Finding> {
        let Some(matcher) = &self.insensitive else {
            return Ok(());
        };
        for secret in matcher.secrets_in(data) {
            self.real(scope, secret)?;
        }
        Ok(())
    }

    /// Searches whole `data`, its white space taken out, for the base64 forms.
    fn search_wrapped(&self, scope: &GuardScope, data: &[u8]) -> Result<(), Finding> {
        let Some(matcher) = self.wrapped.as_ref().filter(|_| !scope.all_home()) else {
            return Ok(());
        };
        for secret in matcher.secrets_in(&Squeezer::squeeze(data)) {
            self.real(scope, secret)?;
        }
        Ok(())
    }

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
        let kind = airlock_dlp::FORMATS[format].kind;
        let allowed = scope
            .allowed_kinds
            .as_ref()
            .is_none_or(|kinds| kinds.iter().any(|k| k == kind));
        if allowed || (scope.formats == DlpMode::Log && logged.contains(&kind)) {
            return Ok(());
        }
        // Bytes follow a cut `from`: a decision needing them is not taken at its end.
        let cut = from.len() > self.decide_within;
        let from = &from[..from.len().min(self.decide_within)];
        let Verdict::Token { len } = airlock_dlp::examine(format, from, prefix_len, at_end && !cut)
        else {
            return Ok(());
        };
        let token = &from[..len];
        if self.known.contains(token) {
            return Ok(());
        }
        // A run that reaches the end of data that does not end there may still grow into
        // a known value: decided by a later search, which sees it whole from its start
        // (shorter than a known value, so within the held-back bytes).
        let open = len == from.len() && !at_end && !cut;
        if open
            && self
                .known
                .iter()
                .any(|value| value.len() > len && value.starts_with(token))
        {
            return Ok(());
        }
        if scope.formats == DlpMode::Log {
            logged.push(kind);
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
    /// The bytes seen but not yet released: at most `hold`.
    carry: Bytes,
    logged: Vec<&'static str>,
    /// Takes white space out for the search of wrapped base64.
    squeezer: Squeezer,
    /// The last squeezed bytes, searched again with the next chunk.
    squeezed: Vec<u8>,
}

impl GuardStream {
    /// Takes the next chunk; returns what may be sent on now, or the refusal (nothing of
    /// the credential released).
    pub fn push(&mut self, chunk: Bytes) -> Result<Released, Finding> {
        let hold = self.inner.hold;
        self.push_wrapped(&chunk)?;
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

    /// Searches the squeezed stream: the bytes kept from before, then `chunk` squeezed;
    /// keeps what could still start a wrapped form.
    fn push_wrapped(&mut self, chunk: &[u8]) -> Result<(), Finding> {
        let Some(matcher) = self
            .inner
            .wrapped
            .as_ref()
            .filter(|_| !self.scope.all_home())
        else {
            return Ok(());
        };
        // A new buffer each time: a large chunk's room is not kept for the stream's life.
        let mut squeezed = Vec::with_capacity(self.squeezed.len() + chunk.len());
        squeezed.extend_from_slice(&self.squeezed);
        self.squeezer.squeeze_into(chunk, &mut squeezed);
        for secret in matcher.secrets_in(&squeezed) {
            self.inner.real(&self.scope, secret)?;
        }
        // The squeezer's pending backslash is kept on top of the window: when the next
        // chunk opens with its escape letter, both go and the window must stay whole.
        let keep = self.squeezer.keep(matcher.longest);
        let cut = squeezed.len().saturating_sub(keep);
        self.squeezed = squeezed[cut..].to_vec();
        Ok(())
    }

    /// Searches trailers that end the body, as a request's headers are searched
    /// ([`OutboundGuard::check_fields`]). Call before [`Self::finish`]: the held-back
    /// bytes are not released if the trailers are refused.
    pub fn check_trailers(&mut self, trailers: &HeaderMap) -> Result<(), Finding> {
        self.inner
            .check_fields(&self.scope, trailers, &mut self.logged)
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
        self.inner
            .search(&self.scope, data, true, &mut self.logged)?;
        self.inner.search_wrapped(&self.scope, data)
    }

    /// The kinds found that `dlp: {credentials: log}` only logs.
    pub fn logged(&self) -> &[&'static str] {
        &self.logged
    }
}

/// The longest of `known` that starts with the prefix of a format of open length
/// ([`airlock_dlp::Shape::AtLeast`]): only such a token can be longer than the lookahead
/// and still equal a known value (a PEM key or a JSON file as a secret never can).
fn longest_open_ended(known: &HashSet<Box<[u8]>>) -> usize {
    let open: Vec<&str> = airlock_dlp::prefixes()
        .filter(|(_, format)| {
            matches!(
                airlock_dlp::FORMATS[*format].shape,
                airlock_dlp::Shape::AtLeast { .. }
            )
        })
        .map(|(prefix, _)| prefix)
        .collect();
    known
        .iter()
        .filter(|value| {
            open.iter()
                .any(|prefix| value.starts_with(prefix.as_bytes()))
        })
        .map(|value| value.len())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
