//! Path canonicalisation: one percent-decode, merged slashes, dot-segment removal, and
//! refusal of whatever still hides a traversal; plus property tests for its invariants.

use airlock_policy::CanonicalRequest;
use airlock_policy::canonical::{Host, PathUnsafe, canonical_path};
use proptest::prelude::*;

fn path(input: &str) -> Result<String, PathUnsafe> {
    canonical_path(input).0
}

#[test]
fn query_and_fragment() {
    assert_eq!(
        canonical_path("/a?b=1&c"),
        (Ok("/a".into()), Some("b=1&c".into()))
    );
    assert_eq!(
        canonical_path("/a?"),
        (Ok("/a".into()), Some(String::new()))
    );
    assert_eq!(canonical_path("/a"), (Ok("/a".into()), None));
    assert_eq!(canonical_path("/a#frag?x"), (Ok("/a".into()), None));
    assert_eq!(
        canonical_path("/a?x=%2e%2e#f"),
        (Ok("/a".into()), Some("x=%2e%2e".into()))
    );
    assert_eq!(canonical_path("?q"), (Ok("/".into()), Some("q".into())));
    // The query is kept raw: an encoded slash or `..` there is the server's business.
    assert_eq!(
        canonical_path("/a?u=%2F..%5C"),
        (Ok("/a".into()), Some("u=%2F..%5C".into()))
    );
}

#[test]
fn empty_asterisk_and_relative() {
    assert_eq!(path(""), Ok("/".into()));
    assert_eq!(path("/"), Ok("/".into()));
    assert_eq!(path("*"), Ok("*".into()));
    assert_eq!(path("a/b"), Err(PathUnsafe::NotAbsolute));
    assert_eq!(path("http://evil/x"), Err(PathUnsafe::NotAbsolute));
    assert_eq!(path("**"), Err(PathUnsafe::NotAbsolute));
}

#[test]
fn one_decode_then_dot_segments() {
    assert_eq!(path("/repos/acme/app"), Ok("/repos/acme/app".into()));
    assert_eq!(path("/a/b/../c"), Ok("/a/c".into()));
    assert_eq!(path("/a/./b/."), Ok("/a/b/".into()));
    assert_eq!(path("/a/b/.."), Ok("/a/".into()));
    assert_eq!(path("/../../etc/passwd"), Ok("/etc/passwd".into()));
    assert_eq!(path("/public/%2e%2e/admin"), Ok("/admin".into()));
    assert_eq!(path("/public/.%2E/admin"), Ok("/admin".into()));
    assert_eq!(path("/%70ublic/%7Euser"), Ok("/public/~user".into()));
    assert_eq!(path("/a%20b/c"), Ok("/a b/c".into()));
    assert_eq!(path("/caf%C3%A9"), Ok("/café".into()));
    assert_eq!(path("/a/"), Ok("/a/".into()));
    assert_eq!(path("/.../x"), Ok("/.../x".into()));
    assert_eq!(path("/..a/x"), Ok("/..a/x".into()));
}

#[test]
fn slashes_are_merged() {
    assert_eq!(path("//admin/x"), Ok("/admin/x".into()));
    assert_eq!(path("/admin//x///"), Ok("/admin/x/".into()));
    assert_eq!(path("/./admin/x"), Ok("/admin/x".into()));
    // `..` after an empty segment: servers disagree on it.
    assert_eq!(path("/a//../b"), Err(PathUnsafe::DotDot));
    assert_eq!(path("//../admin"), Err(PathUnsafe::DotDot));
}

