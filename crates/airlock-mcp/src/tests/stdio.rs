//! The stdio transport: framing with a bound, client and server line decisions.

use airlock_policy::model::StdioMcpRule;

use crate::stdio::{ClientDecision, Frame, Framer, ServerDecision, client_line, server_line};
use crate::{Call, Uninspectable};

/// The stdio rule of a policy whose `tools` are `tools` (YAML flow).
fn stdio_rule(tools: &str) -> StdioMcpRule {
    let text = format!("version: 1\nmcp:\n  - stdio: fs\n    tools: {tools}\n");
    let policy = airlock_policy::load::load_str("p.yaml", &text).unwrap();
    policy.stdio_rule("fs").unwrap().clone()
}

fn fs_rule() -> StdioMcpRule {
    stdio_rule(r#"{deny: [exec], args: {read_file: {path: ["/workspace/**"]}}}"#)
}

fn call(id: u32, name: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{arguments}}}}}"#
    )
}

fn line(frame: &str) -> Frame {
    Frame::Line(frame.as_bytes().to_vec())
}

#[test]
fn framer_splits_lines_across_pushes() {
    let mut framer = Framer::new(16);
    assert_eq!(framer.push(b"ab"), vec![]);
    assert_eq!(
        framer.push(b"c\nde\n\nf"),
        vec![line("abc"), line("de"), line("")]
    );
    assert_eq!(framer.finish(), Some(line("f")));
    assert_eq!(framer.finish(), None);
}

#[test]
fn framer_refuses_an_overlong_line_once_and_holds_at_most_the_bound() {
    let mut framer = Framer::new(8);
    assert_eq!(framer.push(b"12345678\n"), vec![line("12345678")]);
    assert_eq!(framer.push(b"123456789"), vec![Frame::TooLong]);
    for _ in 0..1000 {
        assert_eq!(framer.push(&[b'x'; 4096]), vec![]);
        assert!(framer.held() <= 8);
    }
    assert_eq!(framer.push(b"tail\nok\n"), vec![line("ok")]);
    assert_eq!(framer.push(b"123456789012"), vec![Frame::TooLong]);
    assert_eq!(
        framer.finish(),
        None,
        "an overlong unfinished line gives nothing more"
    );
}

