use super::*;

fn stamp() -> Stamp {
    Stamp {
        unix_ms: 1_800_000_000_000,
        rfc3339: "2027-01-15T08:00:00.000000Z".to_owned(),
    }
}

fn tokens() -> NewTokens {
    NewTokens {
        access: Some("sk-ant-oat01-NEWACCESS".to_owned()),
        refresh: Some("sk-ant-ort01-NEWREFRESH".to_owned()),
        id: None,
        expires_in: Some(3600),
    }
}

#[test]
fn endpoints_are_found_by_host_and_path() {
    let watch = Watch {
        login: Login::Claude,
        file: PathBuf::from("/home/u/.claude/.credentials.json"),
        copy: None,
        secrets: vec![(Field::Refresh, "R".into())],
    };
    assert!(watch.matches("platform.claude.com", "/v1/oauth/token"));
    assert!(watch.matches("Console.Anthropic.com", "/v1/oauth/token"));
    assert!(!watch.matches("platform.claude.com", "/v1/oauth/token/x"));
    assert!(!watch.matches("auth.openai.com", "/oauth/token"));
    assert_eq!(watch.secret(Field::Refresh), Some("R"));
    assert_eq!(watch.secret(Field::Access), None);
}

#[test]
fn a_claude_answer_is_read_and_shown_with_surrogates() {
    let body = br#"{"token_type":"Bearer","access_token":"sk-ant-oat01-NEW","expires_in":28800,"refresh_token":"sk-ant-ort01-NEWR","refresh_token_expires_in":99,"scope":"user:inference","account":{"uuid":"u"}}"#;
    let tokens = parse_response(body).expect("parse");
    assert_eq!(tokens.access.as_deref(), Some("sk-ant-oat01-NEW"));
    assert_eq!(tokens.refresh.as_deref(), Some("sk-ant-ort01-NEWR"));
    assert_eq!(tokens.id, None);
    assert_eq!(tokens.expires_in, Some(28800));
    let shown = surrogate_response(
        body,
        &[
            (Field::Access, "sk-ant-oat01-SUR".to_owned()),
            (Field::Refresh, "sk-ant-ort01-SURR".to_owned()),
        ],
    )
    .expect("rewrite");
    let shown = String::from_utf8(shown).unwrap();
    assert_eq!(
        shown,
        r#"{"token_type":"Bearer","access_token":"sk-ant-oat01-SUR","expires_in":28800,"refresh_token":"sk-ant-ort01-SURR","refresh_token_expires_in":99,"scope":"user:inference","account":{"uuid":"u"}}"#
    );
    assert!(!format!("{tokens:?}").contains("NEW"));
}

