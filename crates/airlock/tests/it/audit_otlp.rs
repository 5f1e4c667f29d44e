//! `--audit-otlp` (docs/operations.md, "OTLP export"): every audit line of a real proxy
//! reaches a test collector (tests/fixtures/otlp_receiver.py) that decodes it with the
//! official OTLP protobuf definitions (`opentelemetry-proto` from PyPI, in a venv cached
//! under the target directory) and refuses any field they do not know; the exported
//! records match the audit file line for line and their bodies verify as a chain; a
//! collector down at start (then answering 503 once) loses no line; a small queue with no
//! collector counts its drops in `/metrics` and writes a line saying how many.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::clients::run_bounded;
use crate::support::{Proxy, ProxyBuilder, TestPki, Upstream, curl_get};

const RECEIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/otlp_receiver.py"
);

/// How long a pip install may take.
const PIP_TIMEOUT: Duration = Duration::from_secs(300);

/// How long exported records may take to arrive.
const ARRIVAL: Duration = Duration::from_secs(30);

/// A venv with `opentelemetry-proto` (and `protobuf`) from PyPI, made once under the
/// target directory; `None` (after `skip_or_fail`) when python3 or PyPI is missing.
pub(crate) fn receiver_python() -> Option<PathBuf> {
    static PYTHON: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    match PYTHON.get_or_init(install) {
        Ok(python) => Some(python.clone()),
        Err(why) => {
            crate::support::skip_or_fail(why);
            None
        }
    }
}

fn install() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("otlp-proto-venv");
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args([
                "-c",
                "from opentelemetry.proto.collector.logs.v1 import logs_service_pb2",
            ])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if ready(&python) {
        return Ok(python);
    }
    let made = Command::new("/usr/bin/python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .map_err(|e| format!("audit_otlp: needs /usr/bin/python3 with venv: {e}"))?;
    if !made.status.success() {
        return Err(format!("audit_otlp: python3 -m venv failed: {made:?}"));
    }
    let installed = run_bounded(
        Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "opentelemetry-proto>=1.30",
            "protobuf",
        ]),
        PIP_TIMEOUT,
    );
    if installed.status.is_some_and(|status| status.success()) && ready(&python) {
        Ok(python)
    } else {
        Err(format!(
            "audit_otlp: needs `opentelemetry-proto` from PyPI; pip install failed: {}",
            installed.stderr
        ))
    }
}

/// The test collector: a python subprocess, killed on drop.
pub(crate) struct Receiver {
    child: Child,
    /// Where it listens (127.0.0.1).
    pub(crate) port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    /// Starts it on `port` (0: any), answering the first `fail` requests 503.
    pub(crate) fn start(python: &Path, port: u16, fail: u32) -> Receiver {
        Receiver::spawn(python, port, fail, None)
    }

    /// Starts it over TLS with `pki`'s upstream leaf (`localhost`).
    pub(crate) fn start_tls(python: &Path, pki: &TestPki) -> Receiver {
        let leaf = (
            pki.upstream_leaf_cert.as_path(),
            pki.upstream_leaf_key.as_path(),
        );
        Receiver::spawn(python, 0, 0, Some(leaf))
    }

