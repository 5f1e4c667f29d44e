//! Network rules: the target (host, host regex, CIDR), methods, ports, paths, path
//! regexes, and `tls_passthrough`.

use airlock_policy::load::load_str;

use super::{allow, one_error};

// --- network rules: target ------------------------------------------------------------

#[test]
fn rule_needs_host_or_cidr() {
    one_error(
        &allow("methods: [GET]"),
        4,
        7,
        &["network.allow[0]: a rule needs `host: NAME` or `cidr: ADDRESS/PREFIX`"],
    );
}

#[test]
fn rule_takes_host_or_cidr_not_both() {
    one_error(
        &allow("host: a.com\n      cidr: 10.0.0.0/8"),
        5,
        7,
        &["either `host` or `cidr`, not both"],
    );
}

#[test]
fn host_regex_is_alone_and_compiles_on_its_own() {
    one_error(
        &allow("host: a.com\n      host_regex: 'a\\.com'"),
        5,
        7,
        &["either `host_regex` or `host`/`cidr`, not both"],
    );
    one_error(
        &allow("host_regex: 'a)|(b'"),
        4,
        19,
        &[
            "network.allow[0].host_regex",
            "not a valid regular expression",
        ],
    );
    one_error(
        &allow("host_regex: ''"),
        4,
        19,
        &["network.allow[0].host_regex"],
    );
}

#[test]
fn empty_host_is_refused() {
    one_error(
        &allow("host: \"\""),
        4,
        13,
        &["network.allow[0].host", "empty"],
    );
}

#[test]
fn bare_star_is_every_name_in_network_rules_only() {
    let policy = airlock_policy::load::load_str("p.yaml", &allow("host: \"*\""))
        .expect("`*` alone is a network rule host");
    assert_eq!(
        policy.network.allow[0].target,
        airlock_policy::model::Target::Host(airlock_policy::model::HostPattern::Any)
    );
    let secret = "version: 1\nsecrets:\n  T:\n    env: T\n    hosts: [\"*\"]\n";
    let err = airlock_policy::load::load_str("p.yaml", secret)
        .expect_err("a secret for every host is refused");
    assert!(
        err.to_string().contains("`*` alone would allow every host"),
        "{err}"
    );
}

#[test]
fn misplaced_star_is_refused() {
    for (host, column) in [
        ("a.*.com", 13),
        ("*a.com", 13),
        ("*.*.com", 13),
        ("api*.com", 13),
    ] {
        one_error(
            &allow(&format!("host: \"{host}\"")),
            4,
            column,
            &["only allowed as a leading `*.`"],
        );
    }
}

#[test]
fn wildcard_on_an_address_is_refused() {
    one_error(
        &allow("host: \"*.10.0.0.1\""),
        4,
        13,
        &["wildcard needs a domain name"],
    );
}

#[test]
fn host_with_port_path_or_scheme_is_refused() {
    one_error(
        &allow("host: a.com:443"),
        4,
        13,
        &["`a.com:443`", "port", "`ports:`"],
    );
    one_error(&allow("host: \"[::1]:443\""), 4, 13, &["port", "`ports:`"]);
    one_error(&allow("host: a.com/x"), 4, 13, &["path", "`paths:`"]);
    one_error(
        &allow("host: https://a.com"),
        4,
        13,
        &["not a URL", "`paths:`"],
    );
}

#[test]
fn invalid_host_names_are_refused() {
    one_error(
        &allow("host: \"a b.com\""),
        4,
        13,
        &["network.allow[0].host", "character"],
    );
    one_error(&allow("host: a..com"), 4, 13, &["empty label"]);
    one_error(&allow("host: 10.0.0.300"), 4, 13, &["IPv4"]);
}

