//! Where a request can carry a credential, and the foreign-credential check over those
//! places (docs/policy.md, "Foreign credentials"; docs/secrets.md).
//!
//! On a host of a secret that pins its account (an in-scope secret without
//! `foreign: allow`), a credential that holds neither a surrogate of an in-scope secret nor
//! the real value of one (raw or inside Basic credentials: to its own hosts, over TLS, the
//! real value passes as it is) is someone else's: the request is refused
//! `foreign_credential`. The places looked at, for every such
//! host whatever the secret's `headers`, are the one table below:
//!
//! * the headers of [`CREDENTIAL_HEADERS`], plus the pinning secrets' own `headers`;
//! * each cookie of `Cookie` that looks like a credential ([`is_credential_cookie`]): a name
//!   holding one of [`CREDENTIAL_COOKIE_MARKERS`], or a value starting with a well-known
//!   credential prefix (`ghp_`, `sk-ant-`, ...). Other cookies (`__cf_bm`, `_cfuvid`: the
//!   bot-management cookies API hosts set and SDK cookie jars send back) pass;
//! * the query parameters of [`CREDENTIAL_QUERY_PARAMETERS`] (name compared
//!   case-insensitively after one percent-decode; `&` and `;` both separate).
//!
//! An empty value is no credential; a header named by an in-scope `inject` is skipped (its
//! value is replaced anyway).

use airlock_policy::Reason;
use http::header::{self, HeaderMap, HeaderName};

use crate::surrogate::known_prefix;
use crate::{Credentials, basic_credentials, percent_decode};

/// Request headers that carry a credential (lower-case), with who sends one there.
pub const CREDENTIAL_HEADERS: &[(&str, &str)] = &[
    (
        "authorization",
        "OpenAI, Anthropic (OAuth), GitHub, GitLab (OAuth), Hugging Face, npm, most APIs; git over HTTPS (Basic)",
    ),
    ("proxy-authorization", "a client's proxy credentials"),
    ("x-api-key", "Anthropic, AWS API Gateway, many others"),
    ("api-key", "Azure OpenAI"),
    ("x-goog-api-key", "Google APIs (Gemini)"),
    ("x-auth-token", "OpenStack and others"),
    ("private-token", "GitLab personal, project and group tokens"),
    ("job-token", "GitLab CI job tokens"),
    (
        "ocp-apim-subscription-key",
        "Azure API Management and Azure AI services",
    ),
    ("x-vault-token", "HashiCorp Vault"),
];

/// Query parameters that carry a credential (lower-case), with who reads one there.
pub const CREDENTIAL_QUERY_PARAMETERS: &[(&str, &str)] = &[
    ("key", "Google APIs (Gemini, Maps, ...)"),
    ("api_key", "many APIs"),
    ("apikey", "many APIs"),
    ("api-key", "Azure"),
    (
        "access_token",
        "OAuth 2.0 bearer tokens in the URI (RFC 6750 §2.3): Google, Facebook, old GitHub",
    ),
    ("token", "raw.githubusercontent.com, Slack"),
    ("private_token", "GitLab"),
    ("subscription-key", "Azure API Management"),
];

/// A cookie whose lower-cased name contains one of these is a credential (GitHub
/// `user_session`, GitLab `_gitlab_session`, `sessionKey`, `next-auth.session-token`, ...).
pub const CREDENTIAL_COOKIE_MARKERS: &[&str] = &[
    "session", "sess", "token", "auth", "jwt", "sid", "key", "login", "cred", "secret", "pass",
];

/// Whether the cookie `name=value` looks like a credential: its name holds one of
/// [`CREDENTIAL_COOKIE_MARKERS`] or its value starts with a well-known credential prefix.
pub fn is_credential_cookie(name: &str, value: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_COOKIE_MARKERS
        .iter()
        .any(|marker| name.contains(marker))
        || !known_prefix(value.trim_matches('"')).is_empty()
}

