//! OAuth refreshes of projected logins under `airlock run` (docs/secrets.md,
//! "Refreshes") with the real CLIs and Codex's `auth.json`: the real Claude Code CLI and
//! the real Codex CLI refreshing expired logins and calling their model with the new
//! tokens, a python client refreshing Codex's login (the `id_token` shown with its claims),
//! and Codex's `id_token` never swapped to any host (rereview35 G7). Setup:
//! `support::credential_refresh`; the rest of the refresh tests: `run_credential_refresh`.
//! As root, and as the test user.

use serde_json::Value;

use crate::support::agents::{Agent, header_values, message_calls};
use crate::support::credential_refresh::{
    REAL_ACCESS, REAL_REFRESH, credentials_lines, issued, marked, outcome, request_to, setup,
    setup_with_tool, succeeded,
};
use crate::support::run::code;

/// The real tokens of the Codex logins (canaries; the real CLI's are JWTs made from them).
const CODEX_ACCESS: &str = "REALcodexACCESScanary0123456789abcdefghijklmnopqrstuvwxyz";
const CODEX_REFRESH: &str = "rt_REALcodexREFRESHcanary0123456789abcdefghijklmnopqrstu";
const CODEX_ID: &str =
    "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.REALcodexIDsignature0123456789abcdef";

/// The python clients' policy: Codex's file projected, its token host and API allowed.
const CODEX_POLICY: &str = "version: 1\nnetwork:\n  allow:\n    - host: auth.openai.com\n    \
                            - host: api.openai.com\ncredentials:\n  files: [codex]\n";

/// The real Claude Code CLI (from the `claude-agent-sdk` wheel), logged in through an
/// expired `.credentials.json` only (no API key): it refreshes, then calls the model with
/// the new token (its tool call runs `wc` on the projected file).
#[test]
fn the_real_claude_code_refreshes_an_expired_login_and_calls_the_model() {
    let test = "the_real_claude_code_refreshes_an_expired_login_and_calls_the_model";
    let tool = "wc -c ~/.claude/.credentials.json";
    let Some((pki, place, server)) = setup_with_tool("127.35.2.38", test, REAL_REFRESH, tool)
    else {
        return;
    };
    let output = place.run_agent(&pki, "127.35.2.38", Agent::Claude);
    let (stdout, context) = outcome(&output);
    let (requests, seen) = place.requests_seen(&server);
    let context = format!("{context}\n{seen}");
    assert_eq!(code(&output), 0, "{context}");
    assert!(
        stdout.contains(crate::support::agents::FINAL_TEXT),
        "{context}"
    );
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "one refresh: {context}");
    let new_access = issued[0]["access_token"].as_str().expect("issued access");
    let new_refresh = issued[0]["refresh_token"].as_str().expect("issued refresh");
    let refresh = request_to(
        &requests,
        "/v1/oauth/token",
        "the refresh reached the server",
    );
    assert_eq!(refresh["body"]["refresh_token"], REAL_REFRESH, "{context}");
    let calls = message_calls(&requests);
    assert!(!calls.is_empty(), "{context}");
    for call in &calls {
        assert_eq!(
            header_values(call, "authorization"),
            [format!("Bearer {new_access}")],
            "{context}"
        );
    }
    // What the model got back from the tool (the file as the command sees it) and every
    // output hold no real token.
    let bodies: Vec<&Value> = calls.iter().map(|call| &call["body"]).collect();
    let sent_back = serde_json::to_string(&bodies).expect("json");
    let audit = std::fs::read_to_string(place.logs().join("audit.jsonl")).unwrap_or_default();
    for real in [REAL_ACCESS, REAL_REFRESH, new_access, new_refresh] {
        assert!(
            !stdout.contains(real) && !output.stderr.contains(real),
            "{context}"
        );
        assert!(
            !sent_back.contains(real),
            "a real token reached the model through the tool"
        );
        assert!(!audit.contains(real), "a real token in the audit log");
    }
    let file = place.file();
    assert_eq!(file["claudeAiOauth"]["accessToken"], new_access);
    assert_eq!(file["claudeAiOauth"]["refreshToken"], new_refresh);
}

/// A JWT with `claims` and signature `signature` (unsigned: only its shape matters here).
fn jwt(claims: &Value, signature: &str) -> String {
    use base64::Engine as _;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let payload = encode(claims.to_string().as_bytes());
    format!("{header}.{payload}.{signature}")
}

