//! The compiled matcher against hand-built policies (no loader involved): precedence,
//! hosts, ports, methods, globs, regexes, CIDRs, unsafe paths, tunnels, addresses,
//! secrets, passthrough and MCP rules.

use std::net::IpAddr;

use airlock_policy::CanonicalRequest;
use airlock_policy::canonical::{Host, canonical_host};
use airlock_policy::decision::{Decision, Reason};
use airlock_policy::matcher::{CompileError, CompiledPolicy};
use airlock_policy::model::{
    HostPattern, McpRule, Network, Policy, Rule, Secret, SecretSource, Target,
};

/// A rule builder: `rule("network.allow[0]", host("a.com"))`.
fn rule(id: &str, target: Target) -> Rule {
    Rule {
        id: id.to_owned(),
        target,
        methods: None,
        paths: Vec::new(),
        path_regex: Vec::new(),
        ports: None,
        json_deny: Vec::new(),
        process: None,
    }
}

fn host(text: &str) -> Target {
    Target::Host(pattern(text))
}

fn pattern(text: &str) -> HostPattern {
    if text == "*" {
        return HostPattern::Any;
    }
    if let Some(suffix) = text.strip_prefix("*.") {
        return HostPattern::Wildcard(suffix.to_owned());
    }
    match canonical_host(text).expect("test host") {
        Host::Name(name) => HostPattern::Exact(name),
        Host::Ip(addr) => HostPattern::Ip(addr),
    }
}

fn cidr(text: &str) -> Target {
    Target::Cidr(text.parse().expect("test cidr"))
}

fn methods(rule: Rule, list: &[&str]) -> Rule {
    Rule {
        methods: Some(list.iter().map(|m| (*m).to_owned()).collect()),
        ..rule
    }
}

fn paths(rule: Rule, list: &[&str]) -> Rule {
    Rule {
        paths: list.iter().map(|p| (*p).to_owned()).collect(),
        ..rule
    }
}

fn regexes(rule: Rule, list: &[&str]) -> Rule {
    Rule {
        path_regex: list.iter().map(|p| (*p).to_owned()).collect(),
        ..rule
    }
}

fn ports(rule: Rule, list: &[u16]) -> Rule {
    Rule {
        ports: Some(list.to_vec()),
        ..rule
    }
}

fn policy(allow: Vec<Rule>, deny: Vec<Rule>) -> CompiledPolicy {
    compile(Policy {
        network: Network {
            allow,
            deny,
            tls_passthrough: Vec::new(),
        },
        ..Policy::default()
    })
}

fn compile(policy: Policy) -> CompiledPolicy {
    CompiledPolicy::compile(&policy).expect("test policy compiles")
}

/// Decide `METHOD URL` (`https://host[:port]/path?query`).
fn decide(compiled: &CompiledPolicy, method: &str, url: &str) -> Decision {
    let (scheme, rest) = url.split_once("://").expect("test url");
    let default_port = if scheme == "https" { 443 } else { 80 };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    let (host, port) = airlock_policy::canonical::parse_authority(authority, default_port)
        .expect("test authority");
    compiled.decide(&CanonicalRequest::new(method, host, port, path))
}

fn allowed_by(rule: &str) -> Decision {
    Decision::allow(rule)
}

fn denied(reason: Reason) -> Decision {
    Decision::deny(reason, None)
}

fn denied_by(rule: &str) -> Decision {
    Decision::deny(Reason::DeniedByRule, Some(rule.to_owned()))
}

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
fn globs_keep_star_inside_a_segment() {
    let compiled = policy(
        vec![
            paths(
                methods(
                    rule("network.allow[0]", host("api.github.com")),
                    &["GET", "POST"],
                ),
                &["/repos/acme/app", "/repos/acme/app/**"],
            ),
            paths(
                rule("network.allow[1]", host("files.example")),
                &["/pub/*.txt"],
            ),
        ],
        Vec::new(),
    );
    let allowed = [
        "https://api.github.com/repos/acme/app",
        "https://api.github.com/repos/acme/app/pulls",
        "https://api.github.com/repos/acme/app/pulls/1/comments",
        "https://api.github.com/repos/acme/app/pulls?state=open",
        "https://api.github.com//repos//acme/app/x",
        "https://api.github.com/repos/acme/other/../app/x",
        "https://api.github.com/repos/acme/%61pp/x",
        "https://files.example/pub/a.txt",
    ];
    for url in allowed {
        assert!(decide(&compiled, "GET", url).is_allow(), "{url}");
    }
    let refused = [
        "https://api.github.com/repos/acme/app2",
        "https://api.github.com/repos/acme/other",
        "https://api.github.com/repos/acme/app/../other",
        "https://api.github.com/repos/acme/app/%2e%2e/other",
        "https://api.github.com/",
        "https://files.example/pub/sub/a.txt",
        "https://files.example/pub/a.txt.exe",
    ];
    for url in refused {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied(Reason::PathNotAllowed),
            "{url}"
        );
    }
    assert_eq!(
        decide(&compiled, "DELETE", "https://api.github.com/repos/acme/app"),
        denied(Reason::MethodNotAllowed)
    );
}

