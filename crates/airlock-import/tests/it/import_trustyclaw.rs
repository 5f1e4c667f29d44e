//! The trustyclaw importer against trustyclaw's documented network controls: domain
//! rules, methods, path guards, wildcards, exact-over-wildcard, reserved provider domains
//! and the provider bundles; round trip; located errors.

use crate::import_support::*;
use airlock_import::SeedFormat;
use airlock_policy::model::{HostPattern, Target};

const TRUSTYCLAW: SeedFormat = SeedFormat::Trustyclaw;

/// A one-rule policy.
fn one(domain: &str, rule: &str) -> String {
    format!("{{\"allowed_network_access\": {{\"{domain}\": {rule}}}}}")
}

#[test]
fn default_closed() {
    let policy = imported(
        TRUSTYCLAW,
        r#"{"managed_ai_provider_network_access": {}, "allowed_network_access": {}}"#,
    );
    assert_eq!(policy, Default::default());
    check(&policy, &[], &[("GET", "https://api.github.com/")]);
}

#[test]
fn documented_policy_decides_as_trustyclaw_does() {
    let policy = imported(TRUSTYCLAW, &fixture("trustyclaw", "network-policy.json"));
    check(
        &policy,
        &[
            ("GET", "https://api.github.com/repos/acme/app"),
            ("HEAD", "https://api.github.com/repos/acme/app/pulls/1"),
            ("GET", "https://api.github.com/zen"),
            (
                "GET",
                "https://raw.githubusercontent.com/acme/app/main/README.md",
            ),
            ("GET", "https://a.b.githubusercontent.com/x"),
            ("GET", "https://registry.npmjs.org/dist"),
            ("GET", "https://registry.npmjs.org/dist/index.js"),
            ("GET", "https://pypi.org/simple/requests/?format=json"),
            // WebSockets use the same rule: the handshake is a GET.
            ("GET", "https://api.github.com/repos/acme/app/events"),
        ],
        &[
            ("POST", "https://api.github.com/repos/acme/app"),
            ("GET", "https://api.github.com/user"),
            ("GET", "https://api.github.com/repos/acme"),
            ("GET", "https://githubusercontent.com/"),
            ("POST", "https://raw.githubusercontent.com/x"),
            ("GET", "https://registry.npmjs.org/distx"),
            ("GET", "https://registry.npmjs.org/other"),
            ("GET", "https://closed.example.org/"),
            ("GET", "https://evil.example/"),
        ],
    );
}

#[test]
fn path_guards_full_match_path_and_query() {
    // `^/dist(?:/.*)?$` allows /dist and /dist/index.js (documented), not a query.
    check(
        &imported(
            TRUSTYCLAW,
            &one(
                "x.test",
                r#"{"allow_http_methods": ["GET"], "path_guards": ["^/dist(?:/.*)?$"]}"#,
            ),
        ),
        &[
            ("GET", "https://x.test/dist"),
            ("GET", "https://x.test/dist/index.js"),
        ],
        &[
            ("GET", "https://x.test/dist?v=1"),
            ("GET", "https://x.test/distro"),
        ],
    );
    // Queries must be allowed by the regex itself (documented example).
    check(
        &imported(
            TRUSTYCLAW,
            &one(
                "x.test",
                r#"{"allow_http_methods": ["GET"], "path_guards": ["^/simple(?:/.*)?(?:\\?.*)?$"]}"#,
            ),
        ),
        &[
            ("GET", "https://x.test/simple/?q=1"),
            ("GET", "https://x.test/simple"),
        ],
        &[("GET", "https://x.test/simplex")],
    );
    // Without guards every path passes; guards are matched after dot segments go.
    check(
        &imported(
            TRUSTYCLAW,
            &one(
                "x.test",
                r#"{"allow_http_methods": ["GET"], "path_guards": ["^/v1/threads/.*$"]}"#,
            ),
        ),
        &[("GET", "https://x.test/v1/threads/1")],
        &[("GET", "https://x.test/v1/threads/../../admin")],
    );
}

