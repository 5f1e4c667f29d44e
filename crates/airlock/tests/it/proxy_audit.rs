//! The audit log (docs/contract.md §5): one JSON line per decision, query values redacted
//! (the raw value appears nowhere in the file), and a log that cannot be opened stops the
//! proxy from starting.

use std::time::Duration;

use crate::support;
use crate::support::{CurlRequest, ProxyBuilder, TestPki, Upstream, assert_http_audit_shape, curl};

#[test]
fn one_line_per_decision() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("GET localhost:{}/ok/**", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let base = format!("https://localhost:{}", upstream.port());
    let requests = [
        ("GET", "/ok/1", 200),
        ("GET", "/ok/2", 200),
        ("GET", "/nope", 403),
        ("POST", "/ok/3", 403),
        ("GET", "/ok/4", 200),
    ];
    for (method, path, status) in requests {
        let url = format!("{base}{path}");
        let response = curl(
            &proxy,
            &pki,
            &CurlRequest {
                method: Some(method),
                ..CurlRequest::get(&url)
            },
        );
        assert_eq!(response.status, status, "{method} {path}: {response:?}");
    }
    let lines = proxy.audit(requests.len());
    std::thread::sleep(Duration::from_millis(300));
    let lines_later = proxy.audit(requests.len());
    assert_eq!(
        lines.len(),
        requests.len(),
        "exactly one line per decision: {lines:?}"
    );
    assert_eq!(
        lines_later.len(),
        requests.len(),
        "no late extra lines: {lines_later:?}"
    );
    for (method, path, status) in requests {
        let matching: Vec<_> = lines.iter().filter(|l| l["path"] == path).collect();
        assert_eq!(matching.len(), 1, "one line for {path}: {lines:?}");
        let line = matching[0];
        assert_http_audit_shape(line);
        assert_eq!(line["method"], method, "{line}");
        assert_eq!(line["host"], "localhost", "{line}");
        assert_eq!(line["port"], upstream.port(), "{line}");
        assert_eq!(line["scheme"], "https", "{line}");
        if status == 200 {
            assert_eq!(line["decision"], "allow", "{line}");
            assert_eq!(line["status"], 200, "{line}");
        } else {
            assert_eq!(line["decision"], "deny", "{line}");
        }
    }
    let reason_for = |path: &str| {
        lines
            .iter()
            .find(|l| l["path"] == path)
            .map(|l| l["reason"].clone())
            .unwrap_or_default()
    };
    assert_eq!(reason_for("/nope"), "path_not_allowed");
    assert_eq!(reason_for("/ok/3"), "method_not_allowed");
    assert_eq!(upstream.hit_count(), 3);
}

