//! Credentials::prepare_request on real header maps: swapping, injection, tripwire,
//! foreign credentials; and what Debug and the redactor show.

use airlock_credentials::{CredentialError, Credentials};
use airlock_policy::Reason;
use airlock_policy::model::{Inject, Secret, SecretSource};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use http::header::HeaderValue;

const GH_REAL: &str = "ghp_RealRealRealRealRealRealRealReal1234";
const OPENAI_REAL: &str = "sk-proj-RealOpenAiKey0123456789";
const NPM_REAL: &str = "npm_RealNpmToken0123456789abcdefABCDEF";

fn secret(name: &str) -> Secret {
    Secret::new(name, SecretSource::Env(name.to_owned()))
}

fn credentials() -> Credentials {
    let openai = Secret {
        inject: Some(Inject {
            header: "authorization".into(),
            format: "Bearer {value}".into(),
        }),
        ..secret("OPENAI_API_KEY")
    };
    let npm = Secret {
        headers: Some(vec!["authorization".into()]),
        ..secret("NPM_TOKEN")
    };
    Credentials::new(vec![
        (secret("GH_TOKEN"), GH_REAL.to_owned()),
        (openai, OPENAI_REAL.to_owned()),
        (npm, NPM_REAL.to_owned()),
    ])
    .expect("credentials")
}

fn surrogate(credentials: &Credentials, name: &str) -> String {
    credentials
        .surrogates()
        .into_iter()
        .find(|(secret, _)| secret == name)
        .map(|(_, surrogate)| surrogate)
        .expect("known secret")
}

fn headers(pairs: &[(&'static str, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, HeaderValue::from_str(value).expect("header value"));
    }
    map
}

fn values(map: &HeaderMap, name: &str) -> Vec<String> {
    map.get_all(name)
        .iter()
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .collect()
}

#[test]
fn surrogates_come_in_policy_order_and_look_like_the_real_thing() {
    let credentials = credentials();
    let names: Vec<String> = credentials
        .surrogates()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["GH_TOKEN", "OPENAI_API_KEY", "NPM_TOKEN"]);
    let gh = surrogate(&credentials, "GH_TOKEN");
    assert!(gh.starts_with("ghp_"));
    assert_eq!(gh.len(), GH_REAL.len());
    assert_ne!(gh, GH_REAL);
}

#[test]
fn every_header_and_every_duplicate_is_swapped() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    let mut map = headers(&[
        ("authorization", format!("token {gh}")),
        ("x-custom", format!("a {gh} b {gh}")),
        ("x-custom", gh.clone()),
        ("user-agent", "curl/8".into()),
    ]);
    let swapped = credentials
        .prepare_request(&["GH_TOKEN"], &mut map)
        .expect("allowed");
    assert_eq!(swapped, ["GH_TOKEN"]);
    assert_eq!(values(&map, "authorization"), [format!("token {GH_REAL}")]);
    assert_eq!(
        values(&map, "x-custom"),
        [format!("a {GH_REAL} b {GH_REAL}"), GH_REAL.to_owned()]
    );
    assert_eq!(values(&map, "user-agent"), ["curl/8"]);
    assert!(map.get("authorization").expect("present").is_sensitive());
}

#[test]
fn basic_credentials_are_swapped_in_user_and_password() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    for (plain, expected) in [
        (
            format!("x-access-token:{gh}"),
            format!("x-access-token:{GH_REAL}"),
        ),
        (
            format!("{gh}:x-oauth-basic"),
            format!("{GH_REAL}:x-oauth-basic"),
        ),
    ] {
        let mut map = headers(&[(
            "authorization",
            format!("Basic {}", STANDARD.encode(&plain)),
        )]);
        let swapped = credentials
            .prepare_request(&["GH_TOKEN"], &mut map)
            .expect("allowed");
        assert_eq!(swapped, ["GH_TOKEN"]);
        assert_eq!(
            values(&map, "authorization"),
            [format!("Basic {}", STANDARD.encode(&expected))]
        );
    }
}

