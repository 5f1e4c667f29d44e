//! Each airlock container of the manifests, run for real on this machine as its pod would
//! run it: the pod's volumes laid out under a temporary directory (ConfigMaps written out,
//! the CA objects of docs/kubernetes.md from the test PKI, empty directories), the
//! `airlock-ca-key` init container's own script run first (as root, as in the manifest),
//! then airlock with the container's command line, environment and uid (`runAsUser`, so a
//! read-only mount really cannot be written), addresses moved to loopback, until the
//! manifest's own startup probe passes; then its readiness and liveness probes, then
//! SIGTERM, after which airlock must exit 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{
    STEP_TIMEOUT, airlock_containers, inspect, manifest_paths, string_list, validator_python,
};
use crate::support::clients::run_bounded;
use crate::support::pki::TestPki;

#[test]
fn manifest_command_lines_start_the_proxy_until_its_probes_pass() {
    crate::support::need_all(&["curl", "setpriv"]);
    let Some(python) = validator_python() else {
        return;
    };
    let report = inspect(&python, &manifest_paths());
    let pki = TestPki::new();
    let root = nix::unistd::geteuid().is_root();
    let airlocks = airlock_containers(&report);
    assert_eq!(airlocks.len(), 3, "{report:#}");
    for airlock in airlocks {
        let manifest = airlock["manifest"].as_str().expect("manifest");
        let mut pod = PodFiles::new(&report["configmaps"], &pki);
        for init in pod_containers(&report, manifest, "airlock-ca-key") {
            let view = pod.mount(init, root);
            if root {
                run_init_script(init, &view);
            } else {
                // Not root: the key is handed over by hand, as the script would.
                let dir = view.local("/ca-key");
                std::fs::copy(&pki.proxy_ca_key, dir.join("ca-key.pem")).expect("copy key");
            }
        }
        let view = pod.mount(airlock, root);
        start_and_probe(airlock, &view, root);
    }
}

/// The containers named `name` of `manifest`'s pods.
fn pod_containers<'a>(report: &'a Value, manifest: &str, name: &str) -> Vec<&'a Value> {
    report["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter(|container| container["manifest"] == manifest && container["name"] == name)
        .collect()
}

/// Runs the init container's `sh -c` script with its mount paths moved to the local ones.
fn run_init_script(init: &Value, view: &View) {
    let argv = string_list(&init["argv"]);
    assert_eq!(argv.first().map(String::as_str), Some("-c"), "{init:#}");
    let script = view.rewrite_paths_in(&argv[1]);
    let output = run_bounded(Command::new("sh").args(["-c", &script]), STEP_TIMEOUT);
    assert!(
        output.status.is_some_and(|status| status.success()),
        "{} of {}: {}\n{script}",
        init["name"],
        init["manifest"],
        output.stderr
    );
}

