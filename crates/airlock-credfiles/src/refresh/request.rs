//! What a request to a watched login's token host may carry, and what its answer may
//! hold (docs/secrets.md, "Refreshes"): the strict reading of a refresh grant's body
//! ([`screen_body`]: every key decoded like a server decodes it, any parameter twice or
//! spelled almost like a watched one is [`Screened::Ambiguous`]), the normal form of a
//! token endpoint's path ([`normal_path`]), and whether an answer holds token fields
//! ([`answer_carries_tokens`]).

use super::spans::{self, Kind};

/// The parameters a refresh grant is read by.
const GRANT_TYPE: &str = "grant_type";
const REFRESH_TOKEN: &str = "refresh_token";

/// The parameters a refresh grant may hold: what Claude Code and Codex send
/// (`client_id` and `scope` besides the grant). Anything more (`audience`, `resource`,
/// ...) could change what the server issues, and that would be written to the host file.
const ALLOWED: &[&str] = &[GRANT_TYPE, REFRESH_TOKEN, "client_id", "scope"];

/// What a request body that carries a projected surrogate is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screened {
    /// `grant_type=refresh_token` with `refresh_token` the refresh surrogate, read
    /// unambiguously: every parameter once, the surrogate nowhere else.
    Grant,
    /// Unambiguous, but not a refresh grant of the refresh surrogate.
    Other,
    /// A body two servers could read differently, or a refresh grant with a parameter
    /// beyond [`ALLOWED`] (the reason, without values).
    Ambiguous(&'static str),
}

/// Reads a token endpoint request's `body` (JSON object or form) that carries one of
/// `surrogates` (every projected surrogate the request may hold); `refresh` is the
/// login's refresh-token surrogate.
pub fn screen_body(body: &[u8], refresh: &str, surrogates: &[&str]) -> Screened {
    let params = match first_byte(body) {
        Some(b'{' | b'[') => json_params(body),
        _ => form_params(body),
    };
    let params = match params {
        Ok(params) => params,
        Err(why) => return Screened::Ambiguous(why),
    };
    for (index, (key, _)) in params.iter().enumerate() {
        if params[..index].iter().any(|(other, _)| other == key) {
            return Screened::Ambiguous("a parameter appears more than once");
        }
        let folded = fold(key);
        let near = [GRANT_TYPE, REFRESH_TOKEN]
            .iter()
            .any(|name| folded == fold(name) && key != name);
        if near {
            return Screened::Ambiguous(
                "a parameter is spelled almost like grant_type or refresh_token",
            );
        }
    }
    let value = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| value.as_deref())
    };
    if params
        .iter()
        .any(|(key, value)| (key == GRANT_TYPE || key == REFRESH_TOKEN) && value.is_none())
    {
        return Screened::Ambiguous("grant_type or refresh_token is not a plain string");
    }
    let grant = value(GRANT_TYPE) == Some("refresh_token") && value(REFRESH_TOKEN) == Some(refresh);
    if !grant {
        return Screened::Other;
    }
    if params
        .iter()
        .any(|(key, _)| !ALLOWED.contains(&key.as_str()))
    {
        return Screened::Ambiguous(
            "a refresh grant may hold only grant_type, refresh_token, client_id and scope",
        );
    }
    // The refresh surrogate once, in its parameter; no other surrogate anywhere.
    let text = String::from_utf8_lossy(body);
    let elsewhere = params.iter().any(|(key, value)| {
        key != REFRESH_TOKEN
            && (surrogates.iter().any(|s| key.contains(s))
                || value
                    .as_deref()
                    .is_some_and(|v| surrogates.iter().any(|s| v.contains(s))))
    });
    let others = surrogates
        .iter()
        .filter(|s| **s != refresh)
        .any(|s| text.contains(s));
    if elsewhere || others || text.matches(refresh).count() != 1 {
        return Screened::Ambiguous(
            "a projected token appears outside the refresh_token parameter",
        );
    }
    Screened::Grant
}

/// The parameter `name` of a refresh grant's `body` (read as [`screen_body`] reads it):
/// `Ok(None)` when absent, `Ok(Some(None))` when present but not a plain string, `Err`
/// when the body cannot be read (run [`screen_body`] first: it refuses those).
pub(super) fn param(body: &[u8], name: &str) -> Result<Option<Option<String>>, &'static str> {
    let params = match first_byte(body) {
        Some(b'{' | b'[') => json_params(body)?,
        _ => form_params(body)?,
    };
    Ok(params
        .into_iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value))
}

