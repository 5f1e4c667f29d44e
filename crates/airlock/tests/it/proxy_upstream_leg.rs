//! The upstream leg of an HTTP/1.1 client connection (docs/benchmarks.md, "The c=1
//! exchange"): its own HTTP/1.1 upstream connection, driven on its task. Sequential client
//! connections to one destination reuse one upstream connection (the spare), concurrent
//! ones at most the bound of legs and the pool's connection; an upstream
//! that closes the leg is dialled again; a body cut short upstream reaches the client cut
//! short, with its audit line; h2 clients keep the pooled client, h2 upstream included.

use std::time::Duration;

use crate::support::clients::run_bounded;
use crate::support::scripted::ScriptedUpstream;
use crate::support::{CurlRequest, HttpVersion, Proxy, ProxyBuilder, TestPki, Upstream, curl};

/// Long enough for a client connection curl closed to be ended by the proxy.
const SETTLE: Duration = Duration::from_millis(300);

fn proxy_for(pki: &TestPki, port: u16) -> Proxy {
    ProxyBuilder::new(pki)
        .allow(&format!("localhost:{port}"))
        .resolve_loopback("localhost")
        .start()
}

/// One curl GET of `url` through `proxy` over `version`: status and the echoed version.
fn echo_version(proxy: &Proxy, pki: &TestPki, url: &str, version: HttpVersion) -> String {
    let request = CurlRequest {
        version,
        ..CurlRequest::get(url)
    };
    let response = curl(proxy, pki, &request);
    assert_eq!(response.status, 200, "{response:?}");
    response.json()["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn sequential_client_connections_share_one_upstream_connection() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for(&pki, upstream.port());
    let url = format!("https://localhost:{}/echo/leg", upstream.port());
    for _ in 0..3 {
        // An HTTP/1.1 client gets its own HTTP/1.1 leg, even to an h2 upstream.
        assert_eq!(
            echo_version(&proxy, &pki, &url, HttpVersion::Http1),
            "HTTP/1.1"
        );
        std::thread::sleep(SETTLE);
    }
    assert_eq!(upstream.hit_count(), 3);
    assert_eq!(
        upstream.connections(),
        1,
        "each client connection's leg was handed to the next"
    );
    proxy.audit(3);
}

/// Eight clients at once, each opening a new client connection per request (the
/// harness's S2c8): the ended connections' legs are kept as spares and taken by the next
/// ones, so the upstream sees the bound of legs (4) and the pool's connection, not a new
/// connection per client connection.
#[test]
fn concurrent_client_connections_reuse_the_bounded_legs() {
    const CLIENTS: usize = 8;
    const EACH: usize = 6;
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = proxy_for(&pki, upstream.port());
    let url = format!("https://localhost:{}/echo/many", upstream.port());
    std::thread::scope(|scope| {
        for _ in 0..CLIENTS {
            scope.spawn(|| {
                for _ in 0..EACH {
                    echo_version(&proxy, &pki, &url, HttpVersion::Http1);
                }
            });
        }
    });
    assert_eq!(upstream.hit_count(), CLIENTS * EACH);
    let connections = upstream.connections();
    assert!(
        // 4 legs and the pool's connection, with room for a leg the upstream or a busy
        // machine closed; one spare per destination made 21.
        connections <= 8,
        "{connections} upstream connections for {} client connections: legs were not kept",
        CLIENTS * EACH
    );
    proxy.audit(CLIENTS * EACH);
}

#[test]
fn h2_clients_keep_the_pool_and_both_sides_speak_either_version() {
    let pki = TestPki::new();
    let any = Upstream::tls(&pki);
    let http1 = Upstream::tls_http1(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", any.port()))
        .allow(&format!("localhost:{}", http1.port()))
        .resolve_loopback("localhost")
        .start();
    let on = |upstream: &Upstream| format!("https://localhost:{}/echo/v", upstream.port());
    let cases = [
        (&any, HttpVersion::Http1, "HTTP/1.1"),
        (&any, HttpVersion::Http2, "HTTP/2.0"),
        (&http1, HttpVersion::Http1, "HTTP/1.1"),
        (&http1, HttpVersion::Http2, "HTTP/1.1"),
    ];
    for (upstream, client, expected) in cases {
        let url = on(upstream);
        assert_eq!(echo_version(&proxy, &pki, &url, client), expected, "{url}");
    }
    // The h1 leg to `any` and the pool's h2 connection; to `http1`, the leg and the pool's.
    assert_eq!(any.connections(), 2);
    assert_eq!(http1.connections(), 2);
    proxy.audit(4);
}

#[test]
fn plain_http_proxy_requests_use_the_leg() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let proxy = proxy_for(&pki, upstream.port());
    let url = format!("http://localhost:{}/echo/plain", upstream.port());
    let written = curl_many(&proxy, &pki, &[&url, &url, &url]);
    assert_eq!(written, ["200", "200", "200"]);
    assert_eq!(upstream.hit_count(), 3);
    assert_eq!(upstream.connections(), 1, "one client connection, one leg");
}

/// Answers `/cut` with 10 of 100 declared bytes, anything else with `ok`; then closes
/// (every connection serves one request).
fn cutting_script(head: &str) -> Vec<u8> {
    if head.starts_with("GET /cut ") {
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789".to_vec()
    } else {
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_vec()
    }
}

#[test]
fn an_upstream_that_closes_mid_response_cuts_the_body_and_is_dialled_again() {
    let pki = TestPki::new();
    let upstream = ScriptedUpstream::tls(&pki, cutting_script);
    let proxy = proxy_for(&pki, upstream.port());
    let base = format!("https://localhost:{}", upstream.port());
    let (ok, cut) = (format!("{base}/ok"), format!("{base}/cut"));
    // One client connection: the leg closed by the upstream after each answer is
    // dialled again for the next request.
    let written = curl_many(&proxy, &pki, &[&ok, &ok]);
    assert_eq!(written, ["200", "200"]);
    let response = curl(&proxy, &pki, &CurlRequest::get(&cut));
    assert_eq!(response.exit, 18, "curl: partial file: {response:?}");
    assert_eq!(response.body, b"0123456789");
    let line = proxy.audit_line_where("the cut exchange", |l| l["path"] == "/cut");
    assert_eq!(line["status"], 200, "{line}");
    assert_eq!(line["bytes_down"], 10, "{line}");
    assert_eq!(upstream.heads().len(), 3);
}

/// GETs every URL in one curl run (one client connection) through `proxy`; the status
/// of each, in order.
fn curl_many(proxy: &Proxy, pki: &TestPki, urls: &[&str]) -> Vec<String> {
    let mut command = crate::support::tool("curl");
    command
        .args([
            "-q",
            "-sS",
            "--max-time",
            "20",
            "--noproxy",
            "",
            "--http1.1",
        ])
        .arg("-x")
        .arg(proxy.url())
        .arg("--cacert")
        .arg(&pki.proxy_ca_cert)
        .args(["-w", "%{http_code}\\n"]);
    for url in urls {
        command.args(["-o", "/dev/null"]).arg(*url);
    }
    let output = run_bounded(&mut command, Duration::from_secs(30));
    assert!(
        output.status.is_some_and(|s| s.success()),
        "{}",
        output.stderr
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}