    fn spawn(python: &Path, port: u16, fail: u32, tls: Option<(&Path, &Path)>) -> Receiver {
        let dir = tempfile::tempdir().expect("receiver dir");
        let out = dir.path().join("records.jsonl");
        let mut command = Command::new(python);
        command
            .arg(RECEIVER)
            .arg(&out)
            .arg(port.to_string())
            .arg(fail.to_string());
        if let Some((cert, key)) = tls {
            command.arg(cert).arg(key);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the receiver");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, ports) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let line = ports
            .recv_timeout(Duration::from_secs(30))
            .expect("the receiver prints its port");
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the receiver did not start: {line:?}")
        });
        Receiver {
            child,
            port,
            out,
            _dir: dir,
        }
    }

    /// The collector's URL.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/logs", self.port)
    }

    /// The records received so far.
    pub(crate) fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON record"))
            .collect()
    }

    /// Waits (bounded) until `count` records arrived; returns them.
    pub(crate) fn wait_for(&self, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + ARRIVAL;
        loop {
            let records = self.records();
            if records.len() >= count || Instant::now() > deadline {
                return records;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on now (bound, then released).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// `count` refused requests and one allowed one to `upstream`.
fn traffic(proxy: &Proxy, pki: &TestPki, upstream: &Upstream, count: usize) {
    for n in 0..count {
        let response = curl_get(proxy, pki, &format!("http://evil.example/{n}?k=v"), &[]);
        assert_eq!(response.status, 403, "{response:?}");
    }
    let url = format!("https://localhost:{}/ok", upstream.port());
    let response = curl_get(proxy, pki, &url, &[]);
    assert_eq!(response.status, 200, "{response:?}");
}

/// Ends the proxy cleanly (the export's shutdown flush runs).
fn stop(proxy: &mut Proxy) {
    let status = proxy.terminate(Duration::from_secs(30)).expect("exits");
    assert!(status.success(), "{}", proxy.stderr());
}

fn attribute<'a>(record: &'a Value, name: &str) -> &'a Value {
    &record["attributes"][name]
}

/// Every record is its file line, in order, with the line's fields as attributes.
fn assert_matches_file(records: &[Value], text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let bodies: Vec<&str> = records
        .iter()
        .map(|r| r["body"].as_str().expect("a string body"))
        .collect();
    assert_eq!(bodies, lines, "the records are the file's lines");
    for (record, line) in records.iter().zip(&lines) {
        let line: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(record["resource"]["service.name"], "airlock", "{record}");
        assert!(
            record["resource"]["service.instance.id"].is_string(),
            "{record}"
        );
        assert_eq!(record["scope"], "airlock.audit");
        if line["kind"] == "checkpoint" {
            continue;
        }
        for key in ["id", "kind", "decision", "host", "method", "reason"] {
            let expected = line.get(key).filter(|v| !v.is_null());
            let got = attribute(record, &format!("airlock.{key}"));
            assert_eq!(expected.unwrap_or(&Value::Null), got, "{key}: {record}");
        }
        let warn = line["decision"] == "deny" || line["kind"] == "audit";
        let severity = if warn { 13 } else { 9 };
        assert_eq!(record["severity_number"], severity, "{record}");
        assert!(
            record["time_unix_nano"].as_u64() > Some(1_700_000_000_000_000_000),
            "{record}"
        );
    }
}

fn allowing_proxy<'a>(pki: &'a TestPki, upstream: &Upstream) -> ProxyBuilder<'a> {
    ProxyBuilder::new(pki)
        .allow(&format!("localhost:{}", upstream.port()))
        .resolve_loopback("localhost")
}

#[test]
fn every_line_is_exported_decodes_and_matches_the_file() {
    let Some(python) = receiver_python() else {
        return;
    };
    let receiver = Receiver::start(&python, 0, 0);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let mut proxy = allowing_proxy(&pki, &upstream)
        .arg("--audit-otlp")
        .arg(&receiver.url())
        .start();
    traffic(&proxy, &pki, &upstream, 3);
    stop(&mut proxy);
    let text = proxy.audit_log_text();
    let records = receiver.wait_for(text.lines().count());
    assert_matches_file(&records, &text);
    assert!(!text.contains("k=v"), "query values redacted: {text}");
    // The exported bodies alone verify as a chain, signed checkpoints and all.
    let copy = proxy.dir().join("exported.jsonl");
    let bodies: String = records
        .iter()
        .map(|r| format!("{}\n", r["body"].as_str().unwrap_or_default()))
        .collect();
    std::fs::write(&copy, bodies).expect("write the copy");
    let key = pki
        .proxy_ca_key
        .parent()
        .expect("dir")
        .join("audit-key.pub.pem");
    let verified = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["audit", "verify", "--key"])
            .arg(&key)
            .arg(&copy),
        Duration::from_secs(30),
    );
    assert_eq!(
        verified.status.and_then(|s| s.code()),
        Some(0),
        "{}",
        verified.stderr
    );
}