/// The first byte of `body` that is not white space.
fn first_byte(body: &[u8]) -> Option<u8> {
    body.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// A key folded the way lenient servers match it: lower-case, letters and digits only.
fn fold(key: &str) -> String {
    key.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// A parameter: its decoded key and, when it is a plain string, its decoded value.
type Param = (String, Option<String>);

/// The top-level members of a JSON object; a duplicate key at any depth or anything but
/// one object is ambiguous.
fn json_params(body: &[u8]) -> Result<Vec<Param>, &'static str> {
    let found = spans::spans(body).ok_or("the body starts like JSON but is not a JSON object")?;
    if found
        .last()
        .is_none_or(|top| top.kind != Kind::Object || !top.path.is_empty())
    {
        return Err("the body starts like JSON but is not a JSON object");
    }
    for (index, span) in found.iter().enumerate() {
        if found[..index].iter().any(|other| other.path == span.path) {
            return Err("a JSON key appears more than once");
        }
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| "the body is not JSON")?;
    let object = value.as_object().ok_or("the body is not a JSON object")?;
    Ok(object
        .iter()
        .map(|(key, value)| (key.clone(), value.as_str().map(str::to_owned)))
        .collect())
}

/// The pairs of a form body, keys and values decoded (`+`, `%XX`). An invalid escape,
/// decoded bytes that are not UTF-8 or hold a control character, or a `;` (an old
/// separator some servers still split on) is ambiguous.
fn form_params(body: &[u8]) -> Result<Vec<Param>, &'static str> {
    let text = std::str::from_utf8(body).map_err(|_| "the form body is not UTF-8")?;
    if text.contains(';') {
        return Err("the form body holds a `;`");
    }
    let mut params = Vec::new();
    for pair in text.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = form_decode(key).ok_or("a form key has an invalid escape")?;
        let value = form_decode(value).ok_or("a form value has an invalid escape")?;
        params.push((key, Some(value)));
    }
    Ok(params)
}

/// A form component decoded (`+` → space, `%XX`); `None` for an invalid escape, bytes
/// that are not UTF-8, or a control character.
pub fn form_decode(component: &str) -> Option<String> {
    let bytes = component.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'%' => {
                let hex = bytes.get(index + 1..index + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                index += 3;
            }
            b'+' => {
                out.push(b' ');
                index += 1;
            }
            byte => {
                out.push(byte);
                index += 1;
            }
        }
    }
    let text = String::from_utf8(out).ok()?;
    (!text.chars().any(char::is_control)).then_some(text)
}

/// A request path as a token endpoint is matched: percent-decoded, `;params` of each
/// segment dropped, empty segments (`//`, a trailing `/`) dropped, lower-case. `None`
/// when the path cannot be decoded (then it matches no endpoint).
pub fn normal_path(path: &str) -> Option<String> {
    let decoded = form_decode(&path.replace('+', "%2B"))?;
    let mut out = String::with_capacity(decoded.len());
    for segment in decoded.split('/') {
        let segment = segment.split(';').next().unwrap_or_default();
        if !segment.is_empty() {
            out.push('/');
            out.push_str(&segment.to_ascii_lowercase());
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// Whether a JSON key names a credential: lower-cased letters and digits hold `token`
/// (but for `token_type`, `issued_token_type`, `token_type_hint`), `secret`, `password`,
/// or end in `key` (`api_key`, `raw_key`, `secret_key`).
pub fn names_a_secret(key: &str) -> bool {
    let folded = fold(key);
    let token = folded.contains("token")
        && !matches!(
            folded.as_str(),
            "tokentype" | "issuedtokentype" | "tokentypehint"
        );
    token || folded.contains("secret") || folded.contains("password") || folded.ends_with("key")
}

/// A value shaped like a credential whatever its key: an API-key prefix (`sk-`) or a JWT.
fn token_shaped(value: &str) -> bool {
    value.len() >= 20 && (value.starts_with("sk-") || value.starts_with("eyJ"))
}

/// The fragments whose presence in a non-JSON answer (form, HTML, text) counts as a
/// token field, matched on the answer's lower-cased letters and digits.
const TEXT_MARKERS: &[&str] = &[
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "apikey",
    "sessiontoken",
    "clientsecret",
];

/// Whether a 2xx answer from a token host holds a token field: a JSON document with a
/// non-empty value under a key [`names_a_secret`] says is a credential, or a string value
/// shaped like one, at any depth; any other body whose text names a token field
/// ([`TEXT_MARKERS`], so a form answer `access_token=...` too).
pub fn answer_carries_tokens(body: &[u8]) -> bool {
    if body.iter().all(u8::is_ascii_whitespace) {
        return false;
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(value) => value_carries(&value),
        Err(_) => {
            let folded = fold(&String::from_utf8_lossy(body));
            TEXT_MARKERS.iter().any(|marker| folded.contains(marker))
        }
    }
}

/// [`answer_carries_tokens`] of a JSON value.
fn value_carries(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(text) => token_shaped(text),
        Value::Array(items) => items.iter().any(value_carries),
        Value::Object(members) => members.iter().any(|(key, value)| {
            let filled = match value {
                Value::Null | Value::Bool(_) | Value::Number(_) => false,
                Value::String(text) => !text.is_empty(),
                Value::Array(items) => !items.is_empty(),
                Value::Object(members) => !members.is_empty(),
            };
            (names_a_secret(key) && filled) || value_carries(value)
        }),
        _ => false,
    }
}
