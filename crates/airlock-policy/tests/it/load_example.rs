//! The full policy example of the original product brief (kept here verbatim; see
//! docs/policy.md "Note on the original example") loads into the expected model after the
//! two fixes the contract itself requires, and as written reports exactly those two
//! problems.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use airlock_policy::load::load_str;
use airlock_policy::model::{
    HostPattern, Inject, McpRule, Policy, Route, Rule, Secret, SecretSource, Target,
};

/// The product brief's policy example, verbatim.
const BRIEF_EXAMPLE: &str = r#"version: 1
network:
  allow:                                  # a request passes if it matches no deny and any allow
    - host: api.github.com                # exact, case-insensitive, trailing dot ignored
      methods: [GET, POST]                # optional; default all; case-insensitive
      paths: ["/repos/acme/app", "/repos/acme/app/**"]   # optional globs on the canonical path:
                                          #   '*' stays inside one segment, '**' crosses segments
    - host: "*.githubusercontent.com"     # '*.' = one or more labels; never the apex itself
    - host: pypi.org
      path_regex: ['^/simple(?:/.*)?(?:\?.*)?$']   # full match on canonical path + query
    - host: github.com
      ports: [22]                         # non-HTTP TCP to a named host (ports default [80, 443])
    - cidr: 10.20.0.0/16                  # destinations given by address
      ports: [5432]
  deny:
    - host: gist.github.com
    - cidr: 169.254.0.0/16
  tls_passthrough: ["*.apple.com"]        # optional: not intercepted, decided on SNI only

secrets:
  GH_TOKEN:
    env: GH_TOKEN                         # source: env: VAR | file: PATH | value: "literal"
    hosts: [api.github.com, github.com, "*.githubusercontent.com"]
    headers: [Authorization]              # optional; default every request header
  OPENAI_API_KEY:
    env: OPENAI_API_KEY
    hosts: [api.openai.com]
    inject: {header: Authorization, format: "Bearer {value}"}   # set outright, agent sends nothing
  NPM_TOKEN:
    file: /run/secrets/npm
    hosts: [registry.npmjs.org]
    surrogate: "npm_0000000000000000000000000000000000000"   # optional: fixed instead of generated
    body: true                            # optional: also swap in query and body (identity encoding)

mcp:
  - host: mcp.example.com
    path: /mcp
    tools: {allow: [read_file], deny: [write_file, run_command]}  # deny first; empty allow = all

routes:                                   # optional reverse-proxy prefixes for base-URL clients
  - prefix: /llm/openrouter/
    upstream: https://openrouter.ai/api/v1/
    secret: OPENROUTER_API_KEY            # injected per that secret's `inject`
"#;

/// The example with what the contract requires of it: the passthrough host allowed
/// (docs/policy.md: a `tls_passthrough` host must also be allowed) and the route's secret
/// defined.
fn fixed_example() -> String {
    BRIEF_EXAMPLE
        .replace(
            "  deny:\n",
            "    - host: \"*.apple.com\"\n  deny:\n",
        )
        .replace(
            "mcp:\n",
            "  OPENROUTER_API_KEY:\n    env: OPENROUTER_API_KEY\n    hosts: [openrouter.ai]\n    inject: {header: Authorization, format: \"Bearer {value}\"}\n\nmcp:\n",
        )
}

fn exact(name: &str) -> HostPattern {
    HostPattern::Exact(name.to_owned())
}

fn host_rule(id: &str, host: HostPattern) -> Rule {
    Rule {
        id: id.to_owned(),
        target: Target::Host(host),
        methods: None,
        paths: Vec::new(),
        path_regex: Vec::new(),
        ports: None,
        json_deny: Vec::new(),
        process: None,
    }
}

#[test]
fn verbatim_example_reports_the_two_contract_violations() {
    let error = load_str("airlock.yaml", BRIEF_EXAMPLE).expect_err("example is inconsistent");
    let found: Vec<(u32, u32)> = error.errors.iter().map(|e| (e.line, e.column)).collect();
    assert_eq!(found, vec![(18, 21), (43, 13)], "{error}");
    assert!(
        error.errors[0]
            .message
            .contains("*.apple.com is not allowed by any network.allow rule")
    );
    assert!(
        error.errors[1]
            .message
            .contains("no secret named `OPENROUTER_API_KEY`")
    );
    assert_eq!(
        error.errors[0].to_string(),
        format!("airlock.yaml:18:21: {}", error.errors[0].message)
    );
}