#[test]
fn deny_paths_cannot_be_bypassed_by_spelling() {
    let compiled = policy(
        vec![rule("network.allow[0]", host("a.com"))],
        vec![paths(
            rule("network.deny[0]", host("a.com")),
            &["/admin", "/admin/**"],
        )],
    );
    assert!(decide(&compiled, "GET", "https://a.com/public/x").is_allow());
    for url in [
        "https://a.com/admin",
        "https://a.com/admin/x",
        "https://a.com//admin/x",
        "https://a.com/./admin/x",
        "https://a.com/public/../admin/x",
        "https://a.com/public/%2e%2e/admin/x",
        "https://a.com/%61dmin/x",
        "https://a.com/admin/x?y=1",
    ] {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied_by("network.deny[0]"),
            "{url}"
        );
    }
    for url in [
        "https://a.com/public/..%2fadmin/x",
        "https://a.com/public/%252e%252e/admin/x",
        "https://a.com/public/..;/admin/x",
        "https://a.com/admin%5cx",
        "https://a.com/admin%00",
    ] {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied(Reason::PathUnsafe),
            "{url}"
        );
    }
}

#[test]
fn unsafe_paths_are_refused_on_every_host_with_path_rules() {
    let compiled = policy(
        vec![
            paths(rule("network.allow[0]", host("paths.example")), &["/ok/**"]),
            rule("network.allow[1]", host("open.example")),
            methods(rule("network.allow[2]", host("mixed.example")), &["GET"]),
            paths(
                methods(rule("network.allow[3]", host("mixed.example")), &["POST"]),
                &["/up/**"],
            ),
        ],
        Vec::new(),
    );
    assert_eq!(
        decide(&compiled, "GET", "https://paths.example/ok/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert!(decide(&compiled, "GET", "https://open.example/a%2fb").is_allow());
    // docs/contract.md §3: refused on a host with path rules, even where a rule without
    // paths would allow the request.
    assert_eq!(
        decide(&compiled, "GET", "https://mixed.example/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert_eq!(
        decide(&compiled, "POST", "https://mixed.example/up/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert_eq!(
        decide(&compiled, "PUT", "https://mixed.example/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert_eq!(
        decide(&compiled, "PUT", "https://mixed.example/a/b"),
        denied(Reason::MethodNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://other.example/a%2fb"),
        denied(Reason::HostNotAllowed)
    );
}

#[test]
fn regexes_match_path_and_query_in_full() {
    let compiled = policy(
        vec![
            regexes(
                rule("network.allow[0]", host("pypi.org")),
                &[r"^/simple(?:/.*)?(?:\?.*)?$"],
            ),
            regexes(
                rule("network.allow[1]", host("r.example")),
                &["/v[0-9]+/items", "/search\\?q=[a-z]+"],
            ),
            paths(
                regexes(rule("network.allow[2]", host("both.example")), &["/re/.*"]),
                &["/glob/*"],
            ),
        ],
        Vec::new(),
    );
    for url in [
        "https://pypi.org/simple",
        "https://pypi.org/simple/requests/",
        "https://pypi.org/simple/?format=json",
        "https://r.example/v2/items",
        "https://r.example/search?q=abc",
        "https://both.example/re/x/y",
        "https://both.example/glob/x",
    ] {
        assert!(decide(&compiled, "GET", url).is_allow(), "{url}");
    }
    for url in [
        "https://pypi.org/simplex",
        "https://pypi.org/other/simple",
        "https://r.example/v2/items/extra",
        "https://r.example/x/v2/items",
        "https://r.example/v2/items?x=1",
        "https://r.example/search?q=abc&x=1",
        "https://r.example/search",
        "https://both.example/glob/x/y",
    ] {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied(Reason::PathNotAllowed),
            "{url}"
        );
    }
}

#[test]
fn ip_literals_are_decided_as_their_address() {
    let compiled = policy(
        vec![
            ports(rule("network.allow[0]", cidr("10.20.0.0/16")), &[5432, 443]),
            rule("network.allow[1]", host("127.0.0.1")),
            rule("network.allow[2]", cidr("2001:db8:1::/48")),
            rule("network.allow[3]", cidr("192.168.0.0/16")),
        ],
        vec![
            rule("network.deny[0]", cidr("169.254.0.0/16")),
            rule("network.deny[1]", cidr("192.168.7.0/24")),
        ],
    );
    for url in [
        "https://10.20.0.5/",
        "https://10.20.255.255/",
        "https://0xa.20.0.5/",
        "https://10.1310725/",
        "https://169082885/",
        "https://[::ffff:10.20.0.5]/",
        "https://127.0.0.1/",
        "https://2130706433/",
        "https://0x7f.1/",
        "https://[2001:db8:1:ff::1]/",
        "https://192.168.1.1/",
    ] {
        assert!(decide(&compiled, "GET", url).is_allow(), "{url}");
    }
    assert_eq!(
        decide(&compiled, "GET", "https://10.21.0.5/"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://10.20.0.5:80/"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://127.0.0.2/"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://[2001:db8:2::1]/"),
        denied(Reason::HostNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://169.254.169.254/"),
        denied_by("network.deny[0]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://0xa9fea9fe/"),
        denied_by("network.deny[0]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://[::ffff:169.254.169.254]/"),
        denied_by("network.deny[0]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://[64:ff9b::a9fe:a9fe]/"),
        denied_by("network.deny[0]")
    );
    assert_eq!(
        decide(&compiled, "GET", "https://192.168.7.9/"),
        denied_by("network.deny[1]")
    );
    let tunnel = compiled.decide_tunnel(&canonical_host("10.20.0.5").expect("host"), 5432);
    assert_eq!(tunnel.decision, allowed_by("network.allow[0]"));
    assert!(tunnel.raw_tcp_allowed);
}

#[test]
fn tunnels_and_raw_tcp() {
    let compiled = policy(
        vec![
            methods(rule("network.allow[0]", host("api.example")), &["GET"]),
            ports(rule("network.allow[1]", host("github.com")), &[22, 443]),
            paths(rule("network.allow[2]", host("github.com")), &["/acme/**"]),
            rule("network.allow[3]", host("blocked.example")),
        ],
        vec![
            paths(rule("network.deny[0]", host("api.example")), &["/admin/**"]),
            rule("network.deny[1]", host("blocked.example")),
        ],
    );
    let name = |n: &str| Host::Name(n.to_owned());
    let api = compiled.decide_tunnel(&name("api.example"), 443);
    assert_eq!(api.decision, allowed_by("network.allow[0]"));
    assert!(!api.raw_tcp_allowed, "a rule with methods only allows HTTP");
    let git = compiled.decide_tunnel(&name("github.com"), 443);
    assert_eq!(git.decision, allowed_by("network.allow[1]"));
    assert!(git.raw_tcp_allowed);
    let ssh = compiled.decide_tunnel(&name("github.com"), 22);
    assert!(ssh.decision.is_allow() && ssh.raw_tcp_allowed);
    let other_port = compiled.decide_tunnel(&name("github.com"), 2222);
    assert_eq!(other_port.decision, denied(Reason::HostNotAllowed));
    assert!(!other_port.raw_tcp_allowed);
    let blocked = compiled.decide_tunnel(&name("blocked.example"), 443);
    assert_eq!(blocked.decision, denied_by("network.deny[1]"));
    assert!(!blocked.raw_tcp_allowed);
    assert_eq!(
        compiled
            .decide_tunnel(&name("nowhere.example"), 443)
            .decision,
        denied(Reason::HostNotAllowed)
    );
}

#[test]
fn check_address_guards_private_destinations() {
    let compiled = policy(
        vec![
            rule("network.allow[0]", host("*.example.com")),
            ports(rule("network.allow[1]", cidr("10.20.0.0/16")), &[5432]),
            rule("network.allow[2]", host("192.168.1.10")),
        ],
        vec![
            rule("network.deny[0]", cidr("169.254.0.0/16")),
            rule("network.deny[1]", cidr("8.8.4.0/24")),
        ],
    );
    let name = Host::Name("api.example.com".into());
    let check = |addr: &str| compiled.check_address(&name, addr.parse().expect("addr"));
    assert_eq!(check("140.82.112.3"), Ok(()));
    assert_eq!(check("2606:4700::1111"), Ok(()));
    assert_eq!(check("127.0.0.1"), Err(denied(Reason::PrivateAddress)));
    assert_eq!(check("::1"), Err(denied(Reason::PrivateAddress)));
    assert_eq!(check("10.0.0.1"), Err(denied(Reason::PrivateAddress)));
    assert_eq!(
        check("::ffff:10.0.0.1"),
        Err(denied(Reason::PrivateAddress))
    );
    assert_eq!(check("::ffff:8.8.8.8"), Err(denied(Reason::PrivateAddress)));
    assert_eq!(check("fd00::1"), Err(denied(Reason::PrivateAddress)));
    assert_eq!(check("100.64.1.1"), Err(denied(Reason::PrivateAddress)));
    assert_eq!(check("169.254.169.254"), Err(denied_by("network.deny[0]")));
    assert_eq!(
        check("::ffff:169.254.169.254"),
        Err(denied_by("network.deny[0]"))
    );
    assert_eq!(
        check("2002:a9fe:a9fe::1"),
        Err(denied_by("network.deny[0]"))
    );
    assert_eq!(check("8.8.4.4"), Err(denied_by("network.deny[1]")));
    assert_eq!(check("10.20.0.5"), Ok(()));
    assert_eq!(check("::ffff:10.20.0.5"), Ok(()));
    assert_eq!(check("192.168.1.10"), Ok(()));
    assert_eq!(check("192.168.1.11"), Err(denied(Reason::PrivateAddress)));
    // An IP literal must be dialled at that very address.
    let literal = canonical_host("0x7f.1").expect("host");
    assert_eq!(
        compiled.check_address(&literal, "127.0.0.2".parse().expect("addr")),
        Err(denied(Reason::HostMismatch))
    );
    let named_literal = canonical_host("192.168.1.10").expect("host");
    assert_eq!(
        compiled.check_address(&named_literal, "::ffff:192.168.1.10".parse().expect("addr")),
        Ok(())
    );
}

#[test]
fn secrets_passthrough_and_mcp_use_the_same_host_matching() {
    let secret = |name: &str, hosts: &[&str]| Secret {
        name: name.to_owned(),
        source: SecretSource::Env(name.to_owned()),
        hosts: hosts.iter().map(|h| pattern(h)).collect(),
        headers: None,
        inject: None,
        surrogate: None,
        body: false,
        foreign_allowed: false,
    };
    let compiled = compile(Policy {
        network: Network {
            allow: vec![rule("network.allow[0]", host("*.apple.com"))],
            deny: Vec::new(),
            tls_passthrough: vec![pattern("*.apple.com")],
        },
        secrets: vec![
            secret(
                "GH_TOKEN",
                &["api.github.com", "github.com", "*.githubusercontent.com"],
            ),
            secret("OTHER", &["*.github.com"]),
        ],
        mcp: vec![
            McpRule {
                id: "mcp[0]".into(),
                host: pattern("mcp.example.com"),
                path: "/mcp".into(),
                allow: vec![],
                deny: vec!["x".into()],
                args: vec![],
            },
            McpRule {
                id: "mcp[1]".into(),
                host: pattern("*.example.com"),
                path: "/tools/**".into(),
                allow: vec![],
                deny: vec![],
                args: vec![],
            },
        ],
        ..Policy::default()
    });
    let name = |n: &str| Host::Name(n.to_owned());
    let names = |n: &str| {
        compiled
            .secrets_for_host(&name(n))
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names("api.github.com"), ["GH_TOKEN", "OTHER"]);
    assert_eq!(names("github.com"), ["GH_TOKEN"]);
    assert_eq!(names("raw.githubusercontent.com"), ["GH_TOKEN"]);
    assert!(names("githubusercontent.com").is_empty());
    assert!(names("evil.com").is_empty());
    assert!(compiled.is_passthrough(&name("swscan.apple.com")));
    assert!(!compiled.is_passthrough(&name("apple.com")));
    assert_eq!(
        compiled
            .mcp_rule(&name("mcp.example.com"), "/mcp")
            .map(|r| r.id.as_str()),
        Some("mcp[0]")
    );
    assert_eq!(compiled.mcp_rule(&name("mcp.example.com"), "/mcp/x"), None);
    assert_eq!(
        compiled
            .mcp_rule(&name("a.example.com"), "/tools/x/y")
            .map(|r| r.id.as_str()),
        Some("mcp[1]")
    );
    assert_eq!(compiled.mcp_rule(&name("other.com"), "/mcp"), None);
}

#[test]
fn invalid_globs_and_regexes_are_compile_errors() {
    let bad_glob = Policy {
        network: Network {
            allow: vec![paths(rule("network.allow[0]", host("a.com")), &["/a/[b"])],
            ..Network::default()
        },
        ..Policy::default()
    };
    assert!(matches!(
        CompiledPolicy::compile(&bad_glob),
        Err(CompileError::Glob { .. })
    ));
    let bad_regex = Policy {
        network: Network {
            deny: vec![regexes(
                rule("network.deny[0]", host("a.com")),
                &["(unclosed"],
            )],
            ..Network::default()
        },
        ..Policy::default()
    };
    assert!(matches!(
        CompiledPolicy::compile(&bad_regex),
        Err(CompileError::Regex { .. })
    ));
    let huge_regex = Policy {
        network: Network {
            allow: vec![regexes(
                rule("network.allow[0]", host("a.com")),
                &["(?:a{1000}){1000}"],
            )],
            ..Network::default()
        },
        ..Policy::default()
    };
    assert!(matches!(
        CompiledPolicy::compile(&huge_regex),
        Err(CompileError::Regex { .. })
    ));
}

#[test]
fn glob_edge_cases() {
    let compiled = policy(
        vec![
            paths(rule("network.allow[0]", host("ext.example")), &["*.txt"]),
            paths(rule("network.allow[1]", host("all.example")), &["/**"]),
            paths(rule("network.allow[2]", host("dir.example")), &["/a/**"]),
            paths(
                rule("network.allow[3]", host("base.example")),
                &["**/secret.txt"],
            ),
            rule("network.allow[4]", host("star.example")),
        ],
        Vec::new(),
    );
    let verdict = |method: &str, url: &str| decide(&compiled, method, url).is_allow();
    assert!(
        !verdict("GET", "https://ext.example/a/b.txt"),
        "`*` must not cross `/`"
    );
    assert!(!verdict("GET", "https://ext.example/b.txt"));
    assert!(verdict("GET", "https://all.example/"));
    assert!(verdict("GET", "https://all.example/a/b/c"));
    assert!(verdict("GET", "https://dir.example/a/x/y"));
    assert!(verdict("GET", "https://dir.example/a/"));
    assert!(!verdict("GET", "https://dir.example/ab"));
    assert!(!verdict("GET", "https://dir.example/b/a/x"));
    assert!(verdict("GET", "https://base.example/x/y/secret.txt"));
    assert!(!verdict("GET", "https://base.example/x/y/secret.txt.bak"));
    // The asterisk form of OPTIONS only passes rules that do not constrain paths.
    let options = |h: &str| {
        compiled.decide(&CanonicalRequest::new(
            "OPTIONS",
            Host::Name(h.into()),
            443,
            "*",
        ))
    };
    assert!(options("star.example").is_allow());
    assert_eq!(options("dir.example"), denied(Reason::PathNotAllowed));
    assert_eq!(options("all.example"), denied(Reason::PathNotAllowed));
}

#[test]
fn ipv4_mapped_literals_in_rules_are_their_ipv4_address() {
    let compiled = policy(
        vec![rule("network.allow[0]", host("[::ffff:10.0.0.7]"))],
        vec![rule("network.deny[0]", host("[::ffff:169.254.169.254]"))],
    );
    assert!(decide(&compiled, "GET", "https://10.0.0.7/").is_allow());
    assert!(decide(&compiled, "GET", "https://[::ffff:10.0.0.7]/").is_allow());
    assert_eq!(
        decide(&compiled, "GET", "https://169.254.169.254/"),
        denied_by("network.deny[0]")
    );
    let name = Host::Name("a.example".into());
    assert_eq!(
        compiled.check_address(&name, "10.0.0.7".parse().expect("addr")),
        Ok(())
    );
    assert_eq!(
        compiled.check_address(&name, "169.254.169.254".parse().expect("addr")),
        Err(denied_by("network.deny[0]"))
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
    let bad = Policy {
        network: Network {
            allow: vec![rule("network.allow[0]", regex("a)|(b"))],
            ..Network::default()
        },
        ..Policy::default()
    };
    assert!(matches!(
        CompiledPolicy::compile(&bad),
        Err(CompileError::Regex { .. })
    ));
}
