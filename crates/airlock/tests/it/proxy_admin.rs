//! The admin API of the real `airlock proxy` over real sockets (curl on the Unix socket and
//! on TCP): policy swaps while requests flow, refused changes that change nothing, If-Match,
//! bearer tokens, socket mode, SIGHUP with a broken file, metrics read by a strict
//! Prometheus text parser, routes checked against docs/openapi.yaml.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::prometheus;
use crate::support::{CurlRequest, Proxy, ProxyBuilder, TestPki, Upstream, curl, run_bounded};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const OLD: &str =
    "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      paths: [\"/old/**\"]\n";
const NEW: &str =
    "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      paths: [\"/new/**\"]\n";

/// One admin call with curl: (status, body). `target` is `unix:PATH` or `http://ADDR`.
fn admin(
    target: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: Option<&str>,
) -> (u16, String) {
    let mut command = crate::support::tool("curl");
    command.args([
        "-sS",
        "--max-time",
        "10",
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ]);
    let url = match target.strip_prefix("unix:") {
        Some(socket) => {
            command.args(["--unix-socket", socket]);
            format!("http://admin{path}")
        }
        None => format!("{target}{path}"),
    };
    for header in headers {
        command.args(["-H", header]);
    }
    if let Some(body) = body {
        command.args(["--data-binary", body]);
    }
    command.arg(url);
    let output = run_bounded(&mut command, Duration::from_secs(15));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').expect("curl status line");
    (status.trim().parse().expect("status"), body.to_owned())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn unix_admin(dir: &Path) -> String {
    format!("unix:{}", dir.join("admin.sock").display())
}

/// `policy` with its `localhost` rule restricted to `port`.
fn on_port(policy: &str, port: u16) -> String {
    policy.replace("localhost", &format!("localhost\n      ports: [{port}]"))
}

/// A proxy under the `OLD` policy (its host on `upstream`'s port) with the admin API on a
/// Unix socket; returns the proxy and the `--admin` target.
fn proxy_with_admin(pki: &TestPki, upstream: &Upstream) -> (Proxy, String) {
    let builder = ProxyBuilder::new(pki).resolve_loopback("localhost");
    let target = unix_admin(builder.dir());
    let proxy = builder
        .policy(&on_port(OLD, upstream.port()))
        .arg("--admin")
        .arg(&target)
        .start();
    (proxy, target)
}

#[test]
fn put_policy_swaps_rules_and_refusals_change_nothing() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (proxy, target) = proxy_with_admin(&pki, &upstream);
    let socket = target.strip_prefix("unix:").unwrap();
    let mode = std::fs::metadata(socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "admin socket mode");
    let get = |path: &str| {
        curl(
            &proxy,
            &pki,
            &CurlRequest::get(&format!("https://localhost:{}{path}", upstream.port())),
        )
        .status
    };

    assert_eq!(get("/old/a"), 200);
    assert_eq!(get("/new/a"), 403);
    let (status, body) = admin(&target, "GET", "/v1/policy", &[], None);
    assert_eq!(status, 200, "{body}");
    let first = json(&body);
    assert_eq!(first["version"], 1);
    assert_eq!(
        first["policy"]["network"]["allow"][0]["host"], "localhost",
        "{body}"
    );
    let etag = first["etag"].as_str().unwrap().to_owned();

    assert_refused_puts_change_nothing(&target);
    assert_eq!(get("/old/a"), 200, "a refused PUT changed the policy");

    // Valid, with the right etag.
    let new = on_port(NEW, upstream.port());
    let if_match = format!("If-Match: \"{etag}\"");
    let (status, body) = admin(
        &target,
        "PUT",
        "/v1/policy",
        &["Content-Type: application/yaml", &if_match],
        Some(&new),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["version"], 2);
    assert_eq!(get("/old/a"), 403);
    assert_eq!(get("/new/a"), 200);
    // The same etag again is stale.
    let (status, body) = admin(
        &target,
        "PUT",
        "/v1/policy",
        &["Content-Type: application/yaml", &if_match],
        Some(OLD),
    );
    assert_eq!(status, 412, "{body}");
    assert_eq!(get("/new/a"), 200);
    let (_, body) = admin(&target, "GET", "/v1/policy", &[], None);
    assert_eq!(json(&body)["version"], 2);

    assert_policy_audit_lines(&proxy);
    assert_denials_and_metrics(&target);
}

