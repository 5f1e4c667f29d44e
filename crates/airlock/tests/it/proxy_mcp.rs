//! MCP tool policy end to end: the real `airlock proxy` in front of a real MCP server on
//! loopback (tests/fixtures/mcp_server.py, Streamable HTTP over TLS), driven by curl.
//! Allowed and denied calls, ids preserved, batches merged in order (JSON and SSE),
//! `tools/list` filtered (JSON, SSE, server-initiated stream), uninspectable bodies
//! refused before the server sees them, bypass attempts, argument guards, and the
//! spellings of the rule's path that routers serve alike (case, trailing slash, dot
//! segments, `;` parameters, encodings).

use crate::support;
use crate::support::clients::CurlResponse;
use crate::support::clients::curl_post_json;
use crate::support::fixture_server::FixtureServer;
use crate::support::raw;
use crate::support::{CurlRequest, ExpectedRefusal, Proxy, ProxyBuilder, TestPki};
use crate::support::{assert_refusal, curl};
use serde_json::{Value, json};

struct Setup {
    pki: TestPki,
    server: FixtureServer,
    proxy: Proxy,
}

fn setup() -> Setup {
    setup_with("{deny: [run_command, write_file]}")
}

/// The fixture server behind a proxy whose `mcp` rule on `/mcp` has `tools` (YAML flow).
fn setup_with(tools: &str) -> Setup {
    let pki = TestPki::new();
    let server = FixtureServer::mcp(&pki);
    let yaml = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
         mcp:\n  - host: localhost\n    path: /mcp\n    tools: {tools}\n",
        port = server.port
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&yaml)
        .resolve_loopback("localhost")
        .start();
    Setup { pki, server, proxy }
}

impl Setup {
    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.server.port)
    }

    fn post(&self, path: &str, body: &str, headers: &[&str]) -> CurlResponse {
        let url = self.url(path);
        curl_post_json(&self.proxy, &self.pki, &url, body, headers)
    }

    /// The request bodies the server received.
    fn server_saw(&self) -> String {
        self.server.hit_lines().join("\n")
    }
}

fn call(id: &str, name: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{}}}}}}"#
    )
}

fn text(response: &CurlResponse) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

fn assert_denied(answer: &Value, id: &Value, tool: &str) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(&answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        format!("tool call denied by policy: {tool}")
    );
    assert_eq!(
        answer["error"]["data"],
        json!({"reason": "mcp_tool_denied", "tool": tool})
    );
}

/// The JSON data of every SSE event in `body`.
fn sse_messages(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).expect("event JSON"))
        })
        .collect()
}

#[test]
fn allowed_call_passes_and_denied_call_is_answered_with_its_id() {
    let s = setup();
    let allowed = s.post("/mcp", &call("1", "read_file"), &[]);
    assert_eq!(allowed.status, 200, "{}", text(&allowed));
    assert_eq!(
        allowed.json()["result"]["content"][0]["text"],
        "called read_file"
    );
    for id in [r#""abc""#, "7", "null", "12345678901234567890123", "1.5e3"] {
        let denied = s.post("/mcp", &call(id, "run_command"), &[]);
        assert_eq!(denied.status, 200, "{}", text(&denied));
        assert!(
            text(&denied).contains(&format!("\"id\":{id},")),
            "{}",
            text(&denied)
        );
        let answer = denied.json();
        assert_denied(&answer, &answer["id"].clone(), "run_command");
    }
    assert!(
        !s.server_saw().contains("run_command"),
        "{}",
        s.server_saw()
    );
    let line = s.proxy.audit_line_where("mcp deny", |l| {
        l["kind"] == "mcp" && l["decision"] == "deny"
    });
    assert_eq!(line["tool"], "run_command");
    assert_eq!(line["reason"], "mcp_tool_denied");
    assert_eq!(line["rule"], "mcp[0]");
    let line = s.proxy.audit_line_where("mcp allow", |l| {
        l["kind"] == "mcp" && l["decision"] == "allow"
    });
    assert_eq!(line["tool"], "read_file");
}

