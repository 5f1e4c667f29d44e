//! Placeholder secrets (docs/contract.md §3, docs/secrets.md): the placeholder is swapped
//! for the real value only on the secret's host (every header, inside Basic auth), the
//! response is scrubbed back, the placeholder sent elsewhere is a tripwire, a foreign
//! credential on the secret's host is refused, and the real value never appears in the log
//! or on stderr.

use crate::support;
use crate::support::{
    CurlRequest, ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_refusal, curl,
    curl_get,
};

const PLACEHOLDER: &str = "PLACEHOLDER_LLM_KEY_7f3a";
const REAL: &str = "sk-bench-REAL-0123456789abcdef";
/// base64("user:PLACEHOLDER_LLM_KEY_7f3a")
const BASIC_PLACEHOLDER: &str = "dXNlcjpQTEFDRUhPTERFUl9MTE1fS0VZXzdmM2E=";
/// base64("user:sk-bench-REAL-0123456789abcdef")
const BASIC_REAL: &str = "dXNlcjpzay1iZW5jaC1SRUFMLTAxMjM0NTY3ODlhYmNkZWY=";

fn start(pki: &TestPki, upstream: &Upstream) -> Proxy {
    ProxyBuilder::new(pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .allow(&format!("other.test:{}", upstream.port()))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .secret(&format!("LLM_KEY={PLACEHOLDER}={REAL}@localhost"))
        .start()
}

fn assert_real_value_never_shown(proxy: &Proxy) {
    let log = proxy.audit_log_text();
    assert!(
        !log.contains(REAL),
        "the real secret is in the audit log:\n{log}"
    );
    assert!(
        !log.contains(BASIC_REAL),
        "the real secret (base64) is in the audit log"
    );
    let stderr = proxy.stderr();
    assert!(
        !stderr.contains(REAL),
        "the real secret is on stderr:\n{stderr}"
    );
}

fn header_values(hit: &support::upstream::Hit, name: &str) -> Vec<String> {
    hit.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

#[test]
fn placeholder_is_swapped_on_its_host_and_scrubbed_back() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let url = format!("https://localhost:{}/echo/llm", upstream.port());
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let extra = format!("X-Copy: {PLACEHOLDER}");
    let response = curl_get(&proxy, &pki, &url, &[&auth, &extra]);
    assert_eq!(response.status, 200, "{response:?}");
    let hits = upstream.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        header_values(&hits[0], "authorization"),
        vec![format!("Bearer {REAL}")],
        "the upstream receives the real value"
    );
    assert_eq!(
        header_values(&hits[0], "x-copy"),
        vec![REAL.to_string()],
        "every header value is swapped"
    );
    let body = String::from_utf8_lossy(&response.body);
    assert!(
        !body.contains(REAL),
        "the response echoing the real value is scrubbed: {body}"
    );
    assert!(
        body.contains(PLACEHOLDER),
        "scrubbing puts the placeholder back: {body}"
    );
    let line = proxy.audit_line_where("for /echo/llm", |l| l["path"] == "/echo/llm");
    assert_eq!(line["decision"], "allow", "{line}");
    assert_eq!(line["secrets"], serde_json::json!(["LLM_KEY"]), "{line}");
    assert_real_value_never_shown(&proxy);
}

#[test]
fn placeholder_inside_basic_auth_is_swapped() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let url = format!("https://localhost:{}/echo/basic", upstream.port());
    let auth = format!("Authorization: Basic {BASIC_PLACEHOLDER}");
    let response = curl_get(&proxy, &pki, &url, &[&auth]);
    assert_eq!(response.status, 200, "{response:?}");
    let hits = upstream.hits();
    assert_eq!(
        header_values(&hits[0], "authorization"),
        vec![format!("Basic {BASIC_REAL}")]
    );
    assert_real_value_never_shown(&proxy);
}

#[test]
fn placeholder_sent_to_another_host_is_a_tripwire() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let url = format!("https://other.test:{}/echo/exfil", upstream.port());
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let response = curl_get(&proxy, &pki, &url, &[&auth]);
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "secret_out_of_scope",
            method: "GET",
            host: "other.test",
            path: Some("/echo/exfil"),
        },
    );
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    let query_url = format!(
        "https://other.test:{}/echo/exfil?k={PLACEHOLDER}",
        upstream.port()
    );
    let response = curl(&proxy, &pki, &CurlRequest::get(&query_url));
    assert_eq!(
        response.status, 403,
        "placeholder in the query: {response:?}"
    );
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    let line = proxy.audit_line_where("with secret_out_of_scope", |l| {
        l["reason"] == "secret_out_of_scope"
    });
    assert_eq!(line["decision"], "deny", "{line}");
    assert_eq!(line["host"], "other.test", "{line}");
    assert_real_value_never_shown(&proxy);
}