/// Invalid policies are refused with every error located; a `secrets` section may not
/// change (and `mcp` is refused as at startup).
fn assert_refused_puts_change_nothing(target: &str) {
    // Invalid: every error located, nothing changed.
    let (status, body) = admin(
        target,
        "PUT",
        "/v1/policy",
        &["Content-Type: application/yaml"],
        Some("version: 1\nnetwork:\n  allow:\n    - host: a..b\n    - hots: x\n"),
    );
    assert_eq!(status, 400, "{body}");
    let errors = json(&body)["errors"].as_array().unwrap().clone();
    assert!(errors.len() >= 2, "{body}");
    assert!(
        errors
            .iter()
            .all(|e| e["location"].as_str().unwrap().starts_with("body:")),
        "{body}"
    );
    // The secrets section may not change; mcp is refused like at startup.
    let (status, body) = admin(
        target,
        "PUT",
        "/v1/policy",
        &["Content-Type: application/yaml"],
        Some("version: 1\nsecrets:\n  T:\n    value: hunter2hunter2\n    hosts: [localhost]\n"),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(json(&body)["errors"][0]["location"], "secrets", "{body}");
}

/// Every change and refused change has a `policy` audit line.
fn assert_policy_audit_lines(proxy: &Proxy) {
    let line = proxy.audit_line_where("policy change", |l| {
        l["kind"] == "policy" && l["decision"] == "allow"
    });
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .contains("source=api version 2"),
        "{line}"
    );
    proxy.audit_line_where("refused policy change", |l| {
        l["kind"] == "policy" && l["decision"] == "deny"
    });
}

/// `/v1/denials` honours its limit and `/metrics` (parsed by the strict reader) carries
/// the policy version, the decisions, the durations and the gauges.
fn assert_denials_and_metrics(target: &str) {
    // Denials and metrics (parsed by the strict reader in support/prometheus.rs).
    let (status, body) = admin(target, "GET", "/v1/denials?limit=2", &[], None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&body)["denials"].as_array().unwrap().len(),
        2,
        "{body}"
    );
    let (status, metrics) = admin(target, "GET", "/metrics", &[], None);
    assert_eq!(status, 200);
    let parsed = prometheus::parse(&metrics).unwrap_or_else(|e| panic!("{e}\n{metrics}"));
    assert_eq!(
        parsed.value("airlock_policy_version", &[]),
        Some(2.0),
        "{metrics}"
    );
    assert!(
        parsed
            .named("airlock_decisions_total")
            .any(|s| s.labels.get("reason").map(String::as_str) == Some("path_not_allowed")),
        "{metrics}"
    );
    assert!(
        parsed
            .value("airlock_request_duration_seconds_count", &[])
            .unwrap()
            >= 4.0,
        "{metrics}"
    );
    assert!(
        parsed.value("airlock_open_connections", &[]).is_some(),
        "{metrics}"
    );
    assert!(
        parsed
            .value("airlock_certificate_cache_size", &[])
            .is_some(),
        "{metrics}"
    );
}

