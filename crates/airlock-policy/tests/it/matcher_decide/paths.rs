//! Path matching: globs, path regexes, unsafe spellings, deny paths no spelling bypasses,
//! and globs or regexes that do not compile.

use airlock_policy::CanonicalRequest;
use airlock_policy::canonical::Host;
use airlock_policy::decision::Reason;
use airlock_policy::matcher::{CompileError, CompiledPolicy};

use super::{decide, denied, denied_by, host, methods, network, paths, policy, regexes, rule};

#[test]
fn globs_keep_star_inside_a_segment() {
    let compiled = policy(
        vec![
            paths(
                methods(
                    rule("network.allow[0]", host("api.github.com")),
                    &["GET", "POST"],
                ),
                &["/repos/acme/app", "/repos/acme/app/**"],
            ),
            paths(
                rule("network.allow[1]", host("files.example")),
                &["/pub/*.txt"],
            ),
        ],
        Vec::new(),
    );
    let allowed = [
        "https://api.github.com/repos/acme/app",
        "https://api.github.com/repos/acme/app/pulls",
        "https://api.github.com/repos/acme/app/pulls/1/comments",
        "https://api.github.com/repos/acme/app/pulls?state=open",
        "https://api.github.com//repos//acme/app/x",
        "https://api.github.com/repos/acme/other/../app/x",
        "https://api.github.com/repos/acme/%61pp/x",
        "https://files.example/pub/a.txt",
    ];
    for url in allowed {
        assert!(decide(&compiled, "GET", url).is_allow(), "{url}");
    }
    let refused = [
        "https://api.github.com/repos/acme/app2",
        "https://api.github.com/repos/acme/other",
        "https://api.github.com/repos/acme/app/../other",
        "https://api.github.com/repos/acme/app/%2e%2e/other",
        "https://api.github.com/",
        "https://files.example/pub/sub/a.txt",
        "https://files.example/pub/a.txt.exe",
    ];
    for url in refused {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied(Reason::PathNotAllowed),
            "{url}"
        );
    }
    assert_eq!(
        decide(&compiled, "DELETE", "https://api.github.com/repos/acme/app"),
        denied(Reason::MethodNotAllowed)
    );
}

#[test]
fn deny_paths_cannot_be_bypassed_by_spelling() {
    let compiled = policy(
        vec![rule("network.allow[0]", host("a.com"))],
        vec![paths(
            rule("network.deny[0]", host("a.com")),
            &["/admin", "/admin/**"],
        )],
    );
    assert!(decide(&compiled, "GET", "https://a.com/public/x").is_allow());
    for url in [
        "https://a.com/admin",
        "https://a.com/admin/x",
        "https://a.com//admin/x",
        "https://a.com/./admin/x",
        "https://a.com/public/../admin/x",
        "https://a.com/public/%2e%2e/admin/x",
        "https://a.com/%61dmin/x",
        "https://a.com/admin/x?y=1",
    ] {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied_by("network.deny[0]"),
            "{url}"
        );
    }
    for url in [
        "https://a.com/public/..%2fadmin/x",
        "https://a.com/public/%252e%252e/admin/x",
        "https://a.com/public/..;/admin/x",
        "https://a.com/admin%5cx",
        "https://a.com/admin%00",
    ] {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied(Reason::PathUnsafe),
            "{url}"
        );
    }
}