#[test]
fn listed_headers_restrict_swapping() {
    let credentials = credentials();
    let npm = surrogate(&credentials, "NPM_TOKEN");
    let mut map = headers(&[
        ("authorization", format!("Bearer {npm}")),
        ("x-other", npm.clone()),
    ]);
    let swapped = credentials
        .prepare_request(&["NPM_TOKEN"], &mut map)
        .expect("allowed");
    assert_eq!(swapped, ["NPM_TOKEN"]);
    assert_eq!(
        values(&map, "authorization"),
        [format!("Bearer {NPM_REAL}")]
    );
    assert_eq!(values(&map, "x-other"), [npm]);
}

#[test]
fn inject_overrides_what_the_agent_sent() {
    let credentials = credentials();
    let mut map = headers(&[
        ("authorization", "Bearer attacker-key".into()),
        ("authorization", "Bearer second".into()),
    ]);
    let swapped = credentials
        .prepare_request(&["OPENAI_API_KEY"], &mut map)
        .expect("allowed");
    assert_eq!(swapped, ["OPENAI_API_KEY"]);
    assert_eq!(
        values(&map, "authorization"),
        [format!("Bearer {OPENAI_REAL}")]
    );

    let mut empty = HeaderMap::new();
    credentials
        .prepare_request(&["OPENAI_API_KEY"], &mut empty)
        .expect("allowed");
    assert_eq!(
        values(&empty, "authorization"),
        [format!("Bearer {OPENAI_REAL}")]
    );
}

#[test]
fn surrogate_out_of_scope_trips_the_wire() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    for map in [
        headers(&[("authorization", format!("token {gh}"))]),
        headers(&[("x-exfil", format!("prefix{gh}suffix"))]),
        headers(&[(
            "authorization",
            format!("Basic {}", STANDARD.encode(format!("u:{gh}"))),
        )]),
        headers(&[("cookie", "a=b".into()), ("cookie", format!("t={gh}"))]),
    ] {
        let before = map.clone();
        let mut map = map;
        assert_eq!(
            credentials.prepare_request(&[], &mut map),
            Err(Reason::SecretOutOfScope)
        );
        assert_eq!(
            credentials.prepare_request(&["NPM_TOKEN"], &mut map),
            Err(Reason::SecretOutOfScope)
        );
        assert_eq!(map, before, "headers untouched on refusal");
    }
}

#[test]
fn foreign_credentials_on_a_secrets_host_are_refused() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    for (name, value) in [
        (
            "authorization",
            "token ghp_AttackerOwnedTokenAttackerOwned12".to_owned(),
        ),
        ("x-api-key", "someone-elses-key".to_owned()),
        ("private-token", "glpat-xyz".to_owned()),
        ("proxy-authorization", "Basic Zm9vOmJhcg==".to_owned()),
    ] {
        let mut map = headers(&[(name, value)]);
        assert_eq!(
            credentials.prepare_request(&["GH_TOKEN"], &mut map),
            Err(Reason::ForeignCredential),
            "{name}"
        );
    }
    // A foreign credential next to the surrogate is still foreign.
    let mut map = headers(&[
        ("authorization", format!("token {gh}")),
        ("authorization", "token other".into()),
    ]);
    assert_eq!(
        credentials.prepare_request(&["GH_TOKEN"], &mut map),
        Err(Reason::ForeignCredential)
    );
    // A secret with listed headers checks those and every credential header besides.
    let mut map = headers(&[("x-api-key", "anything".into())]);
    assert_eq!(
        credentials.prepare_request(&["NPM_TOKEN"], &mut map),
        Err(Reason::ForeignCredential)
    );
    // Headers that carry no credential are the agent's business.
    let mut map = headers(&[("x-request-id", "anything".into())]);
    assert!(
        credentials
            .prepare_request(&["NPM_TOKEN"], &mut map)
            .is_ok()
    );
    // Without the secret in scope, other credentials are the agent's business.
    let mut map = headers(&[("authorization", "token mine".into())]);
    assert_eq!(credentials.prepare_request(&[], &mut map), Ok(Vec::new()));
}

#[test]
fn foreign_allowed_lets_other_credentials_pass() {
    let lenient = Secret {
        foreign_allowed: true,
        ..secret("GH_TOKEN")
    };
    let credentials = Credentials::new(vec![(lenient, GH_REAL.to_owned())]).expect("credentials");
    let mut map = headers(&[("authorization", "token someone-else".into())]);
    assert_eq!(
        credentials.prepare_request(&["GH_TOKEN"], &mut map),
        Ok(Vec::new())
    );
    assert_eq!(values(&map, "authorization"), ["token someone-else"]);
}

