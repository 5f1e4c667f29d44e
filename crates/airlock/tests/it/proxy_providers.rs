//! Provider bundles (`providers:`) end to end: the real `airlock proxy` in front of a
//! body-recording HTTPS server on a loopback address at port 443, standing in for
//! api.openai.com and api.anthropic.com (`--resolve`, `--upstream-ca`), driven by curl with
//! request shapes from the providers' public API docs. Server-side web tools (Responses
//! API `web_search`/`web_search_preview`, Chat Completions `web_search_options`, Messages
//! API `web_search_20250305`/`web_fetch_20250910`) are refused `denied_by_rule` and never
//! reach the server; function tools pass with the real key swapped in; a key of the
//! agent's own is refused `foreign_credential` (the account pin).

use std::net::TcpListener;

use crate::support::assert_refusal;
use crate::support::clients::CurlResponse;
use crate::support::clients::curl_post_json;
use crate::support::fixture_server::FixtureServer;
use crate::support::{ExpectedRefusal, Proxy, ProxyBuilder, TestPki};

const OPENAI_REAL: &str = "sk-proj-real-openai-key-4f1c2a9e7b";
const OPENAI_SURROGATE: &str = "sk-proj-surrogate-openai-000000000";
const ANTHROPIC_REAL: &str = "sk-ant-api03-real-anthropic-9c3d1e";
const ANTHROPIC_SURROGATE: &str = "sk-ant-api03-surrogate-00000000000";

struct Setup {
    pki: TestPki,
    server: FixtureServer,
    proxy: Proxy,
}

/// The proxy with `providers_yaml` (the lines under `providers:`) and a pinning secret
/// for each API host, both hosts resolved to one fixture at `address:443`. `None` when
/// the kernel refuses to bind port 443 (not root, no CAP_NET_BIND_SERVICE), a failure
/// under `AIRLOCK_TEST_REQUIRE` ([`crate::support::skip_or_fail`]).
fn setup(address: &str, providers_yaml: &str) -> Option<Setup> {
    match TcpListener::bind((address, 443)) {
        Ok(listener) => drop(listener),
        Err(error) => {
            crate::support::skip_or_fail(&format!(
                "binding {address}:443 was refused ({error}); provider bundles use the default \
                 port 443: run as root (or grant CAP_NET_BIND_SERVICE)"
            ));
            return None;
        }
    }
    let pki = TestPki::new();
    let server = FixtureServer::body_echo_at(&pki, address, 443);
    let yaml = format!(
        "version: 1\nsecrets:\n  OPENAI_API_KEY:\n    value: {OPENAI_REAL}\n    hosts: [api.openai.com]\n    surrogate: {OPENAI_SURROGATE}\n  ANTHROPIC_API_KEY:\n    value: {ANTHROPIC_REAL}\n    hosts: [api.anthropic.com]\n    surrogate: {ANTHROPIC_SURROGATE}\nproviders:\n{providers_yaml}"
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&yaml)
        .arg("--resolve")
        .arg(&format!("api.openai.com:{address}"))
        .arg("--resolve")
        .arg(&format!("api.anthropic.com:{address}"))
        .arg("--resolve")
        .arg(&format!("chatgpt.com:{address}"))
        .start();
    Some(Setup { pki, server, proxy })
}

/// A provider request: host, path, credential header, JSON body.
struct Call<'a> {
    host: &'a str,
    path: &'a str,
    credential: &'a str,
    body: &'a str,
}

impl Setup {
    fn post(&self, call: &Call) -> CurlResponse {
        let url = format!("https://{}{}", call.host, call.path);
        let headers = ["anthropic-version: 2023-06-01", call.credential];
        curl_post_json(&self.proxy, &self.pki, &url, call.body, &headers)
    }

    /// Asserts `call` reaches the server whole and returns what the server saw.
    fn assert_passes(&self, call: &Call) -> serde_json::Value {
        let response = self.post(call);
        let answer = String::from_utf8_lossy(&response.body);
        assert_eq!(response.status, 200, "{}: {answer}", call.body);
        let seen = response.json();
        assert_eq!(seen["len"], call.body.len(), "{answer}");
        seen
    }

    /// Asserts `call` is refused with `reason` (naming `rule` when given) and that the
    /// server has still seen nothing.
    fn assert_refused(&self, what: &str, call: &Call, reason: &str, rule: Option<&str>) {
        let response = self.post(call);
        let refusal = assert_refusal(
            response.status,
            &response.headers,
            &response.body,
            &ExpectedRefusal {
                reason,
                method: "POST",
                host: call.host,
                path: Some(call.path),
            },
        );
        if let Some(rule) = rule {
            assert_eq!(refusal["rule"], rule, "{what}: {refusal}");
        }
        assert_eq!(
            self.server.hits(),
            0,
            "{what}: the server saw {:?}",
            self.server.hit_lines()
        );
    }
}

