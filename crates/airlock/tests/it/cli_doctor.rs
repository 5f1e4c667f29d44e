//! `airlock doctor` through the real binary: it passes on a machine where `airlock run`
//! works, its `--json` shape, its AppArmor profile, and a real refusal of user namespaces:
//! inside a user namespace of its own whose `user.max_user_namespaces` is 0, the kernel
//! refuses every nested user namespace (`ENOSPC`), so the probe fails exactly as the jail
//! does; doctor then exits 1 naming the remedy, and `airlock run` and `airlock sandbox create`
//! there point at doctor.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::clients::BoundedOutput;
use crate::support::run::{code, namespaces_available};
use crate::support::{need, run_bounded};

/// How long one command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Every check, in the order doctor prints them.
const CHECKS: [&str; 9] = [
    "user namespaces",
    "apparmor",
    "landlock",
    "mount_setattr",
    "seccomp",
    "nftables",
    "cgroups",
    "ca",
    "docker",
];

fn doctor(home: &std::path::Path, args: &[&str]) -> BoundedOutput {
    let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
    command
        .arg("doctor")
        .args(args)
        .env("AIRLOCK_HOME", home)
        .env_remove("XDG_DATA_HOME");
    run_bounded(&mut command, TIMEOUT)
}

/// `sh -c SCRIPT` in a new user namespace (mapped to root) whose `max_user_namespaces` is
/// 0 before SCRIPT runs: no process in it can create another user namespace.
fn without_nested_user_namespaces(home: &std::path::Path, script: &str) -> BoundedOutput {
    need("unshare");
    let mut command = Command::new("unshare");
    command
        .args(["--user", "--map-root-user", "sh", "-c"])
        .arg(format!(
            "echo 0 > /proc/sys/user/max_user_namespaces && {script}"
        ))
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home)
        .env_remove("XDG_DATA_HOME");
    run_bounded(&mut command, TIMEOUT)
}

fn json(output: &BoundedOutput) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json is not one JSON object ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} check in {report}"))
}

/// Where `airlock run` works, doctor passes: exit 0, one line per check, each `ok` or
/// `warn`, the CA line noting that the first run creates it.
#[test]
fn doctor_passes_where_run_works() {
    if !namespaces_available("doctor_passes_where_run_works") {
        return;
    }
    let home = tempfile::tempdir().expect("tempdir");
    let output = doctor(home.path(), &[]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(code(&output), 0, "{text}{}", output.stderr);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), CHECKS.len(), "{text}");
    for (line, name) in lines.iter().zip(CHECKS) {
        assert!(
            line.starts_with(&format!("ok   {name}: "))
                || line.starts_with(&format!("warn {name}: ")),
            "{line}"
        );
    }
    assert!(
        text.contains("the first `airlock run` creates it"),
        "{text}"
    );
    for warning in lines.iter().filter(|l| l.starts_with("warn")) {
        assert!(
            warning.contains(" ("),
            "a warning says what it costs: {warning}"
        );
    }
}

/// `--json`: `ready` and every check with `name`, `status` and `detail`; a created CA is
/// seen with its expiry.
#[test]
fn doctor_json_has_every_check() {
    if !namespaces_available("doctor_json_has_every_check") {
        return;
    }
    let home = tempfile::tempdir().expect("tempdir");
    let mut init = Command::new(env!("CARGO_BIN_EXE_airlock"));
    init.args(["ca", "init"]).env("AIRLOCK_HOME", home.path());
    assert_eq!(code(&run_bounded(&mut init, TIMEOUT)), 0);
    let output = doctor(home.path(), &["--json"]);
    assert_eq!(code(&output), 0, "{}", output.stderr);
    let report = json(&output);
    assert_eq!(report["ready"], true, "{report}");
    let checks = report["checks"].as_array().expect("checks");
    let names: Vec<&str> = checks.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, CHECKS, "{report}");
    for check in checks {
        assert!(
            ["ok", "warn"].contains(&check["status"].as_str().unwrap_or_default()),
            "{check}"
        );
        assert!(
            check["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{check}"
        );
    }
    let ca = check(&report, "ca");
    assert_eq!(ca["status"], "ok", "{ca}");
    assert!(
        ca["detail"]
            .as_str()
            .is_some_and(|d| d.contains("key 0600, expires in 36")),
        "{ca}"
    );
}

/// With nested user namespaces refused by the kernel, doctor fails the namespace check
/// with the kernel's words and the remedy, exits 1, and `airlock run` there points at it.
#[test]
fn doctor_fails_when_the_kernel_refuses_user_namespaces() {
    if !namespaces_available("doctor_fails_when_the_kernel_refuses_user_namespaces") {
        return;
    }
    let home = tempfile::tempdir().expect("tempdir");
    let output = without_nested_user_namespaces(home.path(), "exec \"$AIRLOCK\" doctor --json");
    assert_eq!(code(&output), 1, "{}", output.stderr);
    let report = json(&output);
    assert_eq!(report["ready"], false, "{report}");
    let userns = check(&report, "user namespaces");
    assert_eq!(userns["status"], "fail", "{userns}");
    let detail = userns["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("unshare") && detail.contains("No space left on device"),
        "{userns}"
    );
    assert!(
        userns["cost"]
            .as_str()
            .is_some_and(|c| c.contains("cannot start the jail")),
        "{userns}"
    );
    assert!(
        userns["remedy"]
            .as_str()
            .is_some_and(|r| r.contains("sysctl user.max_user_namespaces=")),
        "{userns}"
    );

    let text = without_nested_user_namespaces(home.path(), "exec \"$AIRLOCK\" doctor");
    assert_eq!(code(&text), 1);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.starts_with("FAIL user namespaces: refused: "),
        "{stdout}"
    );

    let sandboxes = home.path().join("sandboxes");
    let commands = [
        "exec \"$AIRLOCK\" run -- true".to_owned(),
        format!(
            "AIRLOCK_SANDBOX_DIR={} exec \"$AIRLOCK\" sandbox create doctor-hint",
            sandboxes.display()
        ),
    ];
    for script in commands {
        let failed = without_nested_user_namespaces(home.path(), &script);
        assert_eq!(code(&failed), 125, "{script}: {}", failed.stderr);
        assert!(
            failed.stderr.contains("namespaces are unavailable")
                && failed
                    .stderr
                    .contains("`airlock doctor` checks what the jail needs"),
            "{script}: {}",
            failed.stderr
        );
    }
}

/// `--apparmor-profile`: a profile attached to this binary's real path that grants
/// `userns`, with the commands that install it.
#[test]
fn the_apparmor_profile_names_this_binary() {
    let home = tempfile::tempdir().expect("tempdir");
    let output = doctor(home.path(), &["--apparmor-profile"]);
    assert_eq!(code(&output), 0, "{}", output.stderr);
    let profile = String::from_utf8_lossy(&output.stdout);
    let binary = std::fs::canonicalize(env!("CARGO_BIN_EXE_airlock")).expect("binary path");
    assert!(
        profile.contains(&format!(
            "profile airlock \"{}\" flags=(unconfined) {{",
            binary.display()
        )),
        "{profile}"
    );
    assert!(profile.contains("\n  userns,\n"), "{profile}");
    assert!(profile.contains("sudo apparmor_parser -r /etc/apparmor.d/airlock"));
    let both = doctor(home.path(), &["--apparmor-profile", "--json"]);
    assert_eq!(code(&both), 2, "usage error: {}", both.stderr);
}