#[test]
fn fixed_surrogates_are_used_and_checked() {
    let fixed = Secret {
        surrogate: Some("npm_0000000000000000000000000000000000000".into()),
        ..secret("NPM_TOKEN")
    };
    let credentials = Credentials::new(vec![(fixed.clone(), NPM_REAL.to_owned())]).expect("ok");
    assert_eq!(
        credentials.surrogates(),
        [(
            "NPM_TOKEN".to_owned(),
            "npm_0000000000000000000000000000000000000".to_owned()
        )]
    );
    let same = Secret {
        surrogate: Some(NPM_REAL.into()),
        ..secret("NPM_TOKEN")
    };
    assert!(matches!(
        Credentials::new(vec![(same, NPM_REAL.to_owned())]),
        Err(CredentialError::InvalidSurrogate(name)) if name == "NPM_TOKEN"
    ));
    let twin = Secret {
        name: "OTHER".into(),
        ..fixed.clone()
    };
    assert!(matches!(
        Credentials::new(vec![
            (fixed, NPM_REAL.to_owned()),
            (twin, "other-value-1".to_owned())
        ]),
        Err(CredentialError::DuplicateSurrogate(..))
    ));
}

#[test]
fn bad_real_values_are_refused_by_name() {
    for (value, expected) in [
        ("", "EmptyValue"),
        ("a\nb", "InvalidValue"),
        ("--", "NothingToRandomise"),
    ] {
        let err = Credentials::new(vec![(secret("MY_SECRET"), value.to_owned())])
            .expect_err("must refuse");
        assert!(format!("{err:?}").starts_with(expected), "{err:?}");
        assert!(err.to_string().contains("MY_SECRET"), "{err}");
    }
}

#[test]
fn debug_and_redactor_never_show_real_values() {
    let credentials = credentials();
    let debug = format!("{credentials:?}");
    for real in [GH_REAL, OPENAI_REAL, NPM_REAL] {
        assert!(!debug.contains(real), "{debug}");
    }
    assert!(debug.contains("GH_TOKEN"));
    let redactor = credentials.redactor();
    let text = format!(
        "upstream error for {GH_REAL}: {}",
        STANDARD.encode(format!("x:{NPM_REAL}"))
    );
    let redacted = redactor.redact(&text);
    assert!(!redacted.contains(GH_REAL), "{redacted}");
    assert!(redacted.contains("[REDACTED:GH_TOKEN]"), "{redacted}");
    assert!(redacted.contains("[REDACTED:NPM_TOKEN]"), "{redacted}");
}

#[test]
fn tripwire_looks_at_paths_queries_and_bodies() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    let path = format!("/exfil/{gh}");
    assert_eq!(
        credentials.check_out_of_scope(&[], path.as_bytes()),
        Err(Reason::SecretOutOfScope)
    );
    assert_eq!(
        credentials.check_out_of_scope(&["GH_TOKEN"], path.as_bytes()),
        Ok(())
    );
    let encoded: String = gh.bytes().map(|byte| format!("%{byte:02x}")).collect();
    let query = format!("q={encoded}");
    assert_eq!(
        credentials.check_out_of_scope(&["NPM_TOKEN"], query.as_bytes()),
        Err(Reason::SecretOutOfScope)
    );
    assert_eq!(
        credentials.check_out_of_scope(&[], b"/clean?a=%zz%4"),
        Ok(())
    );
}

#[test]
fn responses_get_surrogates_instead_of_real_values() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    let body = format!("{{\"echo\":\"{GH_REAL}\"}}");
    let scrubbed = credentials.scrubber().scrub(body.as_bytes()).into_owned();
    assert_eq!(scrubbed, format!("{{\"echo\":\"{gh}\"}}").into_bytes());
}

