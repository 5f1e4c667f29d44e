//! The parsers of the stores kept as text lines: `~/.git-credentials` (URLs), `~/.npmrc`
//! (`key=value`), `~/.pypirc` (ini sections) and `~/.netrc` (whitespace-separated
//! tokens). Each finds the tokens the table places and refuses other credential-looking
//! entries.

use crate::formats::{Form, Found, looks_like_credential, url_host};
use crate::stores::spec;
use crate::{ProjectError, Store};

/// `~/.git-credentials`: one `scheme://user:password@host[:port][/path]` a line.
pub(crate) fn git(text: &str) -> Result<Vec<Found>, ProjectError> {
    let slot = spec(Store::Git).slot("password");
    let mut found = Vec::new();
    for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
        let (_, rest) = line
            .split_once("://")
            .ok_or(ProjectError::Parse("git-credentials (one URL a line)"))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let Some((userinfo, host)) = authority.rsplit_once('@') else {
            skipped(line)?;
            continue;
        };
        let Some((_, password)) = userinfo.split_once(':') else {
            skipped(line)?;
            continue;
        };
        if password.is_empty() {
            skipped(line)?;
            continue;
        }
        let real = percent_encoding::percent_decode_str(password)
            .decode_utf8()
            .map_err(|_| ProjectError::Parse("git-credentials (a password is not UTF-8)"))?;
        let form = if password.contains('%') {
            Form::Percent
        } else {
            Form::Raw
        };
        let host = url_host(host).ok_or_else(|| ProjectError::BadHost("git".into()))?;
        found.push(Found::new(slot, &host, real, password, form, Some(&host))?);
    }
    Ok(found)
}

/// `~/.npmrc`: `//REGISTRY/PATH/:_authToken=TOKEN` lines (`${VARIABLE}` values are left).
pub(crate) fn npm(text: &str) -> Result<Vec<Found>, ProjectError> {
    let slot = spec(Store::Npm).slot("_authToken");
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            continue;
        }
        if line.starts_with([';', '#']) {
            skipped(line)?;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            skipped(line)?;
            continue;
        };
        let (key, value) = (key.trim(), unquote(value.trim()));
        if value.is_empty() || value.starts_with("${") {
            continue;
        }
        let field = key.rsplit(':').next().unwrap_or(key);
        match key.strip_suffix(":_authToken") {
            Some(registry) if registry.starts_with("//") => {
                let host = url_host(&registry[2..])
                    .ok_or_else(|| ProjectError::BadHost("_authToken".into()))?;
                found.push(Found::new(
                    slot,
                    &host,
                    value,
                    value,
                    Form::Raw,
                    Some(&host),
                )?);
            }
            _ if looks_like_credential(field) => {
                return Err(ProjectError::Unplaced(field.to_owned()));
            }
            _ => {}
        }
    }
    Ok(found)
}

/// `~/.pypirc`: the `password` of each section, for the host of its `repository`.
pub(crate) fn pypi(text: &str) -> Result<Vec<Found>, ProjectError> {
    let slot = spec(Store::Pypi).slot("password");
    let mut found = Vec::new();
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with(['#', ';']) {
            skipped(trimmed)?;
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[') {
            let name = name
                .strip_suffix(']')
                .ok_or(ProjectError::Parse("ini (a section header)"))?;
            sections.push((name.trim().to_owned(), Vec::new()));
            continue;
        }
        if line.starts_with([' ', '\t']) {
            // A continuation line of a multi-line value (index-servers).
            skipped(trimmed)?;
            continue;
        }
        let (key, value) = trimmed
            .split_once(['=', ':'])
            .ok_or(ProjectError::Parse("ini (key = value)"))?;
        let section = sections
            .last_mut()
            .ok_or(ProjectError::Parse("ini (a key outside any section)"))?;
        section
            .1
            .push((key.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    for (name, entries) in &sections {
        let get = |wanted: &str| {
            entries
                .iter()
                .find(|(key, _)| key == wanted)
                .map(|(_, value)| value.as_str())
        };
        for (key, value) in entries {
            if key != "password" && looks_like_credential(key) && !value.is_empty() {
                return Err(ProjectError::Unplaced(format!("{name}.{key}")));
            }
        }
        let Some(password) = get("password").filter(|p| !p.is_empty()) else {
            continue;
        };
        let host = match (get("repository"), name.as_str()) {
            (Some(url), _) => url_host(url),
            (None, "pypi" | "server-login") => Some("upload.pypi.org".to_owned()),
            (None, "testpypi") => Some("test.pypi.org".to_owned()),
            (None, _) => None,
        }
        .ok_or_else(|| ProjectError::BadHost(format!("{name}.repository")))?;
        found.push(Found::new(
            slot,
            name,
            password,
            password,
            Form::Raw,
            Some(&host),
        )?);
    }
    Ok(found)
}

/// `~/.netrc`: `machine HOST login USER password PASSWORD` (any layout); macros skipped.
pub(crate) fn netrc(text: &str) -> Result<Vec<Found>, ProjectError> {
    let slot = spec(Store::Netrc).slot("password");
    let mut found = Vec::new();
    let mut machine: Option<Option<String>> = None;
    let mut in_macro = false;
    for line in text.lines() {
        if in_macro {
            in_macro = !line.trim().is_empty();
            skipped(line)?;
            continue;
        }
        let mut words = line.split_whitespace();
        while let Some(word) = words.next() {
            if word.starts_with('#') {
                let rest: Vec<&str> = std::iter::once(word).chain(words).collect();
                netrc_comment(&rest)?;
                break;
            }
            let mut value = || {
                words
                    .next()
                    .filter(|value| !value.starts_with('"'))
                    .ok_or(ProjectError::Parse("netrc"))
            };
            match word {
                "machine" => machine = Some(Some(value()?.to_owned())),
                "default" => machine = Some(None),
                "login" => {
                    value()?;
                }
                "password" | "account" => {
                    let secret = value()?;
                    let host = machine
                        .clone()
                        .flatten()
                        .ok_or_else(|| ProjectError::BadHost(format!("netrc {word}")))?;
                    if word == "account" {
                        return Err(ProjectError::Unplaced("account".into()));
                    }
                    found.push(Found::new(
                        slot,
                        &host,
                        secret,
                        secret,
                        Form::Raw,
                        Some(&host),
                    )?);
                }
                "macdef" => {
                    value()?;
                    in_macro = true;
                    break;
                }
                _ => return Err(ProjectError::Parse("netrc")),
            }
        }
    }
    Ok(found)
}

/// A line (or a comment) the parser does not read: refused when it holds anything
/// credential-like (a commented-out login would otherwise be shown raw).
pub(crate) fn skipped(line: &str) -> Result<(), ProjectError> {
    if crate::sweep::suspicious(line) {
        return Err(ProjectError::Unplaced(
            "a comment or a line airlock does not read".to_owned(),
        ));
    }
    Ok(())
}

/// A netrc comment's words: refused as [`skipped`] text, or when a `password`,
/// `passwd` or `account` word has a word after it.
fn netrc_comment(words: &[&str]) -> Result<(), ProjectError> {
    let keyword = words.iter().enumerate().any(|(index, word)| {
        let word = word.trim_start_matches('#').to_ascii_lowercase();
        matches!(word.as_str(), "password" | "passwd" | "account") && index + 1 < words.len()
    });
    if keyword {
        return Err(ProjectError::Unplaced("a comment".to_owned()));
    }
    skipped(&words.join(" "))
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or(value)
}
