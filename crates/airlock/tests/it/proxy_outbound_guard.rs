//! The outbound guard (docs/security.md, "Outbound guard"), tried as an injected agent
//! would: a configured secret's real value, read from a file, sent to another allowed host
//! in a header, the path, the query or the body, raw or encoded, over HTTP/1.1, HTTP/2 and
//! a WebSocket, split across chunk and frame boundaries of a large upload: refused
//! `secret_out_of_scope` (`"form":"real"`) and received nowhere; to its own host it passes
//! untouched; in clear it is refused (`"form":"cleartext"`). Well-known credential formats
//! that nobody configured are refused `credential_outbound` (GitHub only with a valid
//! checksum, AWS documentation keys pass) unless `dlp` logs, ignores or allows them; and
//! ordinary uploads (100 MiB of random bytes) pass. Second audit (issue 31): request
//! trailers (HTTP/1.1 chunked and HTTP/2), WebSocket ping, pong and close payloads, the
//! host name (CONNECT target, `Host`, `:authority`, absolute URI; refused before it is
//! resolved or dialled), header names (lower-cased), base64 wrapped or spaced and a value
//! split over header lines are searched; the real value in `Authorization` to its own
//! host passes unchanged over HTTP/1.1 and HTTP/2.

mod formats;
mod hidden;
mod real_value;
mod websocket;

use crate::support;
use crate::support::{
    CurlRequest, ExpectedRefusal, Proxy, ProxyBuilder, TestPki, Upstream, assert_refusal, curl,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// The configured secret's real value: a GitHub token with a valid checksum.
const REAL: &str = "ghp_R3alValueOfTheTokenXYZ0123456789abc";
const SURROGATE: &str = "ghp_SurrogateOfTheTokenXYZ012345678def";

/// A GitHub token nobody configured, with a valid checksum.
fn unknown_github_token() -> String {
    let payload = "k9Jq2mZx7Vb4Nc1Lp8Ws3Df6Gh0TyA";
    format!("ghp_{payload}{}", github_checksum(payload))
}

/// GitHub's checksum: CRC-32 of the payload in base 62, six digits.
fn github_checksum(payload: &str) -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut value = u64::from(crc32(payload.as_bytes()));
    let mut out = [b'0'; 6];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(value % 62) as usize];
        value /= 62;
    }
    String::from_utf8(out.to_vec()).unwrap()
}

/// CRC-32 (IEEE), bit by bit: the test's own reference, independent of the proxy's.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

struct Setup {
    pki: TestPki,
    upstream: Upstream,
    proxy: Proxy,
}

impl Setup {
    /// `localhost` is the secret's host, `other.test` another allowed host; `policy` is
    /// extra YAML (a `dlp` section).
    fn new(policy: &str) -> Setup {
        let pki = TestPki::new();
        let upstream = Upstream::tls(&pki);
        let proxy = Self::proxy(&pki, upstream.port(), policy);
        Setup {
            pki,
            upstream,
            proxy,
        }
    }

    fn proxy(pki: &TestPki, port: u16, policy: &str) -> Proxy {
        let mut builder = ProxyBuilder::new(pki)
            .allow(&format!("localhost:{port}"))
            .allow(&format!("other.test:{port}"))
            .resolve_loopback("localhost")
            .resolve_loopback("other.test")
            .secret(&format!("GH_TOKEN={SURROGATE}={REAL}@localhost"));
        if !policy.is_empty() {
            builder = builder.policy(&format!("version: 1\n{policy}"));
        }
        builder.start()
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.upstream.port())
    }

    /// curl through the proxy to `host`'s `path`, with the rest of `request`.
    fn curl(
        &self,
        host: &str,
        path: &str,
        request: CurlRequest<'_>,
    ) -> support::clients::CurlResponse {
        let url = self.url(host, path);
        curl(
            &self.proxy,
            &self.pki,
            &CurlRequest {
                url: &url,
                ..request
            },
        )
    }

    /// `PUT`s `file` (curl's `@PATH`) to `host`'s `path` over `version`.
    fn upload(
        &self,
        host: &str,
        path: &str,
        file: &str,
        version: support::HttpVersion,
    ) -> support::clients::CurlResponse {
        let request = CurlRequest {
            method: Some("PUT"),
            body: Some(file),
            version,
            ..CurlRequest::get("")
        };
        self.curl(host, path, request)
    }

    /// Sends `headers` and, when there is one, `body` (then as `POST`) to `host`'s `path`.
    fn send(
        &self,
        host: &str,
        path: &str,
        headers: &[&str],
        body: Option<&str>,
    ) -> support::clients::CurlResponse {
        let request = CurlRequest {
            method: body.map(|_| "POST"),
            headers,
            body,
            ..CurlRequest::get("")
        };
        self.curl(host, path, request)
    }

    /// The audit line of the request to `path`.
    fn line(&self, path: &str) -> Value {
        self.proxy
            .audit_line_where(&format!("for {path}"), |l| l["path"] == path)
    }

    fn assert_never_received(&self, what: &str, needles: &[&[u8]]) {
        let received = self.upstream.received();
        let heads = format!("{:?}", self.upstream.hits());
        for needle in needles {
            assert!(
                !received.windows(needle.len()).any(|w| w == *needle),
                "{what}: the upstream received {}",
                String::from_utf8_lossy(needle)
            );
            assert!(
                !heads.contains(&*String::from_utf8_lossy(needle)),
                "{what}: a request head carried {}",
                String::from_utf8_lossy(needle)
            );
        }
    }

    fn assert_real_value_never_logged(&self) {
        let log = self.proxy.audit_log_text();
        for needle in [
            REAL.to_owned(),
            STANDARD.encode(REAL),
            unknown_github_token(),
        ] {
            assert!(
                !log.contains(&needle),
                "the audit log holds {needle}:\n{log}"
            );
        }
        assert!(
            !self.proxy.stderr().contains(REAL),
            "stderr holds the real value"
        );
    }
}

/// Asserts a refusal for `reason` of the request to `path` on `other.test` (any method).
fn assert_refused(response: &support::clients::CurlResponse, reason: &str, path: &str) -> Value {
    assert_refused_on(response, reason, "other.test", path)
}

fn assert_refused_on(
    response: &support::clients::CurlResponse,
    reason: &str,
    host: &str,
    path: &str,
) -> Value {
    let method = if response.status == 403 {
        response.json()["method"]
            .as_str()
            .unwrap_or("GET")
            .to_owned()
    } else {
        "GET".to_owned()
    };
    assert_refusal(
        response.status,
        &response.headers,
        &response.body,
        &ExpectedRefusal {
            reason,
            method: &method,
            host,
            path: Some(path),
        },
    )
}

/// Whether `haystack` holds `needle`.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Asserts the audit log holds the value in no case (a host name is lower-cased).
fn assert_log_free_of_the_value(proxy: &Proxy) {
    let log = proxy.audit_log_text().to_ascii_lowercase();
    assert!(
        !log.contains(&REAL.to_ascii_lowercase()),
        "the audit log holds the value:\n{log}"
    );
    let stderr = proxy.stderr().to_ascii_lowercase();
    assert!(
        !stderr.contains(&REAL.to_ascii_lowercase()),
        "stderr holds the value"
    );
}
