//! Every validation error of the native loader: its exact `line:col` and a message that
//! names the problem and the fix. Multi-error documents report every error.

use airlock_policy::load::{LoadError, load_str};

/// Load `text` and return its errors as `(line, column, message)`.
fn errors(text: &str) -> Vec<(u32, u32, String)> {
    match load_str("p.yaml", text) {
        Ok(policy) => panic!("expected errors, loaded {policy:?}"),
        Err(LoadError { errors }) => {
            assert!(!errors.is_empty(), "LoadError must never be empty");
            errors
                .into_iter()
                .map(|e| {
                    assert_eq!(e.file, "p.yaml");
                    assert!(!e.message.contains('\n'), "one line: {}", e.message);
                    (e.line, e.column, e.message)
                })
                .collect()
        }
    }
}

/// Assert that `text` has exactly one error, at `line:column`, whose message contains
/// every one of `needles`.
#[track_caller]
fn one_error(text: &str, line: u32, column: u32, needles: &[&str]) {
    let found = errors(text);
    assert_eq!(found.len(), 1, "expected one error, got {found:#?}");
    let (found_line, found_column, message) = &found[0];
    assert_eq!(
        (*found_line, *found_column),
        (line, column),
        "wrong location for: {message}"
    );
    for needle in needles {
        assert!(message.contains(needle), "`{needle}` not in: {message}");
    }
}

/// A policy with one allow rule whose body is `rule` (each line indented under `- `).
fn allow(rule: &str) -> String {
    format!("version: 1\nnetwork:\n  allow:\n    - {rule}\n")
}

// --- version and document shape -------------------------------------------------------

#[test]
fn empty_document_needs_a_version() {
    one_error("", 1, 1, &["empty", "version: 1"]);
    one_error("# nothing here\n", 1, 1, &["empty", "version: 1"]);
}

#[test]
fn empty_mapping_needs_a_version() {
    one_error("{}\n", 1, 1, &["`version` is missing", "version: 1"]);
    one_error("network: {}\n", 1, 1, &["`version` is missing"]);
}

#[test]
fn version_must_be_one() {
    one_error(
        "version: 2\n",
        1,
        10,
        &["unsupported version 2", "version: 1"],
    );
    one_error(
        "version: \"1\"\n",
        1,
        10,
        &["must be the number 1", "a string"],
    );
    one_error("version: 1.5\n", 1, 10, &["must be the number 1"]);
}

#[test]
fn document_must_be_a_mapping() {
    one_error(
        "- a\n- b\n",
        1,
        1,
        &["the policy must be a mapping", "a list"],
    );
}

#[test]
fn syntax_error_is_one_located_error() {
    one_error(
        "version: 1\nnetwork: [a\n",
        2,
        10,
        &["syntax error", "unclosed bracket"],
    );
}

#[test]
fn duplicate_keys_are_refused() {
    one_error(
        "version: 1\nnetwork:\n  allow: []\n  allow: []\n",
        4,
        3,
        &["`allow` appears twice", "keep only one"],
    );
}

#[test]
fn a_second_document_is_refused() {
    one_error(
        "version: 1\n---\nversion: 1\n",
        3,
        1,
        &["one YAML document"],
    );
}

// --- unknown keys -------------------------------------------------------------------

#[test]
fn unknown_top_level_key_suggests_the_nearest() {
    one_error(
        "version: 1\nsecret: {}\n",
        2,
        1,
        &[
            "unknown key `secret`",
            "did you mean `secrets`?",
            "`version`",
            "`routes`",
        ],
    );
}

#[test]
fn unknown_rule_key_suggests_the_nearest() {
    one_error(
        &allow("host: a.com\n      mehtods: [GET]"),
        5,
        7,
        &[
            "network.allow[0]: unknown key `mehtods`",
            "did you mean `methods`?",
            "`path_regex`",
        ],
    );
}

#[test]
fn unknown_key_without_a_near_one_lists_the_allowed() {
    one_error(
        "version: 1\nnetwork:\n  whatever: 1\n",
        3,
        3,
        &[
            "unknown key `whatever`",
            "`allow`, `deny`, `tls_passthrough`",
        ],
    );
    let message = &errors("version: 1\nnetwork:\n  whatever: 1\n")[0].2;
    assert!(!message.contains("did you mean"), "{message}");
}

