//! `mcp` rules (host, path, tools and argument guards) and `routes`.

use airlock_policy::load::load_str;

use super::one_error;

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