#[test]
fn tcp_admin_needs_a_token_file_and_the_right_token() {
    let pki = TestPki::new();
    let (status, stderr) = ProxyBuilder::new(&pki)
        .arg("--admin")
        .arg("127.0.0.1:0")
        .start_expecting_exit(Duration::from_secs(20));
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{stderr}");
    assert!(stderr.contains("--admin-token-file"), "{stderr}");

    let builder = ProxyBuilder::new(&pki);
    let token_file = builder.dir().join("token");
    std::fs::write(&token_file, "s3cr3t-token\n").unwrap();
    let proxy = builder
        .arg("--admin")
        .arg("127.0.0.1:0")
        .arg("--admin-token-file")
        .arg(token_file.to_str().unwrap())
        .start();
    let addr = proxy
        .stderr()
        .lines()
        .find_map(|l| {
            l.strip_prefix("airlock: admin API listening on ")
                .map(str::to_owned)
        })
        .expect("admin listen line");
    let target = format!("http://{addr}");
    for path in ["/healthz", "/v1/policy", "/metrics", "/v1/denials"] {
        assert_eq!(
            admin(&target, "GET", path, &[], None).0,
            401,
            "{path} without token"
        );
        assert_eq!(
            admin(&target, "GET", path, &["Authorization: Bearer wrong"], None).0,
            401,
            "{path} wrong token"
        );
        assert_eq!(
            admin(
                &target,
                "GET",
                path,
                &["Authorization: Bearer s3cr3t-token-x"],
                None
            )
            .0,
            401
        );
        assert_eq!(
            admin(
                &target,
                "GET",
                path,
                &["Authorization: Bearer s3cr3t-token"],
                None
            )
            .0,
            200,
            "{path}"
        );
    }
    let (status, _) = admin(
        &target,
        "PUT",
        "/v1/policy",
        &["Content-Type: application/yaml"],
        Some(NEW),
    );
    assert_eq!(status, 401, "an unauthenticated PUT");
    let (_, body) = admin(
        &target,
        "GET",
        "/v1/policy",
        &["Authorization: Bearer s3cr3t-token"],
        None,
    );
    assert_eq!(
        json(&body)["version"],
        1,
        "the unauthenticated PUT changed the policy"
    );
}

#[test]
fn sighup_with_a_broken_file_keeps_the_policy_and_a_file_change_reloads() {
    let pki = TestPki::new();
    let builder = ProxyBuilder::new(&pki);
    let file = builder.dir().join("live.yaml");
    std::fs::write(&file, OLD).unwrap();
    let target = unix_admin(builder.dir());
    let mut proxy = builder
        .arg("--policy")
        .arg(file.to_str().unwrap())
        .arg("--admin")
        .arg(&target)
        .start();
    let version = || {
        json(&admin(&target, "GET", "/v1/policy", &[], None).1)["version"]
            .as_u64()
            .unwrap()
    };
    std::fs::write(&file, "version: 1\nnetwork:\n  allow:\n    - hots: x\n").unwrap();
    signal::kill(Pid::from_raw(proxy.pid() as i32), Signal::SIGHUP).expect("SIGHUP");
    wait_for(
        || proxy.stderr().contains("refused, keeping version 1"),
        "the refusal on stderr",
        &proxy.stderr(),
    );
    assert_eq!(version(), 1);
    let (_, body) = admin(&target, "GET", "/v1/policy", &[], None);
    assert_eq!(
        json(&body)["policy"]["network"]["allow"][0]["paths"][0],
        "/old/**"
    );
    std::fs::write(&file, NEW).unwrap();
    wait_for(|| version() >= 2, "the file change reload", &proxy.stderr());
    let (_, body) = admin(&target, "GET", "/v1/policy", &[], None);
    assert_eq!(
        json(&body)["policy"]["network"]["allow"][0]["paths"][0],
        "/new/**"
    );
    proxy.audit_line_where("refused sighup", |l| {
        l["kind"] == "policy"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.contains("source=sighup"))
    });
    assert!(proxy.is_running());
}

