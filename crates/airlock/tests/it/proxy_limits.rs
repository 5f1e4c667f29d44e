//! The `limits` section end to end (docs/reliability.md): the real `airlock proxy` with a
//! small `limits:` in its policy, driven by hand-written clients over loopback. A slow head
//! is closed and a slow inspected body answered 408 within `body_timeout`; a flood of
//! large inspected bodies against a 2 MiB `buffer_memory` gets 503 `overloaded` while the
//! proxy's peak memory stays bounded and it keeps serving; so does a flood of compressed
//! uploads (their decoded bytes count against the budget) to an upstream that reads
//! nothing; idle HTTP/1.1 and HTTP/2 connections close after `idle_timeout`; connections
//! over `connections_per_client` are refused, and a few addresses at their cap leave room
//! for others; a bad value fails `airlock policy check` with file:line:col. Every loop is
//! bounded in count and time.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::clients::curl_post_json;
use crate::support::fixture_server::FixtureServer;
use crate::support::{Proxy, ProxyBuilder, TestPki, raw, run_bounded};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A guarded host (`json_deny`, so its bodies are read whole) on the body-echo server.
fn policy(port: u16, limits: &str) -> String {
    format!(
        "version: 1\ndlp: {{credentials: off}}\nlimits: {limits}\nnetwork:\n  allow:\n    - host: allowed.test\n      ports: [{port}]\n      json_deny:\n        - path: /tools/*/type\n          values: [\"web_search\"]\n"
    )
}

fn start(pki: &TestPki, port: u16, limits: &str) -> Proxy {
    ProxyBuilder::new(pki)
        .policy(&policy(port, limits))
        .resolve_loopback("allowed.test")
        .start()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A TCP connection to the proxy port.
async fn connect(proxy: &Proxy) -> TcpStream {
    TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .expect("connect to the proxy")
}

/// Reads until the peer closes or `bound` passes: what arrived, and when it closed.
async fn read_to_close(stream: &mut TcpStream, bound: Duration) -> (Vec<u8>, Option<Duration>) {
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    for _ in 0..10_000 {
        let left = bound.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (seen, Some(started.elapsed())),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Err(_) => return (seen, None),
        }
    }
    (seen, None)
}