/// The `(name, value)` pairs of a query (`&` and `;` separate; a pair without `=` has an
/// empty value).
fn query_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split(['&', ';'])
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// A query parameter name as servers read it: once percent-decoded (`+` as a space),
/// lower-cased.
fn parameter_name(raw: &str) -> String {
    let spaced = raw.replace('+', " ");
    let decoded = percent_decode(spaced.as_bytes()).unwrap_or_else(|| spaced.into_bytes());
    String::from_utf8_lossy(&decoded).to_ascii_lowercase()
}

impl Credentials {
    /// Whether some in-scope secret pins its account (no `foreign: allow`).
    fn pins(&self, scope: &[bool]) -> bool {
        self.entries
            .iter()
            .zip(scope)
            .any(|(entry, in_scope)| *in_scope && !entry.foreign_allowed)
    }

    /// Whether `value` is a credential of someone else: not blank, holding no surrogate
    /// (the tripwire ran first, so any surrogate here is in scope) and no real value of a
    /// secret in `scope` (its own value, going where it belongs).
    ///
    /// Holding one of ours is not enough when a credential of a well-known format rides
    /// along (`Basic base64(SURROGATE:ghp_theirs)`: the service would log in with the
    /// other token): what is left once every surrogate and own real value is taken out
    /// must hold no token.
    fn is_foreign(&self, scope: &[bool], value: &[u8]) -> bool {
        if value.iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        if self.surrogates_in(value).is_empty() && !self.holds_own_value(scope, value) {
            return true;
        }
        let decoded = basic_credentials(value);
        [Some(value), decoded.as_deref()]
            .into_iter()
            .flatten()
            .any(|place| !airlock_dlp::find_all(&self.without_ours(scope, place)).is_empty())
    }

    /// `place` with every surrogate and every in-scope real value blanked out.
    fn without_ours(&self, scope: &[bool], place: &[u8]) -> Vec<u8> {
        let mut rest = place.to_vec();
        for (entry, in_scope) in self.entries.iter().zip(scope) {
            let mut values = vec![entry.surrogate.as_bytes()];
            if *in_scope {
                values.push(entry.real.as_bytes());
            }
            for value in values.into_iter().filter(|v| !v.is_empty()) {
                let finder = memchr::memmem::Finder::new(value);
                let mut at = 0;
                while let Some(found) = finder.find(&rest[at..]) {
                    let start = at + found;
                    rest[start..start + value.len()].fill(b' ');
                    at = start + value.len();
                }
            }
        }
        rest
    }

    /// Whether `value`, raw or inside Basic credentials, holds the real value of a secret
    /// in `scope`.
    fn holds_own_value(&self, scope: &[bool], value: &[u8]) -> bool {
        let decoded = basic_credentials(value);
        let places = [Some(value), decoded.as_deref()];
        self.entries
            .iter()
            .zip(scope)
            .filter(|(_, in_scope)| **in_scope)
            .any(|(entry, _)| {
                let real = entry.real.as_bytes();
                places
                    .iter()
                    .flatten()
                    .any(|place| !real.is_empty() && memchr::memmem::find(place, real).is_some())
            })
    }

