//! OAuth refreshes of projected logins (docs/secrets.md, "Refreshes"): which token
//! endpoints are watched ([`ENDPOINTS`]), how their answer is read ([`parse_response`])
//! and shown to the command with surrogates ([`surrogate_response`]), and the pure
//! rewrite of a host file with the refreshed tokens ([`rewrite_file`]), byte-exact outside
//! the values that change. What a request to a token host may carry and what its answer
//! may hold: [`request`]. Which scopes a refresh must keep: [`scope`].

pub mod request;
pub mod scope;
mod spans;

use std::path::PathBuf;

use self::spans::{Kind, Span};

/// A login whose OAuth refreshes airlock carries out for the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Login {
    /// Claude Code's `~/.claude/.credentials.json` (`claudeAiOauth`).
    Claude,
    /// Codex's `~/.codex/auth.json` (`tokens`).
    Codex,
}

impl Login {
    /// The store's name as the policy and the audit log write it.
    pub fn name(self) -> &'static str {
        match self {
            Login::Claude => "claude",
            Login::Codex => "codex",
        }
    }
}

/// A token endpoint: a POST to `https://{host}{path}` is a refresh (or a login).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The login whose tokens it issues.
    pub login: Login,
    /// The host, lower-case.
    pub host: &'static str,
    /// The path, without query.
    pub path: &'static str,
}

/// The token endpoints, as found in the CLIs themselves: Claude Code 2.1.332's
/// `TOKEN_URL` (`platform.claude.com`; earlier versions used `console.anthropic.com`)
/// and codex-cli 0.163.0's refresh URL.
pub const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        login: Login::Claude,
        host: "platform.claude.com",
        path: "/v1/oauth/token",
    },
    Endpoint {
        login: Login::Claude,
        host: "console.anthropic.com",
        path: "/v1/oauth/token",
    },
    Endpoint {
        login: Login::Codex,
        host: "auth.openai.com",
        path: "/oauth/token",
    },
];

/// Endpoints that mint a long-lived credential from a login's token (Claude Code's
/// `create_api_key`, which turns a Console login's access token into an API key): treated
/// like a token host's paths (docs/secrets.md, "Refreshes"): the projected token is not
/// sent there, and a 2xx holding a token field is refused.
pub const MINTING: &[Endpoint] = &[Endpoint {
    login: Login::Claude,
    host: "api.anthropic.com",
    path: "/api/oauth/claude_cli/create_api_key",
}];

/// The endpoints of `login`.
pub fn endpoints(login: Login) -> impl Iterator<Item = &'static Endpoint> {
    ENDPOINTS.iter().filter(move |e| e.login == login)
}

/// A token of a token endpoint's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// `access_token`.
    Access,
    /// `refresh_token`.
    Refresh,
    /// `id_token` (OpenID Connect; Codex).
    Id,
}

impl Field {
    /// The field's name in the endpoint's answer.
    pub fn response_name(self) -> &'static str {
        match self {
            Field::Access => "access_token",
            Field::Refresh => "refresh_token",
            Field::Id => "id_token",
        }
    }

    /// Every field, in answer order.
    pub const ALL: [Field; 3] = [Field::Access, Field::Refresh, Field::Id];
}

/// Whether `login`'s `field` is *inert* (docs/secrets.md, "Credential files", `never`):
/// its file shows a surrogate but no secret is made of it, so it is never swapped to any
/// host (Codex's `id_token`). A refresh's new value of it gets a new surrogate for the
/// command and goes to the host file, but into no credential store.
pub fn inert(login: Login, field: Field) -> bool {
    let store = match login {
        Login::Claude => crate::Store::Claude,
        Login::Codex => crate::Store::Codex,
    };
    let (_, keys) = placements(login);
    keys.iter()
        .filter(|(_, f)| *f == field)
        .filter_map(|(key, _)| {
            crate::stores::spec(store)
                .slots
                .iter()
                .find(|slot| slot.field == *key)
        })
        .any(|slot| slot.sent == crate::stores::Sent::Never)
}

/// What the proxy watches for one projected login: its endpoints, the secrets its
/// tokens were projected as, and the host file the refreshed tokens go back to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watch {
    /// The login.
    pub login: Login,
    /// The host file (outside the jail).
    pub file: PathBuf,
    /// The projected copy the command sees, if any: after a refresh it is rewritten with
    /// the new surrogates, so that a CLI reading its file again finds tokens that work.
    pub copy: Option<PathBuf>,
    /// The secret name of each token projected, e.g. `(Field::Refresh, "CLAUDE_REFRESH_TOKEN")`.
    pub secrets: Vec<(Field, String)>,
}

