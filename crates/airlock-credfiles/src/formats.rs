//! What the parsers report: each token found, how it appears in the file, and the hosts
//! it belongs to; plus the small helpers they share (hosts from URLs, credential-looking
//! field names).

use crate::ProjectError;
use crate::stores::{Hosts, Slot};

/// How a token is written in the file, and so how its surrogate is written in its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// As is.
    Raw,
    /// A JSON string literal, quotes included.
    Json,
    /// Percent-encoded (a URL's password): the file's text is kept, encoded bytes
    /// included, only the letters and digits change.
    Percent,
    /// Docker's `auth`: base64 of `user:password`, the token being the password.
    DockerAuth {
        /// The user name before the colon.
        user: String,
    },
}

/// One token found in a file.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// Its slot in the table.
    pub slot: &'static Slot,
    /// What tells it from others of the same slot (a host, a section), may be empty.
    pub label: String,
    /// The value a client sends (what the proxy swaps back in).
    pub real: String,
    /// The exact text of the token in the file.
    pub in_file: String,
    /// How it is written.
    pub form: Form,
    /// The hosts it belongs to (resolved from the slot and the file).
    pub hosts: Vec<String>,
}

impl Found {
    /// A token of `slot`; `named` is the host the file names beside it (for slots whose
    /// hosts come from the file).
    pub(crate) fn new(
        slot: &'static Slot,
        label: impl Into<String>,
        real: impl Into<String>,
        in_file: impl Into<String>,
        form: Form,
        named: Option<&str>,
    ) -> Result<Found, ProjectError> {
        let named = || {
            named
                .and_then(canonical_host)
                .ok_or_else(|| ProjectError::BadHost(slot.field.to_owned()))
        };
        let hosts = match slot.hosts {
            Hosts::Fixed(hosts) => hosts.iter().map(|host| (*host).to_owned()).collect(),
            Hosts::Named => vec![named()?],
            Hosts::NamedAndApi => {
                let host = named()?;
                vec![format!("api.{host}"), host]
            }
        };
        Ok(Found {
            slot,
            label: label.into(),
            real: real.into(),
            in_file: in_file.into(),
            form,
            hosts,
        })
    }
}

/// A host name as the policy writes it (lower-case, no port, no trailing dot, no
/// brackets), or `None` when `text` is not one.
pub(crate) fn canonical_host(text: &str) -> Option<String> {
    let text = text.trim();
    let host = if let Some(rest) = text.strip_prefix('[') {
        rest.split_once(']')?.0
    } else {
        text.rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(text, |(host, _)| host)
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let valid = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':'));
    valid.then_some(host)
}

/// The host of a URL (`scheme://[user@]host[:port]/...`), or of a bare `host[/path]`.
pub(crate) fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    canonical_host(host)
}

/// Whether a field name looks like it holds a credential (checked for fields the table
/// does not know: such a file is hidden rather than shown with a real value in it).
pub(crate) fn looks_like_credential(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "token", "secret", "password", "passwd", "apikey", "api_key", "private",
    ]
    .iter()
    .any(|word| key.contains(word))
        || key == "auth"
        || key == "_auth"
        || key.ends_with("_key")
        || key.ends_with("-key")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_from_urls_and_authorities() {
        assert_eq!(
            url_host("https://user:pw@Git.Example.COM:8443/x").as_deref(),
            Some("git.example.com")
        );
        assert_eq!(
            url_host("registry.npmjs.org/").as_deref(),
            Some("registry.npmjs.org")
        );
        assert_eq!(url_host("https://[::1]:8080/").as_deref(), Some("::1"));
        assert_eq!(url_host("https:///nohost"), None);
        assert_eq!(canonical_host("bad host"), None);
    }

    #[test]
    fn credential_looking_names() {
        for key in [
            "access_token",
            "clientSecret",
            "password",
            "OPENAI_API_KEY",
            "auth",
        ] {
            assert!(looks_like_credential(key), "{key}");
        }
        for key in ["auth_mode", "account_id", "expiresAt", "scopes", "user"] {
            assert!(!looks_like_credential(key), "{key}");
        }
    }
}
