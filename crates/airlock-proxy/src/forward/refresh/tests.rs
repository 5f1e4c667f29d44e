//! Unit tests of the refresh step: surrogates found in bodies, retired surrogates, the
//! answers exempt from the check.

use super::*;

#[test]
fn surrogates_are_found_anywhere_in_a_body() {
    assert!(contains(b"a=1&refresh_token=SUR&b", b"SUR"));
    assert!(!contains(b"a=1&refresh_token=SU%52", b"SUR"));
    assert!(!contains(b"abc", b""));
}

/// A Claude login's store: access and refresh surrogates `A1`/`R1`-shaped.
fn store() -> Credentials {
    use airlock_policy::model::{Secret, SecretSource};
    let secret = |name: &str, surrogate: &str| {
        let mut secret = Secret::new(name, SecretSource::Value("x".into()));
        secret.surrogate = Some(surrogate.into());
        secret.body = true;
        secret
    };
    Credentials::new(vec![
        (
            secret("file:claude:accessToken", "sk-ant-oat01-SURR-A1"),
            "sk-ant-oat01-REAL-A1".into(),
        ),
        (
            secret("file:claude:refreshToken", "sk-ant-ort01-SURR-R1"),
            "sk-ant-ort01-REAL-R1".into(),
        ),
    ])
    .expect("store")
}

fn watch() -> Watch {
    Watch {
        login: pure::Login::Claude,
        file: "/nonexistent/.credentials.json".into(),
        copy: None,
        secrets: vec![
            (Field::Access, "file:claude:accessToken".into()),
            (Field::Refresh, "file:claude:refreshToken".into()),
        ],
    }
}

#[test]
fn a_retired_surrogate_is_refused_even_in_a_clean_grant() {
    let v1 = store();
    let v2 = v1
        .refreshed(&[
            Refresh {
                name: "file:claude:refreshToken".into(),
                real: "sk-ant-ort01-REAL-R2".into(),
                surrogate: "sk-ant-ort01-SURR-R2".into(),
            },
            Refresh {
                name: "file:claude:accessToken".into(),
                real: "sk-ant-oat01-REAL-A2".into(),
                surrogate: "sk-ant-oat01-SURR-A2".into(),
            },
        ])
        .expect("refreshed");
    let watch = watch();
    let retired = stale_surrogates(&v2, &v2);
    assert_eq!(retired.len(), 2, "{retired:?}");
    let old = b"grant_type=refresh_token&refresh_token=sk-ant-ort01-SURR-R1";
    let new = b"grant_type=refresh_token&refresh_token=sk-ant-ort01-SURR-R2";
    let revoke = b"token=sk-ant-ort01-SURR-R1&token_type_hint=refresh_token";
    // Before any refresh, the grant is clean.
    assert_eq!(
        grant((&v1, &stale_surrogates(&v1, &v1)), Some(&watch), None, old),
        Ok(true)
    );
    // G3: the request's snapshot is v1, a refresh made v2 while its body came in.
    let raced = grant((&v1, &stale_surrogates(&v1, &v2)), Some(&watch), None, old);
    assert!(
        matches!(raced, Err((Reason::SecretOutOfScope, _))),
        "{raced:?}"
    );
    // A later request with the retired surrogate: refused, grant or not, any path.
    for (body, watch) in [
        (&old[..], Some(&watch)),
        (&revoke[..], Some(&watch)),
        (&old[..], None),
    ] {
        let got = grant((&v2, &retired), watch, None, body);
        assert!(matches!(got, Err((Reason::SecretOutOfScope, _))), "{got:?}");
    }
    // A retired access surrogate anywhere too.
    let access =
        b"grant_type=refresh_token&refresh_token=sk-ant-ort01-SURR-R2&x=sk-ant-oat01-SURR-A1";
    assert!(grant((&v2, &retired), Some(&watch), None, access).is_err());
    // The current surrogate is a clean grant; a body with no surrogate is no grant.
    assert_eq!(grant((&v2, &retired), Some(&watch), None, new), Ok(true));
    assert_eq!(
        grant((&v2, &retired), Some(&watch), None, b"a=b"),
        Ok(false)
    );
}

#[test]
fn only_page_assets_skip_the_answer_check() {
    let mut headers = HeaderMap::new();
    assert!(!asset(&headers));
    for (kind, skips) in [
        ("image/png", true),
        ("text/css; charset=utf-8", true),
        ("application/javascript", true),
        ("application/json", false),
        ("text/html", false),
        ("application/x-www-form-urlencoded", false),
    ] {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
        assert_eq!(asset(&headers), skips, "{kind}");
    }
}
