//! The real value of a secret never leaves airlock towards the sandbox or the operator's
//! outputs (docs/contract.md §3 and §5, docs/secrets.md): one proxy, one secret whose real
//! value changes under every encoding (`/`, `+`, `"`, `=`, `?`, `>`, `~`), and every path a
//! secret can take through it — header swap over HTTP/1.1 and h2, Basic auth swap (user and
//! password), responses that carry the real value back (the echo's JSON-escaped headers; a
//! `/reflect` endpoint returning it raw in a header and in base64, base64url,
//! percent-encoded and JSON form), the tripwire on another host, a foreign credential, a
//! refused host, an unreachable upstream, malformed requests. Then every byte airlock wrote
//! — audit log, stderr, stdout, every file in its directory and its `AIRLOCK_HOME` — and
//! every response head, body and client error the clients saw is searched for the real
//! value in raw, base64 (standard and URL-safe, padded or not, and at any alignment inside
//! a larger base64 text), percent-encoded and JSON-escaped form.
//!
//! Not vacuous: the upstream must have received the real value on every swapped request,
//! and the scrubbed responses must carry the surrogate in the encoding the real value had.

use std::path::Path;
use std::time::Duration;

use crate::support::clients::CurlResponse;
use crate::support::encodings::{base64, base64_inner, json_escaped, leak_forms, percent};
use crate::support::raw::{self, TunnelOutcome};
use crate::support::upstream::Hit;
use crate::support::{
    CurlRequest, ExpectedRefusal, HttpVersion, Proxy, ProxyBuilder, TestPki, Upstream,
    assert_refusal, curl, curl_get,
};

/// A real value (a valid header value) whose raw, base64, base64url, padded and unpadded,
/// percent-encoded and JSON-escaped forms all differ.
const REAL: &str = "ghp_Xk9/Lq+Wz\"7Rb=Tn4?>~Hp+Vd\"M~?q2";
const SECRET: &str = "LEAK_TOKEN";
const TOKEN_VAR: &str = "AIRLOCK_LEAK_TEST_TOKEN";

/// One output to search: what it is and its bytes.
struct Output {
    what: String,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Outputs(Vec<Output>);

impl Outputs {
    fn add(&mut self, what: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        self.0.push(Output {
            what: what.into(),
            bytes: bytes.into(),
        });
    }

    fn add_curl(&mut self, what: &str, response: &CurlResponse) {
        self.add(
            format!("{what}: response heads"),
            response.header_dump.clone(),
        );
        self.add(format!("{what}: response body"), response.body.clone());
        self.add(format!("{what}: curl stderr"), response.stderr.clone());
    }