#[test]
fn query_values_are_redacted_everywhere_in_the_log() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}/echo/**", upstream.port()))
        .resolve_loopback("localhost")
        .start();
    let secret_value = "tok-abc-93f1e";
    let url = format!(
        "https://localhost:{}/echo/q?token={secret_value}&x=1",
        upstream.port()
    );
    let response = curl(&proxy, &pki, &CurlRequest::get(&url));
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(
        response.json()["query"],
        format!("token={secret_value}&x=1"),
        "the upstream gets the query unchanged"
    );
    let refused_url = format!(
        "https://localhost:{}/other?token={secret_value}&x=1",
        upstream.port()
    );
    let refused = curl(&proxy, &pki, &CurlRequest::get(&refused_url));
    assert_eq!(refused.status, 403, "{refused:?}");

    let lines = proxy.audit(2);
    let allowed = lines
        .iter()
        .find(|l| l["path"] == "/echo/q")
        .unwrap_or_else(|| panic!("no line for /echo/q: {lines:?}"));
    assert_eq!(allowed["query"], "token=REDACTED&x=REDACTED", "{allowed}");
    let denied = lines
        .iter()
        .find(|l| l["path"] == "/other")
        .unwrap_or_else(|| panic!("no line for /other: {lines:?}"));
    assert_eq!(denied["query"], "token=REDACTED&x=REDACTED", "{denied}");
    let text = proxy.audit_log_text();
    assert!(
        !text.contains(secret_value) && !text.contains("abc-93f1e"),
        "a query value leaked into the audit log:\n{text}"
    );
    assert!(
        !proxy.stderr().contains(secret_value),
        "a query value leaked onto stderr"
    );
}

#[test]
fn an_unopenable_log_stops_the_proxy_at_start() {
    let pki = TestPki::new();
    let target = "/nonexistent-dir-airlock-test/audit.jsonl";
    let (status, stderr) = ProxyBuilder::new(&pki)
        .allow("localhost:443")
        .log_target(target)
        .start_expecting_exit(Duration::from_secs(10));
    let status = status.unwrap_or_else(|| {
        panic!("the proxy kept running with an unopenable log; stderr:\n{stderr}")
    });
    assert!(!status.success(), "must exit non-zero: {status:?}");
    assert!(
        !stderr.contains("proxy listening on"),
        "must not start listening: {stderr}"
    );
    assert!(
        stderr.contains("nonexistent-dir-airlock-test"),
        "the message names the log file: {stderr}"
    );
}

/// The events a set of lines stands for (`count`, 1 where absent).
fn events(lines: &[&serde_json::Value]) -> u64 {
    lines
        .iter()
        .map(|line| line.get("count").map_or(1, |c| c.as_u64().expect("count")))
        .sum()
}

/// Sends a pipelined plain-HTTP GET for each of `urls` on one connection and reads every
/// answer (the last request closes the connection).
fn pipelined(proxy: &support::Proxy, urls: &[String]) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut requests = String::new();
    for (index, url) in urls.iter().enumerate() {
        let host = url.split('/').nth(2).expect("host");
        let close = if index + 1 == urls.len() {
            "Connection: close\r\n"
        } else {
            ""
        };
        requests.push_str(&format!(
            "GET {url} HTTP/1.1\r\nHost: {host}\r\n{close}\r\n"
        ));
    }
    stream.write_all(requests.as_bytes()).expect("write");
    let mut answers = String::new();
    let _ = stream.read_to_string(&mut answers);
    answers
}

#[test]
fn identical_refusals_fold_into_a_line_with_a_count() {
    let pki = TestPki::new();
    let mut proxy = ProxyBuilder::new(&pki).allow("allowed.test").start();
    const REQUESTS: usize = 400;
    let answers = pipelined(
        &proxy,
        &vec!["http://evil.example/upload?k=1".into(); REQUESTS],
    );
    assert_eq!(answers.matches("HTTP/1.1 403").count(), REQUESTS);
    // Within about a second the folded refusals are on disk, without a flush.
    std::thread::sleep(Duration::from_millis(1500));
    let lines = proxy.audit(1);
    let refusals: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["host"] == "evil.example")
        .collect();
    assert!(
        refusals.len() <= 6,
        "{} lines: {refusals:?}",
        refusals.len()
    );
    assert_eq!(events(&refusals), REQUESTS as u64, "{refusals:?}");
    let folded = refusals
        .iter()
        .find(|l| l.get("count").is_some())
        .expect("a count");
    assert_eq!(folded["reason"], "host_not_allowed", "{folded}");
    assert_eq!(folded["query"], "k=REDACTED", "{folded}");
    // Another burst right before shutdown: the fold still open is written on exit.
    let answers = pipelined(&proxy, &vec!["http://evil.example/again".into(); 50]);
    assert_eq!(answers.matches("HTTP/1.1 403").count(), 50);
    let status = proxy.terminate(Duration::from_secs(20)).expect("exit");
    assert!(status.success(), "{status:?}");
    let text = proxy.audit_log_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let again: Vec<&serde_json::Value> = lines.iter().filter(|l| l["path"] == "/again").collect();
    assert_eq!(events(&again), 50, "{again:?}");
    assert!(again.len() <= 4, "{again:?}");
}

#[test]
fn a_tcp_tunnel_is_logged_when_it_opens_and_when_it_closes() {
    use std::io::{Read, Write};
    let echo = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = echo.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = echo.accept().expect("accept");
        let mut buffer = [0u8; 1024];
        while let Ok(n) = stream.read(&mut buffer) {
            if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                break;
            }
        }
    });
    let pki = TestPki::new();
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{port}"))
        .resolve_loopback("localhost")
        .start();
    let mut client = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let connect = format!("CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n");
    client.write_all(connect.as_bytes()).expect("CONNECT");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        client.read_exact(&mut byte).expect("CONNECT answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // Bytes that are neither TLS nor HTTP: relayed raw.
    client.write_all(b"\x00\x01raw bytes").expect("write");
    let mut echoed = [0u8; 11];
    client.read_exact(&mut echoed).expect("echo");
    assert_eq!(&echoed, b"\x00\x01raw bytes");
    // While the tunnel is open, the log already shows it.
    let opened = proxy.audit_line_where("opening the tunnel", |l| {
        l["kind"] == "tcp" && l["phase"] == "open"
    });
    assert_eq!(opened["decision"], "allow", "{opened}");
    assert_eq!(opened["host"], "localhost", "{opened}");
    assert_eq!(opened["port"], port, "{opened}");
    assert!(
        opened.get("bytes_up").is_none() && opened.get("ms").is_none(),
        "{opened}"
    );
    assert!(!proxy.audit_log_text().contains("\"phase\":\"close\""));
    drop(client);
    let closed = proxy.audit_line_where("closing the tunnel", |l| {
        l["kind"] == "tcp" && l["phase"] == "close"
    });
    assert_eq!(closed["decision"], "allow", "{closed}");
    assert_eq!(closed["conn"], opened["conn"], "{closed}");
    assert!(
        closed["bytes_up"].as_u64().is_some_and(|b| b >= 11),
        "{closed}"
    );
    assert!(
        closed["bytes_down"].as_u64().is_some_and(|b| b >= 11),
        "{closed}"
    );
    server.join().expect("echo server");
}

#[test]
fn the_log_rotates_at_its_maximum_size() {
    let pki = TestPki::new();
    let proxy = ProxyBuilder::new(&pki)
        .allow("allowed.test")
        .arg("--audit-max-size")
        .arg("2K")
        .start();
    // Distinct paths, so that nothing folds.
    let urls: Vec<String> = (0..120)
        .map(|index| format!("http://evil.example/r/{index}"))
        .collect();
    let answers = pipelined(&proxy, &urls);
    assert_eq!(answers.matches("HTTP/1.1 403").count(), urls.len());
    let log = proxy.audit_log_path().to_owned();
    let numbered = |n: usize| {
        let mut name = log.clone().into_os_string();
        name.push(format!(".{n}"));
        std::path::PathBuf::from(name)
    };
    // The writer thread may still be rotating when the answers are in: wait until every
    // file exists and none changed over 200 ms.
    let files: Vec<_> = std::iter::once(log.clone())
        .chain((1..=5).map(numbered))
        .collect();
    let sizes = || -> Option<Vec<u64>> {
        files
            .iter()
            .map(|f| std::fs::metadata(f).ok().map(|m| m.len()))
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let before = sizes();
        std::thread::sleep(Duration::from_millis(200));
        if (before.is_some() && before == sizes()) || std::time::Instant::now() > deadline {
            break;
        }
    }
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a log file");
        assert!(
            text.len() <= 2048,
            "{}: {} bytes",
            file.display(),
            text.len()
        );
        for line in text.lines() {
            let line: serde_json::Value = serde_json::from_str(line).expect("whole JSON lines");
            if line["kind"] == "checkpoint" {
                // A rotated file starts with a signed checkpoint (audit_chain.rs).
                continue;
            }
            assert_eq!(line["host"], "evil.example", "{line}");
        }
    }
    assert!(!numbered(6).exists(), "five rotated files are kept");
}

/// Sends plain requests until one is answered 503 `audit_log_unavailable` (at most 20).
fn assert_fails_closed(proxy: &support::Proxy) {
    for _ in 0..20 {
        let response = support::raw::plain(
            proxy.port(),
            b"GET http://evil.example/x HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        );
        if response.status == 503 {
            assert_eq!(
                response.json()["error"],
                "audit_log_unavailable",
                "{response:?}"
            );
            return;
        }
        assert_eq!(response.status, 403, "{response:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the proxy went on answering with a log it could not write");
}

#[test]
fn a_full_disk_fails_closed_with_rotation_on() {
    // /dev/full: every write fails with ENOSPC, as on a full disk.
    let pki = TestPki::new();
    let proxy = ProxyBuilder::new(&pki)
        .allow("allowed.test")
        .log_target("/dev/full")
        .arg("--audit-max-size")
        .arg("1M")
        .start();
    assert_fails_closed(&proxy);
}

#[test]
fn a_rotation_that_fails_fails_closed() {
    let pki = TestPki::new();
    let builder = ProxyBuilder::new(&pki)
        .allow("allowed.test")
        .arg("--audit-max-size")
        .arg("1K");
    // The oldest rotated name is a non-empty directory: the rotation cannot remove it.
    std::fs::create_dir_all(builder.dir().join("audit.jsonl.5/x")).expect("dir");
    let proxy = builder.start();
    assert_eq!(proxy.audit_log_path(), proxy.dir().join("audit.jsonl"));
    assert_fails_closed(&proxy);
    assert!(
        proxy.stderr().contains("audit log write failed"),
        "{}",
        proxy.stderr()
    );
}