#[test]
fn partly_denied_batch_is_forwarded_smaller_and_merged_in_order() {
    let s = setup();
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let batch = format!(
        "[{},{},{list}]",
        call("1", "read_file"),
        call(r#""two""#, "run_command")
    );
    let response = s.post("/mcp", &batch, &[]);
    assert_eq!(response.status, 200, "{}", text(&response));
    let answers = response.json();
    let answers = answers.as_array().expect("array");
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(answers[0]["id"], 1);
    assert_eq!(
        answers[0]["result"]["content"][0]["text"],
        "called read_file"
    );
    assert_denied(&answers[1], &json!("two"), "run_command");
    assert_eq!(answers[2]["id"], 3);
    assert_eq!(
        answers[2]["result"]["tools"],
        json!([{"name": "read_file", "description": "read_file", "inputSchema": {"type": "object"}}])
    );
    assert!(
        !s.server_saw().contains("run_command"),
        "{}",
        s.server_saw()
    );

    // The same batch answered as an event stream: the local error comes first.
    let response = s.post(
        "/mcp",
        &batch,
        &[
            "X-Test-Sse: 1",
            "Accept: application/json, text/event-stream",
        ],
    );
    assert_eq!(response.status, 200, "{}", text(&response));
    let messages = sse_messages(&text(&response));
    assert_eq!(messages.len(), 3, "{}", text(&response));
    assert_denied(&messages[0], &json!("two"), "run_command");
    assert_eq!(messages[1]["id"], 1);
    assert_eq!(
        messages[2]["result"]["tools"].as_array().map(Vec::len),
        Some(1)
    );

    // Every call denied: answered by airlock alone, in order.
    let batch = format!("[{},{}]", call("1", "write_file"), call("2", "run_command"));
    let answers = s.post("/mcp", &batch, &[]).json();
    assert_denied(&answers[0], &json!(1), "write_file");
    assert_denied(&answers[1], &json!(2), "run_command");
}

#[test]
fn tools_list_is_filtered_in_json_sse_and_server_streams() {
    let s = setup();
    let list = r#"{"jsonrpc":"2.0","id":"l","method":"tools/list"}"#;
    let names = |tools: &Value| -> Vec<String> {
        tools
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let json_answer = s.post("/mcp", list, &[]).json();
    assert_eq!(names(&json_answer["result"]["tools"]), ["read_file"]);
    let sse = s.post("/mcp", list, &["X-Test-Sse: 1"]);
    let messages = sse_messages(&text(&sse));
    assert_eq!(messages.len(), 1, "{}", text(&sse));
    assert_eq!(names(&messages[0]["result"]["tools"]), ["read_file"]);
    let url = s.url("/mcp");
    let stream = curl(&s.proxy, &s.pki, &CurlRequest::get(&url));
    let messages = sse_messages(&text(&stream));
    assert_eq!(messages.len(), 1, "{}", text(&stream));
    assert_eq!(names(&messages[0]["result"]["tools"]), ["read_file"]);
}

#[test]
fn uninspectable_bodies_are_refused_before_the_server() {
    let s = setup();
    let dir = tempfile::tempdir().expect("tempdir");
    let huge = dir.path().join("huge");
    std::fs::write(
        &huge,
        format!("{}{}", call("1", "read_file"), " ".repeat(1 << 20)),
    )
    .expect("write");
    let utf16 = dir.path().join("utf16");
    let encoded: Vec<u8> = call("1", "run_command")
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    std::fs::write(&utf16, encoded).expect("write");
    let huge_arg = format!("@{}", huge.display());
    let utf16_arg = format!("@{}", utf16.display());
    let bom = format!("\u{feff}{}", call("1", "run_command"));
    let comment = format!("/* x */ {}", call("1", "run_command"));
    let duplicate = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","name":"run_command"}}"#;
    let no_name =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["run_command"]}}"#;
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "gzip",
            call("1", "run_command"),
            vec!["Content-Encoding: gzip"],
        ),
        ("malformed", "{\"jsonrpc\":".to_owned(), vec![]),
        ("bom", bom, vec![]),
        ("comment", comment, vec![]),
        ("duplicate name", duplicate.to_owned(), vec![]),
        ("no string name", no_name.to_owned(), vec![]),
        ("over 1 MiB", huge_arg, vec![]),
        ("utf-16", utf16_arg, vec![]),
    ];
    for (what, body, headers) in cases {
        let response = s.post("/mcp", &body, &headers);
        assert_refusal(
            response.status,
            &response.headers,
            &response.body,
            &ExpectedRefusal {
                reason: "body_uninspectable",
                method: "POST",
                host: "localhost",
                path: Some("/mcp"),
            },
        );
        assert_eq!(
            s.server.hits(),
            0,
            "{what}: the server saw {}",
            s.server_saw()
        );
    }
    // A compressed answer cannot be filtered: not passed on.
    let response = s.post(
        "/mcp",
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        &["X-Test-Gzip: 1"],
    );
    assert_eq!(response.status, 502, "{}", text(&response));
    assert!(!text(&response).contains("run_command"));
}