impl Watch {
    /// The secret name of `field`, if that token was projected.
    pub fn secret(&self, field: Field) -> Option<&str> {
        self.secrets
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, name)| name.as_str())
    }

    /// Whether a request to `host` and `path` is one of this login's token endpoints
    /// (the path compared in its [`request::normal_path`] form: trailing or doubled
    /// slashes, percent-encoding, `;params` and case do not hide an endpoint).
    pub fn matches(&self, host: &str, path: &str) -> bool {
        let Some(path) = request::normal_path(path) else {
            return false;
        };
        endpoints(self.login).any(|e| host.eq_ignore_ascii_case(e.host) && path == e.path)
    }

    /// Whether `host` is one of this login's token hosts (any path).
    pub fn on_host(&self, host: &str) -> bool {
        endpoints(self.login).any(|e| host.eq_ignore_ascii_case(e.host))
    }

    /// Whether `host` + `path` is one of this login's [`MINTING`] endpoints.
    pub fn mints(&self, host: &str, path: &str) -> bool {
        let Some(path) = request::normal_path(path) else {
            return false;
        };
        MINTING
            .iter()
            .filter(|e| e.login == self.login)
            .any(|e| host.eq_ignore_ascii_case(e.host) && path == e.path)
    }
}

/// The tokens of a successful refresh, real values. `Debug` shows which are present only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NewTokens {
    /// `access_token`.
    pub access: Option<String>,
    /// `refresh_token` (absent: the old one stays valid).
    pub refresh: Option<String>,
    /// `id_token`.
    pub id: Option<String>,
    /// `expires_in`, seconds.
    pub expires_in: Option<u64>,
}

impl std::fmt::Debug for NewTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewTokens")
            .field("access", &self.access.is_some())
            .field("refresh", &self.refresh.is_some())
            .field("id", &self.id.is_some())
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

impl NewTokens {
    /// The token of `field`.
    pub fn get(&self, field: Field) -> Option<&str> {
        match field {
            Field::Access => self.access.as_deref(),
            Field::Refresh => self.refresh.as_deref(),
            Field::Id => self.id.as_deref(),
        }
    }
}

/// Why an answer or a file cannot be rewritten. Never holds a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefreshError {
    /// Not one JSON object.
    #[error("not a JSON object")]
    NotJson,
    /// A token airlock cannot place (a field it does not know, or one not a string).
    #[error("the field {0} holds a token airlock cannot place")]
    Unplaceable(String),
    /// The file lacks the object the tokens belong in.
    #[error("the file has no {0} object")]
    Missing(&'static str),
}

/// Reads a token endpoint's 2xx answer. Fails closed: anything but a JSON object, a
/// known token that is not a non-empty string, or any other string field whose name says
/// it is a token (`*token*` other than `token_type`, at any depth) is [`RefreshError`].
pub fn parse_response(body: &[u8]) -> Result<NewTokens, RefreshError> {
    let found = spans::spans(body).ok_or(RefreshError::NotJson)?;
    if found.last().is_none_or(|top| top.kind != Kind::Object) {
        return Err(RefreshError::NotJson);
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| RefreshError::NotJson)?;
    let mut tokens = NewTokens::default();
    for field in Field::ALL {
        let name = field.response_name();
        let token = match value.get(name) {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::String(token)) if is_token(token) => token.clone(),
            Some(_) => return Err(RefreshError::Unplaceable(name.to_owned())),
        };
        match field {
            Field::Access => tokens.access = Some(token),
            Field::Refresh => tokens.refresh = Some(token),
            Field::Id => tokens.id = Some(token),
        }
    }
    tokens.expires_in = value.get("expires_in").and_then(serde_json::Value::as_u64);
    let known = |span: &Span| {
        span.path.len() == 1 && Field::ALL.iter().any(|f| f.response_name() == span.path[0])
    };
    if let Some(stray) = found
        .iter()
        .filter(|span| span.kind == Kind::String && !known(span))
        .filter_map(|span| span.path.last())
        .find(|key| names_a_token(key))
    {
        return Err(RefreshError::Unplaceable(stray.clone()));
    }
    Ok(tokens)
}

/// A value a header can carry, non-empty (what [`airlock_credentials`] accepts).
fn is_token(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_graphic())
}

/// Whether a key names a token (`session_token`, `accessToken`, ...).
fn names_a_token(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("token") && key != "token_type"
}

/// The answer the command gets: each token of `surrogates` (field, surrogate) replaced by
/// its surrogate, every other byte as it came. Run [`parse_response`] first.
pub fn surrogate_response(
    body: &[u8],
    surrogates: &[(Field, String)],
) -> Result<Vec<u8>, RefreshError> {
    let found = spans::spans(body).ok_or(RefreshError::NotJson)?;
    let edits = surrogates
        .iter()
        .filter_map(|(field, surrogate)| {
            let span = found.iter().find(|s| {
                s.kind == Kind::String && s.path.len() == 1 && s.path[0] == field.response_name()
            })?;
            Some((span.range.clone(), json_string(surrogate)))
        })
        .collect();
    Ok(apply(body, edits))
}

/// The moment of a refresh, as the host files write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// RFC 3339 UTC (`2026-11-27T21:00:00.123456Z`).
    pub rfc3339: String,
}

