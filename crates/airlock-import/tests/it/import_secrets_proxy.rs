//! The secrets-proxy importer against secrets-proxy's documented secrets JSON (README and
//! ARCHITECTURE examples, its test config): secrets, host scoping, `*.` matching the bare
//! domain, placeholders as fixed surrogates, `inject`, `--allow-net`; round trip; errors
//! that never show a secret value.

use crate::import_support::*;
use airlock_import::SeedFormat;
use airlock_import::secrets_proxy::import_with_allow_net;
use airlock_policy::emit::to_yaml;
use airlock_policy::model::{HostPattern, Inject, SecretSource};

const SECRETS_PROXY: SeedFormat = SeedFormat::SecretsProxy;

#[test]
fn documented_secrets_become_scoped_airlock_secrets() {
    let policy = imported(SECRETS_PROXY, &fixture("secrets-proxy", "secrets.json"));
    let names: Vec<&str> = policy.secrets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["OPENAI_API_KEY", "GITHUB_TOKEN", "MY_API_KEY"]);

    let openai = &policy.secrets[0];
    assert_eq!(
        openai.source,
        SecretSource::Value("sk-real-key-here".into())
    );
    assert_eq!(openai.hosts, [HostPattern::Exact("api.openai.com".into())]);
    assert_eq!(
        openai.inject,
        Some(Inject {
            header: "authorization".into(),
            format: "Bearer {value}".into()
        })
    );
    assert!(openai.body && openai.headers.is_none() && !openai.foreign_allowed);
    let surrogate = openai.surrogate.as_deref().unwrap();
    let digits = surrogate
        .strip_prefix("SECRETS_PROXY_PLACEHOLDER_")
        .unwrap();
    assert_eq!(digits.len(), 32);
    assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()));

    // `*.github.com` matches github.com itself in secrets-proxy.
    let github = &policy.secrets[1];
    assert_eq!(
        github.hosts,
        [
            HostPattern::Exact("api.github.com".into()),
            HostPattern::Exact("github.com".into()),
            HostPattern::Wildcard("github.com".into()),
        ]
    );
    assert_ne!(
        github.surrogate, openai.surrogate,
        "each secret gets its own surrogate"
    );

    // No placeholder: airlock generates one per sandbox. URL, path and port are cleaned.
    let test_key = &policy.secrets[2];
    assert_eq!(test_key.surrogate, None);
    assert_eq!(
        test_key.hosts,
        [
            HostPattern::Exact("httpbin.org".into()),
            HostPattern::Ip("10.0.0.5".parse().unwrap())
        ]
    );

    // A secret's hosts are reachable; IP literals are not (secrets-proxy blocks them).
    check(
        &policy,
        &[
            ("POST", "https://api.openai.com/v1/chat/completions"),
            ("GET", "https://api.github.com/user"),
            ("GET", "https://github.com/acme/app.git/info/refs"),
            ("GET", "https://codeload.github.com/acme/app"),
            ("GET", "https://httpbin.org/headers"),
        ],
        &[
            ("GET", "https://10.0.0.5/"),
            ("GET", "https://evil.example/"),
            ("GET", "https://github.com.evil.example/"),
            ("GET", "https://openai.com/"),
        ],
    );
}

#[test]
fn import_is_deterministic() {
    let text = fixture("secrets-proxy", "secrets.json");
    assert_eq!(
        imported(SECRETS_PROXY, &text),
        imported(SECRETS_PROXY, &text)
    );
}

#[test]
fn readme_example_with_allow_net() {
    let text = r#"{
      "OPENAI_API_KEY": {
        "placeholder": "SECRETS_PROXY_PLACEHOLDER_openai",
        "value": "sk-real-key-here",
        "hosts": ["api.openai.com"]
      }
    }"#;
    let policy = import_with_allow_net("secrets.json", text, &["pypi.org", "*.pythonhosted.org"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        policy.secrets[0].surrogate.as_deref(),
        Some("SECRETS_PROXY_PLACEHOLDER_openai")
    );
    check(
        &policy,
        &[
            ("POST", "https://api.openai.com/v1/responses"),
            ("GET", "https://pypi.org/simple/"),
            ("GET", "https://pythonhosted.org/"),
            ("GET", "https://files.pythonhosted.org/packages/x.whl"),
        ],
        &[("GET", "https://example.org/")],
    );
    let error = import_with_allow_net("secrets.json", text, &["ok.test", "*bad.test"]).unwrap_err();
    assert_eq!(error.errors.len(), 1, "{error}");
    assert_eq!(error.errors[0].file, "--allow-net[1]");
}

#[test]
fn round_trip_keeps_the_value_but_debug_does_not_show_it() {
    let policy = imported(SECRETS_PROXY, &fixture("secrets-proxy", "secrets.json"));
    assert!(!format!("{policy:?}").contains("sk-real-key-here"));
    let yaml = to_yaml(&policy);
    assert!(
        yaml.contains("sk-real-key-here"),
        "the user's own file keeps the value:\n{yaml}"
    );
    assert_round_trip(&policy);
}

#[test]
fn invalid_entries_fail_with_every_location_and_no_value() {
    let error = import_errors(SECRETS_PROXY, &fixture("secrets-proxy", "invalid.json"));
    assert_error(&error, 2, &["bad-name", "environment variable name"]);
    assert_error(&error, 3, &["NO_HOSTS", "hosts"]);
    assert_error(&error, 4, &["NO_VALUE", "`value` is required"]);
    assert_error(&error, 5, &["BAD_HOST", "*github.com"]);
    assert_error(&error, 6, &["BAD_INJECT", "{value}"]);
    assert_error(&error, 7, &["EMPTY_PLACEHOLDER", "placeholder"]);
    assert_eq!(error.errors.len(), 6, "{error}");
    assert!(!error.to_string().contains("s3cr3t-VALUE"), "{error}");
    let same = r#"{"K": {"value": "tok-1", "placeholder": "tok-1", "hosts": ["a.test"]}}"#;
    let error = import_errors(SECRETS_PROXY, same);
    assert_error(&error, 1, &["same as `value`"]);
    assert!(!error.to_string().contains("tok-1"), "{error}");
}

#[test]
fn plain_string_secrets_and_unknown_keys_are_refused() {
    for text in [
        r#"{"KEY": "sk-plain"}"#,
        r#"{"KEY": {"value": ["sk-plain"], "hosts": ["a.test"]}}"#,
        r#"{"KEY": {"value": {"v": "sk-plain"}, "hosts": ["a.test"]}}"#,
    ] {
        let error = import_errors(SECRETS_PROXY, text);
        assert_eq!(error.errors.len(), 1, "{error}");
        assert!(!error.to_string().contains("sk-plain"), "{error}");
    }
    let error = import_errors(
        SECRETS_PROXY,
        "{\"KEY\": {\"value\": \"v1\",\n \"hosts\": [\"a.test\"], \"scopes\": []}}",
    );
    assert_error(&error, 2, &["scopes"]);
}
