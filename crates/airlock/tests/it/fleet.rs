//! A fleet of airlock sidecars on one machine (issue 38, docs/kubernetes.md "Fleet
//! simulation"): three network namespaces made by the test, each standing for one agent pod
//! of `deploy/kubernetes/sidecar.yaml`:
//!
//! * the capture is the manifest's own `airlock-redirect` script, run verbatim in the
//!   namespace; airlock runs as uid 1337 with `--transparent 127.0.0.1:15001 --dns
//!   127.0.0.1:15053` as in the manifest, the agent as another uid, a TLS upstream on the
//!   namespace's loopback stands for the outside;
//! * one policy source for all three: a directory laid out as the kubelet lays out a
//!   ConfigMap volume (`..data` → a timestamped directory, `policy.yaml` → `..data/…`),
//!   changed as the kubelet changes it (a new directory, `..data` swapped by rename). The new
//!   file has the old one's length and modification time, so only the swap itself tells;
//! * the change must reach every gateway within [`PROPAGATION_BOUND`] (measured through
//!   each gateway's `/healthz` `policy_version`), after which each agent sees the new
//!   decisions; a broken policy published the same way is refused by all and changes none;
//! * the audit of the three is merged at one receiver, as a node's log collector gets it:
//!   each gateway writes `--log -` as in the manifests, the test reads the three streams
//!   live and merges the lines by time, each tagged with its gateway (not one `--audit-otlp`
//!   receiver: a namespace with `lo` alone cannot reach one; `audit_otlp.rs` tests that
//!   path).
//!
//! Needs root (namespaces, iptables, changing uid); fails under `AIRLOCK_TEST_REQUIRE=1`
//! where it cannot run.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::deploy_manifests::Running;
use crate::gateway_namespaces::{Namespaces, UPSTREAM, namespaces_and_nat_available};
use crate::support::clients::run_bounded;
use crate::support::pki::TestPki;

/// The gateways in the fleet.
const GATEWAYS: usize = 3;
/// airlock's uid in the manifest (the capture script exempts it).
const AIRLOCK_UID: u32 = 1337;
/// The agent's uid (captured).
const AGENT_UID: u32 = 64130;
/// A reload is polled every second (`airlock_session::policy_reload::POLL_INTERVAL`); the
/// bound leaves as much again for reading and compiling the policy on a busy machine.
const PROPAGATION_BOUND: Duration = Duration::from_secs(3);
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

const POLICY_V1: &str = "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n";
const POLICY_V2: &str = "version: 1\nnetwork:\n  allow:\n    - host: other.test\n";
const POLICY_BROKEN: &str = "version: 1\nnetwork:\n  allow: [\n";

/// A directory in the kubelet's ConfigMap volume layout, for one file.
struct ConfigMapDir {
    dir: PathBuf,
    current: Option<PathBuf>,
}

impl ConfigMapDir {
    /// Publishes `content` as `name`: a new `..GENERATION` directory, `..data_tmp` pointing
    /// at it renamed over `..data`, the old directory removed (the kubelet's atomic writer).
    /// `mtime` is given to the new file when set.
    fn publish(&mut self, generation: &str, name: &str, content: &str, mtime: Option<SystemTime>) {
        let versioned = self.dir.join(format!("..{generation}"));
        std::fs::create_dir(&versioned).expect("versioned dir");
        std::fs::set_permissions(&versioned, PermissionsExt::from_mode(0o755)).expect("chmod");
        let file = versioned.join(name);
        std::fs::write(&file, content).expect("write policy");
        if let Some(mtime) = mtime {
            std::fs::File::options()
                .write(true)
                .open(&file)
                .and_then(|f| f.set_modified(mtime))
                .expect("set mtime");
        }
        let tmp = self.dir.join("..data_tmp");
        symlink(format!("..{generation}"), &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("swap ..data");
        let link = self.dir.join(name);
        if link.symlink_metadata().is_err() {
            symlink(format!("..data/{name}"), &link).expect("file link");
        }
        if let Some(old) = self.current.replace(versioned) {
            std::fs::remove_dir_all(old).expect("remove old generation");
        }
    }
}

/// One gateway's namespace and files.
struct Gateway {
    index: usize,
    ns: String,
    dir: PathBuf,
}

/// The one place the gateways' audit arrives, as a node's log collector receives the
/// containers' stdout: each gateway writes `--log -` (as the manifests do) into a pipe read
/// here, and every line is kept tagged with its gateway's index under `"gateway"`.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Value>>>);

impl Receiver {
    /// Reads `stream` until it ends (when the gateway exits), line by line.
    fn attach(&self, index: usize, stream: ChildStdout) -> JoinHandle<()> {
        let lines = self.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if let Ok(mut value) = serde_json::from_str::<Value>(&line) {
                    value["gateway"] = Value::from(index);
                    lines
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(value);
                }
            }
        })
    }

    /// Every line received so far, ordered by time.
    fn merged(&self) -> Vec<Value> {
        let mut merged = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        merged.sort_by(|a, b| a["ts"].as_str().cmp(&b["ts"].as_str()));
        merged
    }

    /// The lines of one gateway.
    fn of(&self, gateway: &Gateway) -> Vec<Value> {
        self.merged()
            .into_iter()
            .filter(|line| line["gateway"] == gateway.index)
            .collect()
    }
}

