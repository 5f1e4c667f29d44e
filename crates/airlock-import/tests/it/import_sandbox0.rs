//! The sandbox0 importer against sandbox0's documented network and protocol-control
//! examples: modes, ordered traffic rules (first match wins), domains, CIDRs, ports, MCP
//! tool policies; round trip; the orders and features that cannot be expressed.

use crate::import_support::*;
use airlock_import::SeedFormat;
use airlock_policy::model::{HostPattern, McpRule, Target};

const SANDBOX0: SeedFormat = SeedFormat::Sandbox0;

#[test]
fn allow_only_github_https() {
    let policy = imported(SANDBOX0, &fixture("sandbox0", "allow-github.json"));
    check(
        &policy,
        &[
            ("GET", "https://github.com/acme/app"),
            ("POST", "https://api.github.com/graphql"),
        ],
        &[
            ("GET", "http://github.com/"),
            ("GET", "https://gist.github.com/"),
            ("GET", "https://evil.example/"),
        ],
    );
    assert!(
        policy
            .network
            .allow
            .iter()
            .all(|r| r.ports == Some(vec![443]))
    );
    assert!(policy.network.deny.is_empty());
    assert_round_trip(&policy);
}

#[test]
fn mcp_tool_policy_as_documented() {
    let policy = imported(SANDBOX0, &fixture("sandbox0", "mcp-tools.yaml"));
    assert_eq!(
        policy.mcp,
        [McpRule {
            id: "mcp[0]".into(),
            host: HostPattern::Exact("mcp.example.com".into()),
            path: "/mcp".into(),
            allow: vec!["read_file".into()],
            deny: vec!["write_file".into(), "run_command".into()],
            args: Vec::new(),
        }]
    );
    let compiled = airlock_policy::matcher::CompiledPolicy::compile(&policy).unwrap();
    let host = airlock_policy::canonical::Host::Name("mcp.example.com".into());
    assert_eq!(compiled.mcp_rule(&host, "/mcp"), Some(&policy.mcp[0]));
    assert_eq!(compiled.mcp_rule(&host, "/mcp/x"), None);
    check(
        &policy,
        &[("POST", "https://mcp.example.com/mcp")],
        &[("POST", "https://mcp.other.example/mcp")],
    );
    assert_round_trip(&policy);
}

#[test]
fn mcp_paths_prefixes_and_methods() {
    let text = |http_match: &str| {
        format!(
            "mode: block-all\negress:\n  protocolRules:\n    - protocol: mcp\n      domains: [\"*.mcp.example\"]\n{http_match}      mcp: {{tools: {{denied: [rm]}}}}\n"
        )
    };
    let policy = imported(
        SANDBOX0,
        &text("      httpMatch: {pathPrefixes: [/mcp, /v1/]}\n"),
    );
    let paths: Vec<(&HostPattern, &str)> = policy
        .mcp
        .iter()
        .map(|r| (&r.host, r.path.as_str()))
        .collect();
    let apex = HostPattern::Exact("mcp.example".into());
    let sub = HostPattern::Wildcard("mcp.example".into());
    assert_eq!(
        paths,
        [
            (&apex, "/mcp*"),
            (&apex, "/mcp*/**"),
            (&apex, "/v1/**"),
            (&sub, "/mcp*"),
            (&sub, "/mcp*/**"),
            (&sub, "/v1/**"),
        ]
    );
    // sandbox0's prefixes are raw string prefixes: `/mcp` covers `/mcp`, `/mcpx`, `/mcp/a`.
    let compiled = airlock_policy::matcher::CompiledPolicy::compile(&policy).unwrap();
    let host = airlock_policy::canonical::Host::Name("a.mcp.example".into());
    // `/v1` too: a server ignoring the trailing slash routes it as `/v1/` (docs/policy.md).
    for path in [
        "/mcp",
        "/mcpx",
        "/mcp/a/b",
        "/v1/",
        "/v1/tools",
        "/v1",
        "/MCP;x",
    ] {
        assert!(compiled.mcp_rule(&host, path).is_some(), "{path}");
    }
    for path in ["/mc", "/v2", "/other/mcp"] {
        assert!(compiled.mcp_rule(&host, path).is_none(), "{path}");
    }
    let everywhere = imported(SANDBOX0, &text(""));
    assert_eq!(everywhere.mcp.len(), 2);
    assert!(everywhere.mcp.iter().all(|r| r.path == "/**"));
    // A rule limited to GET never sees a tools/call.
    let get_only = imported(SANDBOX0, &text("      httpMatch: {methods: [GET]}\n"));
    assert!(get_only.mcp.is_empty());
    // Literal glob characters in an exact path stay literal.
    let literal = imported(SANDBOX0, &text("      httpMatch: {paths: [\"/a*b\"]}\n"));
    assert_eq!(literal.mcp[0].path, "/a\\*b");
    assert_round_trip(&literal);
}