/// The real Codex CLI (from the `openai-codex-cli-bin` wheel), logged in with ChatGPT
/// tokens in `auth.json` whose access token expired: it refreshes at auth.openai.com, then
/// calls chatgpt.com with the new token (the turn itself is not checked: the scripted
/// server does not play ChatGPT's backend).
#[test]
fn the_real_codex_refreshes_an_expired_login_and_calls_the_model() {
    let test = "the_real_codex_refreshes_an_expired_login_and_calls_the_model";
    let Some((pki, place, server)) =
        setup_with_tool("127.35.2.42", test, REAL_REFRESH, "echo probe")
    else {
        return;
    };
    let claims = serde_json::json!({
        "exp": 1000, "email": "user@example.com",
        "https://api.openai.com/auth": {"chatgpt_plan_type": "plus",
            "chatgpt_account_id": "acct", "chatgpt_user_id": "user"}});
    let real_id = jwt(&claims, "REALcodexIDsignature0123456789abcdefghij");
    let real_access = jwt(&claims, "REALcodexACCESSsignature0123456789abcdef");
    let real_refresh = CODEX_REFRESH;
    let auth = serde_json::json!({
        "OPENAI_API_KEY": null,
        "tokens": {"id_token": real_id, "access_token": real_access,
                   "refresh_token": real_refresh, "account_id": "acct"},
        "last_refresh": "2020-01-01T00:00:00Z"});
    let policy = "version: 1\nnetwork:\n  allow:\n    - host: auth.openai.com\n    \
                  - host: chatgpt.com\n    - host: api.openai.com\nfilesystem:\n  writable: \
                  [\"~/.codex\", \".\"]\ncredentials:\n  files: [codex]\n";
    let auth_file = place.codex(&auth.to_string(), policy);
    let output = place.run_agent(&pki, "127.35.2.42", Agent::Codex);
    let (stdout, context) = outcome(&output);
    let (requests, seen) = place.requests_seen(&server);
    let credentials = credentials_lines(&place.logs().join("audit.jsonl"));
    let context = format!("{context}\n{seen}\ncredentials: {credentials:?}");
    // The scripted server does not play ChatGPT's backend (models list, plugins...), so
    // the CLI's run is not expected to finish its turn: what is checked is the refresh
    // and that every call to chatgpt.com afterwards carries the new real token.
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "one refresh: {context}");
    let new_access = issued[0]["access_token"].as_str().expect("access");
    let refresh = request_to(&requests, "/oauth/token", "the refresh reached the server");
    assert_eq!(refresh["body"]["refresh_token"], real_refresh, "{context}");
    let calls: Vec<&Value> = requests
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/backend-api/"))
                && !header_values(r, "authorization").is_empty()
        })
        .collect();
    assert!(!calls.is_empty(), "{context}");
    for call in &calls {
        assert_eq!(
            header_values(call, "authorization"),
            [format!("Bearer {new_access}")],
            "{context}"
        );
    }
    let file: Value =
        serde_json::from_slice(&std::fs::read(&auth_file).expect("read")).expect("json");
    assert_eq!(file["tokens"]["access_token"], new_access, "{context}");
    for real in [real_access.as_str(), real_refresh, new_access] {
        assert!(
            !stdout.contains(real) && !output.stderr.contains(real),
            "{context}"
        );
    }
}

/// Codex's `auth.json`: the refresh's `id_token` (a JWT) is shown with its claims and a
/// random signature; the new access token works towards api.openai.com; the host file
/// gets the new tokens and `last_refresh`.
const CODEX_CLIENT: &str = r#"
import json, os, urllib.request
auth = json.load(open(os.path.expanduser("~/.codex/auth.json")))
body = json.dumps({"client_id": "app_EMoamEEZ73f0CkXaXp7hrann", "grant_type": "refresh_token",
                   "refresh_token": auth["tokens"]["refresh_token"],
                   "scope": "openid profile email"}).encode()
