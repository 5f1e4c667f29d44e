//! The projection of one file: a surrogate for each distinct token, each token's text in
//! the file replaced by its surrogate's, the result parsed again and checked, and one
//! ordinary secret per token for the proxy (its real value, its fixed surrogate, its
//! hosts and where it is swapped).

use std::collections::BTreeSet;

use airlock_policy::model::{HostPattern, Secret, SecretSource};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::formats::{Form, Found};
use crate::stores::Sent;
use crate::{ProjectError, SECRET_PREFIX, Store, token_surrogate};

/// Tokens shorter than this are not given a surrogate (the file is hidden).
const MIN_TOKEN_LEN: usize = 8;

/// A token of a projected file: its secret's name, real value and surrogate.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The secret's name (`file:STORE:FIELD[:LABEL]`).
    pub secret: String,
    /// The real value (what clients send, the password inside docker's `auth`).
    pub real: String,
    /// Its surrogate.
    pub surrogate: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

/// What the command sees of a file, and the secrets the proxy swaps back.
#[derive(Debug, Clone)]
pub struct Projection {
    /// The file's bytes, every token replaced by its surrogate.
    pub bytes: Vec<u8>,
    /// One secret per distinct token (source `Value(real)`, fixed surrogate).
    pub secrets: Vec<Secret>,
    /// The tokens, in the order of `secrets`.
    pub tokens: Vec<Token>,
}

/// Projects the file of `store` whose content is `bytes`. `Err`: the file must be hidden.
pub fn project(store: Store, bytes: &[u8]) -> Result<Projection, ProjectError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ProjectError::Parse("UTF-8 text"))?;
    let found = find(store, text)?;
    let mut tokens: Vec<Token> = Vec::new();
    let mut secrets: Vec<Secret> = Vec::new();
    let mut replacements: Vec<(String, String)> = Vec::new();
    // Tokens shown as a surrogate but never swapped back (`Sent::Never`): no secret.
    let mut inert: Vec<Token> = Vec::new();
    for item in &found {
        let what = field_name(item);
        if item.real.len() < MIN_TOKEN_LEN {
            return Err(ProjectError::TooShort(what));
        }
        if item.real.chars().any(char::is_control) {
            return Err(ProjectError::Parse("tokens without control characters"));
        }
        let known = tokens.iter().position(|token| token.real == item.real);
        let never = item.slot.sent == Sent::Never;
        if (never && known.is_some()) || (!never && inert.iter().any(|t| t.real == item.real)) {
            // Swapped in one place, never in another: not worth guessing.
            return Err(ProjectError::NotReplaced(what));
        }
        if never {
            let surrogate = match inert.iter().find(|token| token.real == item.real) {
                Some(token) => token.surrogate.clone(),
                None => {
                    let surrogate = token_surrogate(&item.real)
                        .filter(|surrogate| surrogate.len() == item.real.len())
                        .ok_or_else(|| ProjectError::TooShort(what.clone()))?;
                    inert.push(Token {
                        secret: what.clone(),
                        real: item.real.clone(),
                        surrogate: surrogate.clone(),
                    });
                    surrogate
                }
            };
            let written = written_form(item, &surrogate)?;
            if !replacements.iter().any(|(from, _)| *from == item.in_file) {
                replacements.push((item.in_file.clone(), written));
            }
            continue;
        }
        let index = match known {
            Some(index) => index,
            None => {
                let surrogate = token_surrogate(&item.real)
                    .filter(|surrogate| surrogate.len() == item.real.len())
                    .ok_or_else(|| ProjectError::TooShort(what.clone()))?;
                let name = unique_name(&secrets, format!("{SECRET_PREFIX}{store}:{what}"));
                let mut secret = Secret::new(name.clone(), SecretSource::Value(item.real.clone()));
                secret.surrogate = Some(surrogate.clone());
                secret.headers = Some(Vec::new());
                tokens.push(Token {
                    secret: name,
                    real: item.real.clone(),
                    surrogate,
                });
                secrets.push(secret);
                tokens.len() - 1
            }
        };
        merge_scope(&mut secrets[index], item)?;
        let written = written_form(item, &tokens[index].surrogate)?;
        if !replacements.iter().any(|(from, _)| *from == item.in_file) {
            replacements.push((item.in_file.clone(), written));
        }
    }
    let projected = replace_all(text, &mut replacements)?;
    let shown: Vec<Token> = tokens.iter().chain(&inert).cloned().collect();
    check(store, &projected, &found, &shown)?;
    let mut masked: Vec<String> = replacements.into_iter().map(|(_, to)| to).collect();
    masked.extend(shown.into_iter().map(|token| token.surrogate));
    if matches!(store, Store::Claude | Store::Codex | Store::Docker) {
        masked.extend(crate::json_stores::public_values(&projected));
    }
    let masked: Vec<&str> = masked.iter().map(String::as_str).collect();
    if crate::sweep::token_left(&projected, &masked) {
        return Err(ProjectError::Unplaced(
            "a token-shaped value outside the fields airlock replaces".to_owned(),
        ));
    }
    Ok(Projection {
        bytes: projected.into_bytes(),
        secrets,
        tokens,
    })
}

