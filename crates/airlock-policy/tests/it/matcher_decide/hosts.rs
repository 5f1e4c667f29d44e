//! Host matching and precedence: deny over allow, wildcards and the apex, any host, host
//! regexes, default ports and methods.

use std::net::IpAddr;

use airlock_policy::canonical::Host;
use airlock_policy::decision::Reason;
use airlock_policy::matcher::{CompileError, CompiledPolicy};
use airlock_policy::model::{Policy, Target};

use super::{allowed_by, decide, denied, denied_by, host, methods, network, policy, ports, rule};

#[test]
fn empty_policy_denies_everything() {
    let compiled = policy(Vec::new(), Vec::new());
    assert_eq!(
        decide(&compiled, "GET", "https://example.com/"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "http://127.0.0.1/"),
        denied(Reason::HostNotAllowed)
    );
    assert!(
        !compiled
            .decide_tunnel(&Host::Name("example.com".into()), 443)
            .decision
            .is_allow()
    );
    assert_eq!(compiled.policy(), &Policy::default());
}

#[test]
fn deny_wins_over_allow() {
    let compiled = policy(
        vec![
            rule("network.allow[0]", host("*.github.com")),
            rule("network.allow[1]", host("gist.github.com")),
        ],
        vec![rule("network.deny[0]", host("gist.github.com"))],
    );
    assert_eq!(
        decide(&compiled, "GET", "https://api.github.com/x"),
        allowed_by("network.allow[0]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://gist.github.com/x"),
        denied_by("network.deny[0]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://GIST.github.com./x"),
        denied_by("network.deny[0]")
    );
}

