//! The Kubernetes manifests of `deploy/kubernetes/` (docs/kubernetes.md), checked offline:
//!
//! * every document validates strictly against the Kubernetes schemas bundled by the
//!   `kubernetes-validate` package from PyPI (in a venv cached under the target
//!   directory), for the oldest and newest versions the manifests claim; a broken copy is
//!   refused (the validator really validates);
//! * the SandboxTemplate's pod is the sidecar Pod, field for field;
//! * the containers keep their security shape (non-root airlock, no capability but the
//!   init containers' named ones, read-only root, limits; the CA key only where it is used);
//! * every ConfigMap policy passes `airlock policy check`, every flag of an airlock
//!   container exists in `airlock proxy --help`, and each airlock container's command line
//!   really starts the binary, with the mounts laid out in a temporary directory and the
//!   addresses moved to loopback, until its own startup probe (`curl` on the admin socket's
//!   `/healthz`) passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::clients::run_bounded;

mod pod;

pub(crate) use pod::Running;

/// The manifests, relative to the workspace root.
const MANIFESTS: &[&str] = &[
    "deploy/kubernetes/sidecar.yaml",
    "deploy/kubernetes/gateway-daemonset.yaml",
    "deploy/kubernetes/agent-sandbox-template.yaml",
];

/// Native sidecars (`restartPolicy: Always` on an init container) are GA from 1.33.
const VERSIONS: &str = "1.33.0,1.37.0";

/// The validating and describing script (its usage is in its docstring).
const INSPECT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/k8s_manifests.py"
);

/// How long one pip install, validation or startup may take.
const PIP_TIMEOUT: Duration = Duration::from_secs(300);
pub(super) const STEP_TIMEOUT: Duration = Duration::from_secs(60);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A venv with `kubernetes-validate` from PyPI, made once under the target directory; `None`
/// (after [`crate::support::skip_or_fail`]) when python3 or PyPI is not available.
pub(super) fn validator_python() -> Option<PathBuf> {
    static PYTHON: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    match PYTHON.get_or_init(install_validator) {
        Ok(python) => Some(python.clone()),
        Err(why) => {
            crate::support::skip_or_fail(why);
            None
        }
    }
}

/// [`validator_python`]'s work.
fn install_validator() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("k8s-validate-venv");
    let python = venv.join("bin/python");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", "import kubernetes_validate, yaml"])
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
        .map_err(|e| format!("deploy_manifests: needs /usr/bin/python3 with venv: {e}"))?;
    if !made.status.success() {
        return Err(format!(
            "deploy_manifests: python3 -m venv failed: {made:?}"
        ));
    }
    let installed = run_bounded(
        Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "kubernetes-validate>=1.33",
        ]),
        PIP_TIMEOUT,
    );
    if installed.status.is_some_and(|status| status.success()) && ready(&python) {
        Ok(python)
    } else {
        Err(format!(
            "deploy_manifests: needs the `kubernetes-validate` package from PyPI; pip install \
             failed: {}",
            installed.stderr
        ))
    }
}

/// Runs the inspect script on `manifests` (paths); its JSON answer.
pub(super) fn inspect(python: &Path, manifests: &[PathBuf]) -> Value {
    let output = run_bounded(
        Command::new(python)
            .arg(INSPECT)
            .arg(VERSIONS)
            .args(manifests),
        STEP_TIMEOUT,
    );
    assert!(
        output.status.is_some_and(|status| status.success()),
        "k8s_manifests.py failed: {}",
        output.stderr
    );
    serde_json::from_slice(&output.stdout).expect("k8s_manifests.py prints JSON")
}

pub(super) fn manifest_paths() -> Vec<PathBuf> {
    let root = workspace();
    MANIFESTS
        .iter()
        .map(|manifest| root.join(manifest))
        .collect()
}

#[test]
fn manifests_validate_against_the_kubernetes_schemas() {
    let Some(python) = validator_python() else {
        return;
    };
    let report = inspect(&python, &manifest_paths());
    assert_eq!(report["errors"], serde_json::json!([]), "{report:#}");
    // 2 + 8 + 2 documents (the template as a Pod and a NetworkPolicy), two versions each.
    assert_eq!(report["validated"], 24, "{report:#}");
    let sidecar = &report["pods"][manifest_paths()[0].to_str().expect("utf-8 path")];
    let template = &report["template_pods"][manifest_paths()[2].to_str().expect("utf-8 path")];
    assert!(sidecar.is_object(), "{report:#}");
    assert_eq!(
        template, sidecar,
        "agent-sandbox-template.yaml's podTemplate.spec must be sidecar.yaml's Pod spec"
    );

    // Broken copies (a misspelt field, a wrong type) are refused: the validator validates.
    let scratch = tempfile::tempdir().expect("tempdir");
    let sidecar_text = std::fs::read_to_string(&manifest_paths()[0]).expect("read sidecar");
    for (from, to, fault) in [
        (
            "restartPolicy: Always",
            "restartPolicyy: Always",
            "'restartPolicyy'",
        ),
        ("periodSeconds: 1\n", "periodSeconds: often\n", "'often'"),
    ] {
        let broken = scratch.path().join("broken.yaml");
        std::fs::write(&broken, sidecar_text.replacen(from, to, 1)).expect("write copy");
        let refused = inspect(&python, &[broken]);
        assert!(
            refused["errors"].to_string().contains(fault),
            "the copy with {fault} was not refused: {:#}",
            refused["errors"]
        );
    }
}

