//! Addresses and everything decided on a host alone: IP literals and CIDRs, tunnels and
//! raw TCP, the private-address guard, secrets, passthrough and MCP rules.

use airlock_policy::canonical::{Host, canonical_host};
use airlock_policy::decision::Reason;
use airlock_policy::model::{McpRule, Network, Policy, Secret, SecretSource};

use super::{
    allowed_by, cidr, compile, decide, denied, denied_by, host, methods, paths, pattern, policy,
    ports, rule,
};

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
