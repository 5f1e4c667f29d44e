//! The scopes of a projected login (docs/secrets.md, "Refreshes", scopes): where the
//! host file records the scopes the login was granted (Claude Code's
//! `claudeAiOauth.scopes`), a refresh grant that names a `scope` must ask for every one
//! of them, so that a command cannot down-scope the user's login (the down-scoped token
//! would be written back to the host file). A grant without `scope` keeps the login's
//! scopes (RFC 6749 §6). Where the file records none (Codex's `auth.json`), `scope` is
//! not compared.

use super::Login;

/// The scopes `login`'s host file (`file`, its bytes) records: `None` when it records
/// none (Codex; a Claude file without a `scopes` array of strings, or an empty one).
pub fn recorded_scopes(login: Login, file: &[u8]) -> Option<Vec<String>> {
    if login != Login::Claude {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(file).ok()?;
    let scopes = value.get("claudeAiOauth")?.get("scopes")?.as_array()?;
    let scopes: Vec<String> = scopes
        .iter()
        .map(|scope| scope.as_str().map(str::to_owned))
        .collect::<Option<_>>()?;
    let scopes: Vec<String> = scopes
        .into_iter()
        .filter(|scope| !scope.trim().is_empty())
        .collect();
    (!scopes.is_empty()).then_some(scopes)
}

/// Whether the refresh grant `body` keeps the login's `recorded` scopes: `Ok` when it
/// names no `scope`, or one that holds every recorded scope (space-separated, any
/// order, more allowed); `Err` (why, no value) when its `scope` leaves one out or is
/// not a plain string. Nothing recorded: always `Ok`.
pub fn check_scope(recorded: Option<&[String]>, body: &[u8]) -> Result<(), &'static str> {
    let Some(recorded) = recorded else {
        return Ok(());
    };
    let requested = match super::request::param(body, "scope")? {
        None => return Ok(()),
        Some(None) => return Err("the refresh grant's scope is not a plain string"),
        Some(Some(scope)) => scope,
    };
    let asked: Vec<&str> = requested.split_ascii_whitespace().collect();
    if recorded.iter().all(|scope| asked.contains(&scope.trim())) {
        Ok(())
    } else {
        Err(
            "the refresh grant's scope leaves out a scope the login's file records (a \
             down-scoped login would be written back to the host's file)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &[u8] = br#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r","scopes":["user:inference","user:profile"]}}"#;

    fn recorded() -> Vec<String> {
        recorded_scopes(Login::Claude, FILE).expect("recorded")
    }

    #[test]
    fn claude_files_record_scopes_codex_files_do_not() {
        assert_eq!(recorded(), ["user:inference", "user:profile"]);
        assert_eq!(recorded_scopes(Login::Codex, FILE), None);
        let none = br#"{"claudeAiOauth":{"accessToken":"a"}}"#;
        assert_eq!(recorded_scopes(Login::Claude, none), None);
        let empty = br#"{"claudeAiOauth":{"scopes":[]}}"#;
        assert_eq!(recorded_scopes(Login::Claude, empty), None);
        let odd = br#"{"claudeAiOauth":{"scopes":["a",1]}}"#;
        assert_eq!(recorded_scopes(Login::Claude, odd), None);
        assert_eq!(recorded_scopes(Login::Claude, b"not json"), None);
    }

    #[test]
    fn a_grant_must_keep_every_recorded_scope() {
        let recorded = recorded();
        let check = |body: &[u8]| check_scope(Some(&recorded), body);
        // No scope: the login keeps its scopes.
        assert_eq!(check(b"grant_type=refresh_token&refresh_token=R"), Ok(()));
        assert_eq!(check(br#"{"grant_type":"refresh_token"}"#), Ok(()));
        // Every recorded scope, any order, more allowed, form or JSON.
        for body in [
            &b"grant_type=refresh_token&scope=user%3Aprofile+user%3Ainference"[..],
            br#"{"scope":"user:inference user:profile user:sessions:claude_code"}"#,
            br#"{"scope":"  user:profile   user:inference "}"#,
        ] {
            assert_eq!(check(body), Ok(()), "{}", String::from_utf8_lossy(body));
        }
        // One left out, none at all, a near miss, a non-string: refused.
        for body in [
            &b"grant_type=refresh_token&scope=user%3Ainference"[..],
            br#"{"scope":""}"#,
            br#"{"scope":"user:inference user:profil"}"#,
            br#"{"scope":"user:inference,user:profile"}"#,
            br#"{"scope":["user:inference","user:profile"]}"#,
        ] {
            assert!(check(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn nothing_recorded_nothing_compared() {
        assert_eq!(check_scope(None, br#"{"scope":"openid"}"#), Ok(()));
        assert_eq!(check_scope(None, br#"{"scope":["x"]}"#), Ok(()));
    }
}
