//! Secrets: the name, the one source, hosts, headers, inject, surrogate, body and
//! foreign credentials; a literal value is never echoed.

use airlock_policy::load::load_str;

use super::{errors, one_error};

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