#[test]
fn git_source_follows_the_branch_not_the_working_tree() {
    let pki = TestPki::new();
    let builder = ProxyBuilder::new(&pki);
    let repo = builder.dir().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        let out = support::clients::git(&repo, args);
        assert!(
            out.status.is_some_and(|s| s.success()),
            "git {args:?}: {}",
            out.stderr
        );
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("policy.yaml"), OLD).unwrap();
    git(&["add", "policy.yaml"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "old",
    ]);
    let target = unix_admin(builder.dir());
    let proxy = builder
        .arg("--policy")
        .arg(&format!("git:{}#main:policy.yaml", repo.display()))
        .arg("--admin")
        .arg(&target)
        .start();
    let policy = || json(&admin(&target, "GET", "/v1/policy", &[], None).1);
    assert_eq!(
        policy()["policy"]["network"]["allow"][0]["paths"][0],
        "/old/**"
    );
    // An edit in the working tree changes nothing.
    std::fs::write(repo.join("policy.yaml"), NEW).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(policy()["version"], 1, "{}", proxy.stderr());
    // A commit on the branch is applied.
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qam",
        "new",
    ]);
    wait_for(
        || policy()["version"] == 2,
        "the git reload",
        &proxy.stderr(),
    );
    assert_eq!(
        policy()["policy"]["network"]["allow"][0]["paths"][0],
        "/new/**"
    );
}

fn wait_for(mut condition: impl FnMut() -> bool, what: &str, context: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}\n{context}");
}

/// Four keep-alive clients (python3 http.client through CONNECT) hammer `/old/x` while the
/// main thread PUTs a policy that refuses it; prints every request's (thread, start, end,
/// status) and the PUT's start and end, all on one monotonic clock.
const LOAD_SCRIPT: &str = r#"
import http.client, json, socket, ssl, sys, threading, time
proxy_host, proxy_port, ca, port, sock_path, body = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
ctx = ssl.create_default_context(cafile=ca)
results, errors, lock = [], [], threading.Lock()
put = {}
def worker(index):
    conn = http.client.HTTPSConnection(proxy_host, proxy_port, context=ctx, timeout=20)
    conn.set_tunnel("localhost", port)
    count = 0
    while count < 400 and (count < 60 or "end" not in put or count < 300):
        start = time.monotonic()
        try:
            conn.request("GET", "/old/x")
            response = conn.getresponse()
            response.read()
            status = response.status
        except Exception as e:
            with lock: errors.append(repr(e))
            return
        end = time.monotonic()
        with lock: results.append([index, start, end, status])
        count += 1
class Unix(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sock_path)
threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
for t in threads: t.start()
while True:
    with lock:
        if len(results) >= 240: break
    time.sleep(0.005)
admin = Unix("admin")
put["start"] = time.monotonic()
admin.request("PUT", "/v1/policy", body=body, headers={"Content-Type": "application/yaml"})
reply = admin.getresponse()
put["status"] = reply.status
put["body"] = reply.read().decode()
put["end"] = time.monotonic()
for t in threads: t.join()
print(json.dumps({"results": results, "errors": errors, "put": put}))
"#;

#[test]
fn put_under_load_switches_every_client_at_one_point() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (proxy, target) = proxy_with_admin(&pki, &upstream);
    let mut command = crate::support::tool("python3");
    command
        .args(["-c", LOAD_SCRIPT, "127.0.0.1", &proxy.port().to_string()])
        .arg(&pki.proxy_ca_cert)
        .arg(upstream.port().to_string())
        .arg(target.strip_prefix("unix:").unwrap())
        .arg(on_port(NEW, upstream.port()));
    let output = run_bounded(&mut command, Duration::from_secs(120));
    assert!(
        output.status.is_some_and(|s| s.success()),
        "{}",
        output.stderr
    );
    let report = json(&String::from_utf8_lossy(&output.stdout));
    assert_eq!(report["errors"], serde_json::json!([]), "failed requests");
    assert_eq!(report["put"]["status"], 200, "{}", report["put"]);
    let (put_start, put_end) = (
        report["put"]["start"].as_f64().unwrap(),
        report["put"]["end"].as_f64().unwrap(),
    );
    let results = report["results"].as_array().unwrap();
    assert!(results.len() >= 1000, "only {} requests", results.len());
    let mut switched = [false; 4];
    for row in results {
        let (thread, start, end, status) = (
            row[0].as_u64().unwrap() as usize,
            row[1].as_f64().unwrap(),
            row[2].as_f64().unwrap(),
            row[3].as_u64().unwrap(),
        );
        assert!(status == 200 || status == 403, "status {status}");
        if end < put_start {
            assert_eq!(status, 200, "a request done before the PUT was refused");
        }
        if start > put_end {
            assert_eq!(status, 403, "a request started after the PUT was allowed");
        }
        // Each client's sequence is allow* then deny*: one switch point.
        if status == 403 {
            switched[thread] = true;
        } else {
            assert!(
                !switched[thread],
                "client {thread} was allowed again after a refusal"
            );
        }
    }
    assert!(
        switched.iter().all(|s| *s),
        "some client never saw the new policy"
    );
    assert!(results.iter().any(|r| r[3] == 200) && results.iter().any(|r| r[3] == 403));
}