#[test]
fn fixed_example_yields_the_model() {
    let policy = load_str("airlock.yaml", &fixed_example()).unwrap_or_else(|e| panic!("{e}"));
    let mut allow = vec![
        Rule {
            methods: Some(vec!["GET".into(), "POST".into()]),
            paths: vec!["/repos/acme/app".into(), "/repos/acme/app/**".into()],
            ..host_rule("network.allow[0]", exact("api.github.com"))
        },
        host_rule(
            "network.allow[1]",
            HostPattern::Wildcard("githubusercontent.com".into()),
        ),
        Rule {
            path_regex: vec![r"^/simple(?:/.*)?(?:\?.*)?$".into()],
            ..host_rule("network.allow[2]", exact("pypi.org"))
        },
        Rule {
            ports: Some(vec![22]),
            json_deny: Vec::new(),
            process: None,
            ..host_rule("network.allow[3]", exact("github.com"))
        },
        Rule {
            id: "network.allow[4]".into(),
            target: Target::Cidr("10.20.0.0/16".parse().expect("cidr")),
            methods: None,
            paths: Vec::new(),
            path_regex: Vec::new(),
            ports: Some(vec![5432]),
            json_deny: Vec::new(),
            process: None,
        },
    ];
    allow.push(host_rule(
        "network.allow[5]",
        HostPattern::Wildcard("apple.com".into()),
    ));
    assert_eq!(policy.network.allow, allow);
    assert_eq!(
        policy.network.deny,
        vec![
            host_rule("network.deny[0]", exact("gist.github.com")),
            Rule {
                id: "network.deny[1]".into(),
                target: Target::Cidr("169.254.0.0/16".parse().expect("cidr")),
                methods: None,
                paths: Vec::new(),
                path_regex: Vec::new(),
                ports: None,
                json_deny: Vec::new(),
                process: None,
            },
        ]
    );
    assert_eq!(
        policy.network.tls_passthrough,
        vec![HostPattern::Wildcard("apple.com".into())]
    );
    let bearer = Inject {
        header: "authorization".into(),
        format: "Bearer {value}".into(),
    };
    let expected_secrets = vec![
        Secret {
            name: "GH_TOKEN".into(),
            source: SecretSource::Env("GH_TOKEN".into()),
            hosts: vec![
                exact("api.github.com"),
                exact("github.com"),
                HostPattern::Wildcard("githubusercontent.com".into()),
            ],
            headers: Some(vec!["authorization".into()]),
            inject: None,
            surrogate: None,
            body: false,
            foreign_allowed: false,
        },
        Secret {
            name: "OPENAI_API_KEY".into(),
            source: SecretSource::Env("OPENAI_API_KEY".into()),
            hosts: vec![exact("api.openai.com")],
            headers: None,
            inject: Some(bearer.clone()),
            surrogate: None,
            body: false,
            foreign_allowed: false,
        },
        Secret {
            name: "NPM_TOKEN".into(),
            source: SecretSource::File(PathBuf::from("/run/secrets/npm")),
            hosts: vec![exact("registry.npmjs.org")],
            headers: None,
            inject: None,
            surrogate: Some("npm_0000000000000000000000000000000000000".into()),
            body: true,
            foreign_allowed: false,
        },
        Secret {
            name: "OPENROUTER_API_KEY".into(),
            source: SecretSource::Env("OPENROUTER_API_KEY".into()),
            hosts: vec![exact("openrouter.ai")],
            headers: None,
            inject: Some(bearer),
            surrogate: None,
            body: false,
            foreign_allowed: false,
        },
    ];
    assert_eq!(policy.secrets, expected_secrets);
    assert_eq!(
        policy.mcp,
        vec![McpRule {
            id: "mcp[0]".into(),
            host: exact("mcp.example.com"),
            path: "/mcp".into(),
            allow: vec!["read_file".into()],
            deny: vec!["write_file".into(), "run_command".into()],
            args: Vec::new(),
        }]
    );
    assert_eq!(
        policy.routes,
        vec![Route {
            prefix: "/llm/openrouter/".into(),
            upstream: "https://openrouter.ai/api/v1/".into(),
            secret: Some("OPENROUTER_API_KEY".into()),
        }]
    );
}

#[test]
fn version_alone_is_an_empty_policy() {
    assert_eq!(load_str("p.yaml", "version: 1\n"), Ok(Policy::default()));
    assert_eq!(
        load_str("p.json", r#"{"version": 1}"#),
        Ok(Policy::default())
    );
}

#[test]
fn ip_literal_host_becomes_an_ip_pattern() {
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  allow:\n    - host: 10.0.0.5\n    - host: \"[::1]\"\n    - host: \"::2\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let hosts: Vec<&Target> = policy.network.allow.iter().map(|r| &r.target).collect();
    assert_eq!(
        hosts,
        vec![
            &Target::Host(HostPattern::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)))),
            &Target::Host(HostPattern::Ip("::1".parse().expect("v6"))),
            &Target::Host(HostPattern::Ip("::2".parse().expect("v6"))),
        ]
    );
}