#[test]
fn an_https_collector_is_trusted_through_audit_otlp_ca() {
    let Some(python) = receiver_python() else {
        return;
    };
    let pki = TestPki::new();
    let receiver = Receiver::start_tls(&python, &pki);
    let upstream = Upstream::tls(&pki);
    let mut proxy = allowing_proxy(&pki, &upstream)
        .arg("--audit-otlp")
        .arg(&format!("https://localhost:{}/v1/logs", receiver.port))
        .arg("--audit-otlp-ca")
        .arg(&pki.upstream_ca_cert.display().to_string())
        .start();
    traffic(&proxy, &pki, &upstream, 1);
    stop(&mut proxy);
    let text = proxy.audit_log_text();
    let records = receiver.wait_for(text.lines().count());
    assert_matches_file(&records, &text);
}

#[test]
fn a_collector_down_at_start_loses_no_line() {
    let Some(python) = receiver_python() else {
        return;
    };
    let port = free_port();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let mut proxy = allowing_proxy(&pki, &upstream)
        .arg("--audit-otlp")
        .arg(&format!("http://127.0.0.1:{port}/v1/logs"))
        .start();
    traffic(&proxy, &pki, &upstream, 4);
    std::thread::sleep(Duration::from_millis(800));
    // Up now, and answering the first request 503 (Retry-After: 1).
    let receiver = Receiver::start(&python, port, 1);
    let before = proxy.audit_log_text().lines().count();
    let records = receiver.wait_for(before);
    assert_eq!(records.len(), before, "{}", proxy.stderr());
    stop(&mut proxy);
    let text = proxy.audit_log_text();
    let records = receiver.wait_for(text.lines().count());
    assert_matches_file(&records, &text);
    assert!(
        proxy.stderr().contains("trying again"),
        "{}",
        proxy.stderr()
    );
}

#[test]
fn a_full_queue_is_counted_and_noted_in_the_file() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let builder = allowing_proxy(&pki, &upstream);
    let socket = builder.dir().join("admin.sock");
    let mut proxy = builder
        .arg("--audit-otlp")
        .arg(&format!("http://127.0.0.1:{}/v1/logs", free_port()))
        .arg("--audit-otlp-queue")
        .arg("2")
        .arg("--admin")
        .arg(&format!("unix:{}", socket.display()))
        .start();
    traffic(&proxy, &pki, &upstream, 20);
    // A second on, the next batch written says how many were dropped.
    std::thread::sleep(Duration::from_millis(1200));
    traffic(&proxy, &pki, &upstream, 1);
    let metrics = run_bounded(
        crate::support::tool("curl")
            .args(["-sS", "--max-time", "10", "--unix-socket"])
            .arg(&socket)
            .arg("http://admin/metrics"),
        Duration::from_secs(15),
    );
    let metrics = String::from_utf8_lossy(&metrics.stdout).into_owned();
    let parsed = crate::support::prometheus::parse(&metrics).unwrap_or_else(|e| panic!("{e}"));
    let dropped = parsed
        .value("airlock_audit_otlp_dropped_total", &[])
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(dropped >= 1.0, "{metrics}");
    stop(&mut proxy);
    let text = proxy.audit_log_text();
    let notes: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["reason"] == "audit_export_dropped")
        .collect();
    let noted: u64 = notes
        .iter()
        .map(|l| {
            assert_eq!(l["kind"], "audit", "{l}");
            l["lost"].as_u64().expect("lost")
        })
        .sum();
    // Every drop is noted, but for those of the notes themselves (counted, not noted).
    assert!(noted >= 1, "{text}");
    assert!(
        (noted + notes.len() as u64) as f64 >= dropped,
        "noted {noted} of {dropped}: {text}"
    );
    assert!(
        proxy.stderr().contains("not exported"),
        "the shutdown flush says what it could not send: {}",
        proxy.stderr()
    );
}