/// Reads one response with a `Content-Length` body (10 s at most).
async fn read_response(stream: &mut TcpStream) -> Vec<u8> {
    let reading = async {
        let mut response = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if response.len() >= end + 4 + length {
                    return response;
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return response,
                Ok(n) => response.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .expect("a response within 10 s")
}

/// A plain-HTTP POST head to the guarded host announcing `length` bytes of JSON.
fn post_head(port: u16, length: usize) -> Vec<u8> {
    format!(
        "POST http://allowed.test:{port}/v1 HTTP/1.1\r\nHost: allowed.test:{port}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
    .into_bytes()
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The proxy's peak resident memory (VmHWM), in KiB.
fn peak_rss_kib(proxy: &Proxy) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", proxy.pid())).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// A normal guarded request through CONNECT still passes.
fn assert_serves(proxy: &Proxy, pki: &TestPki, server: &FixtureServer) {
    let url = format!("https://allowed.test:{}/v1/responses", server.port);
    let response = curl_post_json(proxy, pki, &url, r#"{"model":"m"}"#, &[]);
    assert_eq!(response.status, 200, "{response:?}");
}

#[test]
fn a_slow_head_is_closed_within_body_timeout() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{body_timeout: 1s}");
    let prefix = b"GET http://allowed.test:9/ HTTP/1.1\r\nHost: allowed.test:9\r\n";
    let held = raw::slowloris(
        proxy.port(),
        prefix,
        Duration::from_millis(200),
        Duration::from_secs(10),
    );
    let held = held.expect("the proxy kept a slow head open for 10 s");
    assert!(held < Duration::from_secs(4), "closed after {held:?}");
}

/// A head that stops half-way is answered 408 `request_timeout` (then closed) within
/// `body_timeout` of its first byte.
#[test]
fn a_stalled_head_gets_408() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{body_timeout: 1s}");
    let (response, closed) = runtime().block_on(async {
        let mut stream = connect(&proxy).await;
        stream
            .write_all(b"GET http://allowed.test:9/ HTTP/1.1\r\nHost: al")
            .await
            .expect("head");
        read_to_close(&mut stream, Duration::from_secs(10)).await
    });
    let closed = closed.expect("the proxy kept a stalled head open");
    assert!(closed < Duration::from_secs(4), "closed after {closed:?}");
    let text = String::from_utf8_lossy(&response);
    assert_eq!(status_of(&response), 408, "{text}");
    assert!(text.contains(r#""error":"request_timeout""#), "{text}");
}

/// Between keep-alive requests only `idle_timeout` counts: a connection idle for longer
/// than `body_timeout` (the head deadline) but shorter than `idle_timeout` still serves
/// its next request.
#[test]
fn keep_alive_waits_for_idle_timeout_not_the_head_deadline() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{body_timeout: 1s, idle_timeout: 30s}");
    let request = b"GET http://refused.test/ HTTP/1.1\r\nHost: refused.test\r\n\r\n";
    let second = runtime().block_on(async {
        let mut stream = connect(&proxy).await;
        stream.write_all(request).await.expect("first request");
        let first = read_response(&mut stream).await;
        assert_eq!(
            status_of(&first),
            403,
            "{}",
            String::from_utf8_lossy(&first)
        );
        tokio::time::sleep(Duration::from_millis(2500)).await;
        stream.write_all(request).await.expect("second request");
        read_response(&mut stream).await
    });
    assert_eq!(
        status_of(&second),
        403,
        "{}",
        String::from_utf8_lossy(&second)
    );
}

#[test]
fn a_slow_inspected_body_gets_408() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{body_timeout: 1s}");
    let (response, closed) = runtime().block_on(async {
        let mut stream = connect(&proxy).await;
        stream.write_all(&post_head(9, 100)).await.expect("head");
        stream.write_all(b"{\"model\":").await.expect("part");
        read_to_close(&mut stream, Duration::from_secs(10)).await
    });
    let closed = closed.expect("the proxy kept a slow body open");
    assert!(closed < Duration::from_secs(4), "closed after {closed:?}");
    assert_eq!(
        status_of(&response),
        408,
        "{}",
        String::from_utf8_lossy(&response)
    );
    let text = String::from_utf8_lossy(&response);
    assert!(text.contains(r#""error":"request_timeout""#), "{text}");
    let line = proxy.audit_line_where("the 408", |l| l["status"] == 408);
    assert_eq!(line["reason"], "body_uninspectable", "{line}");
}

#[test]
fn a_flood_of_inspected_bodies_is_bounded_by_buffer_memory() {
    const CLIENTS: usize = 24;
    const BODY: usize = 900 * 1024;
    let pki = TestPki::new();
    let server = FixtureServer::body_echo(&pki);
    let proxy = start(
        &pki,
        server.port,
        "{buffer_memory: 2MiB, body_timeout: 20s}",
    );
    let port = server.port;
    let proxy_port = proxy.port();
    let statuses: Vec<u16> = runtime().block_on(async {
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(tokio::spawn(async move {
                let mut stream = TcpStream::connect(("127.0.0.1", proxy_port))
                    .await
                    .expect("connect");
                let mut body = vec![b' '; BODY];
                body[0] = b'{';
                body[BODY - 1] = b'}';
                let _ = stream.write_all(&post_head(port, BODY)).await;
                let _ = stream.write_all(&body[..BODY / 2]).await;
                // Holding the body half-sent keeps its bytes taken for a while.
                tokio::time::sleep(Duration::from_secs(3)).await;
                let _ = stream.write_all(&body[BODY / 2..]).await;
                let (response, _) = read_to_close(&mut stream, Duration::from_secs(15)).await;
                status_of(&response)
            }));
        }
        let mut statuses = Vec::new();
        for client in clients {
            statuses.push(client.await.expect("client"));
        }
        statuses
    });
    let overloaded = statuses.iter().filter(|s| **s == 503).count();
    assert!(overloaded > 0, "{statuses:?}");
    assert!(overloaded < CLIENTS, "{statuses:?}");
    let line = proxy.audit_line_where("an overloaded refusal", |l| l["reason"] == "overloaded");
    assert_eq!(line["status"], 503, "{line}");
    assert_serves(&proxy, &pki, &server);
    // 24 bodies of 900 KiB would be 21 MiB if all were held at once.
    let peak = peak_rss_kib(&proxy);
    assert!(peak < 80 * 1024, "peak RSS {peak} KiB");
}

#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{idle_timeout: 1s}");
    let (response, closed) = runtime().block_on(async {
        let mut stream = connect(&proxy).await;
        let request = b"GET http://refused.test/ HTTP/1.1\r\nHost: refused.test\r\n\r\n";
        stream.write_all(request).await.expect("request");
        read_to_close(&mut stream, Duration::from_secs(10)).await
    });
    assert_eq!(
        status_of(&response),
        403,
        "{}",
        String::from_utf8_lossy(&response)
    );
    let closed = closed.expect("the idle connection stayed open");
    assert!(
        closed >= Duration::from_millis(900) && closed < Duration::from_secs(4),
        "closed after {closed:?}"
    );
}

#[test]
fn an_idle_h2_connection_gets_goaway() {
    let pki = TestPki::new();
    let server = FixtureServer::body_echo(&pki);
    let proxy = start(&pki, server.port, "{idle_timeout: 1s}");
    let target = format!("allowed.test:{}", server.port);
    let outcome: Result<(u16, Duration), String> = runtime().block_on(async {
        let stream = raw::open_tunnel(proxy.port(), &target).await?;
        let config = pki.client_config_trusting_proxy(&[b"h2"]);
        let name = ServerName::try_from("allowed.test".to_string()).map_err(|e| e.to_string())?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, stream)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .map_err(|e| e.to_string())?;
        let connection = tokio::spawn(connection);
        let request = hyper::Request::post(format!("https://{target}/v1/responses"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let _ = response.into_body().collect().await;
        let idle_from = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), connection)
            .await
            .map_err(|_| "the idle h2 connection stayed open for 10 s".to_string())?
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("h2 connection ended with an error: {e}"))?;
        Ok((status, idle_from.elapsed()))
    });
    let (status, closed) = outcome.expect("h2 exchange");
    assert_eq!(status, 200);
    assert!(closed < Duration::from_secs(4), "closed after {closed:?}");
}

#[test]
fn connections_over_the_client_cap_are_refused() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{connections_per_client: 4}");
    let sources = ["127.0.0.1"; 4];
    refused_at_accept_then_served(proxy.port(), &sources, "127.0.0.1");
    let line = proxy.audit_line_where("the refused connection", |l| l["reason"] == "overloaded");
    assert_eq!(line["kind"], "tcp", "{line}");
}