/// The part of docs/openapi.yaml the route check reads: every key under a path is an
/// operation, and every operation lists its responses by status.
#[derive(serde::Deserialize)]
struct OpenApi {
    paths: BTreeMap<String, BTreeMap<String, Operation>>,
}

#[derive(serde::Deserialize)]
struct Operation {
    responses: BTreeMap<String, serde::de::IgnoredAny>,
}

#[test]
fn openapi_file_matches_the_server() {
    let spec_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    let text = std::fs::read_to_string(spec_path).expect("docs/openapi.yaml");
    let spec: OpenApi =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("docs/openapi.yaml: {e}"));
    let mut documented_routes: Vec<(String, String)> = Vec::new();
    let pki = TestPki::new();
    let builder = ProxyBuilder::new(&pki);
    let target = unix_admin(builder.dir());
    let _proxy = builder.arg("--admin").arg(&target).start();
    for (path, methods) in &spec.paths {
        for (method, operation) in methods {
            documented_routes.push((method.to_uppercase(), path.clone()));
            let method = method.to_uppercase();
            if path == "/v1/events" {
                // A stream: curl stops it after a second; its headers say 200.
                let mut command = crate::support::tool("curl");
                command.args([
                    "-sS",
                    "-N",
                    "--max-time",
                    "1",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--unix-socket",
                ]);
                command
                    .arg(target.strip_prefix("unix:").unwrap())
                    .arg("http://admin/v1/events");
                let output = run_bounded(&mut command, Duration::from_secs(10));
                assert_eq!(String::from_utf8_lossy(&output.stdout), "200");
                continue;
            }
            let body = (method == "PUT").then_some("{}");
            let (status, text) = admin(
                &target,
                &method,
                path,
                &["Content-Type: application/json"],
                body,
            );
            let statuses: Vec<&str> = operation.responses.keys().map(String::as_str).collect();
            assert!(
                statuses.contains(&status.to_string().as_str()),
                "{method} {path} answered {status} ({text}), documented {statuses:?}"
            );
        }
    }
    documented_routes.sort();
    let mut served: Vec<(String, String)> = airlock_control::server::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    served.sort();
    assert_eq!(
        documented_routes, served,
        "docs/openapi.yaml and the server's routes differ"
    );
}

#[test]
fn events_stream_in_order_with_the_deny_filter() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (proxy, target) = proxy_with_admin(&pki, &upstream);
    let stream = crate::support::tool("curl")
        .args(["-sS", "-N", "--max-time", "6", "--unix-socket"])
        .arg(target.strip_prefix("unix:").unwrap())
        .arg("http://admin/v1/events?decision=deny")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl");
    std::thread::sleep(Duration::from_millis(700));
    let url = |path: &str| format!("https://localhost:{}{path}", upstream.port());
    for path in ["/new/1", "/old/allowed", "/new/2", "/new/3"] {
        curl(&proxy, &pki, &CurlRequest::get(&url(path)));
    }
    let output = stream.wait_with_output().expect("curl output");
    let text = String::from_utf8_lossy(&output.stdout);
    let paths: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| json(l)["path"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(paths, ["/new/1", "/new/2", "/new/3"], "{text}");
}

