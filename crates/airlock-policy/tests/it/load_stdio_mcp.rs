//! `mcp: - stdio: NAME` rules (stdio servers run by `airlock mcp`): loaded with the same
//! `tools` as HTTP rules, and every mistake reported at its `file:line:col`.

use airlock_policy::load::{LoadError, load_str};
use airlock_policy::model::Policy;

fn load(text: &str) -> Policy {
    load_str("p.yaml", text).unwrap_or_else(|e| panic!("{e}"))
}

/// The one error of `text`, as `file:line:col: message`.
fn one_error(text: &str) -> String {
    match load_str("p.yaml", text) {
        Ok(policy) => panic!("expected an error, loaded {policy:?}"),
        Err(LoadError { errors }) => {
            assert_eq!(errors.len(), 1, "{errors:#?}");
            let e = &errors[0];
            format!("{}:{}:{}: {}", e.file, e.line, e.column, e.message)
        }
    }
}

#[test]
fn stdio_rules_load_beside_http_rules() {
    let policy = load(
        "version: 1\nmcp:\n  - host: m.com\n    path: /mcp\n    tools: {deny: [rm]}\n  - stdio: fs\n    tools:\n      allow: [read_file, write_file]\n      args: {read_file: {path: [\"/workspace/**\"]}}\n",
    );
    assert_eq!(policy.mcp.len(), 1);
    let rule = policy.stdio_rule("fs").expect("stdio rule");
    assert_eq!(rule.id, "mcp[1]");
    assert_eq!(rule.allow, ["read_file", "write_file"]);
    assert!(rule.deny.is_empty());
    assert_eq!(rule.args.len(), 1);
    assert!(rule.args[0].allows("/workspace/a"));
    assert!(!rule.args[0].allows("/etc/passwd"));
    assert!(policy.stdio_rule("FS").is_none(), "names compare exactly");
}

#[test]
fn a_stdio_rule_needs_tools() {
    let error = one_error("version: 1\nmcp:\n  - stdio: fs\n");
    assert!(
        error.starts_with("p.yaml:3:5: mcp[0]: `tools` is missing"),
        "{error}"
    );
}

#[test]
fn a_stdio_name_must_be_a_plain_name() {
    for (name, column) in [("\"\"", 12), ("\"a b\"", 12), ("/usr/bin/npx", 12)] {
        let error = one_error(&format!(
            "version: 1\nmcp:\n  - stdio: {name}\n    tools: {{}}\n"
        ));
        assert!(
            error.starts_with(&format!("p.yaml:3:{column}: mcp[0].stdio")),
            "{error}"
        );
    }
    let error = one_error("version: 1\nmcp:\n  - stdio: [fs]\n    tools: {}\n");
    assert!(
        error.contains("mcp[0].stdio") && error.contains("string"),
        "{error}"
    );
}

#[test]
fn a_stdio_rule_has_no_host_or_path() {
    let error = one_error("version: 1\nmcp:\n  - stdio: fs\n    host: m.com\n    tools: {}\n");
    assert!(
        error.starts_with("p.yaml:4:5: mcp[0]: `host` cannot stand beside `stdio`"),
        "{error}"
    );
}

#[test]
fn a_stdio_server_has_one_rule() {
    let error = one_error(
        "version: 1\nmcp:\n  - stdio: fs\n    tools: {}\n  - stdio: fs\n    tools: {deny: [x]}\n",
    );
    assert!(
        error.starts_with(
            "p.yaml:5:12: mcp[1].stdio: the stdio server `fs` already has a rule (mcp[0])"
        ),
        "{error}"
    );
}

#[test]
fn a_missing_host_mentions_stdio() {
    let error = one_error("version: 1\nmcp:\n  - path: /mcp\n    tools: {}\n");
    assert!(
        error.contains("`host` is missing") && error.contains("stdio: NAME"),
        "{error}"
    );
}

#[test]
fn combined_sources_cannot_both_rule_one_server() {
    let a = load("version: 1\nmcp:\n  - stdio: fs\n    tools: {}\n");
    let b = load("version: 1\nmcp:\n  - stdio: fs\n    tools: {deny: [x]}\n");
    let error = Policy::combine(vec![
        (Some("a.yaml".into()), a.clone()),
        (Some("b.yaml".into()), b),
    ])
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("stdio server fs is defined again in b.yaml"),
        "{error}"
    );
    let c = load("version: 1\nmcp:\n  - stdio: git\n    tools: {}\n");
    let combined =
        Policy::combine(vec![(Some("a.yaml".into()), a), (Some("c.yaml".into()), c)]).unwrap();
    assert_eq!(
        combined.stdio_rule("git").map(|r| r.id.as_str()),
        Some("c.yaml:mcp[0]")
    );
}