#[test]
fn bypass_attempts_are_decided_on_the_body() {
    let s = setup();
    let cases: Vec<(&str, &str, String, Vec<&str>)> = vec![
        (
            "lying Mcp-Name header",
            "/mcp",
            call("1", "run_command"),
            vec!["Mcp-Name: read_file", "Mcp-Method: tools/call"],
        ),
        ("case variant", "/mcp", call("1", "RUN_COMMAND"), vec![]),
        (
            "escaped name",
            "/mcp",
            call("1", "run\\u005fcommand"),
            vec![],
        ),
        (
            "chunked body",
            "/mcp",
            call("1", "run_command"),
            vec!["Transfer-Encoding: chunked"],
        ),
        (
            "percent-encoded path",
            "/%6dcp",
            call("1", "run_command"),
            vec![],
        ),
        ("query string", "/mcp?x=1", call("1", "run_command"), vec![]),
    ];
    for (what, path, body, headers) in cases {
        let response = s.post(path, &body, &headers);
        assert_eq!(response.status, 200, "{what}: {}", text(&response));
        let answer = response.json();
        assert_eq!(
            answer["error"]["data"]["reason"], "mcp_tool_denied",
            "{what}: {answer}"
        );
    }
    assert_eq!(s.server.hits(), 0, "the server saw {}", s.server_saw());
}

const OLD_TRANSPORT_CLIENT: &str = r#"
import http.client, json, ssl, sys
proxy_port, cafile, port, path = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
ctx = ssl.create_default_context(cafile=cafile)
def connect():
    c = http.client.HTTPSConnection("127.0.0.1", proxy_port, context=ctx, timeout=20)
    c.set_tunnel("localhost", port)
    return c
def event(response):
    lines = []
    for _ in range(100):
        line = response.readline().decode()
        if not line:
            return None
        if line in ("\n", "\r\n"):
            return lines
        lines.append(line.rstrip("\r\n"))
    return lines
stream = connect()
stream.request("GET", path, headers={"Accept": "text/event-stream"})
response = stream.getresponse()
out = {"status": response.status, "events": []}
first = event(response)
out["events"].append(first)
if first:
    endpoint = [l[5:].strip() for l in first if l.startswith("data:")][0]
    post = connect()
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
    post.request("POST", endpoint, body=body, headers={"Content-Type": "application/json"})
    out["post_status"] = post.getresponse().status
    out["events"].append(event(response))
print(json.dumps(out))
"#;

fn old_transport(s: &Setup, path: &str) -> Value {
    let mut command = crate::support::tool("python3");
    command
        .arg("-c")
        .arg(OLD_TRANSPORT_CLIENT)
        .arg(s.proxy.port().to_string())
        .arg(&s.pki.proxy_ca_cert)
        .arg(s.server.port.to_string())
        .arg(path);
    let output = support::run_bounded(&mut command, std::time::Duration::from_secs(40));
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("client output ({e}): {:?} {}", output.stdout, output.stderr))
}

