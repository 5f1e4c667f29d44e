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
    let decided = decide(policy(), Mode::Enforce, request, "/raw");
    assert!(decided.decision.is_allow() && decided.goes_on());
    assert!(decided.route_secret.is_none() && decided.would.is_none());
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
    let decided = decide(policy(), Mode::Enforce, request, "/raw");
    assert!(decided.decision.is_allow());
    assert_eq!(decided.destination.scheme, "https");
    assert_eq!(decided.destination.host.to_string(), "upstream.example.com");
    assert_eq!(decided.destination.port, 443);
    assert_eq!(decided.path_and_query, "/api/chat?x=1");
    assert_eq!(decided.route_secret.as_deref(), Some("KEY"));
}

#[test]
fn report_mode_lets_a_path_refusal_through_and_ask_mode_holds_it() {
    let refused = || identified("GET", "https", "api.example.com", "/v2/a");
    let enforced = decide(policy(), Mode::Enforce, refused(), "/raw");
    assert_eq!(enforced.decision.reason, Some(Reason::PathNotAllowed));
    assert!(!enforced.goes_on());
    let reported = decide(policy(), Mode::Report, refused(), "/raw");
    assert!(reported.decision.is_allow());
    assert_eq!(reported.would, Some(Reason::PathNotAllowed));
    let asked = decide(policy(), Mode::Ask, refused(), "/raw");
    assert!(!asked.decision.is_allow() && asked.goes_on());
    assert_eq!(asked.ask, Some(Reason::PathNotAllowed));
}

#[test]
fn an_unsafe_path_is_never_held_and_is_shown_as_sent() {
    let request = identified("GET", "https", "api.example.com", "/v1/a%2Fb");
    let decided = decide(policy(), Mode::Ask, request, "/v1/a%2Fb");
    assert!(
        !decided.goes_on(),
        "an unsafe path is refused, not asked about"
    );
    assert_eq!(decided.seen.path, "/v1/a%2Fb");
}

#[test]
fn an_unlisted_host_is_refused_for_its_host() {
    let request = identified("GET", "https", "other.example.com", "/");
    let decided = decide(policy(), Mode::Enforce, request, "/raw");
    assert_eq!(decided.decision.reason, Some(Reason::HostNotAllowed));
}