/// Starts airlock as `container` says and runs its probes; stops it with SIGTERM.
fn start_and_probe(container: &Value, view: &View, root: bool) {
    let argv: Vec<String> = string_list(&container["argv"])
        .iter()
        .map(|arg| view.rewrite_arg(arg))
        .collect();
    let mut command = if root {
        let uid = container["run_as_user"].as_u64().expect("runAsUser");
        let mut command = Command::new("setpriv");
        command
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg(env!("CARGO_BIN_EXE_airlock"));
        command
    } else {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
    };
    command.args(&argv);
    for (name, value) in container["env"].as_object().expect("env") {
        command.env(name, view.rewrite(value.as_str().expect("env value")));
    }
    let stderr = view.scratch.join(format!("{}.stderr", view.tag));
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("start airlock");
    let mut airlock = Running(child);
    let context = format!(
        "{} of {}: {argv:?}",
        container["name"], container["manifest"]
    );
    let probes: Vec<Vec<String>> = container["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .map(|probe| string_list(probe).iter().map(|a| view.rewrite(a)).collect())
        .collect();
    assert_eq!(probes.len(), 3, "startup, readiness, liveness: {context}");
    wait_for_probe(&probes[0], &mut airlock, &stderr, &context);
    for probe in &probes[1..] {
        let output = run_bounded(Command::new(&probe[0]).args(&probe[1..]), STEP_TIMEOUT);
        assert!(
            output.status.is_some_and(|status| status.success()),
            "probe {probe:?} failed: {} ({context})",
            output.stderr
        );
    }
    airlock.stop(&context);
}

/// Runs the startup probe every 100 ms until it passes (at most 30 s, as the manifest's
/// `failureThreshold: 30` at one-second periods); fails if airlock exits meanwhile.
fn wait_for_probe(probe: &[String], airlock: &mut Running, stderr: &Path, context: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = run_bounded(
            Command::new(&probe[0]).args(&probe[1..]),
            Duration::from_secs(5),
        );
        if output.status.is_some_and(|status| status.success()) {
            assert!(
                String::from_utf8_lossy(&output.stdout).contains("\"status\":\"ok\""),
                "{context}"
            );
            return;
        }
        let exited = airlock.0.try_wait().expect("try_wait");
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "airlock exited ({exited:?}) or its startup probe never passed: {context}\n{}",
            std::fs::read_to_string(stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child process (airlock, or a helper), stopped when dropped as the kubelet stops a
/// container: SIGTERM, then SIGKILL after [`GRACE`] (so that airlock flushes its audit).
pub(crate) struct Running(pub(crate) Child);

/// How long a child is given to exit after SIGTERM.
const GRACE: Duration = Duration::from_secs(15);

impl Running {
    /// Sends SIGTERM and waits, bounded, for the exit status.
    fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGTERM: airlock drains and exits 0 within [`GRACE`].
    fn stop(&mut self, context: &str) {
        match self.terminate() {
            Some(status) => assert!(status.success(), "exit after SIGTERM: {status} ({context})"),
            None => panic!("airlock did not stop within {GRACE:?} of SIGTERM: {context}"),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) && self.terminate().is_none() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// One pod's volumes under a temporary directory, made on first mount as the kubelet
/// makes them: ConfigMap and Secret files root-owned (0644, 0400), empty directories 0777;
/// and the copies that stand for read-only mounts.
struct PodFiles<'a> {
    root: tempfile::TempDir,
    volumes: BTreeMap<String, PathBuf>,
    copies: Vec<PathBuf>,
    configmaps: &'a Value,
    pki: &'a TestPki,
}

impl<'a> PodFiles<'a> {
    fn new(configmaps: &'a Value, pki: &'a TestPki) -> PodFiles<'a> {
        let root = tempfile::tempdir().expect("tempdir");
        set_mode(root.path(), 0o755);
        PodFiles {
            root,
            volumes: BTreeMap::new(),
            copies: Vec::new(),
            configmaps,
            pki,
        }
    }

    /// `container`'s view of the pod's volumes; a read-only mount is a copy that its uid
    /// cannot write to ([`PodFiles::read_only_copy`]).
    fn mount(&mut self, container: &Value, root: bool) -> View {
        let mut mounts = Vec::new();
        for mount in container["mounts"].as_array().expect("mounts") {
            let kind = mount["kind"].as_str().expect("kind");
            let name = mount["name"].as_str().expect("name");
            let mut dir = self.volume(kind, name);
            if mount["read_only"] == true {
                dir = self.read_only_copy(&dir, root);
            }
            mounts.push((mount["path"].as_str().expect("path").to_owned(), dir));
        }
        mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        View {
            mounts,
            scratch: self.root.path().to_owned(),
            tag: container["name"].as_str().expect("name").to_owned(),
        }
    }

    /// A read-only bind mount, emulated: a copy of `dir` (owners and modes kept) in a
    /// directory owned by root, mode 0755 (0555 for a caller that is not root), so that
    /// the container's uid can read but not create files there.
    fn read_only_copy(&mut self, dir: &Path, root: bool) -> PathBuf {
        use std::os::unix::fs::MetadataExt as _;
        let copy = self.root.path().join(format!("ro{}", self.copies.len()));
        std::fs::create_dir(&copy).expect("read-only copy");
        for entry in std::fs::read_dir(dir).expect("read volume") {
            let entry = entry.expect("volume entry");
            let meta = entry.metadata().expect("metadata");
            let target = copy.join(entry.file_name());
            std::fs::copy(entry.path(), &target).expect("copy volume file");
            if root {
                std::os::unix::fs::chown(&target, Some(meta.uid()), Some(meta.gid()))
                    .expect("chown copy");
            }
            set_mode(&target, meta.mode() & 0o7777);
        }
        set_mode(&copy, if root { 0o755 } else { 0o555 });
        self.copies.push(copy.clone());
        copy
    }

    fn volume(&mut self, kind: &str, name: &str) -> PathBuf {
        let key = format!("{kind}:{name}");
        if let Some(dir) = self.volumes.get(&key) {
            return dir.clone();
        }
        let dir = self.root.path().join(format!("v{}", self.volumes.len()));
        std::fs::create_dir(&dir).expect("volume dir");
        let files: Vec<(String, Vec<u8>, u32)> = match (kind, name) {
            ("configMap", "airlock-ca-cert") => {
                vec![("ca.pem".into(), read(&self.pki.proxy_ca_cert), 0o644)]
            }
            ("secret", "airlock-ca-key") => {
                vec![("ca-key.pem".into(), read(&self.pki.proxy_ca_key), 0o400)]
            }
            ("configMap", _) => self.configmaps[name]
                .as_object()
                .map(|data| {
                    data.iter()
                        .map(|(key, value)| {
                            let text = value.as_str().expect("data").as_bytes().to_vec();
                            (key.clone(), text, 0o644)
                        })
                        .collect()
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        for (file, content, mode) in &files {
            std::fs::write(dir.join(file), content).expect("write volume file");
            set_mode(&dir.join(file), *mode);
        }
        set_mode(&dir, if kind == "emptyDir" { 0o777 } else { 0o755 });
        self.volumes.insert(key, dir.clone());
        dir
    }
}

impl Drop for PodFiles<'_> {
    /// Directories made read-only for a caller that is not root are made removable again.
    fn drop(&mut self) {
        for dir in &self.copies {
            set_mode(dir, 0o755);
        }
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read PKI file")
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// One container's mounts: mount path → local directory, longest first.
struct View {
    mounts: Vec<(String, PathBuf)>,
    scratch: PathBuf,
    tag: String,
}

impl View {
    /// The local directory of the mount at `path`.
    fn local(&self, path: &str) -> PathBuf {
        self.mounts
            .iter()
            .find(|(mount, _)| mount == path)
            .map(|(_, dir)| dir.clone())
            .unwrap_or_else(|| panic!("no mount at {path}"))
    }

    /// [`View::rewrite`], and a URL (an exporter's) → a closed loopback port.
    fn rewrite_arg(&self, arg: &str) -> String {
        if arg.starts_with("http://") || arg.starts_with("https://") {
            return "http://127.0.0.1:9/".to_owned();
        }
        self.rewrite(arg)
    }

    /// A path under a mount → the local path; a listening address → loopback, port 0;
    /// anything else as is.
    fn rewrite(&self, arg: &str) -> String {
        if let Some(path) = arg.strip_prefix("unix:") {
            return format!("unix:{}", self.rewrite(path));
        }
        for (mount, dir) in &self.mounts {
            if let Some(rest) = arg.strip_prefix(mount.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return format!("{}{rest}", dir.display());
            }
        }
        if arg.parse::<std::net::SocketAddr>().is_ok() {
            return "127.0.0.1:0".to_owned();
        }
        arg.to_owned()
    }

    /// Every mount path in a shell script (followed by `/`, a blank or the end) → its
    /// local directory.
    fn rewrite_paths_in(&self, script: &str) -> String {
        let mut out = script.to_owned();
        for (mount, dir) in &self.mounts {
            let mut rewritten = String::new();
            let mut rest = out.as_str();
            while let Some(at) = rest.find(mount.as_str()) {
                let after = &rest[at + mount.len()..];
                let ends = after.is_empty() || after.starts_with(['/', ' ', '\n', ';']);
                rewritten.push_str(&rest[..at]);
                if ends {
                    rewritten.push_str(&dir.display().to_string());
                } else {
                    rewritten.push_str(mount);
                }
                rest = after;
            }
            rewritten.push_str(rest);
            out = rewritten;
        }
        out
    }
}