#[test]
fn old_sse_transport_is_filtered_and_foreign_endpoints_end_the_stream() {
    let pki = TestPki::new();
    let server = FixtureServer::mcp(&pki);
    let yaml = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
         mcp:\n  - host: localhost\n    path: \"/{{sse,sse-elsewhere,messages}}\"\n    tools: {{deny: [run_command, write_file]}}\n",
        port = server.port
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&yaml)
        .resolve_loopback("localhost")
        .start();
    let s = Setup { pki, server, proxy };
    let out = old_transport(&s, "/sse");
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["post_status"], 202, "{out}");
    let message = out["events"][1]
        .as_array()
        .expect("second event")
        .iter()
        .filter_map(|l| l.as_str()?.strip_prefix("data:"))
        .collect::<String>();
    let message: Value = serde_json::from_str(message.trim()).expect("message JSON");
    assert_eq!(message["id"], 9);
    let names: Vec<&str> = message["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["read_file"]);
    // An endpoint outside the rule would let POSTs escape inspection: the stream ends.
    let out = old_transport(&s, "/sse-elsewhere");
    assert_eq!(out["events"], json!([null]), "{out}");
}

/// A `read_file` call with `arguments` (JSON text).
fn read_file(id: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read_file","arguments":{arguments}}}}}"#
    )
}

const WORKSPACE_ONLY: &str =
    r#"{deny: [run_command], args: {read_file: {path: ["/workspace/**"]}}}"#;

fn assert_argument_denied(answer: &Value, id: &Value) {
    assert_eq!(&answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "tool call denied by policy: read_file argument path"
    );
    assert_eq!(
        answer["error"]["data"],
        json!({"reason": "mcp_argument_denied", "tool": "read_file", "argument": "path"})
    );
}

#[test]
fn argument_guards_pass_good_values_and_refuse_the_rest() {
    let s = setup_with(WORKSPACE_ONLY);
    let allowed = s.post(
        "/mcp",
        &read_file("1", r#"{"path":"/workspace/src/main.rs"}"#),
        &[],
    );
    assert_eq!(allowed.status, 200, "{}", text(&allowed));
    assert_eq!(
        allowed.json()["result"]["content"][0]["text"],
        "called read_file"
    );
    let refused = [
        r#"{"path":"/home/u/.ssh/id_ed25519"}"#,
        r#"{"path":"/workspace/../home/u/.ssh/id_rsa"}"#,
        r#"{"path":"/workspace/%2e%2e/home/u/.ssh/id_rsa"}"#,
        r#"{"path":"/workspace/\u002e\u002e/home/u/.ssh/id_rsa"}"#,
        r#"{"path":"/workspace/a","PATH":"/home/u/.ssh/id_rsa"}"#,
        r#"{"path":["/workspace/a","/home/u/.ssh/id_rsa"]}"#,
        r#"{"file":"/home/u/.ssh/id_rsa"}"#,
    ];
    for arguments in refused {
        let response = s.post("/mcp", &read_file("\"r\"", arguments), &[]);
        assert_eq!(response.status, 200, "{arguments}: {}", text(&response));
        assert_argument_denied(&response.json(), &json!("r"));
    }
    // Upper-case tool name: guarded too.
    let upper = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"READ_FILE","arguments":{"path":"/etc/passwd"}}}"#;
    let answer = s.post("/mcp", upper, &[]).json();
    assert_eq!(
        answer["error"]["data"]["reason"], "mcp_argument_denied",
        "{answer}"
    );
    let saw = s.server_saw();
    assert!(!saw.contains("ssh") && !saw.contains("passwd"), "{saw}");
    assert_eq!(s.server.hits(), 1, "{saw}");
    let line = s.proxy.audit_line_where("mcp argument deny", |l| {
        l["kind"] == "mcp" && l["decision"] == "deny"
    });
    assert_eq!(line["tool"], "read_file");
    assert_eq!(line["reason"], "mcp_argument_denied");
    assert_eq!(line["rule"], "mcp[0]");
    assert_eq!(line["argument"], "path", "the argument is named: {line}");
    assert!(
        line.get("server").is_none(),
        "no stdio server on the HTTP path: {line}"
    );
    let log = line.to_string();
    assert!(
        !log.contains("ssh") && !log.contains("passwd"),
        "no value: {log}"
    );
}