fn sha256_hex(text: &str) -> String {
    let output = crate::support::tool("python3")
        .args([
            "-c",
            "import hashlib, sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())",
            text,
        ])
        .output()
        .expect("python3");
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

const OPENAI_AUTH: &str = concat!(
    "Authorization: Bearer ",
    "sk-proj-surrogate-openai-000000000"
);
const ANTHROPIC_AUTH: &str = concat!("x-api-key: ", "sk-ant-api03-surrogate-00000000000");

/// Responses API: a function tool, and the hosted web search tool.
const RESPONSES_FUNCTION: &str = r#"{"model":"gpt-5","input":"What is the weather in Paris?","tools":[{"type":"function","name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}"#;
const RESPONSES_WEB_SEARCH: &str = r#"{"model":"gpt-5","input":"What was a positive news story from today?","tools":[{"type":"web_search"}]}"#;
const RESPONSES_WEB_SEARCH_PREVIEW: &str = r#"{"model":"gpt-4.1","tools":[{"type":"function","name":"f","parameters":{}},{"type":"web_search_preview","search_context_size":"low"}],"input":"news"}"#;
/// Chat Completions with `web_search_options` (search models).
const CHAT_WEB_SEARCH_OPTIONS: &str = r#"{"model":"gpt-4o-search-preview","web_search_options":{},"messages":[{"role":"user","content":"What was a positive news story from today?"}]}"#;
/// Responses API with a remote MCP server (the provider would call the URL).
const RESPONSES_REMOTE_MCP: &str = r#"{"model":"gpt-5","tools":[{"type":"mcp","server_label":"dmcp","server_url":"https://dmcp-server.example/sse","require_approval":"never"}],"input":"Roll 2d4+1"}"#;
/// Chat Completions with a search model and no `web_search_options`.
const CHAT_SEARCH_MODEL: &str =
    r#"{"model":"gpt-4o-mini-search-preview","messages":[{"role":"user","content":"news today"}]}"#;
/// Messages API with the MCP connector.
const MESSAGES_MCP_CONNECTOR: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1000,"messages":[{"role":"user","content":"What tools do you have?"}],"mcp_servers":[{"type":"url","url":"https://example-server.modelcontextprotocol.io/sse","name":"example-mcp"}]}"#;
/// Messages API: a client tool, and the server web search / web fetch tools.
const MESSAGES_FUNCTION: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"tools":[{"name":"get_weather","description":"Get the weather","input_schema":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}],"messages":[{"role":"user","content":"Weather in Paris?"}]}"#;
const MESSAGES_WEB_SEARCH: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"How do I update a web app to TypeScript 5.5?"}],"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}]}"#;
const MESSAGES_WEB_FETCH: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Summarise https://example.com/article"}],"tools":[{"type":"web_fetch_20250910","name":"web_fetch","max_uses":5}]}"#;

fn openai<'a>(path: &'a str, body: &'a str) -> Call<'a> {
    Call {
        host: "api.openai.com",
        path,
        credential: OPENAI_AUTH,
        body,
    }
}

fn anthropic(body: &str) -> Call<'_> {
    Call {
        host: "api.anthropic.com",
        path: "/v1/messages",
        credential: ANTHROPIC_AUTH,
        body,
    }
}