#[test]
fn allowed_calls_and_other_messages_are_forwarded_as_sent() {
    let rule = fs_rule();
    for text in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":"s1","result":{}}"#.to_owned(),
        call(1, "read_file", r#"{"path":"/workspace/a.txt"}"#),
        call(2, "write_file", r#"{"path":"/etc/passwd","content":"x"}"#),
    ] {
        let decision = client_line(text.as_bytes(), &rule);
        assert_eq!(decision.forward.as_deref(), Some(text.as_str()), "{text}");
        assert_eq!(decision.answer, None);
        assert_eq!(decision.refused, None);
    }
}

#[test]
fn a_denied_call_is_answered_with_the_http_paths_error_and_not_forwarded() {
    let decision = client_line(call(7, "exec", r#"{"cmd":"id"}"#).as_bytes(), &fs_rule());
    assert_eq!(decision.forward, None);
    assert_eq!(
        decision.answer.as_deref(),
        Some(crate::denial(serde_json::from_str("7").ok(), "exec").as_str())
    );
    assert_eq!(
        decision.calls,
        vec![Call {
            tool: "exec".into(),
            allowed: false,
            argument: None
        }]
    );
}

#[test]
fn an_argument_guard_refuses_and_names_the_argument() {
    let text = call(8, "read_file", r#"{"path":"/etc/shadow"}"#);
    let decision = client_line(text.as_bytes(), &fs_rule());
    assert_eq!(decision.forward, None);
    let answer = decision.answer.unwrap();
    assert!(answer.contains(r#""id":8"#), "{answer}");
    assert!(answer.contains("mcp_argument_denied"), "{answer}");
    assert!(!answer.contains("/etc/shadow"), "{answer}");
    assert_eq!(decision.calls[0].argument.as_deref(), Some("path"));
}

#[test]
fn a_partly_denied_batch_forwards_the_rest_and_answers_the_denied_at_once() {
    let text = format!(
        "[{},{}]",
        call(1, "read_file", r#"{"path":"/workspace/x"}"#),
        call(2, "exec", "{}")
    );
    let decision = client_line(text.as_bytes(), &fs_rule());
    let forwarded = decision.forward.unwrap();
    assert!(forwarded.starts_with('[') && forwarded.contains("read_file"));
    assert!(!forwarded.contains("exec"));
    let answer = decision.answer.unwrap();
    assert!(
        answer.starts_with("[{") && answer.contains(r#""id":2"#),
        "{answer}"
    );
}

#[test]
fn invalid_lines_are_never_forwarded_and_answered_only_when_they_carry_an_id() {
    let rule = fs_rule();
    let cases: [(&str, Option<&str>); 6] = [
        ("not json", None),
        (
            r#"{"jsonrpc":"2.0","method":"tools/call","id":3,"Method":"x"}"#,
            Some("3"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}"#,
            Some("4"),
        ),
        (r#"{"id":5,"id":6,"method":"tools/call"}"#, None),
        ("[]", None),
        ("42", None),
    ];
    for (text, id) in cases {
        let ClientDecision {
            forward,
            answer,
            refused,
            ..
        } = client_line(text.as_bytes(), &rule);
        assert_eq!(forward, None, "{text}");
        assert!(refused.is_some(), "{text}");
        match id {
            None => assert_eq!(answer, None, "{text}"),
            Some(id) => {
                let answer = answer.unwrap();
                assert!(
                    answer.contains(&format!(r#""id":{id},"error""#)),
                    "{answer}"
                );
                assert!(answer.contains("-32600"), "{answer}");
            }
        }
    }
    let bad = client_line(&[0xff, b'{', b'}'], &rule);
    assert_eq!(bad.forward, None);
    assert_eq!(bad.refused, Some(Uninspectable::NotUtf8));
}

#[test]
fn a_refused_batch_gets_one_error_per_id() {
    let text = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"METHOD":"x","method":"tools/call"}]"#;
    let decision = client_line(text.as_bytes(), &fs_rule());
    assert_eq!(decision.forward, None);
    let answer = decision.answer.unwrap();
    assert!(answer.starts_with('['), "{answer}");
    assert!(answer.contains(r#""id":1,"#) && answer.contains(r#""id":2,"#));
}

#[test]
fn blank_lines_are_dropped_quietly() {
    let decision = client_line(b"  \r", &fs_rule());
    assert_eq!(decision.forward, None);
    assert_eq!(decision.answer, None);
    assert_eq!(decision.refused, None);
    assert_eq!(server_line(b"", &fs_rule()), ServerDecision::Skip);
}

#[test]
fn the_servers_tools_list_is_filtered_and_other_lines_relayed() {
    let rule = fs_rule();
    let list = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"read_file"},{"name":"exec"},{"name":"EXEC"}]}}"#;
    let ServerDecision::Relay(filtered) = server_line(list.as_bytes(), &rule) else {
        panic!("not relayed");
    };
    assert!(filtered.contains("read_file") && !filtered.to_lowercase().contains("exec"));
    let other = r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#;
    assert_eq!(
        server_line(other.as_bytes(), &rule),
        ServerDecision::Relay(other.to_owned())
    );
}

#[test]
fn a_refused_server_line_answers_only_its_responses_to_the_client() {
    let rule = fs_rule();
    // A server request (it has a method) is not answered to the client; a response is.
    let request =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"roots/list\",\"params\":{\"s\":\"\u{2028}\"}}";
    assert!(matches!(
        server_line(request.as_bytes(), &rule),
        ServerDecision::Refuse(Uninspectable::LineBreak(0x2028))
    ));
    // A response hidden after a `\r` gets its error too.
    let hidden = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"x\":\r\
                  {\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"tools\":[{\"name\":\"exec\"}]}}\r}}";
    let ServerDecision::Answer { answer, .. } = server_line(hidden.as_bytes(), &rule) else {
        panic!("not answered");
    };
    assert!(answer.contains(r#""id":4,"error""#), "{answer}");
    assert!(!answer.contains("exec"), "{answer}");
}

#[test]
fn a_server_line_that_is_not_json_is_dropped() {
    let rule = fs_rule();
    assert!(matches!(
        server_line(b"Server started on stdio", &rule),
        ServerDecision::Refuse(_)
    ));
    assert!(matches!(
        server_line(br#"{"id":1,"id":2}"#, &rule),
        ServerDecision::Refuse(Uninspectable::DuplicateKey(_))
    ));
}

/// A line a peer splitting at `brk` reads as a notification, then a denied call with id 9.
fn smuggled(brk: char) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"x":{brk}{}{brk}}}}}"#,
        call(9, "exec", r#"{"cmd":"id"}"#)
    )
}

#[test]
fn a_line_with_a_raw_line_break_is_refused_and_its_hidden_requests_answered() {
    let rule = fs_rule();
    for brk in crate::stdio::LINE_BREAKS {
        let text = smuggled(brk);
        let decision = client_line(text.as_bytes(), &rule);
        assert_eq!(decision.forward, None, "{text:?}");
        assert_eq!(
            decision.refused,
            Some(Uninspectable::LineBreak(u32::from(brk))),
            "{text:?}"
        );
        assert!(decision.calls.is_empty(), "{text:?}");
        let answer = decision.answer.expect("the hidden call is answered");
        assert!(answer.contains(r#""id":9,"error""#), "{answer}");
        assert!(answer.contains("-32600"), "{answer}");
        assert!(matches!(
            server_line(text.as_bytes(), &rule),
            ServerDecision::Refuse(Uninspectable::LineBreak(_))
        ));
    }
}

#[test]
fn u2028_and_u2029_are_refused_even_inside_a_json_string() {
    let rule = fs_rule();
    for brk in ['\u{2028}', '\u{2029}', '\u{85}'] {
        let text =
            format!(r#"{{"jsonrpc":"2.0","id":5,"method":"ping","params":{{"s":"a{brk}b"}}}}"#);
        assert!(
            serde_json::from_str::<serde_json::Value>(&text).is_ok(),
            "valid JSON"
        );
        let decision = client_line(text.as_bytes(), &rule);
        assert_eq!(decision.forward, None, "{text:?}");
        let answer = decision.answer.expect("answered");
        assert!(answer.contains(r#""id":5,"error""#), "{answer}");
        // From the server: dropped, and the client gets an error in place of the result.
        let result = format!(r#"{{"jsonrpc":"2.0","id":5,"result":{{"s":"a{brk}b"}}}}"#);
        let ServerDecision::Answer { problem, answer } = server_line(result.as_bytes(), &rule)
        else {
            panic!("not refused with an answer: {result:?}");
        };
        assert_eq!(problem, Uninspectable::LineBreak(u32::from(brk)));
        assert!(answer.contains(r#""id":5,"error""#), "{answer}");
        assert!(answer.contains("response refused by airlock"), "{answer}");
    }
    // Escaped, the same characters are ordinary JSON and pass.
    let escaped = r#"{"jsonrpc":"2.0","id":6,"method":"ping","params":{"s":"a\u2028\r\nb"}}"#;
    let decision = client_line(escaped.as_bytes(), &rule);
    assert_eq!(decision.forward.as_deref(), Some(escaped));
}

#[test]
fn a_crlf_line_end_is_accepted_and_removed_but_no_other_cr() {
    let rule = fs_rule();
    let text = call(1, "read_file", r#"{"path":"/workspace/a"}"#);
    let decision = client_line(format!("{text}\r").as_bytes(), &rule);
    assert_eq!(decision.forward.as_deref(), Some(text.as_str()));
    let result = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    assert_eq!(
        server_line(format!("{result}\r").as_bytes(), &rule),
        ServerDecision::Relay(result.to_owned())
    );
    for bad in [
        format!("{text}\r\r"),
        format!("{text}\r "),
        format!("\r{text}"),
    ] {
        let decision = client_line(bad.as_bytes(), &rule);
        assert_eq!(decision.forward, None, "{bad:?}");
        assert_eq!(
            decision.refused,
            Some(Uninspectable::LineBreak(0x0d)),
            "{bad:?}"
        );
        assert!(decision.answer.unwrap().contains(r#""id":1,"#));
        assert!(matches!(
            server_line(bad.replace(&text, result).as_bytes(), &rule),
            ServerDecision::Answer {
                problem: Uninspectable::LineBreak(0x0d),
                ..
            }
        ));
    }
}

proptest::proptest! {
    /// Wherever a line break character is put into an allowed line (except one `\r` at
    /// its very end), the line is neither forwarded nor relayed.
    #[test]
    fn a_raw_line_break_anywhere_is_never_passed_on(
        at in 0usize..200,
        which in 0usize..crate::stdio::LINE_BREAKS.len(),
    ) {
        let rule = fs_rule();
        let brk = crate::stdio::LINE_BREAKS[which];
        let text = call(3, "read_file", r#"{"path":"/workspace/été"}"#);
        let at = at % text.len();
        proptest::prop_assume!(text.is_char_boundary(at));
        let mut line = text.clone();
        line.insert(at, brk);
        proptest::prop_assert_eq!(client_line(line.as_bytes(), &rule).forward, None);
        proptest::prop_assert!(!matches!(
            server_line(line.as_bytes(), &rule),
            ServerDecision::Relay(_)
        ));
    }
}
