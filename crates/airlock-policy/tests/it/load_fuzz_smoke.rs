//! A bounded, stable-toolchain cousin of the `load` cargo-fuzz target (`fuzz/`): arbitrary text
//! and YAML-shaped token soup into `load_str`, which must never panic and must refuse with
//! at least one located, one-line error.

use airlock_policy::load::load_str;
use proptest::prelude::*;

/// Pieces of policy syntax, so generated documents get past the YAML parser often.
const TOKENS: &[&str] = &[
    "version: 1\n",
    "network:\n",
    "  allow:\n",
    "  deny:\n",
    "  tls_passthrough: ",
    "    - ",
    "host: ",
    "cidr: ",
    "methods: ",
    "paths: ",
    "path_regex: ",
    "ports: ",
    "secrets:\n",
    "  K:\n",
    "    env: ",
    "file: ",
    "value: ",
    "command: ",
    "hosts: ",
    "headers: ",
    "inject: ",
    "{header: A, format: \"{value}\"}",
    "surrogate: ",
    "body: ",
    "foreign: ",
    "mcp:\n",
    "path: ",
    "tools: ",
    "{allow: [a], deny: []}",
    "routes:\n",
    "prefix: /a/",
    "upstream: https://a.com/",
    "secret: K",
    "a.com",
    "*.a.com",
    "*",
    "[::1]",
    "10.0.0.0/8",
    "10.0.0.1/8",
    "[GET, get, \"G T\"]",
    "[0, 443, 65536]",
    "[/a/**, \"{\"]",
    "['(']",
    "\n",
    "      ",
    "&x ",
    "*x",
    "<<: *x\n",
    "~",
    "true",
    "\"\"",
    "1.5",
    "- ",
    ": ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "#",
    "!!str ",
    "---\n",
    "\t",
    "é",
    "\u{0}",
];

/// Check the invariants of one call.
fn check(text: &str) {
    if let Err(error) = load_str("smoke.yaml", text) {
        assert!(!error.errors.is_empty());
        for located in &error.errors {
            assert!(located.line >= 1 && located.column >= 1, "{located}");
            assert!(!located.message.contains('\n'), "{located}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        check(&text);
    }

    #[test]
    fn token_soup_never_panics(picks in proptest::collection::vec(0..TOKENS.len(), 0..60)) {
        let text: String = picks.iter().map(|&index| TOKENS[index]).collect();
        check(&text);
    }
}

#[test]
fn deep_nesting_and_alias_bombs_are_refused_not_crashed() {
    let deep_flow = format!("version: 1\nnetwork: {}", "[".repeat(100_000));
    let deep_block: String = (0..2_000)
        .map(|depth| format!("{}- \n", " ".repeat(depth * 2)))
        .collect();
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 0..12 {
        let name = format!("l{level}");
        let previous = if level == 0 {
            "a".to_owned()
        } else {
            format!("l{}", level - 1)
        };
        bomb.push_str(&format!(
            "{name}: &{name} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"
        ));
    }
    for (text, needle) in [
        (deep_flow, "syntax error"),
        (deep_block, "too deeply nested"),
        (bomb, "expands too many aliases"),
    ] {
        let error = load_str("hostile.yaml", &text).expect_err("must be refused");
        assert_eq!(error.errors.len(), 1, "{error}");
        assert!(error.errors[0].message.contains(needle), "{error}");
    }
}