/// `limits.connections` caps all clients together: with four addresses each at their
/// own cap (a quarter of four: one), the fifth connection in all is closed at accept and
/// audited with its address.
#[test]
fn connections_over_the_total_cap_are_refused_and_audited() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{connections: 4}");
    let sources = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"];
    refused_at_accept_then_served(proxy.port(), &sources, "127.0.0.5");
    let line = proxy.audit_line_where("the refused connection", |l| l["reason"] == "overloaded");
    assert_eq!(
        (line["kind"].as_str(), line["host"].as_str()),
        (Some("tcp"), Some("127.0.0.5")),
        "{line}"
    );
}

/// One address holds at most a quarter of `limits.connections` (docs/reliability.md,
/// "Connections"): three addresses each trying to hold six idle connections of twelve
/// get three each (the rest closed at accept), and a fourth address is still served.
#[test]
fn a_few_clients_at_their_cap_leave_room_for_others() {
    let pki = TestPki::new();
    let proxy = start(&pki, 9, "{connections: 12}");
    let port = proxy.port();
    let (open, response) = runtime().block_on(async {
        let mut holding = Vec::new();
        for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
            for _ in 0..6 {
                holding.push((source, connect_from(source, port).await));
            }
        }
        // The proxy admits in accept order; those over a cap are closed at once.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut open = Vec::new();
        for (source, stream) in &mut holding {
            let mut byte = [0u8; 1];
            let closed = matches!(
                tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await,
                Ok(Ok(0) | Err(_))
            );
            if !closed {
                open.push(*source);
            }
        }
        let mut fourth = connect_from("127.0.0.5", port).await;
        fourth
            .write_all(b"GET http://refused.test/ HTTP/1.1\r\nHost: refused.test\r\nConnection: close\r\n\r\n")
            .await
            .expect("request");
        let (response, _) = read_to_close(&mut fourth, Duration::from_secs(5)).await;
        drop(holding);
        (open, response)
    });
    for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        let held = open.iter().filter(|s| **s == source).count();
        assert_eq!(held, 3, "{source} holds {held}: {open:?}");
    }
    assert_eq!(
        status_of(&response),
        403,
        "{}",
        String::from_utf8_lossy(&response)
    );
}

