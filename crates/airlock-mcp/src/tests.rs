use super::*;
use airlock_policy::model::McpRule;
use proptest::prelude::*;

fn rule(allow: &[&str], deny: &[&str]) -> McpRule {
    McpRule {
        id: "mcp[0]".into(),
        host: airlock_policy::model::HostPattern::Exact("mcp.example.com".into()),
        path: "/mcp".into(),
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
        args: Vec::new(),
    }
}

fn call(id: &str, name: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{}}}}}}"#
    )
}

#[test]
fn deny_first_then_allow_exact_and_deny_case_insensitive() {
    let r = rule(&["read_file", "run_command"], &["run_command"]);
    assert!(tool_allowed(&r, "read_file"));
    assert!(!tool_allowed(&r, "run_command"));
    assert!(!tool_allowed(&r, "RUN_COMMAND"));
    assert!(!tool_allowed(&r, "Read_File"));
    assert!(!tool_allowed(&r, "other"));
    assert!(tool_allowed(&rule(&[], &["x"]), "anything"));
}

#[test]
fn allowed_call_is_forwarded_as_is() {
    let got = inspect_request(
        call("1", "read_file").as_bytes(),
        &rule(&[], &["run_command"]),
    )
    .unwrap();
    assert_eq!(got.action, Action::Forward);
    assert_eq!(
        got.calls,
        vec![Call {
            tool: "read_file".into(),
            allowed: true,
            argument: None,
        }]
    );
}

#[test]
fn denied_single_call_keeps_its_id_exactly() {
    for id in [
        "1",
        "\"abc\"",
        "null",
        "12345678901234567890123",
        "1.50",
        "-0",
        "\"\\u0061\"",
    ] {
        let got = inspect_request(
            call(id, "run_command").as_bytes(),
            &rule(&[], &["run_command"]),
        )
        .unwrap();
        let Action::Answer(Some(body)) = got.action else {
            panic!("{got:?}")
        };
        assert!(body.contains(&format!("\"id\":{id},")), "{body}");
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(value["error"]["code"], -32602);
        assert_eq!(value["error"]["data"]["reason"], "mcp_tool_denied");
        assert_eq!(value["error"]["data"]["tool"], "run_command");
        assert_eq!(
            value["error"]["message"],
            "tool call denied by policy: run_command"
        );
    }
}

#[test]
fn batch_is_split_and_merged_in_order() {
    let r = rule(&[], &["run_command"]);
    let body = format!(
        "[{},{},{}]",
        call("1", "read_file"),
        call("2", "run_command"),
        call("\"x\"", "read_file")
    );
    let got = inspect_request(body.as_bytes(), &r).unwrap();
    let Action::ForwardPart {
        body: forwarded,
        plan,
    } = got.action
    else {
        panic!()
    };
    assert_eq!(
        forwarded,
        format!(
            "[{},{}]",
            call("1", "read_file"),
            call("\"x\"", "read_file")
        )
    );
    // The upstream answers out of order.
    let upstream =
        br#"[{"jsonrpc":"2.0","id":"x","result":{}},{"jsonrpc":"2.0","id":1,"result":{}}]"#;
    let merged: serde_json::Value = serde_json::from_str(&merge(&plan, upstream).unwrap()).unwrap();
    assert_eq!(merged[0]["id"], 1);
    assert_eq!(merged[1]["id"], 2);
    assert_eq!(merged[1]["error"]["data"]["tool"], "run_command");
    assert_eq!(merged[2]["id"], "x");
}

#[test]
fn fully_denied_batch_and_notifications() {
    let r = rule(&[], &["run_command"]);
    let body = format!(
        "[{},{}]",
        call("1", "run_command"),
        call("2", "run_command")
    );
    let Action::Answer(Some(answer)) = inspect_request(body.as_bytes(), &r).unwrap().action else {
        panic!()
    };
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer.as_array().unwrap().len(), 2);
    let notification = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"run_command"}}"#;
    assert_eq!(
        inspect_request(notification.as_bytes(), &r).unwrap().action,
        Action::Answer(None)
    );
}

