//! The admin API's routes for the asks of `--mode ask` (docs/contract.md "Admin API",
//! docs/policy.md "Ask mode"): `GET /v1/pending` lists them, `POST /v1/pending/{id}` with
//! `{"decision":"allow"|"deny","scope":"once"|"run"|"save"}` answers one (404 unknown id,
//! 400 bad body, 409 already answered or timed out, or `save` not possible).
//!
//! `save` first adds the rule to the first `--policy` file (text edit checked by the real
//! loader, [`airlock_policy::edit`]), written to a temporary file beside it and renamed
//! over it; only then is the ask answered (and the rule applies for the run). If the file
//! cannot be edited the ask stays pending and the caller is told why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use airlock_policy::ask::{Answer, AnswerError, AskKey, Scope};
use airlock_proxy::ask::Asks;
use http::StatusCode;
use serde_json::{Value, json};

/// Where `save` writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaveTarget {
    /// The first `--policy` file (native YAML or JSON).
    File(PathBuf),
    /// Nowhere: why `save` is refused (no `--policy` file, a seed format, a `git:` source).
    Unavailable(String),
}

/// The ask routes' state.
pub struct AskRoutes {
    asks: Arc<Asks>,
    save: SaveTarget,
    /// One `save` at a time edits the file.
    saving: Mutex<()>,
}

impl AskRoutes {
    /// Routes answering `asks`, saving to `save`.
    pub fn new(asks: Arc<Asks>, save: SaveTarget) -> Self {
        AskRoutes {
            asks,
            save,
            saving: Mutex::new(()),
        }
    }

    /// `GET /v1/pending`: the pending asks, oldest first.
    pub fn list(&self) -> (StatusCode, Value) {
        let items: Vec<Value> = self
            .asks
            .pending()
            .iter()
            .map(|ask| ask.to_json())
            .collect();
        (StatusCode::OK, Value::Array(items))
    }

    /// `POST /v1/pending/{id}` with `body`.
    pub fn decide(&self, id: &str, body: &[u8]) -> (StatusCode, Value) {
        let Ok(id) = id.parse::<u64>() else {
            return error(StatusCode::NOT_FOUND, "no pending ask has this id");
        };
        let answer = match parse_answer(body) {
            Ok(answer) => answer,
            Err(message) => return error(StatusCode::BAD_REQUEST, &message),
        };
        let key = match self.asks.key(id) {
            Ok(key) => key,
            Err(e) => return answer_error(e),
        };
        if answer == Answer::Allow(Scope::Save)
            && let Err(message) = self.save_rule(&key)
        {
            return error(StatusCode::CONFLICT, &message);
        }
        match self.asks.answer(id, answer) {
            Ok(()) => (
                StatusCode::OK,
                json!({"id": id.to_string(), "answered": true}),
            ),
            Err(e) => answer_error(e),
        }
    }

    fn save_rule(&self, key: &AskKey) -> Result<(), String> {
        if key.is_raw() {
            // The policy has no raw-only rule: a saved `host` rule would let every HTTP
            // request to that host through in later runs, uninspected by any ask.
            return Err(
                "a raw TCP connection cannot be saved as a rule (it would allow every HTTP \
                 request to the host too): answer once or run, or add the rule by hand"
                    .into(),
            );
        }
        let path = match &self.save {
            SaveTarget::File(path) => path,
            SaveTarget::Unavailable(why) => return Err(why.clone()),
        };
        let _one_at_a_time = self.saving.lock().unwrap_or_else(PoisonError::into_inner);
        save_to(path, key)
    }
}

fn answer_error(error: AnswerError) -> (StatusCode, Value) {
    match error {
        AnswerError::Unknown => error_json(StatusCode::NOT_FOUND, error),
        AnswerError::Closed => error_json(StatusCode::CONFLICT, error),
    }
}

fn error_json(status: StatusCode, error: AnswerError) -> (StatusCode, Value) {
    self::error(status, &error.to_string())
}

fn error(status: StatusCode, message: &str) -> (StatusCode, Value) {
    (status, json!({ "error": message }))
}

/// Reads `{"decision":"allow"|"deny","scope":"once"|"run"|"save"}` (`scope` defaults to
/// `once` and is ignored for `deny`).
fn parse_answer(body: &[u8]) -> Result<Answer, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let scope = match value.get("scope") {
        None | Some(Value::Null) => Scope::Once,
        Some(Value::String(text)) => Scope::parse(text)
            .ok_or_else(|| format!("scope {text:?}: use \"once\", \"run\" or \"save\""))?,
        Some(_) => return Err("scope: use \"once\", \"run\" or \"save\"".to_owned()),
    };
    match value.get("decision").and_then(Value::as_str) {
        Some("allow") => Ok(Answer::Allow(scope)),
        Some("deny") => Ok(Answer::Deny),
        _ => Err("decision: use \"allow\" or \"deny\"".to_owned()),
    }
}

/// Adds the allow entry for `key` to the policy file at `path`: read, edit and check,
/// write a temporary file in the same directory (same permissions), rename it over.
fn save_to(path: &Path, key: &AskKey) -> Result<(), String> {
    use std::io::Write as _;
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let edited = airlock_policy::edit::add_allow(&shown, &text, key).map_err(|e| e.to_string())?;
    let permissions = std::fs::metadata(path)
        .map_err(|e| format!("{shown}: {e}"))?
        .permissions();
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".airlock-save-")
        .tempfile_in(dir)
        .map_err(|e| format!("{shown}: cannot create a temporary file beside it: {e}"))?;
    temp.write_all(edited.as_bytes())
        .and_then(|()| temp.as_file().sync_all())
        .and_then(|()| temp.as_file().set_permissions(permissions))
        .map_err(|e| format!("{shown}: cannot write the temporary file: {e}"))?;
    temp.persist(path)
        .map_err(|e| format!("{shown}: cannot replace the file: {}", e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        assert_eq!(
            parse_answer(br#"{"decision":"allow","scope":"run"}"#),
            Ok(Answer::Allow(Scope::Run))
        );
        assert_eq!(
            parse_answer(br#"{"decision":"allow"}"#),
            Ok(Answer::Allow(Scope::Once))
        );
        assert_eq!(
            parse_answer(br#"{"decision":"deny","scope":"save"}"#),
            Ok(Answer::Deny)
        );
        assert!(parse_answer(br#"{"decision":"maybe"}"#).is_err());
        assert!(parse_answer(br#"{"decision":"allow","scope":"forever"}"#).is_err());
        assert!(parse_answer(b"not json").is_err());
    }

    #[test]
    fn save_keeps_the_text_and_replaces_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("policy.yaml");
        let text = "# keep me\nversion: 1\nnetwork:\n  allow:\n    - host: a.example.test # a\n";
        std::fs::write(&path, text).expect("write");
        let key = AskKey {
            method: "GET".to_owned(),
            host: "b.example.test".to_owned(),
            port: 443,
            path: Some("/x".to_owned()),
        };
        save_to(&path, &key).expect("save");
        let saved = std::fs::read_to_string(&path).expect("read");
        assert!(saved.starts_with(text), "{saved}");
        assert!(saved.contains("b.example.test"), "{saved}");
        let leftovers = std::fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(leftovers, 1);
    }
}