#[test]
fn manifests_keep_their_security_shape() {
    let Some(python) = validator_python() else {
        return;
    };
    let report = inspect(&python, &manifest_paths());
    let containers = report["containers"].as_array().expect("containers");
    assert!(containers.len() >= 7, "{report:#}");
    for container in containers {
        let name = container["name"].as_str().expect("name");
        let context = format!("{container:#}");
        for setting in ["no_privilege_escalation", "read_only_root", "drops_all"] {
            assert_eq!(container[setting], true, "{setting}: {context}");
        }
        assert_eq!(
            container["limits"],
            serde_json::json!(["cpu", "memory"]),
            "{context}"
        );
        let adds = container["adds"].as_array().expect("adds");
        let user = container["run_as_user"].as_i64();
        match name {
            "airlock" => {
                assert_eq!(container["airlock"], true, "{context}");
                assert_eq!(user, Some(1337), "{context}");
                assert!(adds.is_empty(), "{context}");
            }
            "airlock-redirect" => assert_eq!(adds.len(), 2, "NET_ADMIN, NET_RAW: {context}"),
            "airlock-ca-key" => assert_eq!(adds, &[Value::from("CHOWN")], "{context}"),
            _ => {
                // The agent: neither root nor airlock's uid (the REDIRECT exempts 1337).
                assert!(user.is_some_and(|uid| uid != 0 && uid != 1337), "{context}");
                assert!(adds.is_empty(), "{context}");
            }
        }
        for mount in container["mounts"].as_array().expect("mounts") {
            if mount["name"] == "airlock-ca-key" {
                assert_eq!(name, "airlock-ca-key", "the CA key Secret: {context}");
            }
            if mount["kind"] == "emptyDir" && mount["name"] == "ca-key" {
                assert!(name.starts_with("airlock"), "the CA key copy: {context}");
            }
            if mount["kind"] == "emptyDir" && mount["name"] == "admin" {
                assert_eq!(name, "airlock", "the admin socket: {context}");
            }
            if mount["kind"] == "configMap" && mount["name"] == "airlock-policy" {
                assert_eq!(name, "airlock", "the policy: {context}");
            }
        }
    }
}

#[test]
fn manifest_policies_pass_policy_check_and_flags_exist() {
    let Some(python) = validator_python() else {
        return;
    };
    let report = inspect(&python, &manifest_paths());
    let scratch = tempfile::tempdir().expect("tempdir");
    let configmaps = report["configmaps"].as_object().expect("configmaps");
    let mut checked = 0;
    for (name, data) in configmaps {
        let Some(policy) = data["policy.yaml"].as_str() else {
            continue;
        };
        let file = scratch.path().join(format!("{name}-{checked}.yaml"));
        std::fs::write(&file, policy).expect("write policy");
        let output = run_bounded(
            Command::new(env!("CARGO_BIN_EXE_airlock"))
                .args(["policy", "check"])
                .arg(&file),
            STEP_TIMEOUT,
        );
        assert!(
            output.status.is_some_and(|status| status.success()),
            "ConfigMap {name}'s policy.yaml: {}",
            output.stderr
        );
        checked += 1;
    }
    assert!(checked >= 1, "no policy ConfigMap found: {report:#}");

    let help = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_airlock")).args(["proxy", "--help"]),
        STEP_TIMEOUT,
    );
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for container in airlock_containers(&report) {
        let argv = string_list(&container["argv"]);
        assert_eq!(
            argv.first().map(String::as_str),
            Some("proxy"),
            "{container:#}"
        );
        for flag in argv.iter().filter(|arg| arg.starts_with("--")) {
            let flag = flag.split('=').next().unwrap_or(flag);
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{flag} of {} in {} is not a flag of `airlock proxy --help`",
                container["name"],
                container["manifest"]
            );
        }
    }
}

pub(super) fn airlock_containers(report: &Value) -> Vec<&Value> {
    report["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter(|container| container["airlock"] == true)
        .collect()
}

pub(super) fn string_list(value: &Value) -> Vec<String> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item.as_str().expect("a string").to_owned())
        .collect()
}