#[test]
fn unsafe_paths_are_refused_on_every_host_with_path_rules() {
    let compiled = policy(
        vec![
            paths(rule("network.allow[0]", host("paths.example")), &["/ok/**"]),
            rule("network.allow[1]", host("open.example")),
            methods(rule("network.allow[2]", host("mixed.example")), &["GET"]),
            paths(
                methods(rule("network.allow[3]", host("mixed.example")), &["POST"]),
                &["/up/**"],
            ),
        ],
        Vec::new(),
    );
    assert_eq!(
        decide(&compiled, "GET", "https://paths.example/ok/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert!(decide(&compiled, "GET", "https://open.example/a%2fb").is_allow());
    // docs/contract.md §3: refused on a host with path rules, even where a rule without
    // paths would allow the request.
    assert_eq!(
        decide(&compiled, "GET", "https://mixed.example/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert_eq!(
        decide(&compiled, "POST", "https://mixed.example/up/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert_eq!(
        decide(&compiled, "PUT", "https://mixed.example/a%2fb"),
        denied(Reason::PathUnsafe)
    );
    assert_eq!(
        decide(&compiled, "PUT", "https://mixed.example/a/b"),
        denied(Reason::MethodNotAllowed)
    );
    assert_eq!(
        decide(&compiled, "GET", "https://other.example/a%2fb"),
        denied(Reason::HostNotAllowed)
    );
}

#[test]
fn regexes_match_path_and_query_in_full() {
    let compiled = policy(
        vec![
            regexes(
                rule("network.allow[0]", host("pypi.org")),
                &[r"^/simple(?:/.*)?(?:\?.*)?$"],
            ),
            regexes(
                rule("network.allow[1]", host("r.example")),
                &["/v[0-9]+/items", "/search\\?q=[a-z]+"],
            ),
            paths(
                regexes(rule("network.allow[2]", host("both.example")), &["/re/.*"]),
                &["/glob/*"],
            ),
        ],
        Vec::new(),
    );
    for url in [
        "https://pypi.org/simple",
        "https://pypi.org/simple/requests/",
        "https://pypi.org/simple/?format=json",
        "https://r.example/v2/items",
        "https://r.example/search?q=abc",
        "https://both.example/re/x/y",
        "https://both.example/glob/x",
    ] {
        assert!(decide(&compiled, "GET", url).is_allow(), "{url}");
    }
    for url in [
        "https://pypi.org/simplex",
        "https://pypi.org/other/simple",
        "https://r.example/v2/items/extra",
        "https://r.example/x/v2/items",
        "https://r.example/v2/items?x=1",
        "https://r.example/search?q=abc&x=1",
        "https://r.example/search",
        "https://both.example/glob/x/y",
    ] {
        assert_eq!(
            decide(&compiled, "GET", url),
            denied(Reason::PathNotAllowed),
            "{url}"
        );
    }
}

#[test]
fn invalid_globs_and_regexes_are_compile_errors() {
    let bad_glob = network(
        vec![paths(rule("network.allow[0]", host("a.com")), &["/a/[b"])],
        Vec::new(),
    );
    assert!(matches!(
        CompiledPolicy::compile(&bad_glob),
        Err(CompileError::Glob { .. })
    ));
    let bad_regex = network(
        Vec::new(),
        vec![regexes(
            rule("network.deny[0]", host("a.com")),
            &["(unclosed"],
        )],
    );
    assert!(matches!(
        CompiledPolicy::compile(&bad_regex),
        Err(CompileError::Regex { .. })
    ));
    let huge_regex = network(
        vec![regexes(
            rule("network.allow[0]", host("a.com")),
            &["(?:a{1000}){1000}"],
        )],
        Vec::new(),
    );
    assert!(matches!(
        CompiledPolicy::compile(&huge_regex),
        Err(CompileError::Regex { .. })
    ));
}

#[test]
fn glob_edge_cases() {
    let compiled = policy(
        vec![
            paths(rule("network.allow[0]", host("ext.example")), &["*.txt"]),
            paths(rule("network.allow[1]", host("all.example")), &["/**"]),
            paths(rule("network.allow[2]", host("dir.example")), &["/a/**"]),
            paths(
                rule("network.allow[3]", host("base.example")),
                &["**/secret.txt"],
            ),
            rule("network.allow[4]", host("star.example")),
        ],
        Vec::new(),
    );
    let verdict = |method: &str, url: &str| decide(&compiled, method, url).is_allow();
    assert!(
        !verdict("GET", "https://ext.example/a/b.txt"),
        "`*` must not cross `/`"
    );
    assert!(!verdict("GET", "https://ext.example/b.txt"));
    assert!(verdict("GET", "https://all.example/"));
    assert!(verdict("GET", "https://all.example/a/b/c"));
    assert!(verdict("GET", "https://dir.example/a/x/y"));
    assert!(verdict("GET", "https://dir.example/a/"));
    assert!(!verdict("GET", "https://dir.example/ab"));
    assert!(!verdict("GET", "https://dir.example/b/a/x"));
    assert!(verdict("GET", "https://base.example/x/y/secret.txt"));
    assert!(!verdict("GET", "https://base.example/x/y/secret.txt.bak"));
    // The asterisk form of OPTIONS only passes rules that do not constrain paths.
    let options = |h: &str| {
        compiled.decide(&CanonicalRequest::new(
            "OPTIONS",
            Host::Name(h.into()),
            443,
            "*",
        ))
    };
    assert!(options("star.example").is_allow());
    assert_eq!(options("dir.example"), denied(Reason::PathNotAllowed));
    assert_eq!(options("all.example"), denied(Reason::PathNotAllowed));
}