#[test]
fn unknown_keys_in_secrets_inject_mcp_tools_and_routes() {
    one_error(
        "version: 1\nsecrets:\n  A:\n    env: A\n    hosts: [a.com]\n    header: [x]\n",
        6,
        5,
        &["secrets.A: unknown key `header`", "did you mean `headers`?"],
    );
    one_error(
        "version: 1\nsecrets:\n  A:\n    env: A\n    hosts: [a.com]\n    inject: {header: X, format: \"{value}\", prefix: x}\n",
        6,
        44,
        &["secrets.A.inject: unknown key `prefix`"],
    );
    one_error(
        "version: 1\nmcp:\n  - host: m.com\n    path: /mcp\n    tools: {allow: [], denny: [x]}\n",
        5,
        24,
        &["mcp[0].tools: unknown key `denny`", "did you mean `deny`?"],
    );
    one_error(
        "version: 1\nroutes:\n  - prefix: /a/\n    upstream: https://a.com/\n    secrets: X\n",
        5,
        5,
        &["routes[0]: unknown key `secrets`", "did you mean `secret`?"],
    );
}

#[test]
fn non_string_key_is_refused() {
    one_error(
        "version: 1\nnetwork:\n  ? [a]\n  : 1\n",
        3,
        5,
        &["network: a key must be a word, not a list"],
    );
}

// --- wrong types ----------------------------------------------------------------------

#[test]
fn wrong_types_name_the_expected_type() {
    one_error(
        "version: 1\nnetwork: [a]\n",
        2,
        10,
        &["network must be a mapping", "not a list"],
    );
    one_error(
        "version: 1\nnetwork:\n  allow: {host: a.com}\n",
        3,
        10,
        &["network.allow must be a list", "not a mapping"],
    );
    one_error(
        &allow("host: 12"),
        4,
        13,
        &["network.allow[0].host must be a string, not a number: put it in quotes"],
    );
    one_error(
        &allow("host: a.com\n      methods: GET"),
        5,
        16,
        &["network.allow[0].methods must be a list", "not a string"],
    );
    one_error(
        "version: 1\nsecrets:\n  A:\n    env: A\n    hosts: [a.com]\n    body: \"yes\"\n",
        6,
        11,
        &["secrets.A.body must be true or false"],
    );
    one_error(
        "version: 1\nsecrets:\n  A:\n    env: A\n    hosts: [a.com]\n    body: yes\n",
        6,
        11,
        &["secrets.A.body must be true or false", "not a string"],
    );
}

#[test]
fn empty_sections_are_empty() {
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  allow:\n  deny:\n  tls_passthrough:\nsecrets:\nmcp:\nroutes:\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(policy, airlock_policy::Policy::default());
}

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

// --- secrets ------------------------------------------------------------------------

/// A policy with one secret `NAME` whose body lines are `body`.
fn secret(body: &str) -> String {
    format!("version: 1\nsecrets:\n  NAME:\n{body}")
}

#[test]
fn secret_name_must_be_an_env_name() {
    one_error(
        "version: 1\nsecrets:\n  1BAD-NAME:\n    env: X\n    hosts: [a.com]\n",
        3,
        3,
        &["`1BAD-NAME`", "environment variable", "GH_TOKEN"],
    );
}

#[test]
fn secret_needs_exactly_one_source() {
    one_error(
        &secret("    hosts: [a.com]\n"),
        4,
        5,
        &[
            "secrets.NAME",
            "`env: VAR`",
            "`file: PATH`",
            "`value:",
            "`command:",
        ],
    );
    one_error(
        &secret("    env: A\n    file: /x\n    hosts: [a.com]\n"),
        5,
        5,
        &["one source only", "`env` and `file`"],
    );
}