impl Gateway {
    fn admin(&self) -> PathBuf {
        self.dir.join("admin.sock")
    }

    /// `/healthz` through the admin socket, as the manifest's probes ask it.
    fn health(&self) -> Option<Value> {
        let output = run_bounded(
            Command::new("curl")
                .args(["-fsS", "--max-time", "2", "--unix-socket"])
                .arg(self.admin())
                .arg("http://airlock/healthz"),
            Duration::from_secs(5),
        );
        if !output.status.is_some_and(|status| status.success()) {
            return None;
        }
        serde_json::from_slice(&output.stdout).ok()
    }

    fn policy_version(&self) -> Option<u64> {
        self.health()?["policy_version"].as_u64()
    }

    /// The agent's `curl https://HOST/`: the HTTP status, or 000 when nothing answered.
    fn agent_get(&self, host: &str, ca: &Path) -> String {
        let output = run_bounded(
            Command::new("ip").args(["netns", "exec", &self.ns]).args([
                "setpriv",
                &format!("--reuid={AGENT_UID}"),
                &format!("--regid={AGENT_UID}"),
                "--clear-groups",
                "curl",
                "-sS",
                "--max-time",
                "10",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
                ca.to_str().expect("utf-8 path"),
                &format!("https://{host}/fleet"),
            ]),
            STEP_TIMEOUT,
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

/// The `airlock-redirect` init container's script from `deploy/kubernetes/sidecar.yaml`.
fn manifest_capture_script() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kubernetes/sidecar.yaml"
    );
    let text = std::fs::read_to_string(path).expect("read sidecar.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("sidecar.yaml parses");
    let pod = docs
        .iter()
        .find(|doc| doc["kind"] == "Pod")
        .expect("a Pod in sidecar.yaml");
    let init = pod["spec"]["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .find(|container| container["name"] == "airlock-redirect")
        .expect("the airlock-redirect init container");
    assert_eq!(init["command"], serde_json::json!(["/bin/sh", "-c"]));
    init["args"][0].as_str().expect("its script").to_owned()
}

/// Builds namespace `ns`: loopback, a veth with the default route (so that captured
/// packets have somewhere to go before the REDIRECT), then the manifest's capture script.
fn build_namespace(ns: &str, capture: &str) {
    let etc = Path::new("/etc/netns").join(ns);
    std::fs::create_dir_all(&etc).expect("/etc/netns");
    std::fs::write(etc.join("resolv.conf"), "nameserver 10.240.0.9\n").expect("resolv.conf");
    let script = format!(
        "set -eu
ip netns add {ns}
H='ip netns exec {ns}'
$H ip link set lo up
$H ip link add out0 type veth peer name out1
$H ip link set out1 up
$H ip addr add 10.240.0.1/24 dev out0
$H ip link set out0 up
$H ip route add default dev out0
"
    );
    let built = run_bounded(Command::new("sh").args(["-c", &script]), STEP_TIMEOUT);
    assert!(
        built.status.is_some_and(|status| status.success()),
        "namespace {ns}: {}",
        built.stderr
    );
    let captured = run_bounded(
        Command::new("ip").args(["netns", "exec", ns, "sh", "-c", capture]),
        STEP_TIMEOUT,
    );
    assert!(
        captured.status.is_some_and(|status| status.success()),
        "the manifest's capture script in {ns}: {}",
        captured.stderr
    );
}

/// Starts the upstream (as root) and the gateway (as uid 1337) in `gateway`'s namespace,
/// the gateway's audit going to `receiver`.
fn start(
    gateway: &Gateway,
    policy: &Path,
    pki: &TestPki,
    scratch: &Path,
    receiver: &Receiver,
) -> (Vec<Running>, JoinHandle<()>) {
    let upstream = Command::new("ip")
        .args(["netns", "exec", &gateway.ns, "python3"])
        .arg(scratch.join("upstream.py"))
        .args(["127.0.0.1", "443"])
        .arg(&pki.upstream_leaf_cert)
        .arg(&pki.upstream_leaf_key)
        .arg(gateway.dir.join("upstream-up"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start upstream");
    let upstream = Running(upstream);
    let mut airlock = Command::new("ip");
    airlock
        .args(["netns", "exec", &gateway.ns, "setpriv"])
        .arg(format!("--reuid={AIRLOCK_UID}"))
        .arg(format!("--regid={AIRLOCK_UID}"))
        .arg("--clear-groups")
        .arg(env!("CARGO_BIN_EXE_airlock"))
        .arg("proxy")
        .arg("--policy")
        .arg(policy)
        .args(["--resolve", "allowed.test:127.0.0.1"])
        .args(["--resolve", "other.test:127.0.0.1"])
        .arg("--upstream-ca")
        .arg(scratch.join("upstream-ca.pem"))
        .arg("--ca-cert")
        .arg(gateway.dir.join("ca.pem"))
        .arg("--ca-key")
        .arg(gateway.dir.join("ca-key.pem"))
        .args([
            "--transparent",
            "127.0.0.1:15001",
            "--dns",
            "127.0.0.1:15053",
        ])
        .arg("--admin")
        .arg(format!("unix:{}", gateway.admin().display()))
        .args(["--log", "-"])
        .env("AIRLOCK_HOME", gateway.dir.join("home"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(gateway.dir.join("stderr")).expect("stderr"));
    let mut airlock = airlock.spawn().expect("start airlock");
    let stdout = airlock.stdout.take().expect("airlock's stdout");
    let reader = receiver.attach(gateway.index, stdout);
    (vec![upstream, Running(airlock)], reader)
}

/// Makes `gateway.dir` airlock's (0700), with its own copy of the CA key owned by uid 1337
/// and readable by it alone, as the manifest's `airlock-ca-key` init container leaves it.
fn gateway_files(dir: &Path, pki: &TestPki) {
    std::fs::create_dir_all(dir.join("home")).expect("gateway dir");
    std::fs::copy(&pki.proxy_ca_cert, dir.join("ca.pem")).expect("ca.pem");
    std::fs::copy(&pki.proxy_ca_key, dir.join("ca-key.pem")).expect("ca-key.pem");
    for path in [
        dir.to_owned(),
        dir.join("home"),
        dir.join("ca.pem"),
        dir.join("ca-key.pem"),
    ] {
        chown(&path, Some(AIRLOCK_UID), Some(AIRLOCK_UID)).expect("chown to airlock");
    }
    std::fs::set_permissions(dir, PermissionsExt::from_mode(0o700)).expect("chmod");
}

/// Waits (bounded) until every gateway answers `/healthz` with `version`; each one's delay.
fn wait_for_version(gateways: &[Gateway], version: u64, limit: Duration) -> Vec<Duration> {
    let started = Instant::now();
    let mut reached: Vec<Option<Duration>> = vec![None; gateways.len()];
    while started.elapsed() < limit && reached.iter().any(Option::is_none) {
        for (gateway, reached) in gateways.iter().zip(reached.iter_mut()) {
            if reached.is_none() && gateway.policy_version() == Some(version) {
                *reached = Some(started.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let context: Vec<String> = gateways
        .iter()
        .map(|gateway| {
            let stderr = std::fs::read_to_string(gateway.dir.join("stderr")).unwrap_or_default();
            format!("{}: {:?}\n{stderr}", gateway.ns, gateway.health())
        })
        .collect();
    reached
        .into_iter()
        .map(|reached| {
            reached.unwrap_or_else(|| {
                panic!(
                    "not every gateway reached policy version {version} in {limit:?}: {context:#?}"
                )
            })
        })
        .collect()
}

/// Every gateway's agent gets `expected` (host, status) answers.
fn assert_agents_see(gateways: &[Gateway], ca: &Path, expected: &[(&str, &str)]) {
    for gateway in gateways {
        for (host, status) in expected {
            let got = gateway.agent_get(host, ca);
            assert_eq!(
                &got,
                status,
                "{host} from {}'s agent (stderr: {})",
                gateway.ns,
                std::fs::read_to_string(gateway.dir.join("stderr")).unwrap_or_default()
            );
        }
    }
}

#[test]
fn a_policy_change_reaches_every_gateway_in_the_fleet_within_the_bound() {
    let test = "a_policy_change_reaches_every_gateway_in_the_fleet_within_the_bound";
    if !namespaces_and_nat_available(test) {
        return;
    }
    crate::support::need_all(&["curl", "setpriv", "python3"]);
    let tag = format!("alf{}", std::process::id() % 100_000);
    let names: Vec<String> = (0..GATEWAYS).map(|i| format!("{tag}-{i}")).collect();
    let _namespaces = Namespaces {
        names: names.clone(),
    };
    let pki = TestPki::new();
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path();
    std::fs::set_permissions(root, PermissionsExt::from_mode(0o755)).expect("chmod scratch");
    std::fs::write(root.join("upstream.py"), UPSTREAM).expect("upstream.py");
    std::fs::copy(&pki.upstream_ca_cert, root.join("upstream-ca.pem")).expect("upstream CA");
    let agent_ca = root.join("agent-ca.pem");
    std::fs::copy(&pki.proxy_ca_cert, &agent_ca).expect("agent CA");
    for file in ["upstream-ca.pem", "agent-ca.pem"] {
        std::fs::set_permissions(root.join(file), PermissionsExt::from_mode(0o644)).expect("chmod");
    }

    // The one policy source, as the kubelet writes a ConfigMap volume.
    let cm_dir = root.join("configmap");
    std::fs::create_dir(&cm_dir).expect("configmap dir");
    std::fs::set_permissions(&cm_dir, PermissionsExt::from_mode(0o755)).expect("chmod");
    let mut configmap = ConfigMapDir {
        dir: cm_dir.clone(),
        current: None,
    };
    configmap.publish("2026_11_27_10_00_00.1", "policy.yaml", POLICY_V1, None);
    let policy = cm_dir.join("policy.yaml");

    let capture = manifest_capture_script();
    let gateways: Vec<Gateway> = names
        .iter()
        .enumerate()
        .map(|(index, ns)| Gateway {
            index,
            ns: ns.clone(),
            dir: root.join(ns),
        })
        .collect();
    let receiver = Receiver::default();
    let (mut processes, mut readers) = (Vec::new(), Vec::new());
    for gateway in &gateways {
        build_namespace(&gateway.ns, &capture);
        gateway_files(&gateway.dir, &pki);
        let (started, reader) = start(gateway, &policy, &pki, root, &receiver);
        processes.extend(started);
        readers.push(reader);
    }
    wait_for_version(&gateways, 1, Duration::from_secs(30));
    for gateway in &gateways {
        let up = gateway.dir.join("upstream-up");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !up.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(up.exists(), "the upstream in {} did not start", gateway.ns);
    }
    assert_agents_see(
        &gateways,
        &agent_ca,
        &[("allowed.test", "200"), ("other.test", "403")],
    );

    // The change: same length and modification time as the file it replaces.
    let padding = POLICY_V1.len() - POLICY_V2.len();
    assert!(padding >= 2);
    let v2 = format!("{POLICY_V2}{}\n", "#".repeat(padding - 1));
    assert_eq!(v2.len(), POLICY_V1.len());
    let mtime = std::fs::metadata(&policy)
        .and_then(|m| m.modified())
        .expect("mtime");
    configmap.publish("2026_11_27_10_05_00.2", "policy.yaml", &v2, Some(mtime));
    let delays = wait_for_version(&gateways, 2, PROPAGATION_BOUND);
    let slowest = delays.iter().max().copied().unwrap_or_default();
    eprintln!("fleet: policy version 2 reached the {GATEWAYS} gateways after {delays:?}");
    assert!(slowest <= PROPAGATION_BOUND, "{delays:?}");
    assert_agents_see(
        &gateways,
        &agent_ca,
        &[("allowed.test", "403"), ("other.test", "200")],
    );

    // A broken policy, published the same way, is refused everywhere; version 2 stays.
    configmap.publish("2026_11_27_10_10_00.3", "policy.yaml", POLICY_BROKEN, None);
    let refused_deadline = Instant::now() + PROPAGATION_BOUND;
    while Instant::now() < refused_deadline && !all_refused(&gateways, &receiver) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        all_refused(&gateways, &receiver),
        "{:#?}",
        receiver.merged()
    );
    for gateway in &gateways {
        assert_eq!(gateway.policy_version(), Some(2), "{}", gateway.ns);
    }
    assert_agents_see(&gateways, &agent_ca, &[("other.test", "200")]);
    // SIGTERM: each gateway flushes and closes its stream; the receiver reads to the end.
    drop(processes);
    for reader in readers {
        reader.join().expect("audit reader");
    }
    assert_merged_audit(&receiver.merged());
}

/// Whether every gateway has sent a refused `policy` line.
fn all_refused(gateways: &[Gateway], receiver: &Receiver) -> bool {
    gateways.iter().all(|gateway| {
        receiver
            .of(gateway)
            .iter()
            .any(|line| line["kind"] == "policy" && line["decision"] == "deny")
    })
}

/// The merged record holds, from each gateway, the change it took from the file, the
/// refused one, and its agent's decisions before and after, in time order.
fn assert_merged_audit(merged: &[Value]) {
    let context = || {
        merged
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        merged
            .windows(2)
            .all(|pair| pair[0]["ts"].as_str() <= pair[1]["ts"].as_str()),
        "{}",
        context()
    );
    for gateway in 0..GATEWAYS {
        let lines: Vec<&Value> = merged
            .iter()
            .filter(|line| line["gateway"] == gateway)
            .collect();
        let has = |kind: &str, decision: &str, pick: &dyn Fn(&Value) -> bool| {
            lines
                .iter()
                .any(|line| line["kind"] == kind && line["decision"] == decision && pick(line))
        };
        let message = |needle: &'static str| {
            move |line: &Value| line["message"].as_str().is_some_and(|m| m.contains(needle))
        };
        let host = |name: &'static str| move |line: &Value| line["host"] == name;
        let name = |name: &'static str| move |line: &Value| line["name"] == name;
        let context = || format!("gateway {gateway}:\n{}", context());
        assert!(
            has("policy", "allow", &message("source=file version 2")),
            "{}",
            context()
        );
        assert!(
            has("policy", "deny", &message("source=file")),
            "{}",
            context()
        );
        assert!(has("dns", "allow", &name("other.test")), "{}", context());
        let decided = |decision: &str, name: &'static str| {
            lines.iter().any(|line| {
                line["kind"] != "dns" && line["decision"] == decision && host(name)(line)
            })
        };
        // allowed.test passed under version 1 and was refused under version 2; other.test
        // the other way round.
        for (decision, name) in [
            ("allow", "allowed.test"),
            ("deny", "allowed.test"),
            ("allow", "other.test"),
            ("deny", "other.test"),
        ] {
            assert!(decided(decision, name), "{decision} {name}: {}", context());
        }
    }
}