#[test]
fn answers_airlock_cannot_place_are_refused() {
    for body in [
        &b"not json"[..],
        b"[1,2]",
        b"\"x\"",
        br#"{"access_token": 12}"#,
        br#"{"access_token": ""}"#,
        br#"{"access_token": "a b"}"#,
        br#"{"access_token": "a", "session_token": "b"}"#,
        br#"{"access_token": "a", "nested": {"accessToken": "b"}}"#,
    ] {
        assert!(
            parse_response(body).is_err(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    assert!(
        parse_response(br#"{"access_token":"a","token_type":"Bearer","id_token":null}"#).is_ok()
    );
}

#[test]
fn a_claude_file_is_rewritten_in_place() {
    let file = "{\n  \"claudeAiOauth\": {\n    \"accessToken\": \"sk-ant-oat01-OLD\",\n    \"refreshToken\": \"sk-ant-ort01-OLDR\",\n    \"expiresAt\": 1700000000000,\n    \"scopes\": [\"user:inference\"],\n    \"subscriptionType\": \"max\"\n  },\n  \"other\": 1\n}\n";
    assert_eq!(
        file_refresh_token(Login::Claude, file.as_bytes()).as_deref(),
        Some("sk-ant-ort01-OLDR")
    );
    let out = rewrite_file(Login::Claude, file.as_bytes(), &tokens(), &stamp()).expect("rewrite");
    let expected = file
        .replace("sk-ant-oat01-OLD", "sk-ant-oat01-NEWACCESS")
        .replace("sk-ant-ort01-OLDR", "sk-ant-ort01-NEWREFRESH")
        .replace("1700000000000", "1800003600000");
    assert_eq!(String::from_utf8(out.clone()).unwrap(), expected);
    assert_eq!(
        file_freshness(Login::Claude, &out),
        new_freshness(Login::Claude, &tokens(), &stamp())
    );
}

#[test]
fn a_refresh_without_a_new_refresh_token_keeps_the_old_one() {
    let file = br#"{"claudeAiOauth":{"accessToken":"OLD","refreshToken":"OLDR","expiresAt":1}}"#;
    let mut only_access = tokens();
    only_access.refresh = None;
    let out = rewrite_file(Login::Claude, file, &only_access, &stamp()).expect("rewrite");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-NEWACCESS","refreshToken":"OLDR","expiresAt":1800003600000}}"#
    );
}

#[test]
fn a_codex_file_is_rewritten_and_missing_keys_added() {
    let file = br#"{"OPENAI_API_KEY":null,"tokens":{"access_token":"OLDA","refresh_token":"OLDR","account_id":"acc"}}"#;
    let new = NewTokens {
        access: Some("NEWA".into()),
        refresh: Some("NEWR".into()),
        id: Some("NEWI".into()),
        expires_in: None,
    };
    let out = rewrite_file(Login::Codex, file, &new, &stamp()).expect("rewrite");
    let out = String::from_utf8(out).unwrap();
    assert_eq!(
        out,
        r#"{"last_refresh":"2027-01-15T08:00:00.000000Z","OPENAI_API_KEY":null,"tokens":{"id_token":"NEWI","access_token":"NEWA","refresh_token":"NEWR","account_id":"acc"}}"#
    );
    assert_eq!(
        file_freshness(Login::Codex, out.as_bytes()).as_deref(),
        Some("2027-01-15T08:00:00.000000Z")
    );
}

#[test]
fn keys_added_to_an_empty_object_stay_valid_json() {
    let file = br#"{"claudeAiOauth":{ }}"#;
    let out = rewrite_file(Login::Claude, file, &tokens(), &stamp()).expect("rewrite");
    let value: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
    assert_eq!(value["claudeAiOauth"]["expiresAt"], 1_800_003_600_000_u64);
    assert_eq!(
        value["claudeAiOauth"]["refreshToken"],
        "sk-ant-ort01-NEWREFRESH"
    );
}

#[test]
fn a_file_without_its_object_is_refused() {
    assert_eq!(
        rewrite_file(
            Login::Codex,
            br#"{"OPENAI_API_KEY":"sk"}"#,
            &tokens(),
            &stamp()
        ),
        Err(RefreshError::Missing("tokens"))
    );
    assert_eq!(
        rewrite_file(Login::Claude, b"{", &tokens(), &stamp()),
        Err(RefreshError::NotJson)
    );
}

mod screening {
    use super::super::request::{Screened, answer_carries_tokens, normal_path, screen_body};
    use super::*;

    const S: &str = "sk-ant-ort01-SURROGATEsurrogate0001";
    const A: &str = "sk-ant-oat01-ACCESSsurrogate0001";

    fn screen(body: &str) -> Screened {
        screen_body(body.as_bytes(), S, &[S, A])
    }

    #[test]
    fn a_plain_refresh_grant_is_one() {
        let json = format!(
            r#"{{"grant_type":"refresh_token","refresh_token":"{S}","client_id":"c","scope":"user:inference"}}"#
        );
        assert_eq!(screen(&json), Screened::Grant);
        let form = format!("client_id=c&grant_type=refresh_token&refresh_token={S}&scope=a+b");
        assert_eq!(screen(&form), Screened::Grant);
        // Keys are decoded too: an encoded key is the key itself, read once.
        let form = format!("grant%5Ftype=refresh_token&refresh_token={S}");
        assert_eq!(screen(&form), Screened::Grant);
    }

    /// The reviewer's exact bodies (review35 F4, F8) and their relatives.
    #[test]
    fn the_reviewers_bodies_are_ambiguous() {
        let attacker = "%73%6B%2D%61%6E%74%2D%6F%72%74%30%31%2DATTACKERownREFRESHtoken0001";
        for body in [
            format!(
                "refresh%5Ftoken={attacker}&grant_type=refresh_token&refresh_token={S}&client_id=c"
            ),
            format!("grant_type=refresh_token&refresh_token={S}&refresh%5Ftoken={attacker}"),
            format!("grant%5Ftype=refresh_token&grant_type=refresh_token&refresh_token={S}"),
            format!("grant_type=refresh_token&refresh_token={S}&grant_type=authorization_code"),
            format!("grant_type=refresh_token&refresh_token={S}&client_id=a&client_id=b"),
            format!("grant_type=refresh_token&refresh_token={S}&scope=a&scope=b"),
            format!("grant_type=refresh_token&refresh_token={S}&Refresh_Token=x"),
            format!("grant_type=refresh_token&refresh_token={S}&refresh_token[]=x"),
            format!("grant_type=refresh_token&refresh_token={S};refresh_token=x"),
            format!("grant_type=refresh_token&refresh_token={S}&x=%zz"),
            format!("grant_type=refresh_token&refresh_token={S}&x=%00"),
            format!("grant_type=refresh_token&refresh_token={S}&client_id={S}"),
            format!("grant_type=refresh_token&refresh_token={S}&x={A}"),
            format!(
                r#"{{"refresh_token":"sk-ant-ort01-ATTACKER","grant_type":"refresh_token","refresh_token":"{S}"}}"#
            ),
            format!(
                r#"{{"grant_type":"refresh_token","refresh_token":"{S}","Refresh_Token":"sk-ant-ort01-ATTACKER"}}"#
            ),
            format!(
                r#"{{"grant_type":"refresh_token","refresh_token":"{S}","x":{{"a":1,"a":2}}}}"#
            ),
            format!(r#"{{"grant_type":["refresh_token"],"refresh_token":"{S}"}}"#),
            format!(r#"{{"grant_type":"refresh_token","refresh_token":"{S}""#),
            format!(r#"[{{"grant_type":"refresh_token","refresh_token":"{S}"}}]"#),
            format!("grant_type=refresh_token&refresh_token={S}&audience=https://other"),
            format!(r#"{{"grant_type":"refresh_token","refresh_token":"{S}","resource":"r"}}"#),
        ] {
            assert!(
                matches!(screen(&body), Screened::Ambiguous(_)),
                "{body}: {:?}",
                screen(&body)
            );
        }
    }

    #[test]
    fn other_uses_of_the_surrogate_are_no_grant() {
        for body in [
            format!("grant_type=authorization_code&code=x&refresh_token={S}"),
            format!("grant_type=urn:ietf:params:oauth:grant-type:token-exchange&subject_token={S}"),
            format!("token={S}&token_type_hint=refresh_token"),
            format!(r#"{{"grant_type":"refresh_token","refresh_token":"other","x":"{S}"}}"#),
        ] {
            assert_eq!(screen(&body), Screened::Other, "{body}");
        }
    }

    #[test]
    fn endpoint_paths_are_normalised() {
        let watch = Watch {
            login: Login::Claude,
            file: PathBuf::from("/h/.claude/.credentials.json"),
            copy: None,
            secrets: vec![],
        };
        for path in [
            "/v1/oauth/token",
            "/v1/oauth/token/",
            "//v1//oauth/token",
            "/V1/OAuth/Token",
            "/v1/oauth/%74oken",
            "/v1/oauth/token;x=1",
        ] {
            assert!(watch.matches("PLATFORM.claude.com", path), "{path}");
        }
        assert!(!watch.matches("platform.claude.com", "/v1/oauth/token/x"));
        assert!(!watch.matches("platform.claude.com", "/v1/oauth/%zz"));
        assert!(watch.on_host("Console.Anthropic.com"));
        assert!(!watch.on_host("api.anthropic.com"));
        assert!(watch.mints("api.anthropic.com", "/api/oauth/claude_cli/create_api_key/"));
        assert!(!watch.mints("api.anthropic.com", "/v1/messages"));
        assert_eq!(normal_path("/").as_deref(), Some("/"));
    }

    #[test]
    fn token_fields_in_answers_are_found() {
        for body in [
            &br#"{"access_token":"sk-proj-MINTEDapiKEYcanary0008","issued_token_type":"urn:x"}"#[..],
            br#"{"data":{"raw_key":"abc"}}"#,
            br#"{"id_token":"x"}"#,
            br#"{"list":[{"value":"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.sig"}]}"#,
            br#"{"session":{"secret":"s"}}"#,
            b"access_token=abc&token_type=bearer",
            b"<html><input name=\"id_token\" value=\"x\"></html>",
        ] {
            assert!(
                answer_carries_tokens(body),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        for body in [
            &br#"{"error":"invalid_grant","error_description":"bad"}"#[..],
            br#"{"token_type":"Bearer","expires_in":3600,"account":{"uuid":"u"}}"#,
            br#"{"access_token":"","api_key":null}"#,
            b"",
            b"<html>hello</html>",
        ] {
            assert!(
                !answer_carries_tokens(body),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}

/// rereview35 G7: Codex's `id_token` is never swapped (inert), whatever else the file
/// holds; Claude's login has no inert token.
#[test]
fn only_codex_id_tokens_are_inert() {
    assert!(inert(Login::Codex, Field::Id));
    for field in [Field::Access, Field::Refresh] {
        assert!(!inert(Login::Codex, field));
        assert!(!inert(Login::Claude, field));
    }
    assert!(!inert(Login::Claude, Field::Id));
}