/// A `connections_per_client` over a quarter of `connections` fails `airlock policy
/// check` at its place.
#[test]
fn a_client_cap_over_a_quarter_of_the_total_fails_policy_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.yaml");
    let yaml = "version: 1\nlimits:\n  connections: 12\n  connections_per_client: 6\n";
    std::fs::write(&file, yaml).expect("write");
    let mut command = Command::new(support::proxy::AIRLOCK);
    command.args(["policy", "check"]).arg(&file);
    let output = run_bounded(&mut command, Duration::from_secs(20));
    assert_eq!(
        output.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        output.stderr
    );
    let place = format!("{}:4:27", file.display());
    assert!(output.stderr.contains(&place), "{}", output.stderr);
    assert!(output.stderr.contains("at most 3"), "{}", output.stderr);
}

/// Holds one connection from each of `held`, then checks that a further one from `over`
/// is closed at accept without an answer, and that once the held ones are gone a request
/// from `over` is answered (403: the host is not allowed).
fn refused_at_accept_then_served(port: u16, held: &[&str], over: &str) {
    runtime().block_on(async {
        let mut holding = Vec::new();
        for source in held {
            holding.push(connect_from(source, port).await);
        }
        // The proxy admits in accept order: let it take the held ones first.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut refused = connect_from(over, port).await;
        let _ = refused.write_all(b"GET http://refused.test/ HTTP/1.1\r\nHost: refused.test\r\n\r\n").await;
        let (response, closed) = read_to_close(&mut refused, Duration::from_secs(5)).await;
        assert!(closed.is_some(), "the connection over the cap stayed open");
        assert!(response.is_empty(), "{}", String::from_utf8_lossy(&response));
        drop(holding);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut again = connect_from(over, port).await;
        again
            .write_all(b"GET http://refused.test/ HTTP/1.1\r\nHost: refused.test\r\nConnection: close\r\n\r\n")
            .await
            .expect("request");
        let (response, _) = read_to_close(&mut again, Duration::from_secs(5)).await;
        assert_eq!(status_of(&response), 403, "{}", String::from_utf8_lossy(&response));
    });
}

/// A connection to the proxy from the loopback address `source`.
async fn connect_from(source: &str, port: u16) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    let source: std::net::IpAddr = source.parse().expect("address");
    socket
        .bind((source, 0).into())
        .expect("bind the source address");
    socket
        .connect(([127, 0, 0, 1], port).into())
        .await
        .expect("connect")
}

#[test]
fn a_bad_limits_value_fails_policy_check_with_its_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, "version: 1\nlimits:\n  body_timeout: soon\n").expect("write");
    let mut command = Command::new(support::proxy::AIRLOCK);
    command.args(["policy", "check"]).arg(&file);
    let output = run_bounded(&mut command, Duration::from_secs(20));
    assert_eq!(
        output.status.and_then(|s| s.code()),
        Some(1),
        "{}",
        output.stderr
    );
    let place = format!("{}:3:17", file.display());
    assert!(output.stderr.contains(&place), "{}", output.stderr);
    assert!(
        output.stderr.contains("limits.body_timeout"),
        "{}",
        output.stderr
    );
}

