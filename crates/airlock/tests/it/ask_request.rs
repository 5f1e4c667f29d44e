//! Ask mode asks at the request (docs/policy.md "Ask mode"), with the real binary, real
//! curl and loopback upstreams: a request to an unlisted host through the explicit proxy
//! is asked about once, with its method and path, never at its CONNECT; `once` lets
//! exactly it through (the identical next one asks again), `run` the next ones unasked;
//! raw TCP (neither TLS nor HTTP) to an unlisted host is asked about at its connect as
//! `CONNECT host:port`, denied (nothing reaches the upstream) or allowed (relayed); a raw
//! ask says `"raw":true` and its answer lets no HTTP through (a silent client's late
//! request is still asked about); `once` releases only the request that opened the ask.
//! Inside `airlock run`: `ask_mode.rs` (the admin API) and `watch.rs` (answered in tmux).

use crate::ask_mode::{admin, answer, ask_proxy, get, line_for, wait_pending};
use crate::report_mode::raw_tunnel;
use crate::support::{Proxy, TestPki, Upstream};
use serde_json::Value;

/// Sends one request to `url` in a thread, waits for its ask and checks what it names,
/// answers it with `scope`; returns the request's status.
fn asked_request(
    (proxy, pki, socket): (&Proxy, &TestPki, &str),
    url: &str,
    (method, path): (&str, &str),
    scope: &str,
) -> u16 {
    std::thread::scope(|scope_| {
        let request = scope_.spawn(|| get(proxy, pki, url));
        let pending = wait_pending(socket, 1);
        assert_eq!(pending.len(), 1, "one ask per request: {pending:?}");
        assert_eq!(pending[0]["method"], method, "{pending:?}");
        assert_eq!(pending[0]["host"], "other.test", "{pending:?}");
        assert_eq!(pending[0]["path"], path, "{pending:?}");
        assert_eq!(answer(socket, &pending[0]["id"], "allow", scope).0, 200);
        let response = request.join().expect("request");
        // Answered once, the request went through: nothing more was asked.
        assert_eq!(admin(socket, "GET", "/v1/pending", None).1, "[]");
        response.status
    })
}

/// Through the explicit proxy a request to an unlisted host is asked about once, at the
/// request (method and path), never at its CONNECT: `once` lets exactly it through, the
/// next identical one asks again, `run` lets the next ones through unasked.
#[test]
fn an_unlisted_host_through_the_proxy_is_asked_once_per_request() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &[]);
    let url = format!("https://other.test:{port}/tunnelled");
    let asking = (&proxy, &pki, socket.as_str());
    let expect = ("GET", "/tunnelled");
    assert_eq!(asked_request(asking, &url, expect, "once"), 200);
    assert_eq!(asked_request(asking, &url, expect, "run"), 200);
    assert_eq!(get(&proxy, &pki, &url).status, 200, "allowed for the run");
    let other = format!("https://other.test:{port}/elsewhere");
    assert_eq!(
        asked_request(asking, &other, ("GET", "/elsewhere"), "once"),
        200
    );
    let lines: Vec<Value> = proxy
        .audit_log_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    assert!(
        !lines.iter().any(|l| l["method"] == "CONNECT"),
        "no CONNECT was asked about or refused: {lines:?}"
    );
    let tunnelled = line_for(&proxy, "/tunnelled", 3);
    assert_eq!(tunnelled["rule"], "ask.run", "{tunnelled}");
    assert!(tunnelled.get("asked").is_none(), "{tunnelled}");
    let first = line_for(&proxy, "/tunnelled", 1);
    assert_eq!(
        (&first["rule"], &first["asked"]),
        (&Value::from("ask.once"), &Value::from(true))
    );
}

