//! The airut importer against airut's documented allowlist, its pattern table (every row)
//! and its method rules; round trip through the native YAML; located errors.

use crate::import_support::*;
use airlock_import::SeedFormat;
use airlock_policy::model::HostPattern;

const AIRUT: SeedFormat = SeedFormat::Airut;

/// A one-domain allowlist.
fn domain(pattern: &str) -> String {
    format!("domains:\n  - {pattern:?}\n")
}

/// A one-entry `url_prefixes` allowlist on `x.test`.
fn path(pattern: &str) -> String {
    format!("url_prefixes:\n  - host: x.test\n    path: {pattern:?}\n")
}

#[test]
fn documented_allowlist_decides_as_airut_does() {
    let policy = imported(AIRUT, &fixture("airut", "network-allowlist.yaml"));
    check(
        &policy,
        &[
            ("GET", "https://api.github.com/anything"),
            ("DELETE", "https://uploads.github.com/x/y?z=1"),
            ("POST", "https://api.anthropic.com/v1/messages"),
            (
                "POST",
                "https://api.anthropic.com/v1/messages/batches?limit=1",
            ),
            ("GET", "https://api.github.com/repos/your-org/your-repo"),
            (
                "PATCH",
                "https://api.github.com/repos/your-org/your-repo/pulls/1",
            ),
            ("POST", "https://api.github.com/graphql"),
            ("GET", "https://pypi.org/simple/requests/"),
            ("head", "https://pypi.org/simple"),
            ("POST", "https://statsig.anthropic.com/v1/rgstr"),
        ],
        &[
            ("GET", "https://github.com/"),
            ("GET", "https://api.anthropic.com/v1/messages"),
            ("POST", "https://api.anthropic.com/v1/files"),
            (
                "GET",
                "https://api.github.com.evil.test/repos/your-org/your-repo",
            ),
            ("GET", "https://uploads.github.com.evil.test/"),
            // (api.github.com is also covered by the `*.github.com` domain entry, which
            // airut checks first: every method and path there passes.)
            ("POST", "https://pypi.org/simple/x"),
            ("GET", "https://pypi.org/pypi/requests/json"),
            ("GET", "https://statsig.anthropic.com/"),
            ("GET", "https://evil.example/"),
        ],
    );
}

#[test]
fn documented_pattern_table_every_row() {
    // | `api.github.com` | api.github.com | not uploads.github.com |
    check(
        &imported(AIRUT, &domain("api.github.com")),
        &[("GET", "https://api.github.com/")],
        &[("GET", "https://uploads.github.com/")],
    );
    // | `*.github.com` | api.github.com, uploads.github.com | not github.com (no subdomain) |
    check(
        &imported(AIRUT, &domain("*.github.com")),
        &[
            ("GET", "https://api.github.com/"),
            ("GET", "https://uploads.github.com/"),
        ],
        &[("GET", "https://github.com/")],
    );
    // | `/repos/foo` | /repos/foo | not /repos/foo/bar, /repos/foobar |
    check(
        &imported(AIRUT, &path("/repos/foo")),
        &[("GET", "https://x.test/repos/foo")],
        &[
            ("GET", "https://x.test/repos/foo/bar"),
            ("GET", "https://x.test/repos/foobar"),
        ],
    );
    // | `/repos/foo/*` | /repos/foo/bar, /repos/foo/x/y | not /repos/foo, /repos/foobar |
    check(
        &imported(AIRUT, &path("/repos/foo/*")),
        &[
            ("GET", "https://x.test/repos/foo/bar"),
            ("GET", "https://x.test/repos/foo/x/y"),
        ],
        &[
            ("GET", "https://x.test/repos/foo"),
            ("GET", "https://x.test/repos/foobar"),
        ],
    );
    // | `/repos/foo*` | /repos/foo, /repos/foobar, /repos/foo/bar | not /repos/fo |
    check(
        &imported(AIRUT, &path("/repos/foo*")),
        &[
            ("GET", "https://x.test/repos/foo"),
            ("GET", "https://x.test/repos/foobar"),
            ("GET", "https://x.test/repos/foo/bar"),
        ],
        &[("GET", "https://x.test/repos/fo")],
    );
}

#[test]
fn key_principles() {
    // No path normalisation of patterns: `/api` and `/api/` are different patterns.
    check(
        &imported(AIRUT, &path("/api")),
        &[("GET", "https://x.test/api")],
        &[("GET", "https://x.test/api/")],
    );
    // `?` is one character, and fnmatch wildcards cross `/` and reach into the query.
    check(
        &imported(AIRUT, &path("/v?/items*")),
        &[
            ("GET", "https://x.test/v1/items"),
            ("GET", "https://x.test/v2/items/3?page=2"),
        ],
        &[("GET", "https://x.test/v10/items")],
    );
    // Empty path = every path; no implicit prefix otherwise.
    let empty = imported(AIRUT, "url_prefixes:\n  - host: x.test\n    path: \"\"\n");
    check(
        &empty,
        &[("PUT", "https://x.test/any/thing?q")],
        &[("GET", "https://y.test/")],
    );
    // Host patterns compare case-insensitively.
    check(
        &imported(AIRUT, &domain("API.GitHub.com")),
        &[("GET", "https://api.github.com/")],
        &[],
    );
}

