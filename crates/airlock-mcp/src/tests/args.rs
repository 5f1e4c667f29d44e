//! Argument guards (`tools.args`) on `tools/call`.

use super::*;

/// The `mcp` rule of a policy whose `tools` are `tools` (YAML flow).
fn guarded(tools: &str) -> McpRule {
    let text = format!(
        "version: 1\nmcp:\n  - host: mcp.example.com\n    path: /mcp\n    tools: {tools}\n"
    );
    let policy = airlock_policy::load::load_str("p.yaml", &text).unwrap();
    policy.mcp[0].clone()
}

fn workspace() -> McpRule {
    guarded(r#"{deny: [run_command], args: {read_file: {path: ["/workspace/**"]}}}"#)
}

fn call_with(id: &str, name: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
    )
}

/// The refused argument, `None` when the single call is forwarded.
fn refused(rule: &McpRule, body: &str) -> Option<String> {
    let got = inspect_request(body.as_bytes(), rule).unwrap();
    match got.action {
        Action::Forward => {
            assert!(got.calls.iter().all(|c| c.allowed));
            None
        }
        Action::Answer(Some(answer)) => {
            let value: serde_json::Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(value["error"]["data"]["reason"], "mcp_argument_denied");
            let argument = got.calls[0].argument.clone().unwrap();
            assert_eq!(value["error"]["data"]["argument"], argument.as_str());
            Some(argument)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_matching_value_passes_and_others_are_refused() {
    let r = workspace();
    let ok = call_with("1", "read_file", r#"{"path":"/workspace/src/main.rs"}"#);
    assert_eq!(refused(&r, &ok), None);
    for arguments in [
        r#"{"path":"/home/u/.ssh/id_ed25519"}"#,
        r#"{"path":"/workspace/../home/u/.ssh/id_rsa"}"#,
        r#"{"path":"/workspace/a/%2e%2e/%2e%2e/etc/passwd"}"#,
        r#"{"path":"~/.ssh/id_ed25519"}"#,
        r#"{"path":7}"#,
        r#"{"path":["/workspace/a"]}"#,
        r#"{"path":null}"#,
        r#"{"other":"/workspace/a"}"#,
        r#"{}"#,
        r#"[]"#,
        r#""/workspace/a""#,
        r#"null"#,
    ] {
        let body = call_with("1", "read_file", arguments);
        assert_eq!(refused(&r, &body).as_deref(), Some("path"), "{arguments}");
    }
    let no_arguments =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file"}}"#;
    assert_eq!(refused(&r, no_arguments).as_deref(), Some("path"));
    // Other tools are not guarded.
    let other = call_with("1", "list_dir", r#"{"path":"/etc"}"#);
    assert_eq!(refused(&r, &other), None);
}

#[test]
fn the_error_has_the_contract_shape() {
    let body = call_with("\"x\"", "read_file", r#"{"path":"/etc/passwd"}"#);
    let Action::Answer(Some(answer)) = inspect_request(body.as_bytes(), &workspace())
        .unwrap()
        .action
    else {
        panic!()
    };
    assert_eq!(
        answer,
        r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"tool call denied by policy: read_file argument path","data":{"reason":"mcp_argument_denied","tool":"read_file","argument":"path"}}}"#
    );
}

#[test]
fn escapes_case_and_duplicates() {
    let r = workspace();
    // Escaped keys and values are decoded before deciding.
    let escaped = call_with(
        "1",
        "read_file",
        r#"{"pa\u0074h":"\u002fworkspace\u002f..\u002fx"}"#,
    );
    assert_eq!(refused(&r, &escaped).as_deref(), Some("path"));
    let escaped_ok = call_with(
        "1",
        "read_\u{0066}ile",
        r#"{"pa\u0074h":"\u002fworkspace/a"}"#,
    );
    assert_eq!(refused(&r, &escaped_ok), None);
    // A case variant of the tool is guarded too (the tool itself is allowed).
    let upper = call_with("1", "READ_FILE", r#"{"path":"/etc/passwd"}"#);
    assert_eq!(refused(&r, &upper).as_deref(), Some("path"));
    // A key that folds like the guarded one (Go servers would read it) is refused.
    for arguments in [
        r#"{"path":"/workspace/a","PATH":"/etc/passwd"}"#,
        r#"{"Path":"/etc/passwd","path":"/workspace/a"}"#,
    ] {
        let body = call_with("1", "read_file", arguments);
        assert_eq!(refused(&r, &body).as_deref(), Some("path"), "{arguments}");
    }
    let two_arguments = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/workspace/a"},"Arguments":{"path":"/etc/passwd"}}}"#;
    assert_eq!(refused(&r, two_arguments).as_deref(), Some("path"));
    // Exact duplicates are uninspectable, in `arguments` and on a nested path.
    let duplicate = call_with(
        "1",
        "read_file",
        r#"{"path":"/workspace/a","path":"/etc/passwd"}"#,
    );
    assert!(matches!(
        inspect_request(duplicate.as_bytes(), &r),
        Err(Uninspectable::DuplicateKey(_))
    ));
}

#[test]
fn nested_paths_regexes_and_several_guards() {
    let r = guarded(
        r#"{args: {fetch: {url: [{regex: "https://docs\\.example\\.com/.*"}], options.dir: ["/tmp/*"]}}}"#,
    );
    let ok = call_with(
        "1",
        "fetch",
        r#"{"url":"https://docs.example.com/a","options":{"dir":"/tmp/x","n":1}}"#,
    );
    assert_eq!(refused(&r, &ok), None);
    let bad_url = call_with(
        "1",
        "fetch",
        r#"{"url":"https://evil.example/?https://docs.example.com/","options":{"dir":"/tmp/x"}}"#,
    );
    assert_eq!(refused(&r, &bad_url).as_deref(), Some("url"));
    for options in [
        r#"{"dir":"/tmp/x/y"}"#,
        r#""/tmp/x""#,
        r#"{"Dir":"/etc","dir":"/tmp/x"}"#,
        r#"{}"#,
    ] {
        let body = call_with(
            "1",
            "fetch",
            &format!(r#"{{"url":"https://docs.example.com/","options":{options}}}"#),
        );
        assert_eq!(
            refused(&r, &body).as_deref(),
            Some("options.dir"),
            "{options}"
        );
    }
    // A top-level key with a dot is not the nested path.
    let dotted = call_with(
        "1",
        "fetch",
        r#"{"url":"https://docs.example.com/","options.dir":"/tmp/x"}"#,
    );
    assert_eq!(refused(&r, &dotted).as_deref(), Some("options.dir"));
}

#[test]
fn a_denied_tool_stays_a_tool_denial_and_batches_are_split() {
    let r = workspace();
    let body = format!(
        "[{},{},{}]",
        call_with("1", "read_file", r#"{"path":"/workspace/a"}"#),
        call_with("2", "read_file", r#"{"path":"/workspace/../etc/shadow"}"#),
        call_with("3", "run_command", r#"{"path":"/workspace/a"}"#),
    );
    let got = inspect_request(body.as_bytes(), &r).unwrap();
    let arguments: Vec<Option<&str>> = got.calls.iter().map(|c| c.argument.as_deref()).collect();
    assert_eq!(arguments, [None, Some("path"), None]);
    let allowed: Vec<bool> = got.calls.iter().map(|c| c.allowed).collect();
    assert_eq!(allowed, [true, false, false]);
    let Action::ForwardPart { body, plan } = got.action else {
        panic!()
    };
    assert!(
        !body.contains("shadow") && !body.contains("run_command"),
        "{body}"
    );
    let upstream = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let merged: serde_json::Value = serde_json::from_str(&merge(&plan, upstream).unwrap()).unwrap();
    assert_eq!(merged[0]["id"], 1);
    assert_eq!(merged[1]["error"]["data"]["reason"], "mcp_argument_denied");
    assert_eq!(merged[2]["error"]["data"]["reason"], "mcp_tool_denied");
}

proptest! {
    /// A path with a `..` segment is never forwarded, however it is placed.
    #[test]
    fn traversal_is_never_forwarded(
        inside in proptest::collection::vec("[a-z.]{1,5}", 0..3),
        up in 1usize..4,
        rest in "[a-z/]{0,12}",
    ) {
        let path = format!("/workspace/{}{}{rest}", inside.iter().map(|s| format!("{s}/")).collect::<String>(), "../".repeat(up));
        let body = call_with("1", "read_file", &serde_json::json!({"path": path}).to_string());
        let argument = refused(&workspace(), &body);
        prop_assert_eq!(argument.as_deref(), Some("path"));
    }

    /// Any argument value, of any JSON type, is decided without panicking.
    #[test]
    fn any_arguments_never_panic(value in any::<String>(), number in any::<i64>()) {
        let r = workspace();
        for arguments in [
            serde_json::json!({"path": value}).to_string(),
            serde_json::json!({"path": number, "x": value}).to_string(),
            serde_json::Value::Object([(value.clone(), "/workspace/a".into())].into_iter().collect()).to_string(),
        ] {
            let _ = inspect_request(call_with("1", "read_file", &arguments).as_bytes(), &r);
        }
    }
}
