//! The decide step on real compiled policies: routes, report and ask mode, and how the
//! request is shown.

use airlock_policy::canonical::parse_authority;
use airlock_policy::load::load_str;

use super::*;

const POLICY: &str = r#"
version: 1
network:
  allow:
    - host: api.example.com
      methods: [GET]
      paths: ["/v1/**"]
secrets:
  KEY:
    value: real-value-123456
    hosts: [upstream.example.com]
    inject: {header: Authorization, format: "Bearer {value}"}
routes:
  - prefix: /llm/
    upstream: https://upstream.example.com/api/
    secret: KEY
"#;

/// The policy, compiled once (the decision borrows its body guards from it).
fn policy() -> &'static CompiledPolicy {
    static POLICY_COMPILED: std::sync::LazyLock<CompiledPolicy> = std::sync::LazyLock::new(|| {
        CompiledPolicy::compile(&load_str("p.yaml", POLICY).unwrap()).unwrap()
    });
    &POLICY_COMPILED
}

fn identified(method: &str, scheme: &'static str, authority: &str, target: &str) -> Identified {
    let default_port = if scheme == "https" { 443 } else { 80 };
    let (host, port) = parse_authority(authority, default_port).unwrap();
    Identified {
        destination: Destination {
            scheme,
            host: host.clone(),
            port,
        },
        canonical: CanonicalRequest::new(method, host, port, target),
        path_and_query: target.to_owned(),
    }
}

#[test]
fn an_allowed_request_keeps_its_destination_and_rule() {
    let request = identified("get", "https", "api.example.com", "/v1/a?b=c");
    let decided = decide(policy(), Mode::Enforce, request, "/raw", None);
    assert!(decided.decision.is_allow() && decided.goes_on());
    assert!(decided.scope.route_secret.is_none() && decided.would.is_none());
    let seen = decided.seen;
    assert_eq!(seen.method, "GET");
    assert_eq!((seen.host.as_str(), seen.port), ("api.example.com", 443));
    assert_eq!(
        (seen.path.as_str(), seen.query.as_deref()),
        ("/v1/a", Some("b=c"))
    );
    assert_eq!(seen.scheme, Some("https"));
}

#[test]
fn a_route_becomes_the_request_to_its_upstream_with_its_secret() {
    let request = identified("POST", "http", "airlock.internal", "/llm/chat?x=1");
    let decided = decide(policy(), Mode::Enforce, request, "/raw", None);
    assert!(decided.decision.is_allow());
    assert_eq!(decided.destination.scheme, "https");
    assert_eq!(decided.destination.host.to_string(), "upstream.example.com");
    assert_eq!(decided.destination.port, 443);
    assert_eq!(decided.path_and_query, "/api/chat?x=1");
    assert_eq!(decided.scope.route_secret, Some("KEY"));
    assert_eq!(
        decided.scope.in_scope,
        ["KEY"],
        "a route's secret over plain HTTP"
    );
}

#[test]
fn report_mode_lets_a_path_refusal_through_and_ask_mode_holds_it() {
    let refused = || identified("GET", "https", "api.example.com", "/v2/a");
    let enforced = decide(policy(), Mode::Enforce, refused(), "/raw", None);
    assert_eq!(enforced.decision.reason, Some(Reason::PathNotAllowed));
    assert!(!enforced.goes_on());
    let reported = decide(policy(), Mode::Report, refused(), "/raw", None);
    assert!(reported.decision.is_allow());
    assert_eq!(reported.would, Some(Reason::PathNotAllowed));
    let asked = decide(policy(), Mode::Ask, refused(), "/raw", None);
    assert!(!asked.decision.is_allow() && asked.goes_on());
    assert_eq!(asked.ask, Some(Reason::PathNotAllowed));
}

#[test]
fn an_unsafe_path_is_never_held_and_is_shown_as_sent() {
    let request = identified("GET", "https", "api.example.com", "/v1/a%2Fb");
    let decided = decide(policy(), Mode::Ask, request, "/v1/a%2Fb", None);
    assert!(
        !decided.goes_on(),
        "an unsafe path is refused, not asked about"
    );
    assert_eq!(decided.seen.path, "/v1/a%2Fb");
}

#[test]
fn an_unlisted_host_is_refused_for_its_host() {
    let request = identified("GET", "https", "other.example.com", "/");
    let decided = decide(policy(), Mode::Enforce, request, "/raw", None);
    assert_eq!(decided.decision.reason, Some(Reason::HostNotAllowed));
}

mod explain_agrees {
    //! The property of issue 32: `airlock policy explain METHOD URL` and the proxy's decide
    //! step answer every request alike (decision, rule, reason, secrets in scope).

    use airlock_policy::enforce::question_from_url;
    use proptest::prelude::*;

    use super::*;

    fn explained(method: &str, url: &str) -> Option<(Decision, Vec<String>)> {
        let (question, _) = question_from_url(method, url).ok()?;
        let answer = policy().answer(question);
        let secrets = answer
            .scope
            .in_scope
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        Some((answer.decision, secrets))
    }

    fn decided(
        method: &str,
        scheme: &'static str,
        authority: &str,
        target: &str,
    ) -> (Decision, Vec<String>) {
        let request = identified(method, scheme, authority, target);
        let decided = decide(policy(), Mode::Enforce, request, target, None);
        let secrets = decided
            .scope
            .in_scope
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        (decided.decision, secrets)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
        #[test]
        fn explain_and_the_proxy_decide_alike(
            method in prop::sample::select(vec!["GET", "POST", "DELETE", "get"]),
            scheme in prop::sample::select(vec!["http", "https"]),
            host in prop::sample::select(vec![
                "api.example.com", "upstream.example.com", "airlock.internal", "localhost",
                "127.0.0.1", "evil.example", "API.Example.com.",
            ]),
            port in prop::sample::select(vec![None, Some(443u16), Some(80), Some(8443)]),
            segments in prop::collection::vec(
                prop::sample::select(vec!["v1", "llm", "x", "..", ".", "%2e%2e", "a%2Fb", ""]),
                0..5,
            ),
            query in prop::option::of("[a-z]{1,3}=[a-z0-9]{0,3}"),
        ) {
            let authority = match port {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            let mut target = format!("/{}", segments.join("/"));
            if let Some(query) = &query {
                target.push('?');
                target.push_str(query);
            }
            let url = format!("{scheme}://{authority}{target}");
            let Some(by_explain) = explained(method, &url) else {
                return Ok(());
            };
            let by_proxy = decided(method, scheme, &authority, &target);
            prop_assert_eq!(by_explain, by_proxy, "{} {}", method, url);
        }
    }
}

/// The *ask* step in memory: without a held reason the decision stands and nothing is
/// asked; a held one waits for its answer (here the ask's short timeout: refused, asked).
#[tokio::test]
async fn the_ask_step_holds_only_a_held_refusal_and_times_out_refused() {
    use std::time::Duration;

    use crate::ask::{Asks, request_key};

    let asks = Asks::new(Duration::from_millis(20), 4);
    let refused = Decision::deny(Reason::HostNotAllowed, None);
    let unasked = || -> AskKey { panic!("no ask without a held reason") };
    let stands = hold(&asks, None, unasked, refused.clone(), || None).await;
    assert_eq!(stands, (refused.clone(), false));
    assert!(asks.pending().is_empty());
    let key = || request_key("GET", "new.example".to_owned(), 443, Some("/x"));
    let held = hold(
        &asks,
        Some(Reason::HostNotAllowed),
        key,
        refused.clone(),
        || None,
    );
    let answered = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("the ask's own timeout ends the hold");
    assert_eq!(answered, (refused, true));
}
