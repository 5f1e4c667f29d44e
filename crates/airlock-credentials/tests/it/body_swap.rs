//! BodySwap on chunked bodies: swapping for `body: true` secrets in scope, leaving other
//! in-scope surrogates alone, tripping on out-of-scope ones, and surrogates split across
//! chunk borders at every position.

use std::sync::Arc;

use airlock_credentials::Credentials;
use airlock_policy::Reason;
use airlock_policy::model::{Secret, SecretSource};
use proptest::prelude::*;

const LLM_REAL: &str = "sk-proj-RealOpenAiKey0123456789";
const GH_REAL: &str = "ghp_RealRealRealRealRealRealRealReal1234";
const FIXED: &str = "fixed-surrogate";

fn secret(name: &str, body: bool) -> Secret {
    Secret {
        body,
        ..Secret::new(name, SecretSource::Env(name.to_owned()))
    }
}

fn credentials() -> Arc<Credentials> {
    let fixed = Secret {
        surrogate: Some(FIXED.to_owned()),
        ..secret("FIXED", true)
    };
    Arc::new(
        Credentials::new(vec![
            (secret("LLM_KEY", true), LLM_REAL.to_owned()),
            (secret("GH_TOKEN", false), GH_REAL.to_owned()),
            (fixed, "the-real-fixed-value-which-is-longer".to_owned()),
        ])
        .expect("credentials"),
    )
}

fn surrogate(credentials: &Credentials, name: &str) -> String {
    credentials
        .surrogates()
        .into_iter()
        .find(|(secret, _)| secret == name)
        .map(|(_, surrogate)| surrogate)
        .expect("known secret")
}

fn run(
    credentials: &Arc<Credentials>,
    scope: &[&str],
    chunks: &[&[u8]],
) -> Result<(Vec<u8>, Vec<String>), Reason> {
    let mut swap = credentials.body_swap(scope).expect("bodies are scanned");
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(swap.push(chunk)?);
    }
    out.extend(swap.finish()?);
    Ok((out, swap.swapped()))
}

#[test]
fn body_secrets_in_scope_are_swapped_and_others_kept() {
    let credentials = credentials();
    let llm = surrogate(&credentials, "LLM_KEY");
    let gh = surrogate(&credentials, "GH_TOKEN");
    let body = format!("{{\"key\":\"{llm}\",\"gh\":\"{gh}\"}}");
    let (out, swapped) =
        run(&credentials, &["LLM_KEY", "GH_TOKEN"], &[body.as_bytes()]).expect("passes");
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        format!("{{\"key\":\"{LLM_REAL}\",\"gh\":\"{gh}\"}}")
    );
    assert_eq!(swapped, vec!["LLM_KEY".to_owned()]);
}

#[test]
fn out_of_scope_surrogates_trip() {
    let credentials = credentials();
    let gh = surrogate(&credentials, "GH_TOKEN");
    let body = format!("paste={gh}");
    assert_eq!(
        run(&credentials, &["LLM_KEY"], &[body.as_bytes()]),
        Err(Reason::SecretOutOfScope)
    );
}

#[test]
fn lengths_that_differ_are_reported() {
    let credentials = credentials();
    assert!(
        credentials
            .body_swap(&["FIXED"])
            .expect("scan")
            .may_change_length()
    );
    assert!(
        !credentials
            .body_swap(&["LLM_KEY"])
            .expect("scan")
            .may_change_length()
    );
}

#[test]
fn no_body_secret_means_no_scan() {
    let credentials = Arc::new(
        Credentials::new(vec![(secret("GH_TOKEN", false), GH_REAL.to_owned())])
            .expect("credentials"),
    );
    assert!(credentials.body_swap(&["GH_TOKEN"]).is_none());
}

proptest! {
    #[test]
    fn split_surrogates_are_swapped_or_trip_at_any_border(cut in 0usize..80, second in 0usize..80) {
        let credentials = credentials();
        let llm = surrogate(&credentials, "LLM_KEY");
        let fixed = surrogate(&credentials, "FIXED");
        let body = format!("a={llm}&b={fixed}&c=1");
        let bytes = body.as_bytes();
        let mut cuts = [cut.min(bytes.len()), second.min(bytes.len())];
        cuts.sort_unstable();
        let chunks = [&bytes[..cuts[0]], &bytes[cuts[0]..cuts[1]], &bytes[cuts[1]..]];
        let (out, _) = run(&credentials, &["LLM_KEY", "FIXED"], &chunks).expect("passes");
        prop_assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            format!("a={LLM_REAL}&b=the-real-fixed-value-which-is-longer&c=1")
        );
        prop_assert_eq!(
            run(&credentials, &["FIXED"], &chunks),
            Err(Reason::SecretOutOfScope)
        );
    }
}
