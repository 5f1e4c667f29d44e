//! The credentials step in memory: a policy's answer gives the scope, the sequence of
//! `airlock-credentials` swaps or refuses, and a refusal is shown with the path redacted.

use airlock_policy::enforce::Question;
use airlock_policy::load::load_str;
use airlock_policy::{CanonicalRequest, Host, Reason};
use http::HeaderValue;
use http::header::{ACCEPT_ENCODING, AUTHORIZATION};

use super::*;

const REAL: &str = "sk-unit-REAL-0123456789abcdef";
const SURROGATE: &str = "sk-unit-SURR-0123456789abcdef";

const POLICY: &str = r#"
version: 1
network:
  allow:
    - host: api.example
    - host: other.example
secrets:
  KEY:
    env: KEY
    hosts: [api.example]
    surrogate: sk-unit-SURR-0123456789abcdef
"#;

fn setup() -> (CompiledPolicy, Arc<Credentials>) {
    let policy = CompiledPolicy::compile(&load_str("p.yaml", POLICY).unwrap()).unwrap();
    let secrets = policy
        .policy()
        .secrets
        .iter()
        .map(|secret| (secret.clone(), REAL.to_owned()))
        .collect();
    (policy, Arc::new(Credentials::new(secrets).unwrap()))
}

/// Runs the step on `GET scheme://host/x` carrying the surrogate in `Authorization`.
fn swap(scheme: &'static str, host: &str) -> (Result<Prepared, CredentialRefusal>, HeaderMap) {
    let (policy, credentials) = setup();
    let host = Host::Name(host.to_owned());
    let port = if scheme == "https" { 443 } else { 80 };
    let answer = policy.answer(Question {
        canonical: CanonicalRequest::new("GET", host.clone(), port, "/x"),
        tls: scheme == "https",
        path_and_query: "/x".to_owned(),
        caller: None,
    });
    let destination = Destination { scheme, host, port };
    let mut headers = HeaderMap::new();
    let bearer = format!("Bearer {SURROGATE}");
    headers.insert(AUTHORIZATION, HeaderValue::from_str(&bearer).unwrap());
    let mut path_and_query = "/x".to_owned();
    let result = swap_credentials(
        &credentials,
        &policy,
        &destination,
        &answer.scope,
        &mut path_and_query,
        &mut headers,
    );
    (result, headers)
}

#[test]
fn on_its_host_over_tls_the_surrogate_becomes_the_real_value() {
    let (result, headers) = swap("https", "api.example");
    let Ok(prepared) = result else {
        panic!("not swapped: {:?}", result.err());
    };
    assert_eq!(prepared.secrets, ["KEY"]);
    assert!(
        prepared.scrub,
        "the response from a secret's host is scrubbed"
    );
    assert_eq!(headers[AUTHORIZATION], format!("Bearer {REAL}").as_str());
    assert_eq!(headers[ACCEPT_ENCODING], "identity");
}

#[test]
fn on_its_host_in_clear_the_surrogate_is_refused_as_cleartext() {
    let (result, headers) = swap("http", "api.example");
    let refusal = result.err().expect("refused");
    assert_eq!(refusal.reason, Reason::SecretOutOfScope);
    assert_eq!(refusal.form, Some("cleartext"));
    assert!(!headers[AUTHORIZATION].to_str().unwrap().contains(REAL));
}

#[test]
fn elsewhere_the_surrogate_trips_as_a_surrogate() {
    let (result, _) = swap("https", "other.example");
    let refusal = result.err().expect("refused");
    assert_eq!(
        (refusal.reason, refusal.form),
        (Reason::SecretOutOfScope, Some("surrogate"))
    );
}
