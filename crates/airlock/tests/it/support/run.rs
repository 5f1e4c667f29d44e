//! Harness for the `airlock run` tests: the real binary with a private `AIRLOCK_HOME`,
//! run with bounded time, and a check that the kernel grants unprivileged namespaces
//! (tests skip with a printed reason when it does not, and fail under
//! `AIRLOCK_TEST_REQUIRE`: [`crate::support::require`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::clients::{BoundedOutput, run_bounded};

/// How long one `airlock run` may take in a test.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A private home for airlock's CA and logs, and a working directory.
pub struct RunHome {
    dir: tempfile::TempDir,
}

impl RunHome {
    /// A fresh home.
    pub fn new() -> RunHome {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("scratch")).expect("scratch dir");
        crate::support::test_user::adopt(dir.path());
        RunHome { dir }
    }

    /// `AIRLOCK_HOME` for the run.
    pub fn airlock_home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// A scratch directory outside `AIRLOCK_HOME` (visible to the command).
    pub fn scratch(&self) -> PathBuf {
        let scratch = self.dir.path().join("scratch");
        std::fs::create_dir_all(&scratch).expect("scratch dir");
        scratch
    }

    /// The audit log path tests pass with `--log`.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    /// The `airlock` binary as a command (as the test user, when one is asked for).
    pub fn command(&self) -> Command {
        crate::support::test_user::airlock(self.dir.path())
    }

    /// `airlock run ARGS...` with this home, bounded in time; `AIRLOCK_HOME` set, proxy
    /// variables removed, working directory the scratch directory.
    pub fn run(&self, args: &[&str]) -> BoundedOutput {
        self.run_with_env(args, &[])
    }

    /// Like [`RunHome::run`], with extra environment variables for airlock.
    pub fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> BoundedOutput {
        let mut command = self.command();
        command
            .arg("run")
            .args(args)
            .env("AIRLOCK_HOME", self.airlock_home())
            .current_dir(self.scratch());
        for (name, value) in env {
            command.env(name, value);
        }
        run_bounded(&mut command, RUN_TIMEOUT)
    }

    /// Every JSON line of the audit log at [`RunHome::log_path`].
    pub fn audit_lines(&self) -> Vec<Value> {
        read_lines(&self.log_path())
    }
}

/// Every JSON line of a log file (none if it does not exist).
pub fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// The JSON object printed on the line after `marker` in a command's output.
pub fn json_after(stdout: &str, marker: &str) -> Value {
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

/// The exit code of a bounded run (panics if it was killed at the deadline).
pub fn code(output: &BoundedOutput) -> i32 {
    let status = output
        .status
        .unwrap_or_else(|| panic!("airlock run timed out; stderr: {}", output.stderr));
    status
        .code()
        .unwrap_or_else(|| panic!("airlock run killed by a signal: {status:?}"))
}

/// Whether this kernel lets an ordinary user create the jail's namespaces; prints why not
/// ([`crate::support::skip_or_fail`]: a failure under `AIRLOCK_TEST_REQUIRE`).
pub fn namespaces_available(test: &str) -> bool {
    let home = RunHome::new();
    let output = home.run(&["--", "true"]);
    if output.status.is_some_and(|s| s.success()) {
        return true;
    }
    if output.stderr.contains("namespaces are unavailable") {
        return crate::support::skip_or_fail(&format!(
            "{test}: the kernel refuses unprivileged namespaces (allow them: \
             `sysctl kernel.unprivileged_userns_clone=1`, `user.max_user_namespaces` > 0, \
             and on Ubuntu `kernel.apparmor_restrict_unprivileged_userns=0`): {}",
            output.stderr
        ));
    }
    panic!(
        "airlock run -- true failed: {:?} {}",
        output.status, output.stderr
    );
}