/// A client that says nothing for longer than the first-bytes timeout (2 s) after its
/// CONNECT, then starts TLS, is still intercepted on a guarded host: the guard sees its
/// body (403) rather than the tunnel becoming a raw relay to the upstream, over which the
/// client would speak TLS to the upstream itself, past `json_deny` (found by the soak
/// suite's slow TLS hellos, bench/soak).
#[test]
fn a_late_client_hello_on_a_guarded_host_is_still_inspected() {
    let pki = TestPki::new();
    let server = FixtureServer::body_echo(&pki);
    let proxy = start(&pki, server.port, "{}");
    let target = format!("allowed.test:{}", server.port);
    let outcome: Result<Vec<u8>, String> = runtime().block_on(async {
        let stream = raw::open_tunnel(proxy.port(), &target).await?;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let config = pki.client_config_trusting_proxy(&[b"http/1.1"]);
        let name = ServerName::try_from("allowed.test".to_string()).map_err(|e| e.to_string())?;
        let mut tls = tokio::time::timeout(
            Duration::from_secs(10),
            tokio_rustls::TlsConnector::from(config).connect(name, stream),
        )
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake (not intercepted?): {e}"))?;
        let body = r#"{"tools":[{"type":"web_search"}]}"#;
        let request = format!(
            "POST /v1/responses HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut response))
            .await
            .map_err(|_| "no answer within 10 s".to_string())?
            .map_err(|e| e.to_string())?;
        Ok(response)
    });
    let response = outcome.expect("late ClientHello exchange");
    assert_eq!(
        status_of(&response),
        403,
        "{}",
        String::from_utf8_lossy(&response)
    );
    assert!(
        String::from_utf8_lossy(&response).contains("denied_by_rule"),
        "{}",
        String::from_utf8_lossy(&response)
    );
    proxy.audit_line_where("no raw tcp relay to the guarded host", |line| {
        line["kind"] == "http" && line["decision"] == "deny" && line["reason"] == "denied_by_rule"
    });
    assert!(
        !proxy
            .audit_log_text()
            .contains("\"kind\":\"tcp\",\"decision\":\"allow\""),
        "a raw relay was opened: {}",
        proxy.audit_log_text()
    );
}

/// A plain-HTTP upstream that accepts connections and never reads them (a 4 KiB receive
/// buffer), so that whatever the proxy forwards stays on the proxy's side; the accepted
/// connections are held until the task is dropped.
async fn stalled_upstream() -> (u16, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    socket.bind(([127, 0, 0, 1], 0).into()).expect("bind");
    let listener = socket.listen(1024).expect("listen");
    let port = listener.local_addr().expect("address").port();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        for _ in 0..10_000 {
            match tokio::time::timeout(Duration::from_secs(60), listener.accept()).await {
                Ok(Ok((stream, _))) => held.push(stream),
                _ => return,
            }
        }
    });
    (port, task)
}

/// `len` bytes that gzip, zstd and brotli each shrink about a hundredfold: long runs with
/// a few pseudo-random digits (no credential shape) every 4 KiB, so that a body stays
/// under the decoder's ratio bound.
fn compressible(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        out.extend(std::iter::repeat_n(b'a', 4000));
        for _ in 0..96 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            out.push(b'0' + (state >> 60) as u8 % 10);
        }
    }
    out.truncate(len);
    out
}

/// `data` coded as `coding` (`gzip`, `zstd` or `br`).
fn coded(coding: &str, data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    match coding {
        "gzip" => {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(data).expect("gzip");
            encoder.finish().expect("gzip")
        }
        "zstd" => zstd::stream::encode_all(data, 3).expect("zstd"),
        "br" => {
            let mut out = Vec::new();
            {
                let mut encoder = brotli::CompressorWriter::new(&mut out, 4096, 4, 22);
                encoder.write_all(data).expect("brotli");
            }
            out
        }
        other => panic!("no coding {other}"),
    }
}

/// Sends one coded upload to the guarded host behind `proxy_port` (writing for 10 s at
/// most), then reads for 5 s at most: the status, 0 when none came.
async fn coded_upload(proxy_port: u16, port: u16, coding: &str, body: Arc<Vec<u8>>) -> u16 {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", proxy_port)).await else {
        return 0;
    };
    let head = format!(
        "POST http://allowed.test:{port}/upload HTTP/1.1\r\nHost: allowed.test:{port}\r\nContent-Type: text/plain\r\nContent-Encoding: {coding}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let sending = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), sending).await;
    let (response, _) = read_to_close(&mut stream, Duration::from_secs(5)).await;
    status_of(&response)
}