/// Where each refreshed value goes in a login's host file: (object path, key, field).
fn placements(login: Login) -> (&'static [&'static str], [(&'static str, Field); 3]) {
    match login {
        Login::Claude => (
            &["claudeAiOauth"],
            [
                ("accessToken", Field::Access),
                ("refreshToken", Field::Refresh),
                ("idToken", Field::Id),
            ],
        ),
        Login::Codex => (
            &["tokens"],
            [
                ("access_token", Field::Access),
                ("refresh_token", Field::Refresh),
                ("id_token", Field::Id),
            ],
        ),
    }
}

/// The refresh token a login's host file holds now (for the write-back's check that no
/// other run refreshed meanwhile).
pub fn file_refresh_token(login: Login, file: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(file).ok()?;
    let (object, keys) = placements(login);
    let refresh = keys.iter().find(|(_, f)| *f == Field::Refresh)?.0;
    value
        .get(object[0])?
        .get(refresh)?
        .as_str()
        .map(str::to_owned)
}

/// How fresh a login's host file says it is: Claude's `expiresAt` (ms), Codex's
/// `last_refresh` (RFC 3339, compared as text: one format, fixed width).
pub fn file_freshness(login: Login, file: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(file).ok()?;
    match login {
        Login::Claude => value
            .get("claudeAiOauth")?
            .get("expiresAt")?
            .as_u64()
            .map(|ms| format!("{ms:020}")),
        Login::Codex => value.get("last_refresh")?.as_str().map(str::to_owned),
    }
}

/// The freshness [`file_freshness`] would read after [`rewrite_file`] with `tokens`.
pub fn new_freshness(login: Login, tokens: &NewTokens, now: &Stamp) -> Option<String> {
    match login {
        Login::Claude => tokens
            .expires_in
            .map(|s| format!("{:020}", now.unix_ms.saturating_add(s.saturating_mul(1000)))),
        Login::Codex => Some(now.rfc3339.clone()),
    }
}

/// `file` (a login's host file) with the refreshed `tokens` in place, every other byte
/// kept: Claude's `claudeAiOauth.accessToken`, `.refreshToken` and `.expiresAt` (now +
/// `expires_in`, in ms); Codex's `tokens.access_token`, `.refresh_token`, `.id_token` and
/// `last_refresh`. A token the answer did not carry keeps its old value; a key the file
/// lacks is added at the start of its object.
pub fn rewrite_file(
    login: Login,
    file: &[u8],
    tokens: &NewTokens,
    now: &Stamp,
) -> Result<Vec<u8>, RefreshError> {
    let found = spans::spans(file).ok_or(RefreshError::NotJson)?;
    let (object_path, keys) = placements(login);
    let object = found
        .iter()
        .find(|s| s.kind == Kind::Object && s.path == object_path)
        .ok_or(RefreshError::Missing(object_path[0]))?;
    let mut values: Vec<(&[&str], &str, String)> = keys
        .iter()
        .filter_map(|(key, field)| Some((object_path, *key, json_string(tokens.get(*field)?))))
        .collect();
    match login {
        Login::Claude => {
            if let Some(ms) = new_freshness(login, tokens, now) {
                let ms = ms.trim_start_matches('0').to_owned();
                values.push((object_path, "expiresAt", ms));
            }
        }
        Login::Codex => values.push((&[], "last_refresh", json_string(&now.rfc3339))),
    }
    let top = found
        .iter()
        .find(|s| s.path.is_empty() && s.kind == Kind::Object)
        .ok_or(RefreshError::NotJson)?;
    let mut edits = Vec::new();
    // Keys to add, per container: each is followed by a comma but the last one added to
    // an empty object.
    let mut added: Vec<(&Span, String)> = Vec::new();
    for (parent, key, value) in values {
        let at = |s: &&Span| {
            s.path.len() == parent.len() + 1
                && s.path[..parent.len()] == *parent
                && s.path[parent.len()] == key
        };
        match found.iter().find(at) {
            Some(span) => edits.push((span.range.clone(), value)),
            None => {
                let container = if parent.is_empty() { top } else { object };
                added.push((container, format!("{}:{value}", json_string(key))));
            }
        }
    }
    for (index, (container, member)) in added.iter().enumerate() {
        let open = container.range.start + 1;
        let empty = file[open..container.range.end - 1]
            .iter()
            .all(u8::is_ascii_whitespace);
        let more = added[index + 1..]
            .iter()
            .any(|(other, _)| other.range == container.range);
        let comma = if empty && !more { "" } else { "," };
        edits.push((open..open, format!("{member}{comma}")));
    }
    Ok(apply(file, edits))
}

/// `value` as a JSON string.
fn json_string(value: &str) -> String {
    serde_json::Value::String(value.to_owned()).to_string()
}

/// `bytes` with each `(range, replacement)` applied (ranges do not overlap; insertions
/// at one point keep their order).
fn apply(bytes: &[u8], mut edits: Vec<(std::ops::Range<usize>, String)>) -> Vec<u8> {
    edits.sort_by_key(|(range, _)| range.start);
    let mut out = Vec::with_capacity(bytes.len() + 256);
    let mut last = 0;
    for (range, replacement) in edits {
        out.extend_from_slice(&bytes[last..range.start]);
        out.extend_from_slice(replacement.as_bytes());
        last = range.end;
    }
    out.extend_from_slice(&bytes[last..]);
    out
}

#[cfg(test)]
mod tests;