#[test]
fn wildcards_match_any_non_empty_prefix_never_the_apex() {
    check(
        &imported(
            TRUSTYCLAW,
            &one("*.example.com", r#"{"allow_http_methods": ["GET"]}"#),
        ),
        &[
            ("GET", "https://api.example.com/"),
            ("GET", "https://a.b.example.com/"),
        ],
        &[
            ("GET", "https://example.com/"),
            ("GET", "https://badexample.com/"),
        ],
    );
}

#[test]
fn methods_are_the_listed_ones_and_empty_is_closed() {
    let policy = imported(
        TRUSTYCLAW,
        &one("X.Test", r#"{"allow_http_methods": ["get", "DELETE"]}"#),
    );
    assert_eq!(
        policy.network.allow[0].target,
        Target::Host(HostPattern::Exact("x.test".into()))
    );
    check(
        &policy,
        &[("GET", "https://x.test/a"), ("DELETE", "https://x.test/a")],
        &[("POST", "https://x.test/a"), ("HEAD", "https://x.test/a")],
    );
    let closed = imported(TRUSTYCLAW, &one("x.test", r#"{"allow_http_methods": []}"#));
    check(&closed, &[], &[("GET", "https://x.test/")]);
}

#[test]
fn exact_rules_override_wildcards() {
    let policy = imported(
        TRUSTYCLAW,
        &fixture("trustyclaw", "exact-overrides-wildcard.json"),
    );
    check(
        &policy,
        &[
            ("GET", "https://other.example.com/"),
            ("DELETE", "https://other.example.com/"),
            ("GET", "https://api.example.com/"),
            ("HEAD", "https://example.com/"),
        ],
        &[
            ("POST", "https://api.example.com/"),
            ("DELETE", "https://api.example.com/"),
            ("GET", "https://closed.example.com/"),
            ("GET", "https://example.com/"),
        ],
    );
    assert_round_trip(&policy);
}

#[test]
fn exact_rule_with_narrower_paths_than_its_wildcard_cannot_be_expressed() {
    let error = import_errors(TRUSTYCLAW, &fixture("trustyclaw", "unsubtractable.json"));
    assert_error(
        &error,
        4,
        &["api.example.com", "*.example.com", "path_guards"],
    );
}

#[test]
fn provider_bundles_expand_as_documented() {
    let openai = imported(
        TRUSTYCLAW,
        r#"{"managed_ai_provider_network_access": {"openai": true}, "allowed_network_access": {}}"#,
    );
    check(
        &openai,
        &[
            ("POST", "https://api.openai.com/v1/responses"),
            ("GET", "https://auth.openai.com/oauth/authorize"),
            ("POST", "https://auth.openai.com/oauth/token"),
            ("GET", "https://chatgpt.com/backend-api/codex"),
            ("POST", "https://chatgpt.com/backend-api/codex/responses"),
        ],
        &[
            ("GET", "https://api.openai.com/v1/models"),
            ("GET", "https://api.anthropic.com/v1/models"),
            ("GET", "https://openai.com/"),
        ],
    );
    let claude = imported(
        TRUSTYCLAW,
        r#"{"managed_ai_provider_network_access": {"claude": true, "openai": false}, "allowed_network_access": {}}"#,
    );
    check(
        &claude,
        &[
            ("POST", "https://api.anthropic.com/v1/messages"),
            ("GET", "https://api.anthropic.com/api/hello"),
            ("POST", "https://platform.claude.com/v1/oauth/token"),
            ("GET", "https://platform.claude.com/v1/oauth"),
        ],
        &[
            ("GET", "https://platform.claude.com/settings"),
            ("GET", "https://claude.ai/"),
            ("POST", "https://api.openai.com/v1/responses"),
        ],
    );
    // A user wildcard does not reach into a bundle host beyond what the bundle allows.
    let both = imported(
        TRUSTYCLAW,
        r#"{"managed_ai_provider_network_access": {"openai": true}, "allowed_network_access": {"*.openai.example": {"allow_http_methods": ["GET"]}}}"#,
    );
    check(
        &both,
        &[("GET", "https://x.openai.example/")],
        &[("GET", "https://api.openai.com/")],
    );
}

#[test]
fn round_trip_through_native_yaml() {
    let policy = imported(TRUSTYCLAW, &fixture("trustyclaw", "network-policy.json"));
    assert_round_trip(&policy);
}

#[test]
fn invalid_rules_fail_with_every_location() {
    let error = import_errors(TRUSTYCLAW, &fixture("trustyclaw", "invalid.json"));
    assert_error(
        &error,
        4,
        &["*.api.example.com", "*.example.com", "overlapping"],
    );
    assert_error(
        &error,
        5,
        &[
            "api.openai.com",
            "managed_ai_provider_network_access.openai",
        ],
    );
    assert_error(
        &error,
        6,
        &["*.claude.ai", "managed_ai_provider_network_access.claude"],
    );
    assert_error(&error, 7, &["api.*.org", "wildcard"]);
    assert_error(&error, 8, &["OPTIONS"]);
    assert_error(&error, 9, &["(?!admin)", "look-around"]);
    assert_error(
        &error,
        10,
        &["z.example.org", "allow_http_methods is required"],
    );
    assert_eq!(error.errors.len(), 7, "{error}");
}

#[test]
fn shape_errors_are_located() {
    let error = import_errors(
        TRUSTYCLAW,
        r#"{"managed_ai_provider_network_access": {"openai": true}}"#,
    );
    assert_error(&error, 1, &["allowed_network_access is required"]);
    let error = import_errors(
        TRUSTYCLAW,
        "{\"allowed_network_access\": {\n  \"a.test\": {\"allow_http_methods\": [\"GET\"], \"openai_account_guard\": true}}}",
    );
    assert_error(&error, 2, &["openai_account_guard"]);
    let error = import_errors(TRUSTYCLAW, r#"{"allowed_network_access": {}, "ssh": 1}"#);
    assert_error(&error, 1, &["ssh"]);
    let error = import_errors(
        TRUSTYCLAW,
        r#"{"managed_ai_provider_network_access": {"openai": "yes"}, "allowed_network_access": {}}"#,
    );
    assert_eq!(error.errors.len(), 1, "{error}");
    let error = import_errors(
        TRUSTYCLAW,
        "{\"allowed_network_access\": {\"A.test\": {\"allow_http_methods\": []},\n \"a.test\": {\"allow_http_methods\": []}}}",
    );
    assert_error(&error, 2, &["repeats"]);
}

#[test]
fn tab_indented_json_is_read() {
    let text = "{\n\t\"allowed_network_access\": {\n\t\t\"x.test\": {\"allow_http_methods\": [\"GET\"]}\n\t}\n}\n";
    check(
        &imported(TRUSTYCLAW, text),
        &[("GET", "https://x.test/")],
        &[],
    );
}
