//! Body guards (`json_deny` on `network.allow`): what the loader accepts, every error with
//! its `line:col`, and which allow rules' guards apply to a request.

use airlock_policy::CompiledPolicy;
use airlock_policy::canonical::{CanonicalRequest, canonical_host};
use airlock_policy::json_deny::Segment;
use airlock_policy::load::{LoadError, load_str};

/// The errors of `text` as `(line, column, message)`.
fn errors(text: &str) -> Vec<(u32, u32, String)> {
    match load_str("p.yaml", text) {
        Ok(policy) => panic!("expected errors, loaded {policy:?}"),
        Err(LoadError { errors }) => errors
            .into_iter()
            .map(|e| (e.line, e.column, e.message))
            .collect(),
    }
}

#[track_caller]
fn one_error(text: &str, line: u32, column: u32, needles: &[&str]) {
    let found = errors(text);
    assert_eq!(found.len(), 1, "expected one error, got {found:#?}");
    let (found_line, found_column, message) = &found[0];
    assert_eq!((*found_line, *found_column), (line, column), "{message}");
    for needle in needles {
        assert!(message.contains(needle), "`{needle}` not in: {message}");
    }
}

/// A policy whose first allow rule on api.openai.com has the guard list `guards`
/// (indented to sit under `json_deny:`; the list starts on line 6).
fn guarded(guards: &str) -> String {
    format!(
        "version: 1\nnetwork:\n  allow:\n    - host: api.openai.com\n      json_deny:\n{guards}"
    )
}

#[test]
fn the_documented_form_loads() {
    let policy = load_str(
        "p.yaml",
        &guarded(
            "        - path: /tools/*/type\n          values: [\"web_search\", \"web_search_preview*\"]\n        - path: /stream\n",
        ),
    )
    .unwrap();
    let guards = &policy.network.allow[0].json_deny;
    assert_eq!(guards.len(), 2);
    assert_eq!(
        guards[0].path.segments,
        vec![
            Segment::Key("tools".into()),
            Segment::Any,
            Segment::Key("type".into())
        ]
    );
    assert_eq!(
        guards[0].values,
        Some(vec!["web_search".into(), "web_search_preview*".into()])
    );
    assert_eq!(guards[1].values, None);
    assert!(!policy.network.allow[0].is_destination_only());
}

#[test]
fn bad_paths_are_located() {
    one_error(
        &guarded("        - path: tools/*/type\n"),
        6,
        17,
        &["network.allow[0].json_deny[0].path", "starts with `/`"],
    );
    one_error(
        &guarded("        - path: /tools//type\n"),
        6,
        17,
        &["empty"],
    );
    one_error(&guarded("        - path: /a~2\n"), 6, 17, &["~0", "~1"]);
    one_error(
        &guarded("        - path: /tool*\n"),
        6,
        17,
        &["whole segment"],
    );
    one_error(
        &guarded("        - path: 3\n"),
        6,
        17,
        &["must be a string"],
    );
    one_error(
        &guarded("        - values: [x]\n"),
        6,
        11,
        &["`path` is missing"],
    );
}

#[test]
fn bad_values_and_keys_are_located() {
    one_error(
        &guarded("        - path: /a\n          values: []\n"),
        7,
        19,
        &["json_deny[0].values", "empty list"],
    );
    one_error(
        &guarded("        - path: /a\n          values: [\"\"]\n"),
        7,
        20,
        &["values[0]", "empty"],
    );
    one_error(
        &guarded("        - path: /a\n          value: [x]\n"),
        7,
        11,
        &["unknown key `value`", "did you mean `values`"],
    );
    one_error(&guarded("        path: /a\n"), 6, 9, &["must be a list"]);
    one_error(&guarded("        []\n"), 6, 9, &["empty list"]);
}

#[test]
fn guards_belong_on_allow_rules_and_not_on_passthrough_hosts() {
    one_error(
        "version: 1\nnetwork:\n  deny:\n    - host: a.com\n      json_deny:\n        - path: /a\n",
        6,
        9,
        &["network.deny[0].json_deny", "network.allow"],
    );
    one_error(
        &format!(
            "{}  tls_passthrough: [api.openai.com]\n",
            guarded("        - path: /a\n")
        ),
        7,
        21,
        &["tls_passthrough[0]", "json_deny"],
    );
}

fn request(method: &str, host: &str, path: &str) -> CanonicalRequest {
    CanonicalRequest::new(method, canonical_host(host).unwrap(), 443, path)
}

#[test]
fn every_matching_guarded_allow_rule_applies() {
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  allow:\n    - host: \"*.openai.com\"\n    - host: api.openai.com\n      methods: [POST]\n      json_deny:\n        - path: /a\n    - host: api.openai.com\n      paths: [/v1/**]\n      json_deny:\n        - path: /b\n    - host: other.com\n",
    )
    .unwrap();
    let compiled = CompiledPolicy::compile(&policy).unwrap();
    let ids = |req: &CanonicalRequest| -> Vec<String> {
        compiled
            .body_guards(req)
            .into_iter()
            .map(|rule| rule.id.clone())
            .collect()
    };
    // The broad rule comes first and names the decision; the guards still apply.
    let post = request("POST", "api.openai.com", "/v1/responses");
    assert_eq!(
        compiled.decide(&post).rule.as_deref(),
        Some("network.allow[0]")
    );
    assert_eq!(ids(&post), ["network.allow[1]", "network.allow[2]"]);
    assert_eq!(
        ids(&request("GET", "api.openai.com", "/v1/x")),
        ["network.allow[2]"]
    );
    assert!(ids(&request("GET", "api.openai.com", "/v2/x")).is_empty());
    assert!(ids(&request("POST", "other.com", "/v1/x")).is_empty());
}

/// A tunnel to a host whose bodies are inspected (a `json_deny` guard on a matching allow
/// rule, or an `mcp` rule) never passes as raw TCP, even when a destination-only rule
/// allows the host: a raw relay would let the client speak TLS to the upstream itself.
#[test]
fn inspected_hosts_never_pass_raw_tcp() {
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  allow:\n    - host: guarded.example\n      json_deny:\n        - path: /stream\n    - host: \"*.openai.com\"\n    - host: api.openai.com\n      ports: [443]\n      json_deny:\n        - path: /a\n    - host: mcp.example\n    - host: plain.example\nmcp:\n  - host: mcp.example\n    path: /mcp\n    tools:\n      deny: [run_command]\n",
    )
    .unwrap();
    let compiled = CompiledPolicy::compile(&policy).unwrap();
    let raw = |host: &str, port: u16| {
        let tunnel = compiled.decide_tunnel(&canonical_host(host).unwrap(), port);
        assert!(tunnel.decision.is_allow(), "{host}:{port} allowed");
        tunnel.raw_tcp_allowed
    };
    assert!(!raw("guarded.example", 443), "a guarded rule alone");
    assert!(
        !raw("api.openai.com", 443),
        "a guarded rule beside a broad one"
    );
    assert!(raw("api.openai.com", 80), "the guard is on port 443 only");
    assert!(raw("chat.openai.com", 443), "no guard for this host");
    assert!(!raw("mcp.example", 443), "an mcp rule names the host");
    assert!(raw("plain.example", 443));
    // What an ask answered for an unlisted host may open is checked the same way.
    let names_mcp = |host: &str| compiled.has_mcp_rule(&canonical_host(host).unwrap());
    assert!(names_mcp("mcp.example") && names_mcp("MCP.Example."));
    assert!(!names_mcp("plain.example") && !names_mcp("unlisted.example"));
}