request = urllib.request.Request("https://auth.openai.com/oauth/token", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
with urllib.request.urlopen(request, timeout=30) as answer:
    text = answer.read().decode()
    print("REFRESH %d %s" % (answer.status, text))
access = json.loads(text)["access_token"]
call = urllib.request.Request("https://api.openai.com/v1/models",
                              headers={"Authorization": "Bearer " + access})
with urllib.request.urlopen(call, timeout=30) as answer:
    print("API %d" % answer.status)
# The file again, after the host's file was written back: still the projection.
print("AFTER " + open(os.path.expanduser("~/.codex/auth.json")).read().replace("\n", " "))
"#;

#[test]
fn a_codex_refresh_keeps_the_id_token_claims_and_writes_back() {
    let test = "a_codex_refresh_keeps_the_id_token_claims_and_writes_back";
    let Some((pki, place, server)) = setup("127.35.2.40", test, REAL_REFRESH) else {
        return;
    };
    let (real_access, real_refresh, real_id) = (CODEX_ACCESS, CODEX_REFRESH, CODEX_ID);
    let auth = format!(
        "{{\n  \"OPENAI_API_KEY\": null,\n  \"tokens\": {{\n    \"id_token\": \"{real_id}\",\n    \
         \"access_token\": \"{real_access}\",\n    \"refresh_token\": \"{real_refresh}\",\n    \
         \"account_id\": \"acct\"\n  }},\n  \"last_refresh\": \"2026-01-01T00:00:00Z\"\n}}\n"
    );
    let auth_file = place.codex(&auth, CODEX_POLICY);
    let program = place.script("codex_client.py", CODEX_CLIENT);
    let output = place.run_program(&pki, "127.35.2.40", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "{context}");
    let new_id = issued[0]["id_token"].as_str().expect("id");
    let new_access = issued[0]["access_token"].as_str().expect("access");
    let new_refresh = issued[0]["refresh_token"].as_str().expect("refresh");
    let requests = server.requests();
    let refresh = request_to(&requests, "/oauth/token", "the refresh reached the server");
    assert_eq!(refresh["body"]["refresh_token"], real_refresh);
    let models = request_to(&requests, "/v1/models", "the API call");
    assert_eq!(
        header_values(models, "authorization"),
        [format!("Bearer {new_access}")]
    );
    let answer: Value =
        serde_json::from_str(marked(&stdout, "REFRESH 200").expect("refreshed")).expect("json");
    let shown_id = answer["id_token"].as_str().expect("id shown");
    let (claims, signature) = new_id.rsplit_once('.').expect("jwt");
    assert!(shown_id.starts_with(&format!("{claims}.")), "{context}");
    assert!(!shown_id.ends_with(signature), "{context}");
    for real in [
        real_access,
        real_refresh,
        real_id,
        new_access,
        new_refresh,
        new_id,
    ] {
        assert!(
            !stdout.contains(real),
            "a real token reached the command: {context}"
        );
    }
    let file: Value =
        serde_json::from_slice(&std::fs::read(&auth_file).expect("read")).expect("json");
    assert_eq!(file["tokens"]["id_token"], new_id);
    assert_eq!(file["tokens"]["access_token"], new_access);
    assert_eq!(file["tokens"]["refresh_token"], new_refresh);
    assert_eq!(file["tokens"]["account_id"], "acct");
    assert_ne!(file["last_refresh"], "2026-01-01T00:00:00Z");
}

/// A Codex login with an `id_token` but no refresh token (rereview35 G7): no refresh is
/// watched, and the `id_token` is still never swapped: a token exchange carrying its
/// surrogate to auth.openai.com goes out with the surrogate (the real one never leaves),
/// while the access token still arrives real at api.openai.com.
#[test]
fn a_codex_id_token_is_never_swapped_even_without_a_refresh_token() {
    let test = "a_codex_id_token_is_never_swapped_even_without_a_refresh_token";
    let Some((pki, place, server)) = setup("127.35.2.66", test, REAL_REFRESH) else {
        return;
    };
    let (real_access, real_id) = (CODEX_ACCESS, CODEX_ID);
    let auth = format!(
        "{{\"OPENAI_API_KEY\":null,\"tokens\":{{\"id_token\":\"{real_id}\",\
         \"access_token\":\"{real_access}\",\"account_id\":\"acct\"}}}}"
    );
    place.codex(&auth, CODEX_POLICY);
    let script = r#"
import json, os, urllib.parse, urllib.request, urllib.error
tokens = json.load(open(os.path.expanduser("~/.codex/auth.json")))["tokens"]
body = urllib.parse.urlencode({
    "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
    "client_id": "app_EMoamEEZ73f0CkXaXp7hrann", "requested_token": "openai-api-key",
    "subject_token": tokens["id_token"],
    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token"}).encode()
request = urllib.request.Request("https://auth.openai.com/oauth/token", data=body,
    method="POST", headers={"Content-Type": "application/x-www-form-urlencoded"})
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        print("EXCHANGE %d" % answer.status)
except urllib.error.HTTPError as error:
    print("EXCHANGE %d" % error.code)
call = urllib.request.Request("https://api.openai.com/v1/models",
                              headers={"Authorization": "Bearer " + tokens["access_token"]})
with urllib.request.urlopen(call, timeout=30) as answer:
    print("API %d" % answer.status)
"#;
    let program = place.script("exchange.py", script);
    let output = place.run_program(&pki, "127.35.2.66", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    assert!(stdout.lines().any(|line| line == "API 200"), "{context}");
    let requests = server.requests();
    let exchange = request_to(
        &requests,
        "/oauth/token",
        "the exchange went out (with the surrogate)",
    );
    let sent = exchange.to_string();
    assert!(
        !sent.contains("REALcodexIDsignature"),
        "the real id_token left: {sent}"
    );
    assert!(
        sent.contains("eyJzdWIiOiJ1c2VyIn0."),
        "the surrogate keeps the claims: {sent}"
    );
    let models = request_to(&requests, "/v1/models", "the API call");
    assert_eq!(
        header_values(models, "authorization"),
        [format!("Bearer {real_access}")]
    );
    assert!(!stdout.contains(real_id) && !stdout.contains(real_access));
}
