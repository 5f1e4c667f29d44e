//! Secret presets end to end: the real `airlock proxy` with `{preset: anthropic}` and
//! `{preset: openai}` in front of a TLS server on loopback standing in for
//! api.anthropic.com and api.openai.com (`--resolve`, `--upstream-ca`), driven by curl in
//! the forms the official SDKs send: the surrogate is swapped for the real key in
//! `X-Api-Key` and in `Authorization: Bearer`, a key of the agent's own in either header
//! is refused `foreign_credential`, and the real key shows nowhere but upstream. The
//! current `anthropic` and `openai` Python SDKs from PyPI (installed once into a venv under
//! the target directory; the tests fail, saying why, without python3 or PyPI) do the same
//! through the proxy (Anthropic with ANTHROPIC_API_KEY and with ANTHROPIC_AUTH_TOKEN).

use crate::support::sdk;
use crate::support::{
    ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_refusal, curl_get,
};

const ANTHROPIC_REAL: &str = "sk-ant-api03-REAL-preset-anthropic-0123456789";
const ANTHROPIC_SURROGATE: &str = "sk-ant-api03-SURR-preset-anthropic-9876543210";
const OPENAI_REAL: &str = "sk-proj-REAL-preset-openai-0123456789";
const OPENAI_SURROGATE: &str = "sk-proj-SURR-preset-openai-9876543210";

/// The proxy with both presets (the keys given as literal values so that the test
/// controls them; the preset supplies hosts and headers), both API hosts allowed on the
/// upstream's port and resolved to loopback.
fn start(pki: &TestPki, upstream: &Upstream) -> Proxy {
    let port = upstream.port();
    let yaml = format!(
        "version: 1\n\
         network:\n  allow:\n    - host: api.anthropic.com\n      ports: [{port}]\n    - host: api.openai.com\n      ports: [{port}]\n\
         secrets:\n  ANTHROPIC_API_KEY:\n    preset: anthropic\n    value: {ANTHROPIC_REAL}\n    surrogate: {ANTHROPIC_SURROGATE}\n\
         \x20 OPENAI_API_KEY:\n    preset: openai\n    value: {OPENAI_REAL}\n    surrogate: {OPENAI_SURROGATE}\n"
    );
    ProxyBuilder::new(pki)
        .policy(&yaml)
        .resolve_loopback("api.anthropic.com")
        .resolve_loopback("api.openai.com")
        .start()
}

fn assert_real_keys_never_shown(proxy: &Proxy) {
    let log = proxy.audit_log_text();
    let stderr = proxy.stderr();
    for real in [ANTHROPIC_REAL, OPENAI_REAL] {
        assert!(
            !log.contains(real),
            "a real key is in the audit log:\n{log}"
        );
        assert!(!stderr.contains(real), "a real key is on stderr:\n{stderr}");
    }
}

#[test]
fn the_anthropic_preset_swaps_the_surrogate_in_both_sdk_forms() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let url = |path: &str| format!("https://api.anthropic.com:{}{path}", upstream.port());

    // `Authorization: Bearer` (auth tokens; what the issue saw the SDK send).
    let bearer = format!("Authorization: Bearer {ANTHROPIC_SURROGATE}");
    let response = curl_get(&proxy, &pki, &url("/echo/bearer"), &[&bearer]);
    assert_eq!(response.status, 200, "{response:?}");
    // `X-Api-Key` (API keys), with the version header the SDK adds.
    let api_key = format!("X-Api-Key: {ANTHROPIC_SURROGATE}");
    let response = curl_get(
        &proxy,
        &pki,
        &url("/echo/api-key"),
        &[&api_key, "anthropic-version: 2023-06-01"],
    );
    assert_eq!(response.status, 200, "{response:?}");

    let hits = upstream.hits();
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(
        hits[0].header_values("authorization"),
        vec![format!("Bearer {ANTHROPIC_REAL}")]
    );
    assert_eq!(
        hits[1].header_values("x-api-key"),
        vec![ANTHROPIC_REAL.to_owned()]
    );
    assert_eq!(
        hits[1].header_values("anthropic-version"),
        vec!["2023-06-01"]
    );
    let line = proxy.audit_line_where("for /echo/bearer", |l| l["path"] == "/echo/bearer");
    assert_eq!(line["decision"], "allow", "{line}");
    assert_eq!(
        line["secrets"],
        serde_json::json!(["ANTHROPIC_API_KEY"]),
        "{line}"
    );
    assert_real_keys_never_shown(&proxy);
}