    fn add_files(&mut self, root: &Path) {
        let mut pending = vec![root.to_path_buf()];
        while let Some(dir) = pending.pop() {
            let entries = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    let bytes = std::fs::read(&path)
                        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
                    self.add(format!("file {}", path.display()), bytes);
                }
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn header_values(hit: &Hit, name: &str) -> Vec<String> {
    hit.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

fn hit_for<'a>(hits: &'a [Hit], path: &str) -> &'a Hit {
    hits.iter()
        .find(|h| h.target == path)
        .unwrap_or_else(|| panic!("the upstream never received {path}: {hits:?}"))
}

/// The value of `name=` in a `/reflect` document.
fn reflected(body: &[u8], name: &str) -> String {
    let text = String::from_utf8_lossy(body);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= line in the reflect answer: {text}"))
        .to_string()
}

/// Guards the test's own encoders and the choice of [`REAL`]: the forms searched for are
/// correct and pairwise different, so each check looks at something distinct.
fn check_forms() {
    assert_eq!(
        base64(b"user:sk-bench-REAL-0123456789abcdef", false, true),
        "dXNlcjpzay1iZW5jaC1SRUFMLTAxMjM0NTY3ODlhYmNkZWY="
    );
    assert_eq!(base64(b"a", false, true), "YQ==");
    assert_eq!(base64(b"ab", false, false), "YWI");
    assert_eq!(base64(b"\xfb\xff", true, true), "-_8=");
    assert_eq!(percent("a/b\"", true), "a%2Fb%22");
    assert_eq!(json_escaped("a\"b/"), "a\\\"b/");
    let forms = leak_forms(REAL);
    for (i, (name_a, a)) in forms.iter().enumerate() {
        for (name_b, b) in &forms[i + 1..] {
            assert_ne!(a, b, "{name_a} and {name_b} of the test value coincide");
        }
    }
    for offset in 0..3 {
        assert_ne!(
            base64_inner(REAL.as_bytes(), offset, false),
            base64_inner(REAL.as_bytes(), offset, true),
            "standard and URL-safe base64 coincide at offset {offset}"
        );
    }
}

#[test]
fn the_real_value_appears_in_nothing_airlock_writes_or_answers() {
    check_forms();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let up = upstream.port();
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let (mut proxy, surrogate) = start_proxy(&pki, up, dead);

    let mut outputs = Outputs::default();
    let bearer = format!("Authorization: Bearer {surrogate}");
    let ctx = Leak {
        proxy: &proxy,
        pki: &pki,
        up,
        surrogate: &surrogate,
        bearer: &bearer,
    };
    swap_headers_and_basic_auth(&ctx, &mut outputs);
    reflect_every_encoding(&ctx, &mut outputs);
    refuse_and_fail(&ctx, dead, &mut outputs);
    send_malformed(&ctx, &mut outputs);
    assert_upstream_got_only_the_real_value(&upstream.hits(), &surrogate);
    assert_audit_names_the_secret_and_refusals(&proxy);

    // Stop the proxy so that everything it would write on the way out is written too.
    let status = proxy.terminate(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "the proxy exits cleanly on SIGTERM: {status:?}"
    );
    std::thread::sleep(Duration::from_millis(200));

    outputs.add("audit log", proxy.audit_log_text());
    outputs.add("proxy stderr", proxy.stderr());
    outputs.add("proxy stdout", proxy.stdout());
    outputs.add_files(proxy.dir());
    assert!(
        outputs
            .0
            .iter()
            .any(|o| o.what.starts_with("file ") && o.what.ends_with("surrogates.env")),
        "the proxy's directory was searched"
    );

    assert_no_leak(&outputs);
}

/// The proxy and what the requests of [`the_real_value_appears_in_nothing_airlock_writes_or_answers`]
/// send through it.
struct Leak<'a> {
    proxy: &'a Proxy,
    pki: &'a TestPki,
    /// The upstream's port.
    up: u16,
    surrogate: &'a str,
    /// `Authorization: Bearer SURROGATE`.
    bearer: &'a str,
}

fn leak_url(host: &str, port: u16, path: &str) -> String {
    format!("https://{host}:{port}{path}")
}

/// Starts the proxy with the secret from the environment (allowed: `localhost` on the
/// upstream's and the dead port, `other.test`); returns it with the surrogate it wrote.
fn start_proxy(pki: &TestPki, up: u16, dead: u16) -> (Proxy, String) {
    let builder = ProxyBuilder::new(pki);
    let surrogates_file = builder.dir().join("surrogates.env");
    let home = builder.dir().join("airlock-home");
    let xdg = builder.dir().join("xdg-data");
    std::fs::create_dir_all(&home).expect("mkdir home");
    std::fs::create_dir_all(&xdg).expect("mkdir xdg");
    // The value comes from the environment, so no input file in the proxy's directory
    // holds it: whatever is found there, airlock wrote.
    let proxy = builder
        .policy(&format!(
            "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{up}, {dead}]\n\
             \x20   - host: other.test\n      ports: [{up}]\n\
             secrets:\n  {SECRET}:\n    env: {TOKEN_VAR}\n    hosts: [localhost]\n"
        ))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .env(TOKEN_VAR, REAL)
        .env("AIRLOCK_HOME", home.to_str().expect("utf-8 path"))
        .env("XDG_DATA_HOME", xdg.to_str().expect("utf-8 path"))
        .arg("--surrogates-out")
        .arg(surrogates_file.to_str().expect("utf-8 path"))
        .start();
    let surrogates = std::fs::read_to_string(&surrogates_file).expect("surrogates file");
    let surrogate = surrogates
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{SECRET}=")))
        .unwrap_or_else(|| panic!("no {SECRET}= line in --surrogates-out: {surrogates}"))
        .to_string();
    assert_ne!(surrogate, REAL, "the sandbox must get a surrogate");
    assert_eq!(
        surrogate.len(),
        REAL.len(),
        "a generated surrogate has the real value's length"
    );

    (proxy, surrogate)
}

/// Steps 1 and 2: the header and Basic auth swaps.
fn swap_headers_and_basic_auth(ctx: &Leak<'_>, outputs: &mut Outputs) {
    let surrogate = ctx.surrogate;
    let (proxy, pki, up, bearer) = (ctx.proxy, ctx.pki, ctx.up, ctx.bearer);
    // 1. Header swap, HTTP/1.1 and h2: every header carrying the surrogate. The echo sends
    //    the received (real) values back JSON-escaped; they must come back as surrogates.
    let copy = format!("X-Copy: {surrogate}");
    let cookie = format!("Cookie: session={surrogate}");
    for (path, version) in [
        ("/echo/header-h1", HttpVersion::Http1),
        ("/echo/header-h2", HttpVersion::Http2),
    ] {
        let target = leak_url("localhost", up, path);
        let response = curl(
            proxy,
            pki,
            &CurlRequest {
                headers: &[bearer, &copy, &cookie],
                version,
                ..CurlRequest::get(&target)
            },
        );
        assert_eq!(response.status, 200, "{path}: {response:?}");
        let body = String::from_utf8_lossy(&response.body);
        assert!(
            body.contains(&format!("Bearer {}", json_escaped(surrogate))),
            "{path}: the echoed header is scrubbed back to the surrogate, JSON-escaped: {body}"
        );
        outputs.add_curl(path, &response);
    }

    // 2. Basic auth swap, the surrogate as password and as user name.
    let basic_password = format!("user:{surrogate}");
    let basic_user = format!("{surrogate}:x-oauth-basic");
    for (path, credential) in [
        ("/echo/basic-password", &basic_password),
        ("/echo/basic-user", &basic_user),
    ] {
        let header = format!(
            "Authorization: Basic {}",
            base64(credential.as_bytes(), false, true)
        );
        let target = leak_url("localhost", up, path);
        let response = curl_get(proxy, pki, &target, &[&header]);
        assert_eq!(response.status, 200, "{path}: {response:?}");
        outputs.add_curl(path, &response);
    }
}

/// Step 3: the real value handed back in every encoding.
fn reflect_every_encoding(ctx: &Leak<'_>, outputs: &mut Outputs) {
    let surrogate = ctx.surrogate;
    let (proxy, pki, up) = (ctx.proxy, ctx.pki, ctx.up);
    // 3. The upstream hands the real value back in every encoding, and raw in a header.
    let reflect = format!("X-Reflect: {surrogate}");
    let target = leak_url("localhost", up, "/reflect");
    let response = curl_get(proxy, pki, &target, &[&reflect]);
    assert_eq!(response.status, 200, "/reflect: {response:?}");
    let reflected_header = response
        .headers
        .iter()
        .find(|(n, _)| n == "x-reflected")
        .map(|(_, v)| v.clone());
    assert_eq!(
        reflected_header.as_deref(),
        Some(surrogate),
        "a response header carrying the real value is scrubbed to the surrogate"
    );
    for (line, expected) in [
        ("raw", surrogate.to_owned()),
        ("percent", percent(surrogate, true)),
        ("percent-lower", percent(surrogate, false)),
        ("json", format!("\"{}\"", json_escaped(surrogate))),
    ] {
        assert_eq!(
            reflected(&response.body, line),
            expected,
            "the {line} form of the real value becomes the {line} form of the surrogate"
        );
    }
    for (line, url_safe) in [
        ("base64", false),
        ("base64-unpadded", false),
        ("base64url", true),
        ("base64url-unpadded", true),
    ] {
        let inner = base64_inner(surrogate.as_bytes(), 0, url_safe).expect("long enough");
        assert!(
            reflected(&response.body, line).starts_with(&inner),
            "the {line} form of the real value becomes the {line} form of the surrogate: {}",
            String::from_utf8_lossy(&response.body)
        );
    }
    outputs.add_curl("/reflect", &response);
}

/// Steps 4 to 7: the tripwire, a foreign credential, a refused host, a dead upstream.
fn refuse_and_fail(ctx: &Leak<'_>, dead: u16, outputs: &mut Outputs) {
    let surrogate = ctx.surrogate;
    let (proxy, pki, up, bearer) = (ctx.proxy, ctx.pki, ctx.up, ctx.bearer);
    let basic_password = format!("user:{surrogate}");
    // 4. The tripwire: the surrogate to another allowed host, as a bearer and inside Basic.
    let basic_tripwire = format!(
        "Authorization: Basic {}",
        base64(basic_password.as_bytes(), false, true)
    );
    for (path, header) in [
        ("/echo/tripwire-bearer", bearer),
        ("/echo/tripwire-basic", basic_tripwire.as_str()),
    ] {
        let target = leak_url("other.test", up, path);
        let response = curl_get(proxy, pki, &target, &[header]);
        assert_refusal(
            response.status,
            &response.headers,
            &response.body,
            &ExpectedRefusal {
                reason: "secret_out_of_scope",
                method: "GET",
                host: "other.test",
                path: Some(path),
            },
        );
        outputs.add_curl(path, &response);
    }

    // 5. A foreign credential on the secret's host.
    let target = leak_url("localhost", up, "/echo/foreign");
    let response = curl_get(
        proxy,
        pki,
        &target,
        &["Authorization: Bearer ghp_attackerOwnedToken000000000000000"],
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
    outputs.add_curl("/echo/foreign", &response);

    // 6. A refused host, offered the surrogate (refused on CONNECT or inside TLS).
    let target = leak_url("refused.test", up, "/echo/refused");
    let response = curl_get(proxy, pki, &target, &[bearer]);
    assert!(
        response.status == 403 || response.connect_status == 403,
        "refused.test is refused: {response:?}"
    );
    outputs.add_curl("refused.test", &response);

    // 7. The secret's host, swapped, but the upstream is down: the error the proxy writes.
    let target = leak_url("localhost", dead, "/echo/down");
    let response = curl_get(proxy, pki, &target, &[bearer]);
    assert!(
        response.status >= 500 || response.exit != 0,
        "an unreachable upstream is an error: {response:?}"
    );
    outputs.add_curl("unreachable upstream", &response);
}

/// Step 8: malformed requests carrying the surrogate.
fn send_malformed(ctx: &Leak<'_>, outputs: &mut Outputs) {
    let surrogate = ctx.surrogate;
    let (proxy, pki, up) = (ctx.proxy, ctx.pki, ctx.up);
    // 8. Malformed requests carrying the surrogate: CL+TE inside TLS, duplicate Host plain.
    let smuggle = format!(
        "POST /echo/smuggle HTTP/1.1\r\nHost: localhost:{up}\r\nAuthorization: Bearer {surrogate}\r\n\
         Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    );
    let outcome = raw::connect_tls_expect_close(
        proxy.port(),
        pki,
        &format!("localhost:{up}"),
        "localhost",
        smuggle.as_bytes(),
    );
    let response = match outcome {
        TunnelOutcome::InsideTls(r) | TunnelOutcome::RefusedOnConnect(r) => r,
        TunnelOutcome::TlsFailed(e) => panic!("TLS to the proxy failed: {e}"),
    };
    assert_eq!(response.status, 400, "CL+TE: {response:?}");
    outputs.add("CL+TE inside TLS: raw response", response.raw);
    let duplicate = format!(
        "GET http://localhost:{up}/echo/duplicate HTTP/1.1\r\nHost: localhost:{up}\r\n\
         Host: other.test:{up}\r\nAuthorization: Bearer {surrogate}\r\nConnection: close\r\n\r\n"
    );
    let response = raw::plain(proxy.port(), duplicate.as_bytes());
    assert_eq!(response.status, 400, "duplicate Host: {response:?}");
    outputs.add("duplicate Host: raw response", response.raw);
}

/// Not vacuous: the upstream received the real value on every swapped request (and the
/// surrogate on none), and nothing refused reached it.
fn assert_upstream_got_only_the_real_value(hits: &[Hit], surrogate: &str) {
    for path in ["/echo/header-h1", "/echo/header-h2"] {
        let hit = hit_for(hits, path);
        assert_eq!(
            header_values(hit, "authorization"),
            vec![format!("Bearer {REAL}")],
            "{path}: the upstream got the real value"
        );
        assert_eq!(
            header_values(hit, "x-copy"),
            vec![REAL.to_string()],
            "{path}"
        );
        assert_eq!(
            header_values(hit, "cookie"),
            vec![format!("session={REAL}")],
            "{path}"
        );
    }
    assert_eq!(
        header_values(hit_for(hits, "/echo/basic-password"), "authorization"),
        vec![format!(
            "Basic {}",
            base64(format!("user:{REAL}").as_bytes(), false, true)
        )],
        "the surrogate as Basic password becomes the real value"
    );
    assert_eq!(
        header_values(hit_for(hits, "/echo/basic-user"), "authorization"),
        vec![format!(
            "Basic {}",
            base64(format!("{REAL}:x-oauth-basic").as_bytes(), false, true)
        )],
        "the surrogate as Basic user becomes the real value"
    );
    assert_eq!(
        header_values(hit_for(hits, "/reflect"), "x-reflect"),
        vec![REAL.to_string()],
        "the reflect request carried the real value"
    );
    let mut reached: Vec<&str> = hits.iter().map(|h| h.target.as_str()).collect();
    reached.sort_unstable();
    assert_eq!(
        reached,
        [
            "/echo/basic-password",
            "/echo/basic-user",
            "/echo/header-h1",
            "/echo/header-h2",
            "/reflect"
        ],
        "only the allowed, swapped requests reach the upstream"
    );
    for hit in hits {
        assert!(
            !format!("{:?}", hit.headers).contains(surrogate),
            "{}: a surrogate was forwarded unswapped: {:?}",
            hit.target,
            hit.headers
        );
    }
}

/// The audit log names the secret on the swapped requests and has every refusal.
fn assert_audit_names_the_secret_and_refusals(proxy: &Proxy) {
    for path in [
        "/echo/header-h1",
        "/echo/header-h2",
        "/echo/basic-password",
        "/echo/basic-user",
        "/reflect",
    ] {
        let line = proxy.audit_line_where(&format!("for {path}"), |l| l["path"] == path);
        assert_eq!(line["decision"], "allow", "{line}");
        assert_eq!(line["secrets"], serde_json::json!([SECRET]), "{line}");
    }
    for (reason, host) in [
        ("secret_out_of_scope", "other.test"),
        ("foreign_credential", "localhost"),
        ("host_not_allowed", "refused.test"),
    ] {
        proxy.audit_line_where(&format!("with {reason} for {host}"), |l| {
            l["reason"] == reason && l["host"] == host && l["decision"] == "deny"
        });
    }
}

/// Panics naming every output that holds [`REAL`] in any of its forms, and the form.
fn assert_no_leak(outputs: &Outputs) {
    let forms = leak_forms(REAL);
    let mut leaks = Vec::new();
    for output in &outputs.0 {
        for (form_name, form) in &forms {
            if let Some(at) = find(&output.bytes, form.as_bytes()) {
                let start = at.saturating_sub(40);
                let end = (at + form.len() + 40).min(output.bytes.len());
                leaks.push(format!(
                    "{} holds the real value in {form_name} form ({form:?}): …{}…",
                    output.what,
                    String::from_utf8_lossy(&output.bytes[start..end])
                ));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "the real value of {SECRET} leaked ({} finding(s)):\n{}",
        leaks.len(),
        leaks.join("\n")
    );
}

/// The same response checks with a fixed surrogate (`--secret NAME=SURROGATE=VALUE@HOST`)
/// whose length differs from the real value's: every encoded form is scrubbed whatever the
/// surrogate, a Basic-auth echo included (this once leaked: only the raw form was
/// replaced for such a pair).
#[test]
fn a_fixed_surrogate_of_another_length_is_scrubbed_in_every_form() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let surrogate = "PLACEHOLDER_LEAK_TOKEN_0001";
    assert_ne!(surrogate.len(), REAL.len());
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
        .secret(&format!("{SECRET}={surrogate}={REAL}@localhost"))
        .start();
    let basic = format!(
        "Authorization: Basic {}",
        base64(format!("user:{surrogate}").as_bytes(), false, true)
    );
    let reflect = format!("X-Reflect: {surrogate}");
    let mut outputs = Outputs::default();
    for (path, header) in [("/echo/basic", &basic), ("/reflect", &reflect)] {
        let target = format!("https://localhost:{}{path}", upstream.port());
        let response = curl_get(&proxy, &pki, &target, &[header]);
        assert_eq!(response.status, 200, "{path}: {response:?}");
        outputs.add_curl(path, &response);
    }
    assert_eq!(
        header_values(hit_for(&upstream.hits(), "/reflect"), "x-reflect"),
        vec![REAL.to_string()],
        "the upstream got the real value"
    );
    assert_no_leak(&outputs);
}