#[test]
fn ordered_rules_keep_first_match_decisions() {
    let policy = imported(SANDBOX0, &fixture("sandbox0", "ordered.yaml"));
    check(
        &policy,
        &[
            ("GET", "https://github.com/"),
            ("GET", "https://api.github.com/user"),
            ("GET", "https://github.com:22/"),
            ("GET", "https://10.20.3.4:5432/"),
        ],
        &[
            ("GET", "https://gist.github.com/"),
            ("GET", "https://gist.github.com:22/"),
            ("GET", "http://api.github.com/"),
            ("GET", "https://10.20.3.4/"),
            ("GET", "https://10.21.0.1:5432/"),
            ("GET", "https://resolver.example/"),
            ("GET", "https://evil.example/"),
        ],
    );
    // The leading denies stay (a later allow overlaps them) and cover every port those
    // allows open; the trailing catch-all deny and the UDP-only rule change nothing.
    let denies: Vec<(String, Option<Vec<u16>>)> = policy
        .network
        .deny
        .iter()
        .map(|r| (target(&r.target), r.ports.clone()))
        .collect();
    assert_eq!(
        denies,
        [
            ("169.254.0.0/16".to_owned(), Some(vec![22, 80, 443])),
            // A name may resolve into the allowed 10.20.0.0/16, so 5432 is denied too.
            ("gist.github.com".to_owned(), Some(vec![22, 80, 443, 5432])),
        ]
    );
    assert_round_trip(&policy);
}

/// A target as written in the native YAML.
fn target(target: &Target) -> String {
    match target {
        Target::Host(host) => host.to_string(),
        Target::Cidr(net) => net.to_string(),
        Target::HostRegex(regex) => format!("regex {regex}"),
    }
}

#[test]
fn a_later_deny_shadowed_by_an_earlier_allow_cannot_be_expressed() {
    let error = import_errors(SANDBOX0, &fixture("sandbox0", "first-match-conflict.yaml"));
    assert_error(
        &error,
        8,
        &[
            "egress.trafficRules[1] (\"no-gist\")",
            "egress.trafficRules[0] (\"github\")",
            "egress.trafficRules[2] (\"gist-ssh\")",
            "first matching rule",
        ],
    );
    assert_eq!(error.errors[0].column, 7);
    assert_eq!(error.errors.len(), 1, "{error}");
}

#[test]
fn allow_all_with_denies() {
    let policy = imported(SANDBOX0, &fixture("sandbox0", "allow-all.yaml"));
    assert_eq!(
        policy.network.allow[0].target,
        Target::Host(HostPattern::Any)
    );
    check(
        &policy,
        &[
            ("GET", "https://example.com/"),
            ("POST", "https://pastebin.example/"),
        ],
        &[
            ("GET", "https://pastebin.com/"),
            ("GET", "https://x.pastebin.com/raw"),
            ("GET", "https://169.254.169.254/latest/meta-data"),
        ],
    );
    let smtp: Vec<String> = policy
        .network
        .deny
        .iter()
        .filter(|r| r.ports == Some(vec![25, 465]))
        .map(|r| target(&r.target))
        .collect();
    assert_eq!(smtp, ["0.0.0.0/0", "::/0"]);
    assert_round_trip(&policy);
    // A missing mode is sandbox0's default, allow-all.
    let default_mode = imported(SANDBOX0, "egress: {}\n");
    assert_eq!(
        default_mode.network.allow[0].target,
        Target::Host(HostPattern::Any)
    );
    // In allow-all, an allow before an overlapping deny would punch a hole airlock cannot.
    let error = import_errors(
        SANDBOX0,
        "mode: allow-all\negress:\n  trafficRules:\n    - {action: allow, domains: [ok.pastebin.com]}\n    - {action: deny, domains: [\"*.pastebin.com\"]}\n",
    );
    assert_error(&error, 5, &["trafficRules[1]", "trafficRules[0]"]);
}

#[test]
fn unsupported_features_fail_with_every_location() {
    let error = import_errors(SANDBOX0, &fixture("sandbox0", "unsupported.yaml"));
    assert_error(&error, 6, &["ssh-by-protocol", "appProtocols"]);
    assert_error(&error, 7, &["mixed", "domains and CIDRs"]);
    assert_error(&error, 14, &["huge", "1024"]);
    assert_error(&error, 15, &["trafficRules[3]", "maybe"]);
    assert_error(&error, 18, &["api-readonly", "protocol http"]);
    assert_error(&error, 24, &["everywhere", "domains"]);
    assert_error(&error, 28, &["credentialRules"]);
    assert_eq!(error.errors.len(), 7, "{error}");
}

#[test]
fn shape_errors_are_located() {
    let error = import_errors(SANDBOX0, "mode: deny-all\n");
    assert_error(&error, 1, &["deny-all"]);
    let error = import_errors(SANDBOX0, "mode: block-all\negress:\n  trafficRule: []\n");
    assert_error(&error, 3, &["trafficRule"]);
    let error = import_errors(
        SANDBOX0,
        "mode: block-all\negress:\n  trafficRules:\n    - {name: a, action: allow, domains: [x.test]}\n    - {name: a, action: allow, domains: [y.test]}\n",
    );
    assert_error(&error, 5, &["repeats the name"]);
    let error = import_errors(
        SANDBOX0,
        "mode: block-all\negress:\n  trafficRules:\n    - {action: allow, ports: [{port: 0}]}\n    - {action: allow, cidrs: [10.0.0.1]}\n    - {action: allow}\n",
    );
    assert_error(&error, 4, &["ports are 1 to 65535"]);
    assert_error(&error, 5, &["CIDR"]);
    assert_error(&error, 6, &["at least one"]);
}

#[test]
fn empty_document_allows_nothing() {
    let policy = imported(SANDBOX0, "");
    assert_eq!(policy, Default::default());
}