/// The trace id of a `traceparent` value (and checks its shape).
fn trace_of(value: &str) -> String {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!((parts[0], parts[3]), ("00", "01"), "{value}");
    assert_eq!((parts[1].len(), parts[2].len()), (32, 16), "{value}");
    parts[1].to_owned()
}

#[test]
fn traceparent_reaches_a_tls_upstream_with_the_audit_lines_trace() {
    let Some(python) = receiver_python() else {
        return;
    };
    let receiver = Receiver::start(&python, 0, 0);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let policy = format!(
        "version: 1\naudit: {{traceparent: true}}\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{port}]\n"
    );
    let mut proxy = ProxyBuilder::new(&pki)
        .policy(&policy)
        .resolve_loopback("localhost")
        .arg("--audit-otlp")
        .arg(&receiver.url())
        .start();
    let own = curl_get(&proxy, &pki, &format!("https://localhost:{port}/own"), &[]);
    assert_eq!(own.status, 200, "{own:?}");
    let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let header = format!("traceparent: {incoming}");
    let kept = curl_get(
        &proxy,
        &pki,
        &format!("https://localhost:{port}/kept"),
        &[&header],
    );
    assert_eq!(kept.status, 200, "{kept:?}");
    stop(&mut proxy);
    let hits = upstream.hits();
    let sent = |path: &str| {
        let hit = hits
            .iter()
            .find(|h| h.target == path)
            .unwrap_or_else(|| panic!("{path}: {hits:?}"));
        let values = hit.header_values("traceparent");
        assert_eq!(values.len(), 1, "{hit:?}");
        values[0].clone()
    };
    let line = |path: &str| proxy.audit_line_where(path, |l| l["path"] == path);
    // Without an incoming one: the decision id is the trace id.
    let own_sent = sent("/own");
    let own_line = line("/own");
    assert_eq!(trace_of(&own_sent), own_line["id"].as_str().expect("id"));
    assert_eq!(own_line["trace"], own_line["id"], "{own_line}");
    // A valid incoming one: its trace id kept, a new span id.
    let kept_sent = sent("/kept");
    assert_eq!(trace_of(&kept_sent), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(!kept_sent.contains("00f067aa0ba902b7"), "{kept_sent}");
    assert_eq!(line("/kept")["trace"], "4bf92f3577b34da6a3ce929d0e0e4736");
    // The exported records carry the trace id too.
    let text = proxy.audit_log_text();
    let records = receiver.wait_for(text.lines().count());
    assert_matches_file(&records, &text);
    let traced: Vec<&str> = records
        .iter()
        .filter_map(|r| r["trace_id"].as_str().filter(|t| !t.is_empty()))
        .collect();
    assert!(
        traced.contains(&"4bf92f3577b34da6a3ce929d0e0e4736"),
        "{records:?}"
    );
    assert!(
        traced.contains(&trace_of(&own_sent).as_str()),
        "{records:?}"
    );
}

/// `airlock run` (also as the CI's ordinary user: `.ci/run` runs `audit_otlp::run_`): its
/// lines reach the collector before it exits, the close checkpoint included.
#[test]
fn run_exports_every_line_before_it_ends() {
    if !crate::support::run::namespaces_available("audit_otlp::run_exports") {
        return;
    }
    let Some(python) = receiver_python() else {
        return;
    };
    let receiver = Receiver::start(&python, 0, 0);
    let home = crate::support::run::RunHome::new();
    let log = home.log_path();
    let url = receiver.url();
    let output = home.run(&[
        "--log",
        log.to_str().expect("utf-8 path"),
        "--audit-otlp",
        &url,
        "--",
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "http://evil.example/",
    ]);
    assert!(output.status.is_some(), "{}", output.stderr);
    let text = std::fs::read_to_string(&log).expect("the run's log");
    assert!(text.contains("evil.example"), "{text}");
    // Sent before the run ended: nothing is waited for here.
    let records = receiver.records();
    assert_matches_file(&records, &text);
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.contains("\"close\":true")),
        "{text}"
    );
}