/// The proxy's resident memory now (VmRSS), in KiB.
fn rss_kib(proxy: &Proxy) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", proxy.pid())).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Decompressed request bodies count against `limits.buffer_memory` (docs/reliability.md,
/// "Compressed bodies"): 36 concurrent gzip, zstd and brotli uploads, each 16 MiB
/// decoded, to a host whose bodies the outbound guard searches, behind an upstream that
/// reads nothing. The proxy's peak memory stays within a 32 MiB budget plus a fixed
/// overhead (the per-connection buffers of uncompressed bodies); the uploads that find no
/// room are refused 503 `overloaded`; the proxy serves afterwards.
#[test]
fn decoded_request_bodies_are_bounded_by_buffer_memory() {
    const CLIENTS: usize = 36;
    const DECODED: usize = 16 << 20;
    let pki = TestPki::new();
    let data = compressible(DECODED);
    let bodies: Vec<(&str, Arc<Vec<u8>>)> = ["gzip", "zstd", "br"]
        .into_iter()
        .map(|coding| (coding, Arc::new(coded(coding, &data))))
        .collect();
    drop(data);
    let runtime = runtime();
    let (port, upstream) = runtime.block_on(stalled_upstream());
    let policy = format!(
        "version: 1\nlimits: {{buffer_memory: 32MiB}}\nnetwork:\n  allow:\n    - host: allowed.test\n      ports: [{port}]\n"
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&policy)
        .resolve_loopback("allowed.test")
        .start();
    let before = rss_kib(&proxy);
    let proxy_port = proxy.port();
    let statuses: Vec<u16> = runtime.block_on(async {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let (coding, body) = bodies[i % bodies.len()].clone();
                tokio::spawn(coded_upload(proxy_port, port, coding, body))
            })
            .collect();
        let mut statuses = Vec::new();
        for client in clients {
            statuses.push(client.await.expect("client"));
        }
        statuses
    });
    let peak = peak_rss_kib(&proxy);
    upstream.abort();
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_kib(&proxy);
    eprintln!("RSS before {before} KiB, peak {peak} KiB, after {after} KiB; {statuses:?}");
    // 32 MiB of budget, the proxy at rest, and the per-connection buffers (hyper's read
    // and write buffers) that any upload has, coded or not. Measured: 34 MiB over rest;
    // with decoding outside the budget, 109 MiB.
    let over = peak.saturating_sub(before);
    assert!(
        over < (32 + 20) * 1024,
        "peak RSS {peak} KiB, {over} KiB over rest"
    );
    assert!(statuses.contains(&503), "{statuses:?}");
    let line = proxy.audit_line_where("an overloaded upload", |l| l["reason"] == "overloaded");
    assert_eq!(line["status"], 503, "{line}");
    let served = runtime.block_on(async {
        let mut stream = connect(&proxy).await;
        let request =
            b"GET http://refused.test/ HTTP/1.1\r\nHost: refused.test\r\nConnection: close\r\n\r\n";
        stream.write_all(request).await.expect("request");
        read_to_close(&mut stream, Duration::from_secs(5)).await.0
    });
    assert_eq!(
        status_of(&served),
        403,
        "{}",
        String::from_utf8_lossy(&served)
    );
}

/// A zstd body whose frame asks for a window over 8 MiB (here 32 MiB) is refused
/// `body_uninspectable` before the window is allocated (docs/policy.md, "Compressed
/// bodies"); one with an 8 MiB window is forwarded.
#[test]
fn a_zstd_window_over_8_mib_is_refused() {
    use std::io::Write as _;
    let pki = TestPki::new();
    let runtime = runtime();
    let (port, upstream) = runtime.block_on(stalled_upstream());
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n      ports: [{port}]\n"
    );
    let proxy = ProxyBuilder::new(&pki)
        .policy(&policy)
        .resolve_loopback("allowed.test")
        .start();
    let frame = |window_log: u32| {
        let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).expect("zstd");
        encoder
            .set_parameter(zstd::stream::raw::CParameter::WindowLog(window_log))
            .expect("window");
        encoder.write_all(&compressible(1 << 20)).expect("zstd");
        Arc::new(encoder.finish().expect("zstd"))
    };
    let (wide, fits) = (frame(25), frame(23));
    let (refused, forwarded) = runtime.block_on(async {
        let refused = coded_upload(proxy.port(), port, "zstd", wide).await;
        let forwarded = coded_upload(proxy.port(), port, "zstd", fits).await;
        (refused, forwarded)
    });
    upstream.abort();
    assert_eq!(refused, 403);
    let line = proxy.audit_line_where("the refused upload", |l| l["status"] == 403);
    assert_eq!(line["reason"], "body_uninspectable", "{line}");
    // The upstream reads nothing and answers nothing: no refusal came back.
    assert_eq!(forwarded, 0);
}