/// Raw TCP (neither TLS nor HTTP) to an unlisted host is asked about at its connect, as
/// `CONNECT host:port`: denied, nothing reaches the upstream; allowed, the bytes pass.
#[test]
fn raw_tcp_to_an_unlisted_host_is_asked_at_its_connect() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &[]);
    let target = format!("other.test:{port}");
    for (decision, scope) in [("deny", "once"), ("allow", "once")] {
        std::thread::scope(|scope_| {
            let tunnel = scope_.spawn(|| raw_tunnel(&proxy, &target, b"\x00\x01not http\r\n"));
            let pending = wait_pending(&socket, 1);
            assert_eq!(pending[0]["method"], "CONNECT", "{pending:?}");
            assert_eq!(pending[0]["path"], Value::Null, "{pending:?}");
            assert_eq!(pending[0]["raw"], true, "{pending:?}");
            assert_eq!(pending[0]["suggestion"], target, "{pending:?}");
            assert_eq!(answer(&socket, &pending[0]["id"], decision, scope).0, 200);
            tunnel.join().expect("tunnel");
        });
        if decision == "deny" {
            let line = proxy.audit_line_where("the refused tcp line", |l| {
                l["kind"] == "tcp" && l["decision"] == "deny"
            });
            assert_eq!(line["asked"], true, "{line}");
            assert_eq!(line["reason"], "host_not_allowed", "{line}");
            upstream.assert_untouched("a denied raw tunnel");
        }
    }
    let line = proxy.audit_line_where("the allowed tcp line", |l| {
        l["kind"] == "tcp"
            && l["decision"] == "allow"
            && l.get("phase").is_none_or(|p| p == "close")
    });
    assert_eq!(line["rule"], "ask.once", "{line}");
    assert_eq!(line["asked"], true, "{line}");
    assert!(
        upstream.connections() >= 1,
        "the allowed bytes were relayed"
    );
}

/// Opens a CONNECT to `target` through the proxy and reads its 200 head (bounded).
fn connect_silently(proxy: &Proxy, target: &str) -> std::net::TcpStream {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    )
    .expect("send CONNECT");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    assert!(line.contains(" 200"), "{line}");
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    stream
}

/// A client silent at its connect is asked about as raw (`"raw":true`); the raw answer
/// (even `run`) lets no HTTP through: a request line sent after it is intercepted and
/// asked about with its method and path, and nothing is relayed raw (docs/policy.md
/// "Ask mode").
#[test]
fn a_silent_client_allowed_raw_is_still_asked_per_request() {
    use std::io::{Read, Write};
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &[]);
    let target = format!("other.test:{port}");
    let mut stream = connect_silently(&proxy, &target);
    let pending = wait_pending(&socket, 1);
    assert_eq!(pending[0]["raw"], true, "{pending:?}");
    assert_eq!(pending[0]["path"], Value::Null, "{pending:?}");
    assert_eq!(answer(&socket, &pending[0]["id"], "allow", "run").0, 200);
    write!(stream, "GET /late HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("send");
    let pending = wait_pending(&socket, 1);
    assert_eq!(
        (
            &pending[0]["method"],
            &pending[0]["path"],
            &pending[0]["raw"]
        ),
        (
            &Value::from("GET"),
            &Value::from("/late"),
            &Value::from(false)
        ),
        "{pending:?}"
    );
    assert_eq!(answer(&socket, &pending[0]["id"], "deny", "once").0, 200);
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).expect("a response");
    assert!(head.starts_with(b"HTTP/1.1 4"), "{:?}", head);
    upstream.assert_untouched("a late request on a raw-allowed connection");
}

/// Identical requests waiting on one ask: `once` lets only the first through; the other
/// is asked again (here denied).
#[test]
fn once_lets_only_the_request_that_opened_the_ask_through() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let (proxy, socket) = ask_proxy(&pki, port, &[]);
    let url = format!("https://other.test:{port}/same");
    let statuses = std::thread::scope(|scope_| {
        let first = scope_.spawn(|| get(&proxy, &pki, &url).status);
        let pending = wait_pending(&socket, 1);
        let second = scope_.spawn(|| get(&proxy, &pki, &url).status);
        // Give the second request time to join the first ask.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert_eq!(wait_pending(&socket, 1).len(), 1, "one shared ask");
        assert_eq!(answer(&socket, &pending[0]["id"], "allow", "once").0, 200);
        let again = wait_pending(&socket, 1);
        assert_ne!(again[0]["id"], pending[0]["id"], "a new ask: {again:?}");
        assert_eq!(answer(&socket, &again[0]["id"], "deny", "once").0, 200);
        let mut statuses = [first.join().expect("first"), second.join().expect("second")];
        statuses.sort_unstable();
        statuses
    });
    assert_eq!(statuses[0], 200, "{statuses:?}");
    assert_ne!(statuses[1], 200, "{statuses:?}");
}