#[test]
fn server_side_web_tools_never_reach_the_provider() {
    let Some(s) = setup(
        "127.77.0.1",
        "  openai: true\n  anthropic: {web_tools: false}\n",
    ) else {
        return;
    };
    let openai_rule = Some("providers.openai[0]");
    let anthropic_rule = Some("providers.anthropic[0]");
    let cases = [
        (
            "responses web_search",
            openai("/v1/responses", RESPONSES_WEB_SEARCH),
            openai_rule,
        ),
        (
            "responses web_search_preview",
            openai("/v1/responses", RESPONSES_WEB_SEARCH_PREVIEW),
            openai_rule,
        ),
        (
            "chat web_search_options",
            openai("/v1/chat/completions", CHAT_WEB_SEARCH_OPTIONS),
            openai_rule,
        ),
        (
            "responses remote mcp",
            openai("/v1/responses", RESPONSES_REMOTE_MCP),
            openai_rule,
        ),
        (
            "chat search model",
            openai("/v1/chat/completions", CHAT_SEARCH_MODEL),
            openai_rule,
        ),
        (
            "codex via chatgpt.com",
            Call {
                host: "chatgpt.com",
                credential: "originator: codex_cli_rs",
                ..openai("/backend-api/codex/responses", RESPONSES_WEB_SEARCH)
            },
            Some("providers.openai[2]"),
        ),
        (
            "messages web_search",
            anthropic(MESSAGES_WEB_SEARCH),
            anthropic_rule,
        ),
        (
            "messages mcp connector",
            anthropic(MESSAGES_MCP_CONNECTOR),
            anthropic_rule,
        ),
        (
            "messages web_fetch",
            anthropic(MESSAGES_WEB_FETCH),
            anthropic_rule,
        ),
    ];
    for (what, call, rule) in &cases {
        s.assert_refused(what, call, "denied_by_rule", *rule);
    }
    let line = s.proxy.audit_line_where("web tool refusal", |l| {
        l["kind"] == "http" && l["reason"] == "denied_by_rule" && l["host"] == "api.anthropic.com"
    });
    assert_eq!(line["rule"], "providers.anthropic[0]", "{line}");
}

#[test]
fn function_tools_pass_with_the_real_key_swapped_in() {
    let Some(s) = setup("127.77.0.2", "  openai: true\n  anthropic: true\n") else {
        return;
    };
    let openai_call = openai("/v1/responses", RESPONSES_FUNCTION);
    let seen = s.assert_passes(&openai_call);
    assert_eq!(
        seen["authorization_sha256"],
        sha256_hex(&format!("Bearer {OPENAI_REAL}")),
        "the real OpenAI key arrives"
    );
    let seen = s.assert_passes(&anthropic(MESSAGES_FUNCTION));
    assert_eq!(
        seen["x_api_key_sha256"],
        sha256_hex(ANTHROPIC_REAL),
        "the real Anthropic key arrives"
    );
    // Codex signed in with ChatGPT: guarded too, and a function tool passes.
    let codex = Call {
        host: "chatgpt.com",
        credential: "originator: codex_cli_rs",
        ..openai("/backend-api/codex/responses", RESPONSES_FUNCTION)
    };
    s.assert_passes(&codex);
    assert_eq!(s.server.hits(), 3, "{:?}", s.server.hit_lines());
    let line = s.proxy.audit_line_where("allowed provider call", |l| {
        l["kind"] == "http" && l["decision"] == "allow" && l["host"] == "api.openai.com"
    });
    assert_eq!(line["rule"], "providers.openai[0]", "{line}");
}

#[test]
fn a_key_of_the_agents_own_is_refused() {
    let Some(s) = setup(
        "127.77.0.3",
        "  openai: {web_tools: true}\n  anthropic: true\n",
    ) else {
        return;
    };
    // The Anthropic key is also tried as a bearer token (the other header that API reads).
    let own_keys = [
        (
            "Authorization: Bearer sk-proj-agents-own-account-key-1234",
            openai("/v1/responses", RESPONSES_FUNCTION),
        ),
        (
            "x-api-key: sk-ant-api03-agents-own-account-key-5678",
            anthropic(MESSAGES_FUNCTION),
        ),
        (
            "Authorization: Bearer sk-ant-api03-agents-own-account-key-5678",
            anthropic(MESSAGES_FUNCTION),
        ),
    ];
    for (credential, call) in own_keys {
        let call = Call { credential, ..call };
        s.assert_refused(credential, &call, "foreign_credential", None);
    }
    let log = s.proxy.audit_log_text();
    assert!(
        !log.contains("agents-own-account-key"),
        "credentials stay out of the log"
    );
}

#[test]
fn web_tools_true_lets_the_web_tools_through() {
    let Some(s) = setup(
        "127.77.0.4",
        "  openai: {web_tools: true}\n  anthropic: {web_tools: true}\n",
    ) else {
        return;
    };
    for call in [
        openai("/v1/responses", RESPONSES_WEB_SEARCH),
        openai("/v1/chat/completions", CHAT_WEB_SEARCH_OPTIONS),
        anthropic(MESSAGES_WEB_SEARCH),
        anthropic(MESSAGES_WEB_FETCH),
        openai("/v1/responses", RESPONSES_REMOTE_MCP),
        openai("/v1/chat/completions", CHAT_SEARCH_MODEL),
        anthropic(MESSAGES_MCP_CONNECTOR),
    ] {
        s.assert_passes(&call);
    }
    assert_eq!(s.server.hits(), 7, "{:?}", s.server.hit_lines());
}