#[test]
fn argument_guards_split_a_batch() {
    let s = setup_with(WORKSPACE_ONLY);
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let batch = format!(
        "[{},{},{list}]",
        read_file("1", r#"{"path":"/workspace/a"}"#),
        read_file("2", r#"{"path":"/workspace/../../etc/shadow"}"#),
    );
    let response = s.post("/mcp", &batch, &[]);
    assert_eq!(response.status, 200, "{}", text(&response));
    let answers = response.json();
    let answers = answers.as_array().expect("array");
    assert_eq!(answers.len(), 3, "{answers:?}");
    assert_eq!(
        answers[0]["result"]["content"][0]["text"],
        "called read_file"
    );
    assert_argument_denied(&answers[1], &json!(2));
    assert_eq!(answers[2]["id"], 3);
    assert!(!s.server_saw().contains("shadow"), "{}", s.server_saw());
    // Every call refused: answered by airlock alone.
    let batch = format!(
        "[{},{}]",
        read_file("4", r#"{"path":"/etc/shadow"}"#),
        read_file("5", r#"{}"#),
    );
    let answers = s.post("/mcp", &batch, &[]).json();
    assert_argument_denied(&answers[0], &json!(4));
    assert_argument_denied(&answers[1], &json!(5));
    assert_eq!(s.server.hits(), 1, "{}", s.server_saw());
}

/// Spellings of `/mcp` that common routers serve as `/mcp` (case-insensitive routing,
/// a trailing slash, dot segments, `;` parameters, doubled slashes, percent-encoding).
pub(crate) const MCP_SPELLINGS: &[&str] = &[
    "/MCP",
    "/Mcp",
    "/mcp/",
    "/MCP/",
    "/mcp/.",
    "/mcp//",
    "/./mcp",
    "//mcp",
    "/x/../mcp",
    "/mcp;x",
    "/mcp;jsessionid=1/",
    "/mcp/;x",
    "/;x/mcp",
    "/%6Dcp",
    "/%4D%43%50",
    "/mcp%3Bx",
];

/// POSTs `body` to `path` exactly as written (curl would remove dot segments).
fn post_as_written(s: &Setup, path: &str, body: &str) -> raw::RawResponse {
    let target = format!("localhost:{}", s.server.port);
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    raw::connect_tls(
        s.proxy.port(),
        &s.pki,
        &target,
        "localhost",
        request.as_bytes(),
    )
    .response()
}

#[test]
fn every_spelling_of_the_mcp_path_is_inspected() {
    let s = setup();
    for (index, path) in MCP_SPELLINGS.iter().enumerate() {
        let response = post_as_written(&s, path, &call(&index.to_string(), "run_command"));
        assert_eq!(
            response.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&response.raw)
        );
        assert_denied(&response.json(), &json!(index), "run_command");
    }
    // A path that cannot be read (a servlet `..;`, an encoded slash, double encoding) may
    // be routed to `/mcp`: refused on a host with an mcp rule.
    for path in ["/x/..;/mcp", "/mcp%2F", "/x/%252e%252e/mcp", "/a//../mcp"] {
        let response = post_as_written(&s, path, &call("1", "run_command"));
        assert_eq!(response.status, 403, "{path}");
        assert_eq!(response.json()["reason"], "path_unsafe", "{path}");
    }
    assert!(
        !s.server_saw().contains("run_command"),
        "a denied call reached the server: {}",
        s.server_saw()
    );
    // The spellings reach the server when the call is allowed, and their answers are
    // filtered like `/mcp`'s.
    for path in ["/MCP/", "/mcp;x", "/%6Dcp"] {
        let allowed = post_as_written(&s, path, &call("2", "read_file"));
        assert_eq!(allowed.status, 200, "{path}");
        assert_eq!(
            allowed.json()["result"]["content"][0]["text"],
            "called read_file",
            "{path}"
        );
        let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
        let tools = post_as_written(&s, path, list).json()["result"]["tools"].clone();
        let names: Vec<&str> = tools
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(names, ["read_file"], "{path}");
    }
    let line = s.proxy.audit_line_where("mcp deny", |l| {
        l["kind"] == "mcp" && l["decision"] == "deny"
    });
    assert_eq!(line["rule"], "mcp[0]", "{line}");
}