#[test]
fn body_swapping_only_for_secrets_marked_body() {
    let npm = Secret {
        body: true,
        ..secret("NPM_TOKEN")
    };
    let credentials = Credentials::new(vec![
        (secret("GH_TOKEN"), GH_REAL.to_owned()),
        (npm, NPM_REAL.to_owned()),
    ])
    .expect("credentials");
    let gh = surrogate(&credentials, "GH_TOKEN");
    let npm = surrogate(&credentials, "NPM_TOKEN");
    let body = format!("{{\"a\":\"{npm}\",\"b\":\"{gh}\"}}");
    let (swapped, names) = credentials
        .swap_in_body(&["GH_TOKEN", "NPM_TOKEN"], body.as_bytes())
        .expect("swapped");
    assert_eq!(names, ["NPM_TOKEN"]);
    assert_eq!(
        swapped,
        format!("{{\"a\":\"{NPM_REAL}\",\"b\":\"{gh}\"}}").into_bytes()
    );
    assert_eq!(
        credentials.swap_in_body(&["GH_TOKEN"], body.as_bytes()),
        None
    );
}

#[test]
fn rotation_keeps_surrogates_and_still_scrubs_the_old_value() {
    let before = credentials();
    let surrogates = before.surrogates();
    let new_real = "ghp_NewNewNewNewNewNewNewNewNewNewNew5678";
    let after = before
        .rotated("GH_TOKEN", new_real.to_owned())
        .expect("rotated");
    assert_eq!(after.surrogates(), surrogates, "the sandbox sees no change");
    let gh = surrogate(&after, "GH_TOKEN");
    let mut map = headers(&[("authorization", format!("Bearer {gh}"))]);
    after
        .prepare_request(&["GH_TOKEN"], &mut map)
        .expect("swapped");
    assert_eq!(
        values(&map, "authorization"),
        vec![format!("Bearer {new_real}")]
    );
    let echoed = format!("old {GH_REAL} new {new_real}");
    let scrubbed = after.scrubber().scrub(echoed.as_bytes()).into_owned();
    let scrubbed = String::from_utf8(scrubbed).expect("utf-8");
    assert!(
        !scrubbed.contains(GH_REAL) && !scrubbed.contains(new_real),
        "{scrubbed}"
    );
    let redacted = after.redactor().redact(&echoed).into_owned();
    assert!(
        !redacted.contains(GH_REAL) && !redacted.contains(new_real),
        "{redacted}"
    );
    // A second rotation keeps the same surrogate too.
    let again = after
        .rotated(
            "GH_TOKEN",
            "ghp_ThirdThirdThirdThirdThirdThird000000".to_owned(),
        )
        .expect("rotated again");
    assert_eq!(again.surrogates(), surrogates);
}

#[test]
fn foreign_credentials_in_cookies_query_and_other_headers_are_refused() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    let npm = surrogate(&credentials, "NPM_TOKEN");
    // GH_TOKEN swaps in every header, NPM_TOKEN (`headers: [authorization]`) in one: the
    // places checked are the same table for both.
    for scope in ["GH_TOKEN", "NPM_TOKEN"] {
        for (name, value) in [
            ("x-goog-api-key", "AIzaSyAttackerOwnedKey".to_owned()),
            ("api-key", "azure-key-of-someone-else".to_owned()),
            ("cookie", "user_session=attacker-session".to_owned()),
            ("cookie", "theme=dark; _gitlab_session=abc".to_owned()),
            (
                "cookie",
                "prefs=ghp_AttackerOwnedTokenAttackerOwned12".to_owned(),
            ),
        ] {
            let mut map = headers(&[(name, value.clone())]);
            assert_eq!(
                credentials.prepare_request(&[scope], &mut map),
                Err(Reason::ForeignCredential),
                "{scope}: {name}: {value}"
            );
        }
        for target in [
            "/v1/models?key=AIzaSyAttackerOwnedKey",
            "/x?a=1&api_key=mine",
            "/x?a=1;access_token=mine",
            "/x?%6Bey=mine",
            "/x?TOKEN=mine",
            "/x?key=mine%20too",
        ] {
            assert_eq!(
                credentials.check_foreign_query(&[scope], target),
                Err(Reason::ForeignCredential),
                "{scope}: {target}"
            );
        }
    }
    // Cookies that are no credential, and credentials that are surrogates, pass.
    let mut map = headers(&[
        ("cookie", "__cf_bm=abc.def; _cfuvid=xyz".to_owned()),
        ("cookie", format!("user_session={gh}")),
    ]);
    assert!(credentials.prepare_request(&["GH_TOKEN"], &mut map).is_ok());
    for target in [
        "/x".to_owned(),
        "/x?page=2&per_page=100&monkey=1".to_owned(),
        "/x?key=&token".to_owned(),
        format!("/x?key={gh}"),
        format!("/x?access_token={}", npm.replace('_', "%5F")),
    ] {
        let scope = ["GH_TOKEN", "NPM_TOKEN"];
        assert_eq!(
            credentials.check_foreign_query(&scope, &target),
            Ok(()),
            "{target}"
        );
    }
    // Off the secrets' hosts, or with `foreign: allow`, nothing is checked.
    assert_eq!(credentials.check_foreign_query(&[], "/x?key=mine"), Ok(()));
    let lenient = Secret {
        foreign_allowed: true,
        ..secret("GH_TOKEN")
    };
    let lenient = Credentials::new(vec![(lenient, GH_REAL.to_owned())]).expect("credentials");
    assert_eq!(
        lenient.check_foreign_query(&["GH_TOKEN"], "/x?key=mine"),
        Ok(())
    );
    let mut map = headers(&[("cookie", "user_session=mine".to_owned())]);
    assert!(lenient.prepare_request(&["GH_TOKEN"], &mut map).is_ok());
}