#[test]
fn method_filtering_rules() {
    // Omitted or empty methods: every method; listed methods compare case-insensitively.
    for methods in ["", "    methods: []\n"] {
        let text = format!("url_prefixes:\n  - host: x.test\n    path: /graphql\n{methods}");
        check(
            &imported(AIRUT, &text),
            &[
                ("GET", "https://x.test/graphql"),
                ("DELETE", "https://x.test/graphql"),
            ],
            &[],
        );
    }
    let lower = "url_prefixes:\n  - host: x.test\n    path: /graphql\n    methods: [post]\n";
    let policy = imported(AIRUT, lower);
    assert_eq!(
        policy.network.allow[0].methods,
        Some(vec!["POST".to_owned()])
    );
    check(
        &policy,
        &[("POST", "https://x.test/graphql")],
        &[("GET", "https://x.test/graphql")],
    );
}

#[test]
fn star_alone_is_every_host_name() {
    let policy = imported(AIRUT, &domain("*"));
    assert!(matches!(
        &policy.network.allow[0].target,
        airlock_policy::model::Target::Host(HostPattern::Any)
    ));
    check(&policy, &[("GET", "https://anything.example/")], &[]);
    assert_round_trip(&policy);
}

#[test]
fn empty_file_allows_nothing() {
    let policy = imported(AIRUT, "# nothing yet\n");
    assert_eq!(policy, Default::default());
    check(&policy, &[], &[("GET", "https://api.github.com/")]);
}

#[test]
fn round_trip_through_native_yaml() {
    let policy = imported(AIRUT, &fixture("airut", "network-allowlist.yaml"));
    assert_eq!(policy.network.allow.len(), 6);
    assert_eq!(policy.network.allow[0].id, "network.allow[0]");
    assert_round_trip(&policy);
    assert_round_trip(&imported(AIRUT, &path("/a[!b]c?d*")));
}

#[test]
fn unexpressible_entries_fail_with_every_location() {
    let error = import_errors(AIRUT, &fixture("airut", "unexpressible.yaml"));
    assert_error(&error, 11, &["url_prefixes[1]", "graphql"]);
    assert_error(&error, 12, &["url_prefixes[2]", "host"]);
    assert_error(&error, 13, &["url_prefixes[3]", "bad host/x"]);
    assert_eq!(error.errors.len(), 3, "{error}");
    assert!(error.errors.iter().all(|e| e.file == "test-input"));
}

#[test]
fn fnmatch_host_patterns_decide_as_airut_does() {
    // `?` is one character, a dot included (no host name has an empty label, though).
    check(
        &imported(AIRUT, &domain("h?.example.com")),
        &[
            ("GET", "https://h1.example.com/"),
            ("GET", "https://HX.Example.COM/"),
        ],
        &[
            ("GET", "https://h.example.com/"),
            ("GET", "https://h12.example.com/"),
            ("GET", "https://h1.example.com.evil.test/"),
        ],
    );
    // `*` in the middle or at the front crosses dots.
    check(
        &imported(AIRUT, &domain("API-*.Example.com")),
        &[
            ("GET", "https://api-.example.com/"),
            ("GET", "https://api-eu.example.com/"),
            ("GET", "https://api-a.b.example.com/"),
        ],
        &[
            ("GET", "https://api.example.com/"),
            ("GET", "https://xapi-eu.example.com/"),
        ],
    );
    check(
        &imported(AIRUT, &domain("*github.com")),
        &[
            ("GET", "https://github.com/"),
            ("GET", "https://notgithub.com/"),
            ("GET", "https://api.github.com/"),
        ],
        &[("GET", "https://github.com.evil.test/")],
    );
    // Sets, negated sets and ranges; upper case in the pattern is lower-cased first.
    check(
        &imported(
            AIRUT,
            "url_prefixes:\n  - host: \"[A-C]*.[!x]?.test\"\n    path: /v[0-9]/*\n",
        ),
        &[
            ("GET", "https://a.yy.test/v1/x"),
            ("GET", "https://cdn.zz.test/v9/a/b?q=1"),
        ],
        &[
            ("GET", "https://d.yy.test/v1/x"),
            ("GET", "https://a.xy.test/v1/x"),
            ("GET", "https://a.yy.test/vx/x"),
            ("GET", "https://a.yy.test/v1"),
        ],
    );
    // `*` and wildcard patterns never cover IP-literal hosts (the address rules do).
    check(
        &imported(AIRUT, &domain("10.0.0.*")),
        &[],
        &[("GET", "https://10.0.0.1/")],
    );
}

#[test]
fn fnmatch_hosts_round_trip_as_host_regex() {
    let policy = imported(
        AIRUT,
        &fixture("airut", "unexpressible.yaml").replace(
            "    graphql:\n      queries: [viewer]\n  - path: /no-host\n  - host: \"bad host/x\"\n",
            "",
        ),
    );
    assert!(matches!(
        &policy.network.allow[1].target,
        airlock_policy::model::Target::HostRegex(_)
    ));
    assert_round_trip(&policy);
    let yaml = airlock_policy::emit::to_yaml(&policy);
    assert!(yaml.contains("host_regex:"), "{yaml}");
}

#[test]
fn unknown_keys_and_syntax_errors_are_located() {
    let error = import_errors(AIRUT, "domains: [a.test]\nurl_prefix:\n  - host: b.test\n");
    assert_error(&error, 2, &["url_prefix"]);
    let error = import_errors(AIRUT, "domains: [a.test\n");
    assert_eq!(error.errors.len(), 1);
    assert_eq!(error.errors[0].line, 1);
    let error = import_errors(
        AIRUT,
        "url_prefixes:\n  - host: x.test\n    methods: [\"GET POST\"]\n",
    );
    assert_error(&error, 3, &["not an HTTP method"]);
}