#[test]
fn hosts_are_canonicalised() {
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  allow:\n    - host: API.GitHub.COM.\n    - host: \"*.Bücher.DE\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let shown: Vec<String> = policy
        .network
        .allow
        .iter()
        .map(|rule| match &rule.target {
            airlock_policy::model::Target::Host(host) => host.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(shown, ["api.github.com", "*.xn--bcher-kva.de"]);
}

#[test]
fn cidr_must_parse_and_have_no_host_bits() {
    one_error(
        &allow("cidr: 10.20.1.0/16"),
        4,
        13,
        &["host bits set", "`10.20.0.0/16`"],
    );
    one_error(
        &allow("cidr: 10.0.0.1"),
        4,
        13,
        &["no prefix length", "`10.0.0.1/32`"],
    );
    one_error(
        &allow("cidr: not-a-net"),
        4,
        13,
        &["not an address block", "10.20.0.0/16"],
    );
    one_error(
        &allow("cidr: fd00::1/8"),
        4,
        13,
        &["host bits", "`fd00::/8`"],
    );
}

// --- methods, ports, paths, regexes ---------------------------------------------------

#[test]
fn methods_are_tokens_and_known_or_upper_case() {
    one_error(
        &allow("host: a.com\n      methods: [GET, \"GE T\"]"),
        5,
        22,
        &["methods[1] `GE T`", "RFC 9110 token"],
    );
    one_error(
        &allow("host: a.com\n      methods: [gett]"),
        5,
        17,
        &["methods[0] `gett`", "unknown method", "(GETT)"],
    );
    one_error(
        &allow("host: a.com\n      methods: []"),
        5,
        16,
        &["methods is an empty list", "remove `methods`"],
    );
    let policy = load_str(
        "p.yaml",
        &allow("host: a.com\n      methods: [get, Post, PROPFIND, GET]"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        policy.network.allow[0].methods,
        Some(vec!["GET".into(), "POST".into(), "PROPFIND".into()])
    );
}

#[test]
fn ports_are_1_to_65535_and_not_empty() {
    one_error(
        &allow("host: a.com\n      ports: [0]"),
        5,
        15,
        &["ports[0]: port 0 is out of range", "1 to 65535"],
    );
    one_error(
        &allow("host: a.com\n      ports: [443, 65536]"),
        5,
        20,
        &["ports[1]: port 65536 is out of range"],
    );
    one_error(
        &allow("host: a.com\n      ports: []"),
        5,
        14,
        &["ports is an empty list", "default 80 and 443"],
    );
    one_error(
        &allow("host: a.com\n      ports: [\"443\"]"),
        5,
        15,
        &["ports[0] must be a port number"],
    );
}

#[test]
fn paths_must_start_with_slash_and_compile() {
    one_error(
        &allow("host: a.com\n      paths: [\"repos/**\"]"),
        5,
        15,
        &["paths[0] `repos/**`", "must start with `/`"],
    );
    one_error(
        &allow("host: a.com\n      paths: [\"/a/{b\"]"),
        5,
        15,
        &["paths[0] `/a/{b`", "not a valid glob"],
    );
    one_error(
        &allow("host: a.com\n      paths: []"),
        5,
        14,
        &["paths is an empty list"],
    );
}

#[test]
fn path_regex_must_compile_within_the_size_limit() {
    one_error(
        &allow("host: a.com\n      path_regex: [\"^/(a\"]"),
        5,
        20,
        &[
            "path_regex[0]",
            "not a valid regular expression",
            "unclosed group",
        ],
    );
    one_error(
        &allow("host: a.com\n      path_regex: [\"^/\\\\w{1000}\\\\w{1000}$\"]"),
        5,
        20,
        &["path_regex[0]", "1 MiB limit"],
    );
}

#[test]
fn deny_rules_take_the_same_matchers() {
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  deny:\n    - host: a.com\n      methods: [delete]\n      paths: [/x/**]\n      path_regex: ['^/y$']\n      ports: [8443]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let rule = &policy.network.deny[0];
    assert_eq!(rule.id, "network.deny[0]");
    assert_eq!(rule.methods, Some(vec!["DELETE".into()]));
    assert_eq!(rule.paths, ["/x/**"]);
    assert_eq!(rule.path_regex, ["^/y$"]);
    assert_eq!(rule.ports, Some(vec![8443]));
    one_error(
        "version: 1\nnetwork:\n  deny:\n    - host: a.com:1\n",
        4,
        13,
        &["network.deny[0].host", "port"],
    );
}

// --- tls_passthrough ------------------------------------------------------------------

#[test]
fn passthrough_host_must_be_allowed() {
    one_error(
        "version: 1\nnetwork:\n  allow:\n    - host: a.com\n  tls_passthrough: [b.com]\n",
        5,
        21,
        &[
            "tls_passthrough[0]: b.com is not allowed",
            "- host: \"b.com\"",
        ],
    );
    one_error(
        "version: 1\nnetwork:\n  allow:\n    - host: \"*.a.com\"\n  tls_passthrough: [a.com]\n",
        5,
        21,
        &["a.com is not allowed"],
    );
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  allow:\n    - host: \"*.a.com\"\n    - cidr: 10.0.0.0/8\n  tls_passthrough: [x.a.com, \"*.b.a.com\", 10.1.2.3]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(policy.network.tls_passthrough.len(), 3);
}