    /// The header names checked: [`CREDENTIAL_HEADERS`] and the pinning secrets' `headers`,
    /// less the `injected` ones.
    fn checked_headers<'a>(&'a self, scope: &[bool], injected: &[&HeaderName]) -> Vec<&'a str> {
        let pinning_headers = self
            .entries
            .iter()
            .zip(scope)
            .filter(|(entry, in_scope)| **in_scope && !entry.foreign_allowed)
            .filter_map(|(entry, _)| entry.headers.as_ref())
            .flatten()
            .map(String::as_str);
        let mut names: Vec<&str> = CREDENTIAL_HEADERS
            .iter()
            .map(|(name, _)| *name)
            .chain(pinning_headers)
            .filter(|name| !injected.iter().any(|injected| injected.as_str() == *name))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The foreign-credential check on request headers (see the module documentation);
    /// `scope[i]` says whether secret `i` is in scope, `injected` names the headers an
    /// in-scope `inject` sets.
    pub(crate) fn check_foreign_headers(
        &self,
        scope: &[bool],
        injected: &[&HeaderName],
        headers: &HeaderMap,
    ) -> Result<(), Reason> {
        if !self.pins(scope) {
            return Ok(());
        }
        for name in self.checked_headers(scope, injected) {
            if headers
                .get_all(name)
                .iter()
                .any(|value| self.is_foreign(scope, value.as_bytes()))
            {
                return Err(Reason::ForeignCredential);
            }
        }
        if injected.iter().any(|name| **name == header::COOKIE) {
            return Ok(());
        }
        let foreign_cookie = headers.get_all(header::COOKIE).iter().any(|value| {
            String::from_utf8_lossy(value.as_bytes())
                .split(';')
                .filter_map(|cookie| cookie.split_once('='))
                .any(|(name, value)| {
                    is_credential_cookie(name.trim(), value.trim())
                        && self.is_foreign(scope, value.trim().trim_matches('"').as_bytes())
                })
        });
        if foreign_cookie {
            return Err(Reason::ForeignCredential);
        }
        Ok(())
    }

    /// The foreign-credential check on the query of `path_and_query` (the request target in
    /// origin form): [`Reason::ForeignCredential`] if, on a host where an in-scope secret
    /// pins its account, a parameter of [`CREDENTIAL_QUERY_PARAMETERS`] has a non-empty
    /// value holding no surrogate (raw or once percent-decoded). Run
    /// [`Self::check_out_of_scope`] on the same target first.
    pub fn check_foreign_query(
        &self,
        in_scope: &[&str],
        path_and_query: &str,
    ) -> Result<(), Reason> {
        let Some((_, query)) = path_and_query.split_once('?') else {
            return Ok(());
        };
        let scope: Vec<bool> = self
            .entries
            .iter()
            .map(|entry| in_scope.contains(&entry.name.as_str()))
            .collect();
        if !self.pins(&scope) {
            return Ok(());
        }
        let foreign = query_pairs(query)
            .filter(|(name, _)| {
                let name = parameter_name(name);
                CREDENTIAL_QUERY_PARAMETERS
                    .iter()
                    .any(|(credential, _)| *credential == name)
            })
            .any(|(_, value)| {
                let decoded = percent_decode(value.as_bytes());
                let value = decoded.as_deref().unwrap_or(value.as_bytes());
                self.is_foreign(&scope, value)
            });
        if foreign {
            return Err(Reason::ForeignCredential);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_cookies_are_told_by_name_or_value() {
        for (name, value) in [
            ("user_session", "abc"),
            ("__Host-user_session_same_site", "abc"),
            ("_gitlab_session", "abc"),
            ("sessionKey", "sk-ant-sid01-xyz"),
            ("__Secure-next-auth.session-token", "eyJ"),
            ("AUTH", "x"),
            ("prefs", "ghp_0123456789abcdef0123456789abcdef0123"),
            ("prefs", "\"ghp_0123\""),
        ] {
            assert!(is_credential_cookie(name, value), "{name}={value}");
        }
        for (name, value) in [
            ("__cf_bm", "abc.def"),
            ("_cfuvid", "x-1"),
            ("theme", "dark"),
        ] {
            assert!(!is_credential_cookie(name, value), "{name}={value}");
        }
    }

    #[test]
    fn query_parameter_names_are_read_as_servers_read_them() {
        assert_eq!(parameter_name("KEY"), "key");
        assert_eq!(parameter_name("%6Bey"), "key");
        assert_eq!(parameter_name("api%5Fkey"), "api_key");
        let pairs: Vec<_> = query_pairs("a=1;key=2&flag&=3").collect();
        assert_eq!(pairs, [("a", "1"), ("key", "2"), ("flag", ""), ("", "3")]);
    }

    #[test]
    fn the_tables_are_lower_case_and_without_duplicates() {
        for table in [CREDENTIAL_HEADERS, CREDENTIAL_QUERY_PARAMETERS] {
            let mut names: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
            assert!(names.iter().all(|name| *name == name.to_ascii_lowercase()));
            names.sort_unstable();
            let count = names.len();
            names.dedup();
            assert_eq!(names.len(), count);
        }
        for (name, _) in CREDENTIAL_HEADERS {
            assert!(HeaderName::from_bytes(name.as_bytes()).is_ok(), "{name}");
        }
    }
}
