//! The parsers of the stores kept as JSON (Claude Code, Codex, Docker) and as YAML (gh):
//! the tokens the table places, and an error for any other field that looks like a
//! credential.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::formats::{Form, Found, looks_like_credential, url_host};
use crate::stores::{DOCKER_HUB_HOSTS, spec};
use crate::{ProjectError, Store};

/// `~/.claude/.credentials.json`.
pub(crate) fn claude(text: &str) -> Result<Vec<Found>, ProjectError> {
    let root = parse_json(text)?;
    let table = spec(Store::Claude);
    let mut found = Vec::new();
    let mut known = Vec::new();
    for field in ["accessToken", "refreshToken"] {
        if let Some(real) = string_at(&root, &["claudeAiOauth", field]) {
            found.push(json_token(table.slot(field), "", real, None)?);
            known.push(format!("claudeAiOauth.{field}"));
        }
    }
    if let Some(servers) = root.get("mcpOAuth").and_then(Value::as_object) {
        for (name, server) in servers {
            for (field, slot) in [
                ("accessToken", "mcpAccessToken"),
                ("refreshToken", "mcpRefreshToken"),
            ] {
                let Some(real) = string_at(server, &[field]) else {
                    continue;
                };
                let host = server
                    .get("serverUrl")
                    .and_then(Value::as_str)
                    .and_then(url_host)
                    .ok_or_else(|| ProjectError::BadHost(format!("mcpOAuth.{field}")))?;
                found.push(json_token(table.slot(slot), &host, real, Some(&host))?);
                known.push(format!("mcpOAuth.{name}.{field}"));
            }
        }
    }
    unplaced(&root, "", &known)?;
    Ok(found)
}

/// `~/.codex/auth.json`.
pub(crate) fn codex(text: &str) -> Result<Vec<Found>, ProjectError> {
    let root = parse_json(text)?;
    let table = spec(Store::Codex);
    let mut found = Vec::new();
    let mut known = Vec::new();
    if let Some(real) = string_at(&root, &["OPENAI_API_KEY"]) {
        found.push(json_token(table.slot("OPENAI_API_KEY"), "", real, None)?);
        known.push("OPENAI_API_KEY".to_owned());
    }
    for field in ["access_token", "id_token", "refresh_token"] {
        if let Some(real) = string_at(&root, &["tokens", field]) {
            found.push(json_token(table.slot(field), "", real, None)?);
            known.push(format!("tokens.{field}"));
        }
    }
    unplaced(&root, "", &known)?;
    Ok(found)
}

/// `~/.docker/config.json`: `auths.REGISTRY.{auth, identitytoken, registrytoken}`.
pub(crate) fn docker(text: &str) -> Result<Vec<Found>, ProjectError> {
    let root = parse_json(text)?;
    let table = spec(Store::Docker);
    let mut found = Vec::new();
    let mut known = Vec::new();
    if let Some(auths) = root.get("auths").and_then(Value::as_object) {
        for (registry, entry) in auths {
            let host = url_host(registry).ok_or_else(|| ProjectError::BadHost("auths".into()))?;
            let hub = host == "index.docker.io" || host == "docker.io";
            let mut push = |mut item: Found| {
                if hub {
                    item.hosts = DOCKER_HUB_HOSTS.iter().map(|h| (*h).to_owned()).collect();
                }
                found.push(item);
            };
            if let Some(auth) = string_at(entry, &["auth"]) {
                let decoded = STANDARD
                    .decode(auth)
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or(ProjectError::Parse(
                        "Docker `auth` (base64 of user:password)",
                    ))?;
                let (user, password) = decoded.split_once(':').ok_or(ProjectError::Parse(
                    "Docker `auth` (base64 of user:password)",
                ))?;
                let form = Form::DockerAuth {
                    user: user.to_owned(),
                };
                push(Found::new(
                    table.slot("auth"),
                    &host,
                    password,
                    auth,
                    form,
                    Some(&host),
                )?);
                known.push(format!("auths.{registry}.auth"));
            }
            for field in ["identitytoken", "registrytoken"] {
                if let Some(real) = string_at(entry, &[field]) {
                    push(json_token(table.slot(field), &host, real, Some(&host))?);
                    known.push(format!("auths.{registry}.{field}"));
                }
            }
        }
    }
    unplaced(&root, "", &known)?;
    Ok(found)
}