#[test]
fn foreign_credential_on_the_secrets_host_is_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let url = format!("https://localhost:{}/echo/foreign", upstream.port());
    let response = curl_get(
        &proxy,
        &pki,
        &url,
        &["Authorization: Bearer sk-attacker-owned-key-000000"],
    );
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "foreign_credential",
            method: "GET",
            host: "localhost",
            path: Some("/echo/foreign"),
        },
    );
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    let log = proxy.audit_log_text();
    assert!(
        !log.contains("sk-attacker-owned-key"),
        "credentials stay out of the log"
    );
    assert_real_value_never_shown(&proxy);
}

/// A `body: true` secret with a fixed surrogate of a different length than its value, so
/// that the upstream's `body_len` proves the swap even though the echoed response is
/// scrubbed back.
fn start_with_body_secret(pki: &TestPki, upstream: &Upstream) -> Proxy {
    let port = upstream.port();
    ProxyBuilder::new(pki)
        .policy(&format!(
            "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n    - host: other.test\n      ports: [{port}]\n\
             secrets:\n  LLM_KEY:\n    value: \"{REAL}\"\n    surrogate: \"{PLACEHOLDER}\"\n    hosts: [localhost]\n    body: true\n"
        ))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .start()
}

#[test]
fn body_secrets_are_swapped_in_bodies_and_trip_elsewhere() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start_with_body_secret(&pki, &upstream);
    let body = format!("{{\"api_key\":\"{PLACEHOLDER}\",\"n\":1}}");
    let post = |url: &str| {
        curl(
            &proxy,
            &pki,
            &CurlRequest {
                method: Some("POST"),
                body: Some(&body),
                ..CurlRequest::get(url)
            },
        )
    };
    let response = post(&format!("https://localhost:{}/echo/body", upstream.port()));
    assert_eq!(response.status, 200, "{response:?}");
    let echo: serde_json::Value = serde_json::from_slice(&response.body).expect("echo JSON");
    assert_eq!(
        echo["body_len"],
        body.len() - PLACEHOLDER.len() + REAL.len(),
        "the upstream received the real value in the body: {echo}"
    );
    assert_eq!(
        echo["body"], body,
        "the echoed real value is scrubbed back to the placeholder"
    );

    let line = proxy.audit_line_where("for /echo/body", |l| l["path"] == "/echo/body");
    assert_eq!(
        line["secrets"],
        serde_json::json!(["LLM_KEY"]),
        "the audit line names the secret swapped in the body: {line}"
    );

    let response = post(&format!(
        "https://other.test:{}/echo/paste",
        upstream.port()
    ));
    assert_eq!(response.status, 403, "{response:?}");
    let refusal: serde_json::Value = serde_json::from_slice(&response.body).expect("JSON 403");
    assert_eq!(refusal["reason"], "secret_out_of_scope", "{refusal}");
    // Bodies stream: the other host may see the request head, but the upload is aborted
    // before the placeholder (held back until it is recognised) is released.
    let line = proxy.audit_line_where("the body tripwire", |l| {
        l["reason"] == "secret_out_of_scope" && l["host"] == "other.test"
    });
    assert_eq!(line["decision"], "deny", "{line}");
    assert_real_value_never_shown(&proxy);
}

