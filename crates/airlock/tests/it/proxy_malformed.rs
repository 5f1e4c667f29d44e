//! Malformed and hostile framing (docs/contract.md §4): Content-Length with
//! Transfer-Encoding and conflicting Content-Lengths get 400 and a close; oversize headers
//! get 413/414/431 or a close; a slowloris client is cut off by the proxy's header timeout.
//! Nothing reaches the upstream.

use std::time::Duration;

use crate::support::raw;
use crate::support::{Proxy, ProxyBuilder, TestPki, Upstream};

/// The longest the proxy may keep a never-finishing header block open.
const SLOWLORIS_BOUND: Duration = Duration::from_secs(40);

fn start(pki: &TestPki, tls: &Upstream, plain: &Upstream) -> Proxy {
    ProxyBuilder::new(pki)
        .allow(&format!("localhost:{}", tls.port()))
        .allow(&format!("localhost:{}", plain.port()))
        .resolve_loopback("localhost")
        .start()
}

fn smuggling_heads(path: &str, host: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "CL+TE",
            format!(
                "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /echo/smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n"
            ),
        ),
        (
            "TE+CL",
            format!(
                "POST {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\nGET /echo/smuggled HTTP/1.1\r\nHost: {host}\r\n\r\n"
            ),
        ),
        (
            "two Content-Lengths",
            format!(
                "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nContent-Length: 30\r\n\r\nhelloGET /echo/smuggled HTTP/1.1\r\n\r\n"
            ),
        ),
    ]
}

#[test]
fn request_smuggling_shapes_get_400_and_close() {
    let pki = TestPki::new();
    let tls = Upstream::tls(&pki);
    let plain = Upstream::plain();
    let proxy = start(&pki, &tls, &plain);
    let target = format!("localhost:{}", tls.port());
    let plain_target = format!("localhost:{}", plain.port());
    let absolute = format!("http://{plain_target}/echo/smuggle");
    let mut failures = Vec::new();
    let mut refused = 0;
    for (name, request) in smuggling_heads("/echo/smuggle", &target) {
        let response = raw::connect_tls_expect_close(
            proxy.port(),
            &pki,
            &target,
            "localhost",
            request.as_bytes(),
        )
        .response();
        if response.status == 400 && response.closed {
            refused += 1;
        } else {
            failures.push(format!(
                "{name} inside TLS: status {} closed {}",
                response.status, response.closed
            ));
        }
    }
    for (name, request) in smuggling_heads(&absolute, &plain_target) {
        let response = raw::plain_expect_close(proxy.port(), request.as_bytes());
        if response.status == 400 && response.closed {
            refused += 1;
        } else {
            failures.push(format!(
                "{name} plain: status {} closed {}",
                response.status, response.closed
            ));
        }
    }
    let reached: Vec<String> = tls
        .hits()
        .iter()
        .chain(plain.hits().iter())
        .map(|h| format!("{} {}", h.method, h.target))
        .collect();
    assert!(
        failures.is_empty() && reached.is_empty(),
        "smuggling shapes not answered with 400 + close:\n{}\nreached upstream: {reached:?}",
        failures.join("\n")
    );
    let lines = proxy.audit(refused);
    assert!(
        lines.iter().filter(|l| l["decision"] == "deny").count() >= refused,
        "every refused request is logged: {lines:?}"
    );
}

#[test]
fn oversize_headers_are_refused() {
    let pki = TestPki::new();
    let tls = Upstream::tls(&pki);
    let plain = Upstream::plain();
    let proxy = start(&pki, &tls, &plain);
    let big = "a".repeat(256 * 1024);
    let many: String = (0..2000).map(|i| format!("X-Many-{i}: {i}\r\n")).collect();
    let target = format!("localhost:{}", tls.port());
    let plain_target = format!("localhost:{}", plain.port());
    let shapes = [
        ("one 256 KiB header", format!("X-Big: {big}\r\n")),
        ("2000 headers", many),
    ];
    for (name, extra) in &shapes {
        let request =
            format!("GET /echo/big HTTP/1.1\r\nHost: {target}\r\n{extra}Connection: close\r\n\r\n");
        let response = raw::connect_tls_expect_close(
            proxy.port(),
            &pki,
            &target,
            "localhost",
            request.as_bytes(),
        )
        .response();
        assert!(
            [413, 414, 431, 400].contains(&response.status)
                || (response.status == 0 && response.closed),
            "{name} inside TLS: {}",
            String::from_utf8_lossy(&response.raw[..response.raw.len().min(400)])
        );

        let request = format!(
            "GET http://{plain_target}/echo/big HTTP/1.1\r\nHost: {plain_target}\r\n{extra}Connection: close\r\n\r\n"
        );
        let response = raw::plain_expect_close(proxy.port(), request.as_bytes());
        assert!(
            [413, 414, 431, 400].contains(&response.status)
                || (response.status == 0 && response.closed),
            "{name} plain: {}",
            String::from_utf8_lossy(&response.raw[..response.raw.len().min(400)])
        );
    }
    let long_uri = format!(
        "GET http://{plain_target}/echo/{} HTTP/1.1\r\nHost: {plain_target}\r\nConnection: close\r\n\r\n",
        "u".repeat(256 * 1024)
    );
    let response = raw::plain_expect_close(proxy.port(), long_uri.as_bytes());
    assert!(
        [413, 414, 431, 400].contains(&response.status)
            || (response.status == 0 && response.closed),
        "256 KiB URI: {}",
        String::from_utf8_lossy(&response.raw[..response.raw.len().min(400)])
    );
    assert_eq!(tls.hit_count(), 0, "{:?}", tls.hits());
    assert_eq!(plain.hit_count(), 0, "{:?}", plain.hits());
}

#[test]
fn slowloris_is_cut_off_by_the_header_timeout() {
    let pki = TestPki::new();
    let tls = Upstream::tls(&pki);
    let plain = Upstream::plain();
    let proxy = start(&pki, &tls, &plain);
    let plain_target = format!("localhost:{}", plain.port());
    let prefix =
        format!("GET http://{plain_target}/echo/slow HTTP/1.1\r\nHost: {plain_target}\r\nX-Slow: ");
    let open_for = raw::slowloris(
        proxy.port(),
        prefix.as_bytes(),
        Duration::from_millis(500),
        SLOWLORIS_BOUND,
    );
    let open_for = open_for.unwrap_or_else(|| {
        panic!("the proxy kept a never-ending header block open for {SLOWLORIS_BOUND:?}")
    });
    eprintln!("slowloris: the proxy closed the connection after {open_for:?}");
    assert_eq!(plain.hit_count(), 0);
}
