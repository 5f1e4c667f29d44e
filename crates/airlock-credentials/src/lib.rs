//! airlock's secrets: format-preserving surrogates, host-scoped swapping of surrogates for
//! real values in request headers, the out-of-scope tripwire, the foreign-credential check,
//! and redaction of real values from any output. Pure: no I/O.
//!
//! The sandbox only ever holds surrogates ([`Credentials::surrogates`]). For each request
//! the proxy names the secrets whose hosts match the request's host (`in_scope`), and
//! [`Credentials::prepare_request`] swaps, injects, or refuses (docs/contract.md §3,
//! docs/secrets.md).

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

mod body;
mod finder;
pub mod foreign;
pub mod guard;
pub mod redact;
mod refreshed;
mod released;
pub mod sequence;
pub mod surrogate;

use std::fmt;

use airlock_policy::Reason;
use airlock_policy::model::{Inject, Secret};
use base64::Engine;
use base64::alphabet;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::finder::Finder;

pub use body::BodySwap;
pub use foreign::{CREDENTIAL_HEADERS, CREDENTIAL_QUERY_PARAMETERS};
pub use guard::{Finding, Form, GuardScope, GuardStream, OutboundGuard, ValueScope};
pub use redact::{Redactor, ScrubStream, Scrubber};
pub use refreshed::Refresh;
pub use released::Released;
pub use sequence::{CredentialRefusal, Head, Prepared};
pub use surrogate::{KNOWN_PREFIXES, generate_surrogate, known_prefix};

/// Decodes Basic credentials with or without padding.
const BASIC_DECODER: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// What is wrong with the secrets handed to [`Credentials::new`]. Never holds a real value.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// A secret's real value is empty.
    #[error("secret {0}: the real value is empty")]
    EmptyValue(String),
    /// A real value holds a character that cannot travel in an HTTP header.
    #[error("secret {0}: the real value contains a control character (line break?)")]
    InvalidValue(String),
    /// No surrogate can be generated: nothing to randomise after the known prefix.
    #[error(
        "secret {0}: the real value has no letter or digit to randomise; set a fixed `surrogate`"
    )]
    NothingToRandomise(String),
    /// A fixed surrogate is empty, equal to the real value, or not a valid header value.
    #[error(
        "secret {0}: the fixed surrogate must be non-empty, printable and differ from the real value"
    )]
    InvalidSurrogate(String),
    /// Two secrets have the same surrogate.
    #[error("secrets {0} and {1} have the same surrogate")]
    DuplicateSurrogate(String, String),
    /// The matcher over all surrogates or values could not be built.
    #[error("cannot build the secret matcher: {0}")]
    Matcher(#[from] aho_corasick::BuildError),
}

/// One secret, ready for use.
struct Entry {
    name: String,
    real: String,
    surrogate: String,
    /// Lower-case header names the surrogate is swapped in; `None` = every header.
    headers: Option<Vec<String>>,
    inject: Option<(HeaderName, HeaderValue)>,
    foreign_allowed: bool,
    /// Also swapped in the query and identity-encoded bodies.
    body: bool,
}

impl Entry {
    fn swaps_in(&self, header: &str) -> bool {
        self.headers
            .as_ref()
            .is_none_or(|names| names.iter().any(|name| name == header))
    }
}