/// A store's parser: every token of the file, or why the file cannot be projected.
fn find(store: Store, text: &str) -> Result<Vec<Found>, ProjectError> {
    match store {
        Store::Claude => crate::json_stores::claude(text),
        Store::Codex => crate::json_stores::codex(text),
        Store::Docker => crate::json_stores::docker(text),
        Store::Gh => crate::json_stores::gh(text),
        Store::Git => crate::text_stores::git(text),
        Store::Npm => crate::text_stores::npm(text),
        Store::Pypi => crate::text_stores::pypi(text),
        Store::Netrc => crate::text_stores::netrc(text),
    }
}

/// `FIELD` or `FIELD:LABEL`.
fn field_name(item: &Found) -> String {
    if item.label.is_empty() {
        item.slot.field.to_owned()
    } else {
        format!("{}:{}", item.slot.field, item.label)
    }
}

/// `name`, or `name:2`, `name:3`... when a secret already has it.
fn unique_name(secrets: &[Secret], name: String) -> String {
    let taken = |candidate: &str| secrets.iter().any(|secret| secret.name == candidate);
    if !taken(&name) {
        return name;
    }
    (2..)
        .map(|n| format!("{name}:{n}"))
        .find(|candidate| !taken(candidate))
        .unwrap_or(name)
}

/// Adds `item`'s hosts and way of sending to `secret` (a token found in several places
/// goes everywhere each place says).
fn merge_scope(secret: &mut Secret, item: &Found) -> Result<(), ProjectError> {
    for host in &item.hosts {
        let pattern = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => HostPattern::Ip(ip),
            Err(_) => HostPattern::Exact(host.clone()),
        };
        if !secret.hosts.contains(&pattern) {
            secret.hosts.push(pattern);
        }
    }
    match item.slot.sent {
        Sent::Authorization => {
            let headers = secret.headers.get_or_insert_with(Vec::new);
            if !headers.iter().any(|header| header == "authorization") {
                headers.push("authorization".to_owned());
            }
        }
        Sent::Body => secret.body = true,
        Sent::Never => {}
    }
    if secret.hosts.is_empty() {
        return Err(ProjectError::BadHost(item.slot.field.to_owned()));
    }
    Ok(())
}

/// The surrogate as the file writes it in place of `item`'s text.
fn written_form(item: &Found, surrogate: &str) -> Result<String, ProjectError> {
    Ok(match &item.form {
        Form::Raw => surrogate.to_owned(),
        Form::Json => serde_json::to_string(surrogate)
            .map_err(|_| ProjectError::NotReplaced(item.slot.field.to_owned()))?,
        Form::Percent => percent_like(&item.in_file, &item.real, surrogate)
            .ok_or_else(|| ProjectError::NotReplaced(item.slot.field.to_owned()))?,
        Form::DockerAuth { user } => STANDARD.encode(format!("{user}:{surrogate}")),
    })
}

/// `surrogate` written the way `in_file` writes `real`: each percent-encoded byte that the
/// surrogate keeps stays encoded, every other byte is the surrogate's own.
fn percent_like(in_file: &str, real: &str, surrogate: &str) -> Option<String> {
    let (real, surrogate) = (real.as_bytes(), surrogate.as_bytes());
    let bytes = in_file.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let (mut at, mut index) = (0, 0);
    while at < bytes.len() {
        let (want, width) = if bytes[at] == b'%' {
            let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            (u8::from_str_radix(hex, 16).ok()?, 3)
        } else {
            (bytes[at], 1)
        };
        if *real.get(index)? != want {
            return None;
        }
        let replacement = *surrogate.get(index)?;
        if replacement == want {
            out.extend_from_slice(&bytes[at..at + width]);
        } else {
            out.push(replacement);
        }
        at += width;
        index += 1;
    }
    (index == real.len()).then_some(())?;
    String::from_utf8(out).ok()
}

/// `text` with every `from` replaced by its `to`, longest first; each must occur.
fn replace_all(text: &str, replacements: &mut [(String, String)]) -> Result<String, ProjectError> {
    replacements.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    let mut text = text.to_owned();
    for (from, to) in replacements.iter() {
        if from.is_empty() || !text.contains(from.as_str()) {
            return Err(ProjectError::NotReplaced("a token's text".to_owned()));
        }
        text = text.replace(from.as_str(), to);
    }
    Ok(text)
}

/// The projection parsed again: the same number of tokens, each one a surrogate, and no
/// real value (nor the file's text of one) left anywhere in it.
fn check(
    store: Store,
    projected: &str,
    found: &[Found],
    tokens: &[Token],
) -> Result<(), ProjectError> {
    let again = find(store, projected)?;
    let surrogates: BTreeSet<&str> = tokens.iter().map(|t| t.surrogate.as_str()).collect();
    if again.len() != found.len() {
        return Err(ProjectError::NotReplaced(
            "the token count changed".to_owned(),
        ));
    }
    if let Some(item) = again
        .iter()
        .find(|item| !surrogates.contains(item.real.as_str()))
    {
        return Err(ProjectError::NotReplaced(field_name(item)));
    }
    for item in found {
        if projected.contains(item.real.as_str()) || projected.contains(item.in_file.as_str()) {
            return Err(ProjectError::NotReplaced(field_name(item)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoded_passwords_keep_their_encoding() {
        let written = percent_like("ab%2Fcd12", "ab/cd12", "xy/zw34").expect("written");
        assert_eq!(written, "xy%2Fzw34");
        assert_eq!(percent_like("ab%2", "ab/", "xy/"), None);
    }

    #[test]
    fn a_missing_text_is_an_error() {
        let mut replacements = vec![("absent".to_owned(), "x".to_owned())];
        assert!(replace_all("text", &mut replacements).is_err());
    }
}