#[test]
fn bypass_shapes_are_refused() {
    let r = rule(&[], &["run_command"]);
    let cases: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","name":"run_command"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"run_command"}}"#,
        // Twins under case folding: a case-insensitive server might read the other one.
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","Name":"run_command"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file"},"Params":{"name":"run_command"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":{"name":"run_command"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["run_command"]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_command\"}}",
        "/* c */ {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"run_command\"}}",
        "[]",
        "[1]",
        "{\"a\":1} {\"b\":2}",
        "",
    ];
    for case in cases {
        assert!(inspect_request(case.as_bytes(), &r).is_err(), "{case}");
    }
    let utf16: Vec<u8> = call("1", "run_command")
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    assert!(inspect_request(&utf16, &r).is_err());
    assert_eq!(
        inspect_request(&vec![b' '; BODY_LIMIT + 1], &r),
        Err(Uninspectable::TooLarge)
    );
}

#[test]
fn escaped_tool_names_are_decoded_before_deciding() {
    let r = rule(&[], &["run_command"]);
    let body =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"run\u005fcommand"}}"#;
    let got = inspect_request(body.as_bytes(), &r).unwrap();
    assert!(matches!(got.action, Action::Answer(Some(_))));
}

#[test]
fn tools_list_results_are_filtered() {
    let r = rule(&[], &["run_command"]);
    let body = r#"{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"read_file"},{"name":"run_command"},{"name":3}],"nextCursor":"c"}}"#;
    let out = filter_response(body.as_bytes(), &r).unwrap().unwrap();
    let value: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        value["result"]["tools"],
        serde_json::json!([{"name": "read_file"}])
    );
    assert_eq!(value["result"]["nextCursor"], "c");
    assert_eq!(value["id"], "l");
    let clean = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read_file"}]}}"#;
    assert_eq!(filter_response(clean.as_bytes(), &r).unwrap(), None);
}

#[test]
fn sse_events_are_filtered_and_bad_ones_end_the_stream() {
    let r = rule(&[], &["run_command"]);
    let mut filter = SseFilter::new(r.clone(), Box::new(|p| p == "/messages"), &[]);
    let event = "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"run_command\"},{\"name\":\"read_file\"}]}}\r\n\r\n";
    let (a, b) = event.split_at(40);
    let mut out = filter.push(a.as_bytes()).unwrap();
    out.extend(filter.push(b.as_bytes()).unwrap());
    let out = String::from_utf8(out).unwrap();
    assert!(!out.contains("run_command"), "{out}");
    assert!(out.contains("read_file"));
    assert!(
        filter
            .push(b"event: endpoint\ndata: /messages?s=1\n\n")
            .is_ok()
    );
    assert!(filter.push(b"event: endpoint\ndata: /other\n\n").is_err());
    let mut filter = SseFilter::new(r.clone(), Box::new(|_| true), &[]);
    assert!(filter.push(b"data: not json\n\n").is_err());
    let mut filter = SseFilter::new(r, Box::new(|_| true), &[]);
    assert!(filter.push(b"data: {}\rdata: x\n\n").is_err());
}

mod args;
mod stdio;

proptest! {
    #[test]
    fn any_id_survives_a_denial(id in prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-zA-Z0-9 _\\-]{0,20}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("null".to_owned()),
    ]) {
        let got = inspect_request(call(&id, "run_command").as_bytes(), &rule(&[], &["run_command"])).unwrap();
        let Action::Answer(Some(body)) = got.action else { panic!() };
        let expected = format!("\"id\":{id},");
        prop_assert!(body.contains(&expected));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = inspect_request(&bytes, &rule(&[], &["x"]));
        let _ = filter_response(&bytes, &rule(&[], &["x"]));
    }

    #[test]
    fn a_denied_name_is_never_forwarded(name in "[a-zA-Z_]{1,12}") {
        let r = rule(&[], &[&name]);
        let body = format!("[{},{}]", call("1", &name), call("2", "zzz_other"));
        let got = inspect_request(body.as_bytes(), &r).unwrap();
        match got.action {
            Action::ForwardPart { body, .. } => {
                let quoted = format!("\"{name}\"");
                prop_assert!(!body.contains(&quoted));
            }
            Action::Answer(_) => {}
            Action::Forward => prop_assert!(false),
        }
    }
}