#[test]
fn the_openai_preset_swaps_bearer_and_pins_the_account() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let url = format!("https://api.openai.com:{}/echo/openai", upstream.port());
    let bearer = format!("Authorization: Bearer {OPENAI_SURROGATE}");
    let response = curl_get(&proxy, &pki, &url, &[&bearer]);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        upstream.hits()[0].header_values("authorization"),
        vec![format!("Bearer {OPENAI_REAL}")]
    );

    // A key of the agent's own in a preset header is refused before it leaves.
    let foreign = "Authorization: Bearer sk-proj-agents-own-key-000000000000";
    let response = curl_get(&proxy, &pki, &url, &[foreign]);
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "foreign_credential",
            method: "GET",
            host: "api.openai.com",
            path: Some("/echo/openai"),
        },
    );
    let anthropic = format!("https://api.anthropic.com:{}/echo/x", upstream.port());
    let response = curl_get(&proxy, &pki, &anthropic, &["X-Api-Key: sk-ant-api03-own"]);
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(
        upstream.hit_count(),
        1,
        "refused requests never reach upstream"
    );
    assert_real_keys_never_shown(&proxy);
}

#[test]
fn the_real_anthropic_sdk_gets_its_key_swapped_in_either_form() {
    let python = sdk::sdk_python();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let base_url = format!("https://api.anthropic.com:{}", upstream.port());
    // Which header carries which variable is the SDK's choice (2.14 sends ANTHROPIC_API_KEY
    // as `Authorization: Bearer`, older ones as `X-Api-Key`): whichever it is, the upstream
    // must get the real key in it and the surrogate nowhere.
    for variable in ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"] {
        let before = upstream.hit_count();
        let output = std::process::Command::new(&python)
            .args(["-c", sdk::ANTHROPIC_SCRIPT])
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env(variable, ANTHROPIC_SURROGATE)
            .env("SDK_BASE_URL", &base_url)
            .env("HTTPS_PROXY", proxy.url())
            .env("SSL_CERT_FILE", &pki.proxy_ca_cert)
            .output()
            .expect("run the SDK");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stdout.contains("SDK "), "{stdout}\n{stderr}");
        let hits = upstream.hits();
        assert_eq!(hits.len(), before + 1, "{variable}: {stderr}");
        let hit = hits.last().unwrap();
        assert_eq!(
            (hit.method.as_str(), hit.target.as_str()),
            ("POST", "/v1/messages")
        );
        let credentials: Vec<String> = ["x-api-key", "authorization"]
            .iter()
            .flat_map(|name| hit.header_values(name))
            .collect();
        let bearer = format!("Bearer {ANTHROPIC_REAL}");
        assert!(
            !credentials.is_empty()
                && credentials
                    .iter()
                    .all(|value| value == ANTHROPIC_REAL || value == &bearer),
            "{variable}: {hit:?}"
        );
        assert!(
            !hit.headers
                .iter()
                .any(|(_, v)| v.contains(ANTHROPIC_SURROGATE)),
            "{variable}: the surrogate reached the upstream: {hit:?}"
        );
        assert!(
            !stderr.contains(ANTHROPIC_REAL),
            "the real key reached the SDK: {stderr}"
        );
    }
    assert_real_keys_never_shown(&proxy);
}

#[test]
fn the_real_openai_sdk_gets_its_key_swapped_in() {
    let python = sdk::sdk_python();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let output = std::process::Command::new(&python)
        .args(["-c", sdk::OPENAI_SCRIPT])
        .env_remove("OPENAI_BASE_URL")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env("OPENAI_API_KEY", OPENAI_SURROGATE)
        .env(
            "SDK_BASE_URL",
            format!("https://api.openai.com:{}/v1", upstream.port()),
        )
        .env("HTTPS_PROXY", proxy.url())
        .env("SSL_CERT_FILE", &pki.proxy_ca_cert)
        .output()
        .expect("run the SDK");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.contains("SDK "), "{stdout}\n{stderr}");
    let hits = upstream.hits();
    assert_eq!(hits.len(), 1, "{stderr}");
    assert_eq!(
        (hits[0].method.as_str(), hits[0].target.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        hits[0].header_values("authorization"),
        vec![format!("Bearer {OPENAI_REAL}")],
        "{:?}",
        hits[0]
    );
    assert!(!stderr.contains(OPENAI_REAL), "{stderr}");
    assert_real_keys_never_shown(&proxy);
}

#[test]
fn the_secret_shorthand_takes_a_preset() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("api.anthropic.com:{}", upstream.port()))
        .resolve_loopback("api.anthropic.com")
        .secret(&format!(
            "ANTHROPIC_API_KEY={ANTHROPIC_SURROGATE}={ANTHROPIC_REAL}@preset:anthropic"
        ))
        .start();
    let url = format!("https://api.anthropic.com:{}/echo/short", upstream.port());
    let bearer = format!("Authorization: Bearer {ANTHROPIC_SURROGATE}");
    let response = curl_get(&proxy, &pki, &url, &[&bearer]);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        upstream.hits()[0].header_values("authorization"),
        vec![format!("Bearer {ANTHROPIC_REAL}")]
    );
    assert_real_keys_never_shown(&proxy);
}