#[test]
fn wildcard_never_matches_the_apex_and_exact_unions_with_it() {
    let compiled = policy(
        vec![rule("network.allow[0]", host("*.githubusercontent.com"))],
        Vec::new(),
    );
    assert!(decide(&compiled, "GET", "https://raw.githubusercontent.com/a").is_allow());
    assert!(decide(&compiled, "GET", "https://a.b.githubusercontent.com/a").is_allow());
    assert_eq!(
        decide(&compiled, "GET", "https://githubusercontent.com/a"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://evilgithubusercontent.com/a"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://githubusercontent.com.evil.com/"),
        denied(Reason::HostNotAllowed)
    );

    let both = policy(
        vec![
            rule("network.allow[0]", host("*.example.com")),
            methods(rule("network.allow[1]", host("example.com")), &["GET"]),
            methods(rule("network.allow[2]", host("api.example.com")), &["POST"]),
        ],
        Vec::new(),
    );
    assert_eq!(
        decide(&both, "POST", "https://example.com/"),
        denied(Reason::MethodNotAllowed)
    );
    assert_eq!(
        decide(&both, "GET", "https://example.com/"),
        allowed_by("network.allow[1]")
    );
    // Both rules match: the lowest index is reported.
    assert_eq!(
        decide(&both, "POST", "https://api.example.com/"),
        allowed_by("network.allow[0]")
    );
}

#[test]
fn any_host_matches_names_only() {
    let compiled = policy(vec![rule("network.allow[0]", host("*"))], Vec::new());
    assert!(decide(&compiled, "GET", "https://anything.example/").is_allow());
    assert_eq!(
        decide(&compiled, "GET", "https://10.0.0.1/"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://[::1]/"),
        denied(Reason::HostNotAllowed)
    );
    let addr: IpAddr = "10.0.0.1".parse().expect("addr");
    assert_eq!(
        compiled.check_address(&Host::Name("anything.example".into()), addr),
        Err(denied(Reason::PrivateAddress))
    );
}

#[test]
fn ports_default_to_80_and_443_for_allows_and_to_all_for_denies() {
    let compiled = policy(
        vec![
            rule("network.allow[0]", host("a.com")),
            ports(rule("network.allow[1]", host("github.com")), &[22]),
            rule("network.allow[2]", host("b.com")),
            ports(rule("network.allow[3]", host("c.com")), &[8443]),
        ],
        vec![
            rule("network.deny[0]", host("b.com")),
            ports(rule("network.deny[1]", host("c.com")), &[9000]),
        ],
    );
    assert!(decide(&compiled, "GET", "https://a.com/").is_allow());
    assert!(decide(&compiled, "GET", "http://a.com/").is_allow());
    assert_eq!(
        decide(&compiled, "GET", "https://a.com:8443/"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://github.com/"),
        denied(Reason::HostNotAllowed)
    );
    assert!(decide(&compiled, "GET", "https://github.com:22/").is_allow());
    assert_eq!(
        decide(&compiled, "GET", "https://b.com/"),
        denied_by("network.deny[0]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://b.com:1234/"),
        denied_by("network.deny[0]")
    );
    assert!(decide(&compiled, "GET", "https://c.com:8443/").is_allow());
    assert_eq!(
        decide(&compiled, "GET", "https://c.com:9000/"),
        denied_by("network.deny[1]")
    );
    let tunnel = compiled.decide_tunnel(&Host::Name("b.com".into()), 5555);
    assert_eq!(tunnel.decision, denied_by("network.deny[0]"));
}

#[test]
fn methods_are_matched_upper_case() {
    let compiled = policy(
        vec![methods(
            rule("network.allow[0]", host("a.com")),
            &["GET", "HEAD"],
        )],
        Vec::new(),
    );
    assert!(decide(&compiled, "get", "https://a.com/").is_allow());
    assert!(decide(&compiled, "HEAD", "https://a.com/").is_allow());
    assert_eq!(
        decide(&compiled, "POST", "https://a.com/"),
        denied(Reason::MethodNotAllowed)
    );
    let deny = policy(
        vec![rule("network.allow[0]", host("a.com"))],
        vec![methods(rule("network.deny[0]", host("a.com")), &["DELETE"])],
    );
    assert!(decide(&deny, "GET", "https://a.com/x").is_allow());
    assert_eq!(
        decide(&deny, "DELETE", "https://a.com/x"),
        denied_by("network.deny[0]")
    );
}

#[test]
fn host_regex_matches_names_fully_case_insensitively_and_never_addresses() {
    let regex = |text: &str| Target::HostRegex(text.to_owned());
    let compiled = policy(
        vec![
            rule("network.allow[0]", regex(r"api-[a-z]+\.example\.com")),
            rule("network.allow[1]", regex(r".*")),
        ],
        vec![rule("network.deny[0]", regex(r"EVIL\..*"))],
    );
    assert_eq!(
        decide(&compiled, "GET", "https://API-eu.Example.com./x"),
        allowed_by("network.allow[0]")
    );
    // Not a prefix or substring match: the whole name.
    assert_eq!(
        decide(&compiled, "GET", "https://api-eu.example.com.evil.test/"),
        allowed_by("network.allow[1]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://evil.example.com/"),
        denied_by("network.deny[0]")
    );
    // `.*` is every name, never an IP literal.
    assert_eq!(
        decide(&compiled, "GET", "https://10.0.0.1/"),
        denied(Reason::HostNotAllowed)
    );
    assert!(
        compiled
            .decide_tunnel(&Host::Name("api-x.example.com".into()), 443)
            .decision
            .is_allow()
    );
    // A regex the loader would refuse does not compile here either.
    let bad = network(vec![rule("network.allow[0]", regex("a)|(b"))], Vec::new());
    assert!(matches!(
        CompiledPolicy::compile(&bad),
        Err(CompileError::Regex { .. })
    ));
}

#[test]
fn named_hosts_are_the_exact_allowed_names_once_in_order_and_bounded() {
    let mut named = network(
        vec![
            rule("network.allow[0]", host("b.example")),
            rule("network.allow[1]", host("*.example")),
            rule("network.allow[2]", host("10.0.0.1")),
            rule("network.allow[3]", host("a.example")),
            rule("network.allow[4]", host("b.example")),
            rule("network.allow[5]", host("*")),
            rule("network.allow[6]", host("pass.example")),
            rule("network.allow[7]", host("c.example")),
        ],
        vec![rule("network.deny[0]", host("d.example"))],
    );
    named
        .network
        .tls_passthrough
        .push(super::pattern("pass.example"));
    let compiled = super::compile(named);
    let name = |n: &str| Host::Name(n.to_owned());
    // Wildcards, IP literals, `*`, passthrough hosts and deny rules name no leaf to make.
    assert_eq!(
        compiled.named_hosts(8),
        [name("b.example"), name("a.example"), name("c.example")]
    );
    assert_eq!(
        compiled.named_hosts(2),
        [name("b.example"), name("a.example")]
    );
    assert!(compiled.named_hosts(0).is_empty());
    assert!(policy(Vec::new(), Vec::new()).named_hosts(8).is_empty());
}