#[test]
fn a_rotated_file_secret_is_used_without_a_restart() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let dir = tempfile::tempdir().expect("tempdir");
    let secret_file = dir.path().join("llm-key");
    let first = "sk-rotate-FIRST-value-0001";
    let second = "sk-rotate-SECOND-value-000002";
    std::fs::write(&secret_file, format!("{first}\n")).expect("write secret");
    let port = upstream.port();
    let proxy = ProxyBuilder::new(&pki)
        .policy(&format!(
            "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
             secrets:\n  LLM_KEY:\n    file: {}\n    surrogate: \"{PLACEHOLDER}\"\n    hosts: [localhost]\n",
            secret_file.display()
        ))
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{port}/echo/rotate");
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let send = || {
        let response = curl_get(&proxy, &pki, &url, &[&auth]);
        assert_eq!(response.status, 200, "{response:?}");
        let hits = upstream.hits();
        let last = hits.last().expect("a hit");
        header_values(last, "authorization")
    };
    assert_eq!(send(), vec![format!("Bearer {first}")]);

    std::fs::write(&secret_file, format!("{second}\n")).expect("rotate secret");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut seen = send();
    while seen != vec![format!("Bearer {second}")] && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        seen = send();
    }
    assert_eq!(
        seen,
        vec![format!("Bearer {second}")],
        "the new value is used within the poll interval"
    );
    let stderr = proxy.stderr();
    assert!(stderr.contains("LLM_KEY re-read"), "{stderr}");
    let log = proxy.audit_log_text();
    for value in [first, second] {
        assert!(
            !stderr.contains(value) && !log.contains(value),
            "a real value leaked"
        );
    }
}

#[test]
fn a_compressed_response_from_a_secrets_host_is_decoded_and_scrubbed() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let on_secret_host = format!("https://localhost:{}/gzip-echo", upstream.port());
    let response = curl_get(&proxy, &pki, &on_secret_host, &[&auth]);
    assert_eq!(response.status, 200, "{response:?}");
    let hits = upstream.hits();
    assert_eq!(
        header_values(&hits[0], "accept-encoding"),
        vec!["identity".to_owned()],
        "airlock asks a secret's host for an identity-encoded response"
    );
    assert!(
        !response
            .headers
            .iter()
            .any(|(name, _)| name == "content-encoding"),
        "the body is passed on decoded: {response:?}"
    );
    let body = String::from_utf8_lossy(&response.body);
    assert!(body.contains(PLACEHOLDER), "decoded and scrubbed: {body}");
    assert!(!body.contains(REAL), "the real value came back: {body}");
    // A body that claims gzip but is not: the transfer is aborted, nothing unscrubbed
    // reaches the client.
    let corrupt = format!("https://localhost:{}/compressed", upstream.port());
    let response = curl_get(&proxy, &pki, &corrupt, &[&auth]);
    assert!(
        response.exit != 0 && response.body.is_empty(),
        "an undecodable body must not look whole: {response:?}"
    );
    // Elsewhere nothing is scrubbed, so a compressed response passes as it is.
    let elsewhere = format!("https://other.test:{}/compressed", upstream.port());
    let response = curl(&proxy, &pki, &CurlRequest::get(&elsewhere));
    assert_eq!(response.status, 200, "{response:?}");
    assert_real_value_never_shown(&proxy);
}

#[test]
fn inject_sets_the_header_whatever_the_client_sent() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let proxy = ProxyBuilder::new(&pki)
        .policy(&format!(
            "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
             secrets:\n  API_KEY:\n    value: \"{REAL}\"\n    hosts: [localhost]\n    headers: [x-api-key]\n    \
             inject: {{header: x-api-key, format: \"Key {{value}}\"}}\n"
        ))
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{port}/echo/inject");
    for sent in [None, Some("x-api-key: something-the-agent-made-up")] {
        let headers: Vec<&str> = sent.into_iter().collect();
        let response = curl(
            &proxy,
            &pki,
            &CurlRequest {
                headers: &headers,
                ..CurlRequest::get(&url)
            },
        );
        assert_eq!(response.status, 200, "{sent:?}: {response:?}");
        let hits = upstream.hits();
        assert_eq!(
            header_values(hits.last().expect("a hit"), "x-api-key"),
            vec![format!("Key {REAL}")],
            "{sent:?}"
        );
    }
    assert_real_value_never_shown(&proxy);
}

#[test]
fn a_surrogate_over_plain_http_is_refused_even_to_its_own_host() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let proxy = start(&pki, &upstream);
    let url = format!("http://localhost:{}/echo/plain", upstream.port());
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let response = curl_get(&proxy, &pki, &url, &[&auth]);
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason: "secret_out_of_scope",
            method: "GET",
            host: "localhost",
            path: Some("/echo/plain"),
        },
    );
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    // Control: the same host over plain HTTP without the surrogate passes untouched.
    let response = curl_get(&proxy, &pki, &url, &[]);
    assert_eq!(response.status, 200, "{response:?}");
    assert_real_value_never_shown(&proxy);
}