/// `~/.config/gh/hosts.yml`: `HOST.oauth_token` and `HOST.users.USER.oauth_token`.
pub(crate) fn gh(text: &str) -> Result<Vec<Found>, ProjectError> {
    // YAML comments are not parsed: a commented-out login would be shown raw.
    for line in text.lines().map(str::trim_start) {
        if line.starts_with('#') {
            crate::text_stores::skipped(line)?;
        }
    }
    let root: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_saphyr::from_str(text).map_err(|_| ProjectError::Parse("YAML"))?
    };
    let slot = spec(Store::Gh).slot("oauth_token");
    let mut found = Vec::new();
    let mut known = Vec::new();
    let hosts = match &root {
        Value::Null => return Ok(found),
        Value::Object(hosts) => hosts,
        _ => return Err(ProjectError::Parse("gh's hosts.yml (a map of hosts)")),
    };
    for (host, entry) in hosts {
        let mut places = vec![(Vec::new(), format!("{host}.oauth_token"))];
        if let Some(users) = entry.get("users").and_then(Value::as_object) {
            for user in users.keys() {
                places.push((
                    vec!["users", user.as_str()],
                    format!("{host}.users.{user}.oauth_token"),
                ));
            }
        }
        for (mut path, place) in places {
            path.push("oauth_token");
            if let Some(real) = string_at(entry, &path) {
                found.push(Found::new(slot, host, real, real, Form::Raw, Some(host))?);
                known.push(place);
            }
        }
    }
    unplaced(&root, "", &known)?;
    Ok(found)
}

fn parse_json(text: &str) -> Result<Value, ProjectError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    // serde_json keeps the last of two equal keys: the first one's value would be neither
    // found nor replaced, and shown raw. Such a file is refused.
    serde_json::from_str::<NoDuplicateKeys>(text)
        .map_err(|_| ProjectError::Parse("JSON without duplicate keys"))?;
    serde_json::from_str(text).map_err(|_| ProjectError::Parse("JSON"))
}

/// Keys whose string values are public identifiers by the file's format (an OAuth
/// client's id, Codex's account id): not swept for token shapes (crate::sweep).
const PUBLIC_KEYS: &[&str] = &["clientId", "client_id", "account_id"];

/// The string values of `text` (a JSON store's projected file) under [`PUBLIC_KEYS`].
pub(crate) fn public_values(text: &str) -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    match child.as_str() {
                        Some(text) if PUBLIC_KEYS.contains(&key.as_str()) => {
                            out.push(text.to_owned());
                        }
                        _ => walk(child, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| walk(item, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        walk(&value, &mut out);
    }
    out
}

/// A JSON document, parsed only to refuse an object with two equal keys (after
/// unescaping), at any depth.
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON without duplicate keys")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(self)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(self)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(self)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(self)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(serde::de::Error::custom("duplicate key"));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(self)
    }
}

/// A JSON string token found beside `named` (for slots whose hosts the file names).
fn json_token(
    slot: &'static crate::stores::Slot,
    label: &str,
    real: &str,
    named: Option<&str>,
) -> Result<Found, ProjectError> {
    let in_file = serde_json::to_string(real).map_err(|_| ProjectError::Parse("JSON"))?;
    Found::new(slot, label, real, in_file, Form::Json, named)
}

/// The non-empty string at `path` below `value`.
fn string_at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    path.iter()
        .try_fold(value, |value, key| value.get(key))?
        .as_str()
        .filter(|text| !text.is_empty())
}

/// An error for the first non-empty string under a credential-looking key whose place
/// (`a.b.c`) is not in `known`.
fn unplaced(value: &Value, at: &str, known: &[String]) -> Result<(), ProjectError> {
    let join = |key: &str| {
        if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        }
    };
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let place = join(key);
                let holds_value = child.as_str().is_some_and(|text| !text.is_empty());
                if holds_value && looks_like_credential(key) && !known.contains(&place) {
                    return Err(ProjectError::Unplaced(place));
                }
                unplaced(child, &place, known)?;
            }
        }
        Value::Array(items) => {
            for item in items {
                unplaced(item, &join("[]"), known)?;
            }
        }
        _ => {}
    }
    Ok(())
}