/// The secrets of one sandbox: real values and their surrogates. `Debug` shows names only.
pub struct Credentials {
    /// The secrets as configured, for [`Credentials::rotated`].
    secrets: Vec<Secret>,
    /// Values replaced by rotation, with their secret's name and surrogate: still redacted
    /// and scrubbed, since a request in flight or an echo may carry them.
    retired: Vec<(String, String, String)>,
    entries: Vec<Entry>,
    /// Finds every surrogate; pattern id = index in `entries`. `None` when there are none.
    surrogates: Option<Finder>,
    redactor: Redactor,
    scrubber: Scrubber,
    guard: OutboundGuard,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field(
                "secrets",
                &self
                    .entries
                    .iter()
                    .map(|entry| &entry.name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Builds the store from each secret (in policy order) and its real value. The surrogate
    /// is the secret's fixed `surrogate`, or freshly generated from a CSPRNG.
    pub fn new(secrets: Vec<(Secret, String)>) -> Result<Self, CredentialError> {
        Self::assemble(secrets, Vec::new())
    }

    /// The same store with a new real value for the secret `name` (a `file:` source that
    /// changed): surrogates stay as they are, so the sandbox notices nothing; the old value
    /// is still redacted and scrubbed.
    pub fn rotated(&self, name: &str, real: String) -> Result<Self, CredentialError> {
        let mut retired = self.retired.clone();
        let secrets = self
            .secrets
            .iter()
            .zip(&self.entries)
            .map(|(secret, entry)| {
                let mut secret = secret.clone();
                secret.surrogate = Some(entry.surrogate.clone());
                if entry.name == name && entry.real != real {
                    retired.push((
                        entry.name.clone(),
                        entry.real.clone(),
                        entry.surrogate.clone(),
                    ));
                    (secret, real.clone())
                } else {
                    (secret, entry.real.clone())
                }
            })
            .collect();
        let mut rotated = Self::assemble(secrets, retired)?;
        // Surrogates that were generated stay "generated" for the next rotation.
        rotated.secrets = self.secrets.clone();
        Ok(rotated)
    }

    fn assemble(
        secrets: Vec<(Secret, String)>,
        retired: Vec<(String, String, String)>,
    ) -> Result<Self, CredentialError> {
        let mut rng = rand::rng();
        let configured: Vec<Secret> = secrets.iter().map(|(secret, _)| secret.clone()).collect();
        let mut entries: Vec<Entry> = Vec::with_capacity(secrets.len());
        for (secret, real) in secrets {
            let name = secret.name;
            if real.is_empty() {
                return Err(CredentialError::EmptyValue(name));
            }
            if HeaderValue::from_str(&real).is_err() {
                return Err(CredentialError::InvalidValue(name));
            }
            let surrogate = match secret.surrogate {
                Some(fixed) => {
                    if fixed.is_empty() || fixed == real || HeaderValue::from_str(&fixed).is_err() {
                        return Err(CredentialError::InvalidSurrogate(name));
                    }
                    fixed
                }
                None => match generate_surrogate(&real, &mut rng) {
                    Some(surrogate) => surrogate,
                    None => return Err(CredentialError::NothingToRandomise(name)),
                },
            };
            if let Some(other) = entries.iter().find(|entry| entry.surrogate == surrogate) {
                return Err(CredentialError::DuplicateSurrogate(
                    other.name.clone(),
                    name,
                ));
            }
            let inject = match secret.inject {
                Some(Inject { header, format }) => {
                    let value = format.replace("{value}", &real);
                    match (
                        HeaderName::from_bytes(header.as_bytes()),
                        HeaderValue::from_str(&value),
                    ) {
                        (Ok(header), Ok(mut value)) => {
                            value.set_sensitive(true);
                            Some((header, value))
                        }
                        _ => return Err(CredentialError::InvalidValue(name)),
                    }
                }
                None => None,
            };
            let headers = secret
                .headers
                .map(|names| names.iter().map(|name| name.to_ascii_lowercase()).collect());
            entries.push(Entry {
                name,
                real,
                surrogate,
                headers,
                inject,
                foreign_allowed: secret.foreign_allowed,
                body: secret.body,
            });
        }
        let surrogates = if entries.is_empty() {
            None
        } else {
            Some(Finder::new(
                &entries
                    .iter()
                    .map(|entry| entry.surrogate.as_bytes())
                    .collect::<Vec<_>>(),
            )?)
        };
        let redactor = Redactor::new(
            entries
                .iter()
                .map(|entry| (entry.name.as_str(), entry.real.as_str()))
                .chain(
                    retired
                        .iter()
                        .map(|(name, real, _)| (name.as_str(), real.as_str())),
                ),
        )?;
        let scrubber = Scrubber::new(
            entries
                .iter()
                .map(|entry| (entry.real.as_str(), entry.surrogate.as_str()))
                .chain(
                    retired
                        .iter()
                        .map(|(_, real, surrogate)| (real.as_str(), surrogate.as_str())),
                ),
        )?;
        let guard = OutboundGuard::new(
            &entries
                .iter()
                .map(|e| (e.name.as_str(), e.real.as_str(), e.surrogate.as_str()))
                .collect::<Vec<_>>(),
            &retired
                .iter()
                .filter_map(|(name, real, surrogate)| {
                    let index = entries.iter().position(|e| &e.name == name)?;
                    Some((index, real.as_str(), surrogate.as_str()))
                })
                .collect::<Vec<_>>(),
        )?;
        Ok(Self {
            secrets: configured,
            retired,
            entries,
            surrogates,
            redactor,
            scrubber,
            guard,
        })
    }

    /// `(NAME, SURROGATE)` for every secret, in policy order: what the sandbox may see.
    pub fn surrogates(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .map(|entry| (entry.name.clone(), entry.surrogate.clone()))
            .collect()
    }

    /// A redactor replacing every real value (raw, base64, URL-encoded, JSON-escaped) by
    /// `[REDACTED:NAME]`.
    pub fn redactor(&self) -> Redactor {
        self.redactor.clone()
    }

    /// A scrubber for responses: every real value (raw, base64, URL-encoded, JSON-escaped)
    /// becomes the same encoding of its surrogate.
    pub fn scrubber(&self) -> Scrubber {
        self.scrubber.clone()
    }

    /// The outbound guard over every real value and the well-known credential formats.
    pub fn guard(&self) -> OutboundGuard {
        self.guard.clone()
    }

    /// Where each secret's real value may go for a request: `home` names the secrets
    /// whose hosts match the destination; `tls` says whether the request travels
    /// encrypted (a real value never goes in clear, even home).
    pub fn value_scopes(&self, home: &[&str], tls: bool) -> Vec<ValueScope> {
        self.entries
            .iter()
            .map(|entry| match (home.contains(&entry.name.as_str()), tls) {
                (true, true) => ValueScope::Home,
                (true, false) => ValueScope::Cleartext,
                (false, _) => ValueScope::Foreign,
            })
            .collect()
    }

    /// The tripwire for request parts other than headers (path, query, inspected bodies):
    /// [`Reason::SecretOutOfScope`] if `data`, as is or once percent-decoded, holds the
    /// surrogate of a secret not in `in_scope`.
    pub fn check_out_of_scope(&self, in_scope: &[&str], data: &[u8]) -> Result<(), Reason> {
        let Some(matcher) = &self.surrogates else {
            return Ok(());
        };
        let out_of_scope = |bytes: &[u8]| {
            matcher
                .find_iter(bytes)
                .any(|m| !in_scope.contains(&self.entries[m.pattern].name.as_str()))
        };
        if out_of_scope(data) || percent_decode(data).is_some_and(|decoded| out_of_scope(&decoded))
        {
            return Err(Reason::SecretOutOfScope);
        }
        Ok(())
    }

    /// Swaps the surrogates of in-scope secrets marked `body: true` for their real values in
    /// a query or an identity-encoded body. `None` when nothing was swapped; otherwise the new
    /// bytes and the names of the secrets swapped, in policy order. Run
    /// [`Self::check_out_of_scope`] on the same data first.
    pub fn swap_in_body(&self, in_scope: &[&str], data: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
        let allowed = |index: usize| {
            let entry = &self.entries[index];
            entry.body && in_scope.contains(&entry.name.as_str())
        };
        let mut used = vec![false; self.entries.len()];
        let swapped = self.replace(data, &allowed, &mut used)?;
        let names = self
            .entries
            .iter()
            .zip(used)
            .filter(|(_, used)| *used)
            .map(|(entry, _)| entry.name.clone())
            .collect();
        Some((swapped, names))
    }

    /// Prepares a request's headers for forwarding. `in_scope` names the secrets whose hosts
    /// match the request's host.
    ///
    /// * Refuses with [`Reason::SecretOutOfScope`] if any header (also inside
    ///   `Authorization: Basic`) holds the surrogate of a secret not in scope.
    /// * Refuses with [`Reason::ForeignCredential`] if an in-scope secret without
    ///   `foreign_allowed` pins the host and a credential header ([`CREDENTIAL_HEADERS`] and
    ///   the secret's `headers`) or a credential cookie is present, non-empty, not injected,
    ///   and holds neither an in-scope surrogate nor an in-scope secret's own real value
    ///   ([`foreign`]; the query is checked by
    ///   [`Self::check_foreign_query`]).
    /// * Otherwise replaces every in-scope surrogate by its real value in every header the
    ///   secret allows (every duplicate, inside Basic credentials too), then sets each
    ///   in-scope `inject` header outright.
    ///
    /// Returns the names of the secrets swapped or injected, in policy order. On error the
    /// headers are left as they were.
    pub fn prepare_request(
        &self,
        in_scope: &[&str],
        headers: &mut HeaderMap,
    ) -> Result<Vec<String>, Reason> {
        let scope: Vec<bool> = self
            .entries
            .iter()
            .map(|entry| in_scope.contains(&entry.name.as_str()))
            .collect();
        let injected: Vec<&HeaderName> = self
            .entries
            .iter()
            .zip(&scope)
            .filter(|(_, in_scope)| **in_scope)
            .filter_map(|(entry, _)| entry.inject.as_ref().map(|(name, _)| name))
            .collect();

        // Tripwire: no header may carry the surrogate of a secret not in scope.
        let mut any_surrogate = false;
        for value in headers.values() {
            let found = self.surrogates_in(value.as_bytes());
            if found.iter().any(|&index| !scope[index]) {
                return Err(Reason::SecretOutOfScope);
            }
            any_surrogate |= !found.is_empty();
        }

        self.check_foreign_headers(&scope, &injected, headers)?;

        let mut used = vec![false; self.entries.len()];
        // Only headers holding a surrogate change: skip the rewrite when there are none.
        let names: Vec<HeaderName> = if any_surrogate {
            headers.keys().cloned().collect()
        } else {
            Vec::new()
        };
        for name in names {
            let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
            let mut changed = false;
            let mut rewritten = Vec::with_capacity(values.len());
            for value in values {
                match self.swap_value(&name, &value, &scope, &mut used) {
                    Some(new_value) => {
                        changed = true;
                        rewritten.push(new_value);
                    }
                    None => rewritten.push(value),
                }
            }
            if changed {
                headers.remove(&name);
                for value in rewritten {
                    headers.append(name.clone(), value);
                }
            }
        }
        for (index, entry) in self.entries.iter().enumerate() {
            if let (true, Some((name, value))) = (scope[index], &entry.inject) {
                headers.insert(name.clone(), value.clone());
                used[index] = true;
            }
        }
        Ok(self
            .entries
            .iter()
            .zip(used)
            .filter(|(_, used)| *used)
            .map(|(entry, _)| entry.name.clone())
            .collect())
    }

    /// Indices of the secrets whose surrogate occurs in `value`, raw or inside Basic
    /// credentials.
    fn surrogates_in(&self, value: &[u8]) -> Vec<usize> {
        let Some(matcher) = &self.surrogates else {
            return Vec::new();
        };
        let mut found: Vec<usize> = matcher.find_iter(value).map(|m| m.pattern).collect();
        if let Some(decoded) = basic_credentials(value) {
            found.extend(matcher.find_iter(&decoded).map(|m| m.pattern));
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    /// `value` with in-scope surrogates replaced (raw, or inside Basic credentials), or
    /// `None` when nothing was replaced.
    fn swap_value(
        &self,
        header: &HeaderName,
        value: &HeaderValue,
        scope: &[bool],
        used: &mut [bool],
    ) -> Option<HeaderValue> {
        let allowed = |index: usize| scope[index] && self.entries[index].swaps_in(header.as_str());
        let bytes = value.as_bytes();
        if let Some(decoded) = basic_credentials(bytes)
            && let Some(swapped) = self.replace(&decoded, &allowed, used)
        {
            let encoded = format!("Basic {}", STANDARD.encode(swapped));
            return sensitive_value(encoded.as_bytes());
        }
        let swapped = self.replace(bytes, &allowed, used)?;
        sensitive_value(&swapped)
    }

    /// `bytes` with every allowed surrogate replaced by its real value, or `None`.
    fn replace(
        &self,
        bytes: &[u8],
        allowed: &impl Fn(usize) -> bool,
        used: &mut [bool],
    ) -> Option<Vec<u8>> {
        let matcher = self.surrogates.as_ref()?;
        let mut out = Vec::with_capacity(bytes.len());
        let mut last = 0;
        for m in matcher.find_iter(bytes) {
            let index = m.pattern;
            if !allowed(index) {
                continue;
            }
            out.extend_from_slice(&bytes[last..m.start]);
            out.extend_from_slice(self.entries[index].real.as_bytes());
            last = m.end;
            used[index] = true;
        }
        if last == 0 {
            return None;
        }
        out.extend_from_slice(&bytes[last..]);
        Some(out)
    }
}

/// `data` with each `%XX` decoded once, or `None` if it holds no valid escape.
fn percent_decode(data: &[u8]) -> Option<Vec<u8>> {
    let hex = |byte: u8| char::from(byte).to_digit(16);
    let mut decoded = Vec::with_capacity(data.len());
    let mut changed = false;
    let mut index = 0;
    while index < data.len() {
        let escape = (data[index] == b'%')
            .then(|| Some((hex(*data.get(index + 1)?)?, hex(*data.get(index + 2)?)?)))
            .flatten();
        match escape {
            Some((high, low)) => {
                // Two hex digits are at most 0xFF.
                decoded.push(u8::try_from(high * 16 + low).unwrap_or(u8::MAX));
                changed = true;
                index += 3;
            }
            None => {
                decoded.push(data[index]);
                index += 1;
            }
        }
    }
    changed.then_some(decoded)
}

/// The decoded credentials of an `Authorization: Basic <base64>` value.
fn basic_credentials(value: &[u8]) -> Option<Vec<u8>> {
    let scheme = value.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let encoded = value[6..].trim_ascii();
    BASIC_DECODER.decode(encoded).ok()
}

/// A header value marked sensitive. Every piece put together is a valid header value (the
/// real values were checked in [`Credentials::new`]), so this cannot fail in practice; if it
/// did, the value would be forwarded unswapped (holding only surrogates, never half a secret).
fn sensitive_value(bytes: &[u8]) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_bytes(bytes).ok()?;
    value.set_sensitive(true);
    Some(value)
}