#[test]
fn trustyclaw_endpoint_takes_the_importer_fixtures() {
    let fixtures = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../airlock-import/tests/fixtures/import/trustyclaw"
    );
    let pki = TestPki::new();
    let builder = ProxyBuilder::new(&pki);
    let target = unix_admin(builder.dir());
    let _proxy = builder.policy(OLD).arg("--admin").arg(&target).start();
    let put = |file: &str| {
        let body = std::fs::read_to_string(format!("{fixtures}/{file}")).unwrap();
        admin(
            &target,
            "PUT",
            "/v1/network/policy",
            &["Content-Type: application/json"],
            Some(&body),
        )
    };
    let (status, body) = put("invalid.json");
    assert_eq!(status, 400, "{body}");
    assert!(!json(&body)["errors"].as_array().unwrap().is_empty());
    let (status, body) = put("network-policy.json");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["version"], 2);
    let (_, body) = admin(&target, "GET", "/v1/policy", &[], None);
    let policy = json(&body);
    let expected = airlock_import::import(
        airlock_import::SeedFormat::Trustyclaw,
        "body",
        &std::fs::read_to_string(format!("{fixtures}/network-policy.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        policy["policy"]["network"]["allow"]
            .as_array()
            .unwrap()
            .len(),
        expected.network.allow.len(),
        "{body}"
    );
    assert!(
        !body.contains("/old/**"),
        "the old network rules stayed: {body}"
    );
}

/// The admin socket never replaces a file that is not a socket (a mistyped path must not
/// clobber the operator's data), and a refused start leaves that file as it was.
#[test]
fn admin_socket_path_holding_a_file_is_refused_and_kept() {
    let pki = TestPki::new();
    let operator_dir = tempfile::tempdir().unwrap();
    let precious = operator_dir.path().join("precious.txt");
    std::fs::write(&precious, "keep me\n").unwrap();
    let (status, stderr) = ProxyBuilder::new(&pki)
        .arg("--admin")
        .arg(&format!("unix:{}", precious.display()))
        .start_expecting_exit(Duration::from_secs(20));
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{stderr}");
    assert!(stderr.contains("is not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me\n");
    let leftovers: Vec<_> = std::fs::read_dir(precious.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".airlock-admin-")
        })
        .collect();
    assert!(leftovers.is_empty(), "staging directory left behind");
}

/// The leaves of the hosts the allow rules name exactly (not a wildcard, not a
/// `tls_passthrough` host) are minted as the proxy starts, before any client connects
/// (docs/benchmarks.md, "Start-up, phase by phase"): the certificate cache gauge shows them.
#[test]
fn the_named_hosts_leaves_are_made_before_any_request() {
    let pki = TestPki::new();
    let builder = ProxyBuilder::new(&pki);
    let target = unix_admin(builder.dir());
    let proxy = builder
        .policy(
            "version: 1\nnetwork:\n  allow:\n    - host: a.example\n    - host: \"*.wild.example\"\n    - host: b.example\n    - host: pass.example\n    - host: a.example\n      paths: [\"/x\"]\n  tls_passthrough: [pass.example]\n",
        )
        .arg("--admin")
        .arg(&target)
        .start();
    let cached = || {
        let (status, metrics) = admin(&target, "GET", "/metrics", &[], None);
        assert_eq!(status, 200, "{metrics}");
        let parsed = prometheus::parse(&metrics).unwrap_or_else(|e| panic!("{e}\n{metrics}"));
        parsed.value("airlock_certificate_cache_size", &[])
    };
    wait_for(|| cached() == Some(2.0), "two leaves", &proxy.stderr());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cached(), Some(2.0), "a.example and b.example only");
}
