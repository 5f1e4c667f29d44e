//! The document as a whole: its version and shape, unknown keys, wrong types, and a
//! document with several errors, each reported where it is.

use airlock_policy::load::load_str;

use super::{allow, errors, one_error};

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