#[test]
fn hidden_traversal_and_delimiters_are_refused() {
    let cases = [
        ("/a/%252e%252e/admin", PathUnsafe::DotDot),
        ("/a/%252E%252e", PathUnsafe::DotDot),
        ("/a/.%252e/b", PathUnsafe::DotDot),
        ("/a/%252e/b", PathUnsafe::DotDot),
        ("/public/..;/admin", PathUnsafe::DotDot),
        ("/public/..;jsessionid=1/admin", PathUnsafe::DotDot),
        ("/public/%2e%2e;/admin", PathUnsafe::DotDot),
        ("/public/%252e%252e%253b/admin", PathUnsafe::DotDot),
        ("/a\\b", PathUnsafe::Backslash),
        ("/a%5cb", PathUnsafe::Backslash),
        ("/a%5Cb", PathUnsafe::Backslash),
        ("/a/..%5c..%5cwindows", PathUnsafe::Backslash),
        ("/a%255cb", PathUnsafe::Backslash),
        ("/a%00b", PathUnsafe::Nul),
        ("/a%2500b", PathUnsafe::Nul),
        ("/a\0b", PathUnsafe::Nul),
        ("/a%2fb", PathUnsafe::EncodedSlash),
        ("/a%2Fb", PathUnsafe::EncodedSlash),
        ("/public/..%2fadmin", PathUnsafe::EncodedSlash),
        ("/a%252fb", PathUnsafe::EncodedSlash),
        ("/%c0%ae%c0%ae/admin", PathUnsafe::InvalidUtf8),
        ("/a%ff", PathUnsafe::InvalidUtf8),
    ];
    for (input, expected) in cases {
        assert_eq!(path(input), Err(expected), "{input}");
    }
}

#[test]
fn percent_question_and_hash_are_re_encoded() {
    assert_eq!(path("/a%3Fb"), Ok("/a%3Fb".into()));
    assert_eq!(path("/a%3fb"), Ok("/a%3Fb".into()));
    assert_eq!(path("/a%23b"), Ok("/a%23b".into()));
    assert_eq!(path("/100%25"), Ok("/100%25".into()));
    assert_eq!(path("/a%2541"), Ok("/a%2541".into()));
    assert_eq!(path("/a%zz"), Ok("/a%25zz".into()));
    assert_eq!(path("/a%"), Ok("/a%25".into()));
}

#[test]
fn request_method_is_upper_cased() {
    let host = Host::Name("example.com".into());
    let req = CanonicalRequest::new("get", host.clone(), 443, "/a/../b?x=1");
    assert_eq!(req.method, "GET");
    assert_eq!(req.path, Ok("/b".into()));
    assert_eq!(req.query.as_deref(), Some("x=1"));
    assert_eq!(req.host, host);
    assert_eq!(req.port, 443);
}

/// Path-like strings built from the characters that matter, plus arbitrary text.
fn path_strategy() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%2e".to_owned()),
        Just("%2E".to_owned()),
        Just("%25".to_owned()),
        Just("%252e".to_owned()),
        Just("%2f".to_owned()),
        Just("%5c".to_owned()),
        Just("%00".to_owned()),
        Just("%3f".to_owned()),
        Just("%23".to_owned()),
        Just("%".to_owned()),
        Just(";".to_owned()),
        Just("?".to_owned()),
        Just("#".to_owned()),
        Just("\\".to_owned()),
        "[a-z]{1,3}",
        "\\PC{1,2}",
    ];
    prop::collection::vec(piece, 0..16).prop_map(|pieces| format!("/{}", pieces.concat()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn canonical_paths_are_fixed_points(input in path_strategy()) {
        if let (Ok(once), _) = canonical_path(&input) {
            let (again, query) = canonical_path(&once);
            prop_assert_eq!(again, Ok(once.clone()));
            prop_assert_eq!(query, None);
        }
    }

    #[test]
    fn canonical_paths_never_hold_dot_segments_backslash_or_nul(input in path_strategy()) {
        if let (Ok(out), _) = canonical_path(&input) {
            prop_assert!(out.starts_with('/'));
            prop_assert!(!out.contains('\\') && !out.contains('\0'));
            prop_assert!(!out.contains("//"));
            for segment in out.split('/') {
                prop_assert!(segment != "." && segment != "..", "{out}");
            }
            let lower = out.to_ascii_lowercase();
            prop_assert!(!lower.contains("%2f") && !lower.contains("%5c") && !lower.contains("%00"));
        }
    }

    #[test]
    fn arbitrary_text_never_panics(input in "\\PC{0,64}") {
        let _ = canonical_path(&input);
        if let (Ok(once), _) = canonical_path(&input) {
            prop_assert_eq!(canonical_path(&once).0, Ok(once.clone()));
        }
    }
}