#[test]
fn the_real_value_on_its_own_host_is_no_foreign_credential() {
    // docs/secrets.md: to the secret's own hosts the real value passes as it is.
    let credentials = credentials();
    let basic = format!("Basic {}", STANDARD.encode(format!("x:{GH_REAL}")));
    for (name, value) in [
        ("authorization", format!("token {GH_REAL}")),
        ("authorization", basic),
        ("x-api-key", GH_REAL.to_owned()),
        ("cookie", format!("user_session={GH_REAL}")),
    ] {
        let mut map = headers(&[(name, value.clone())]);
        assert_eq!(
            credentials.prepare_request(&["GH_TOKEN"], &mut map),
            Ok(Vec::new()),
            "{name}"
        );
        assert_eq!(values(&map, name), vec![value], "untouched");
    }
    let query = format!("/x?access_token={GH_REAL}");
    assert_eq!(
        credentials.check_foreign_query(&["GH_TOKEN"], &query),
        Ok(())
    );
    // Another token of the same format on that host is still someone else's.
    let mut map = headers(&[(
        "authorization",
        "token ghp_AttackerOwnedTokenAttackerOwned12".to_owned(),
    )]);
    assert_eq!(
        credentials.prepare_request(&["GH_TOKEN"], &mut map),
        Err(Reason::ForeignCredential)
    );
    // Another secret's real value is no pass on this host: it is foreign here.
    let mut map = headers(&[("authorization", format!("Bearer {NPM_REAL}"))]);
    assert_eq!(
        credentials.prepare_request(&["GH_TOKEN"], &mut map),
        Err(Reason::ForeignCredential)
    );
}

#[test]
fn ours_beside_another_token_is_still_a_foreign_credential() {
    // Basic `OURS:THEIRS`: the service could log in with the other token.
    let credentials = credentials();
    let payload = "AttackerOwnedTokenAttackerOwne";
    let theirs = format!(
        "ghp_{payload}{}",
        airlock_dlp::github_checksum(payload.as_bytes())
    );
    let gh_surrogate = surrogate(&credentials, "GH_TOKEN");
    for ours in [GH_REAL, gh_surrogate.as_str()] {
        for value in [
            format!("Basic {}", STANDARD.encode(format!("{ours}:{theirs}"))),
            format!("Basic {}", STANDARD.encode(format!("{theirs}:{ours}"))),
            format!("token {ours} {theirs}"),
        ] {
            let mut map = headers(&[("authorization", value.clone())]);
            assert_eq!(
                credentials.prepare_request(&["GH_TOKEN"], &mut map),
                Err(Reason::ForeignCredential),
                "{value}"
            );
        }
    }
    // Control: ours beside an ordinary user name passes (and the surrogate is swapped).
    let value = format!(
        "Basic {}",
        STANDARD.encode(format!("octocat:{gh_surrogate}"))
    );
    let mut map = headers(&[("authorization", value)]);
    assert_eq!(
        credentials.prepare_request(&["GH_TOKEN"], &mut map),
        Ok(vec!["GH_TOKEN".to_owned()])
    );
}