#[test]
fn secret_sources_are_checked() {
    one_error(
        &secret("    env: \"A-B\"\n    hosts: [a.com]\n"),
        4,
        10,
        &["secrets.NAME.env", "not an environment variable name"],
    );
    one_error(
        &secret("    file: \"\"\n    hosts: [a.com]\n"),
        4,
        11,
        &["secrets.NAME.file is empty"],
    );
    one_error(
        &secret("    command: []\n    hosts: [a.com]\n"),
        4,
        14,
        &["command is an empty list"],
    );
    one_error(
        &secret("    command: [\"\"]\n    hosts: [a.com]\n"),
        4,
        15,
        &["command[0] is empty"],
    );
    let policy = load_str(
        "p.yaml",
        &secret("    command: [pass, show, gh]\n    hosts: [a.com]\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        policy.secrets[0].source,
        airlock_policy::model::SecretSource::Command(vec![
            "pass".into(),
            "show".into(),
            "gh".into()
        ])
    );
}

#[test]
fn literal_values_are_never_echoed() {
    let found = errors(&secret(
        "    value: 1234567890123\n    hosts: [a.com]\n    surrogate: \"s3cr3t-literal\"\n    bogus: 1\n",
    ));
    let found_again = errors(&secret(
        "    value: \"s3cr3t-literal\"\n    hosts: [a.com]\n    surrogate: \"s3cr3t-literal\"\n",
    ));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!((found[0].0, found[0].1), (4, 12));
    assert_eq!((found[1].0, found[1].1), (7, 5));
    assert!(
        found[0].2.contains("value must be a string"),
        "{}",
        found[0].2
    );
    assert_eq!(found_again.len(), 1, "{found_again:#?}");
    assert_eq!((found_again[0].0, found_again[0].1), (6, 16));
    assert!(found_again[0].2.contains("same as the value"));
    for (_, _, message) in found.iter().chain(&found_again) {
        assert!(!message.contains("1234567890123"), "{message}");
        assert!(!message.contains("s3cr3t"), "{message}");
    }
}

#[test]
fn secret_hosts_are_required_and_valid() {
    one_error(&secret("    env: A\n"), 4, 5, &["`hosts` is missing"]);
    one_error(
        &secret("    env: A\n    hosts: []\n"),
        5,
        12,
        &["hosts is an empty list"],
    );
    one_error(
        &secret("    env: A\n    hosts: [a.com, \"*\"]\n"),
        5,
        20,
        &["secrets.NAME.hosts[1]", "`*` alone"],
    );
}

#[test]
fn secret_headers_inject_surrogate_body_foreign() {
    one_error(
        &secret("    env: A\n    hosts: [a.com]\n    headers: [\"Bad Header\"]\n"),
        6,
        15,
        &["headers[0] `Bad Header` is not a header name"],
    );
    one_error(
        &secret("    env: A\n    hosts: [a.com]\n    inject: {format: \"Bearer {value}\"}\n"),
        6,
        13,
        &["inject: `header` is missing"],
    );
    one_error(
        &secret("    env: A\n    hosts: [a.com]\n    inject: {header: X}\n"),
        6,
        13,
        &["inject: `format` is missing"],
    );
    one_error(
        &secret("    env: A\n    hosts: [a.com]\n    inject: {header: X, format: \"Bearer\"}\n"),
        6,
        33,
        &["inject.format must contain `{value}` exactly once"],
    );
    one_error(
        &secret(
            "    env: A\n    hosts: [a.com]\n    inject: {header: X, format: \"{value}{value}\"}\n",
        ),
        6,
        33,
        &["exactly once"],
    );
    one_error(
        &secret("    env: A\n    hosts: [a.com]\n    surrogate: \"\"\n"),
        6,
        16,
        &["surrogate is empty"],
    );
    one_error(
        &secret("    env: A\n    hosts: [a.com]\n    foreign: maybe\n"),
        6,
        14,
        &["foreign `maybe` is neither `allow` nor `deny`"],
    );
    let policy = load_str(
        "p.yaml",
        &secret("    env: A\n    hosts: [a.com]\n    headers: [X-Api-Key]\n    inject: {header: X-Api-Key, format: \"{value}\"}\n    body: true\n    foreign: allow\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let loaded = &policy.secrets[0];
    assert_eq!(loaded.headers, Some(vec!["x-api-key".into()]));
    assert_eq!(
        loaded.inject.as_ref().map(|i| i.header.as_str()),
        Some("x-api-key")
    );
    assert!(loaded.body);
    assert!(loaded.foreign_allowed);
}

// --- mcp and routes -------------------------------------------------------------------

#[test]
fn mcp_entries_need_host_path_and_tools() {
    one_error(
        "version: 1\nmcp:\n  - path: /mcp\n    tools: {}\n",
        3,
        5,
        &["mcp[0]: `host` is missing"],
    );
    one_error(
        "version: 1\nmcp:\n  - host: m.com\n    tools: {}\n",
        3,
        5,
        &["mcp[0]: `path` is missing", "path: /mcp"],
    );
    one_error(
        "version: 1\nmcp:\n  - host: m.com\n    path: /mcp\n",
        3,
        5,
        &["mcp[0]: `tools` is missing"],
    );
    one_error(
        "version: 1\nmcp:\n  - host: m.com\n    path: mcp\n    tools: {}\n",
        4,
        11,
        &["mcp[0].path `mcp`", "must start with `/`"],
    );
    one_error(
        "version: 1\nmcp:\n  - host: m.com\n    path: /mcp\n    tools: {allow: [\"\"]}\n",
        5,
        21,
        &["mcp[0].tools.allow[0] is empty"],
    );
}

#[test]
fn routes_are_checked() {
    let base = "version: 1\nsecrets:\n  K:\n    env: K\n    hosts: [a.com]\n    inject: {header: X-Key, format: \"{value}\"}\nroutes:\n";
    one_error(
        &format!("{base}  - prefix: /a\n    upstream: https://a.com/\n"),
        8,
        13,
        &["routes[0].prefix `/a` must start and end with `/`"],
    );
    one_error(
        &format!("{base}  - prefix: /a/\n    upstream: http://a.com/\n"),
        9,
        15,
        &["routes[0].upstream `http://a.com/` must be an https:// URL"],
    );
    one_error(
        &format!("{base}  - prefix: /a/\n    upstream: https://a.com/v1\n"),
        9,
        15,
        &["must end with `/`"],
    );
    one_error(
        &format!("{base}  - prefix: /a/\n    upstream: https://a.com/\n    secret: L\n"),
        10,
        13,
        &["routes[0].secret: no secret named `L`"],
    );
    one_error(
        &format!(
            "{base}  - prefix: /a/\n    upstream: https://a.com/\n  - prefix: /a/\n    upstream: https://b.com/\n"
        ),
        10,
        13,
        &["routes[1].prefix `/a/` is already used"],
    );
    one_error(
        &format!("{base}  - upstream: https://a.com/\n"),
        8,
        5,
        &["`prefix` is missing"],
    );
    one_error(
        &format!("{base}  - prefix: /a/\n"),
        8,
        5,
        &["`upstream` is missing"],
    );
    one_error(
        "version: 1\nsecrets:\n  K:\n    env: K\n    inject: {header: X-Key, format: \"{value}\"}\nroutes:\n  - prefix: /a/\n    upstream: https://a.com/\n    secret: K\n",
        4,
        5,
        &["secrets.K: `hosts` is missing"],
    );
    one_error(
        "version: 1\nsecrets:\n  K:\n    env: K\n    hosts: [a.com]\nroutes:\n  - prefix: /a/\n    upstream: https://a.com/\n    secret: K\n",
        9,
        13,
        &["routes[0].secret: the secret `K` has no `inject`"],
    );
    let policy = load_str(
        "p.yaml",
        &format!("{base}  - prefix: /a/\n    upstream: https://A.com:8443/v1/\n    secret: K\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(policy.routes[0].upstream, "https://a.com:8443/v1/");
}

// --- several errors at once -----------------------------------------------------------

#[test]
fn every_error_is_reported_in_document_order() {
    let text = "\
version: 3
network:
  allow:
    - host: a.com:443
    - host: b.com
      ports: [0]
      methods: [gett]
    - cidr: 10.0.0.1/8
  deny:
    - hots: c.com
secrets:
  TOKEN:
    hosts: []
";
    let found = errors(text);
    let locations: Vec<(u32, u32)> = found.iter().map(|(l, c, _)| (*l, *c)).collect();
    assert_eq!(
        locations,
        vec![
            (1, 10),
            (4, 13),
            (6, 15),
            (7, 17),
            (8, 13),
            (10, 7),
            (10, 7),
            (13, 5),
            (13, 12),
        ],
        "{found:#?}"
    );
    let messages: Vec<&str> = found.iter().map(|(_, _, m)| m.as_str()).collect();
    assert!(messages[0].contains("unsupported version 3"));
    assert!(messages[1].contains("network.allow[0].host"));
    assert!(messages[2].contains("network.allow[1].ports[0]"));
    assert!(messages[3].contains("network.allow[1].methods[0]"));
    assert!(messages[4].contains("network.allow[2].cidr"));
    assert!(messages[5].contains("unknown key `hots`") && messages[5].contains("`host`"));
    assert!(messages[6].contains("network.deny[0]: a rule needs"));
    assert!(messages[7].contains("secrets.TOKEN: say where the value comes from"));
    assert!(messages[8].contains("secrets.TOKEN.hosts is an empty list"));
}

#[test]
fn load_error_display_is_one_located_line_per_error() {
    let error = load_str("team.yaml", "version: 2\nnetwork: 1\n").expect_err("invalid");
    assert_eq!(
        error.to_string(),
        "team.yaml:1:10: unsupported version 2: this airlock reads `version: 1`\n\
         team.yaml:2:10: network must be a mapping of `key: value` entries, not a number"
    );
    let as_error: &dyn std::error::Error = &error;
    assert!(as_error.source().is_none());
}

/// A policy whose one `mcp` rule has `tools: {args: ARGS}` (YAML flow, on line 5).
fn mcp_args(args: &str) -> String {
    format!("version: 1\nmcp:\n  - host: m.com\n    path: /mcp\n    tools: {{args: {args}}}\n")
}

#[test]
fn mcp_argument_guards_are_checked_where_written() {
    let loaded = load_str(
        "p.yaml",
        &mcp_args(r#"{read_file: {path: ["/workspace/**", {regex: "/tmp/.*"}], a.b: {regex: x}}}"#),
    )
    .unwrap();
    let guards = &loaded.mcp[0].args;
    assert_eq!(guards.len(), 2);
    assert_eq!(guards[0].tool, "read_file");
    assert_eq!(guards[0].patterns.len(), 2);
    assert_eq!(guards[1].argument.keys, ["a", "b"]);
    one_error(
        &mcp_args(r#"{read_file: {path: ["/a/[b"]}}"#),
        5,
        39,
        &["mcp[0].tools.args.read_file.path[0] `/a/[b`", "glob"],
    );
    one_error(
        &mcp_args(r#"{read_file: {path: [{regex: "a)|(b"}]}}"#),
        5,
        47,
        &["mcp[0].tools.args.read_file.path[0].regex `a)|(b`", "regex"],
    );
    one_error(
        &mcp_args(r#"{read_file: {path: {regex: "("}}}"#),
        5,
        46,
        &["mcp[0].tools.args.read_file.path.regex"],
    );
    one_error(
        &mcp_args(r#"{read_file: {path: [{rgx: x}]}}"#),
        5,
        40,
        &["unknown key `rgx`", "did you mean `regex`?"],
    );
    one_error(
        &mcp_args(r#"{read_file: {path: []}}"#),
        5,
        38,
        &["mcp[0].tools.args.read_file.path is an empty list"],
    );
    one_error(
        &mcp_args(r#"{read_file: {path: "/workspace/**"}}"#),
        5,
        38,
        &["mcp[0].tools.args.read_file.path must be a list"],
    );
    one_error(
        &mcp_args(r#"{read_file: {a..b: [x]}}"#),
        5,
        32,
        &["mcp[0].tools.args.read_file.a..b", "dotted path"],
    );
    one_error(
        &mcp_args(r#"{read_file: {}}"#),
        5,
        31,
        &["mcp[0].tools.args.read_file names no argument"],
    );
    one_error(
        &mcp_args(r#"{read_file: [path]}"#),
        5,
        31,
        &["mcp[0].tools.args.read_file must be a mapping"],
    );
}
