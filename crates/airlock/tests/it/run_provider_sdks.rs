//! The current `anthropic` and `openai` Python SDKs from PyPI under `airlock run`, with the
//! keys scoped by presets (`{preset: anthropic}`, `{preset: openai}`): no proxy variables,
//! the jail's capture takes the SDKs' HTTPS to a loopback TLS server standing in for
//! api.anthropic.com and api.openai.com (`--resolve`, `--upstream-ca`); the SDKs hold only
//! surrogates, the server gets the real keys, and the audit names the secrets used.

use crate::support::run::{RunHome, code, namespaces_available};
use crate::support::sdk;
use crate::support::{TestPki, Upstream};

const ANTHROPIC_REAL: &str = "sk-ant-api03-REAL-run-anthropic-0123456789abcdef";
const OPENAI_REAL: &str = "sk-proj-REAL-run-openai-0123456789abcdef";

#[test]
fn the_provider_sdks_reach_their_api_with_the_real_keys_swapped_in() {
    if !namespaces_available("the_provider_sdks_reach_their_api_with_the_real_keys_swapped_in") {
        return;
    }
    let python = sdk::sdk_python();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let port = upstream.port();
    let policy = home.scratch().join("airlock.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nnetwork:\n  allow:\n    - host: api.anthropic.com\n      ports: [{port}]\n    - host: api.openai.com\n      ports: [{port}]\nsecrets:\n  ANTHROPIC_API_KEY: {{preset: anthropic}}\n  OPENAI_API_KEY: {{preset: openai}}\n"
        ),
    )
    .expect("write the policy");
    // The scripts hold no `'`, so they can be quoted for sh as they are.
    assert!(!sdk::ANTHROPIC_SCRIPT.contains('\'') && !sdk::OPENAI_SCRIPT.contains('\''));
    let script = format!(
        "SDK_BASE_URL=https://api.anthropic.com:{port} {py} -c '{anthropic}' && \
         SDK_BASE_URL=https://api.openai.com:{port}/v1 {py} -c '{openai}' && \
         echo \"KEYS $ANTHROPIC_API_KEY $OPENAI_API_KEY\"",
        py = python.display(),
        anthropic = sdk::ANTHROPIC_SCRIPT,
        openai = sdk::OPENAI_SCRIPT,
    );
    let output = home.run_with_env(
        &[
            "--policy",
            &policy.to_string_lossy(),
            "--resolve",
            "api.anthropic.com:127.0.0.1",
            "--resolve",
            "api.openai.com:127.0.0.1",
            "--upstream-ca",
            &pki.upstream_ca_cert.to_string_lossy(),
            "--log",
            &home.log_path().to_string_lossy(),
            "--",
            "sh",
            "-c",
            &script,
        ],
        &[
            ("ANTHROPIC_API_KEY", ANTHROPIC_REAL),
            ("OPENAI_API_KEY", OPENAI_REAL),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(code(&output), 0, "{stdout}\n{}", output.stderr);
    assert_eq!(
        stdout.matches("SDK ").count(),
        2,
        "both SDKs ran: {stdout}\n{}",
        output.stderr
    );
    // Inside, only surrogates: same prefix and length, not the real value.
    let keys = stdout
        .lines()
        .find_map(|line| line.strip_prefix("KEYS "))
        .unwrap_or_else(|| panic!("no KEYS line: {stdout}"));
    let (anthropic_surrogate, openai_surrogate) = keys.split_once(' ').expect("two keys");
    assert!(anthropic_surrogate.starts_with("sk-ant-api03-"), "{keys}");
    assert_eq!(anthropic_surrogate.len(), ANTHROPIC_REAL.len());
    assert_ne!(anthropic_surrogate, ANTHROPIC_REAL);
    assert!(openai_surrogate.starts_with("sk-"), "{keys}");
    assert_ne!(openai_surrogate, OPENAI_REAL);

    let hits = upstream.hits();
    assert_eq!(hits.len(), 2, "{hits:?}\n{}", output.stderr);
    let anthropic = &hits[0];
    assert_eq!(
        (anthropic.method.as_str(), anthropic.target.as_str()),
        ("POST", "/v1/messages")
    );
    let credentials: Vec<String> = ["x-api-key", "authorization"]
        .iter()
        .flat_map(|name| anthropic.header_values(name))
        .collect();
    let bearer = format!("Bearer {ANTHROPIC_REAL}");
    assert!(
        !credentials.is_empty()
            && credentials
                .iter()
                .all(|value| value == ANTHROPIC_REAL || value == &bearer),
        "{anthropic:?}"
    );
    let openai = &hits[1];
    assert_eq!(
        (openai.method.as_str(), openai.target.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        openai.header_values("authorization"),
        vec![format!("Bearer {OPENAI_REAL}")]
    );
    let secrets: Vec<serde_json::Value> = home
        .audit_lines()
        .into_iter()
        .filter(|line| line["kind"] == "http" && line["decision"] == "allow")
        .map(|line| line["secrets"].clone())
        .collect();
    assert_eq!(
        secrets,
        [
            serde_json::json!(["ANTHROPIC_API_KEY"]),
            serde_json::json!(["OPENAI_API_KEY"])
        ]
    );
    for real in [ANTHROPIC_REAL, OPENAI_REAL] {
        assert!(!stdout.contains(real) && !output.stderr.contains(real));
        let log = std::fs::read_to_string(home.log_path()).unwrap_or_default();
        assert!(!log.contains(real), "{log}");
    }
}