#[test]
fn foreign_credentials_in_cookies_query_and_other_headers_are_refused() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    // One secret swapped in every header, one narrowed to `x-api-key` (as presets narrow):
    // the places checked for a foreign credential are the same for both.
    let narrowed = ProxyBuilder::new(&pki)
        .policy(&format!(
            "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n\
             secrets:\n  API_KEY:\n    value: \"{REAL}\"\n    surrogate: \"{PLACEHOLDER}\"\n    \
             hosts: [localhost]\n    headers: [x-api-key]\n"
        ))
        .resolve_loopback("localhost")
        .start();
    let every_header = start(&pki, &upstream);
    let attempts: [(&str, &[&str]); 6] = [
        ("/v1/models?key=AIzaSyAttackerOwnedKey", &[]),
        ("/v1/x?alt=json&api_key=attacker-owned-key", &[]),
        ("/v1/x?access%5Ftoken=attacker-owned-key", &[]),
        ("/v1/x", &["X-Goog-Api-Key: AIzaSyAttackerOwnedKey"]),
        (
            "/v1/x",
            &["Cookie: _cfuvid=1; user_session=attacker-owned-session"],
        ),
        ("/v1/x", &["Authorization: Bearer attacker-owned-key"]),
    ];
    for proxy in [&narrowed, &every_header] {
        for (target, headers) in attempts {
            let url = format!("https://localhost:{port}{target}");
            let response = curl_get(proxy, &pki, &url, headers);
            assert_refusal(
                response.status,
                &response.headers,
                &response.body,
                &ExpectedRefusal {
                    reason: "foreign_credential",
                    method: "GET",
                    host: "localhost",
                    path: Some(target.split('?').next().unwrap_or(target)),
                },
            );
        }
        let log = proxy.audit_log_text();
        assert!(
            !log.contains("attacker-owned") && !log.contains("AIzaSy"),
            "{log}"
        );
        assert_real_value_never_shown(proxy);
    }
    assert_eq!(upstream.hit_count(), 0, "{:?}", upstream.hits());
    // Controls: cookies that are no credential and the surrogate itself pass.
    let placeholder = format!("x-api-key: {PLACEHOLDER}");
    let cookie = format!("Cookie: __cf_bm=abc.def; _cfuvid=1; user_session={PLACEHOLDER}");
    for proxy in [&narrowed, &every_header] {
        let url = format!("https://localhost:{port}/echo/ok?key={PLACEHOLDER}&page=2");
        let response = curl_get(proxy, &pki, &url, &[&placeholder, &cookie]);
        assert_eq!(response.status, 200, "{response:?}");
    }
}

#[test]
fn a_path_built_to_chain_redactions_is_answered_at_once_and_logged_redacted_whole() {
    // The path is the agent's to choose, and its well-known tokens are redacted before it
    // is logged. 2,400 AWS-shaped runs, each followed by the next: only the last is a key,
    // and redacting it makes the one before a key, and so on. Redacted pass by pass, this
    // 48 KB path cost 12 s of the proxy's CPU (release build) on one of its workers;
    // docs/security.md, "Bounded work per request".
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = start(&pki, &upstream);
    let chain = "AKIAQWERTYUIOPASDFGH".repeat(2_400);
    let url = format!("https://localhost:{}/echo/{chain}", upstream.port());
    let header = format!("Authorization: Bearer {PLACEHOLDER}");
    let request = CurlRequest {
        headers: &[&header],
        ..CurlRequest::get(&url)
    };
    let started = std::time::Instant::now();
    let response = curl(&proxy, &pki, &request);
    let took = started.elapsed();
    assert_eq!(response.status, 403, "{response:?}");
    assert!(
        took < std::time::Duration::from_secs(10),
        "answered after {took:?}"
    );
    let line = proxy.audit_line_where("for the chained path", |l| {
        l["host"] == "localhost" && l["decision"] == "deny"
    });
    assert_eq!(line["path"], "[REDACTED]", "{line}");
    assert_eq!(line["credential"], "aws", "{line}");
    // The proxy still answers the next request at once.
    let url = format!("https://localhost:{}/echo/after", upstream.port());
    assert_eq!(curl(&proxy, &pki, &CurlRequest::get(&url)).status, 200);
    assert_real_value_never_shown(&proxy);
}
