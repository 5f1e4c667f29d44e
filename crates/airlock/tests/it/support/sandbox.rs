//! Harness for the `airlock sandbox` tests: a private state root and `AIRLOCK_HOME`, the
//! real binary run with bounded time, JSON-lines parsing of `exec --json`, and a guard that
//! removes every sandbox it made (daemons, namespaces, containers) when the test ends,
//! whatever happened.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::clients::{BoundedOutput, run_bounded};

/// How long one `airlock sandbox` command may take in a test.
pub const SANDBOX_TIMEOUT: Duration = Duration::from_secs(120);

/// A state root and CA home; every sandbox in it is removed on drop.
pub struct SandboxHome {
    dir: tempfile::TempDir,
}

/// What `exec --json` printed: the lines of each stream and the final report.
#[derive(Debug)]
pub struct JsonExec {
    /// Standard output lines.
    pub stdout: Vec<String>,
    /// Standard error lines.
    pub stderr: Vec<String>,
    /// The final object (`exit`, `timed_out`, `wall_ms`, ...).
    pub report: Value,
}

impl SandboxHome {
    /// A fresh home.
    pub fn new() -> SandboxHome {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("scratch")).expect("scratch");
        crate::support::test_user::adopt(dir.path());
        SandboxHome { dir }
    }

    /// The state root (`AIRLOCK_SANDBOX_DIR`).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("sandboxes")
    }

    /// `AIRLOCK_HOME` (the CA and its key).
    pub fn airlock_home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// A scratch directory.
    pub fn scratch(&self) -> PathBuf {
        self.dir.path().join("scratch")
    }

    /// A sandbox's directory.
    pub fn sandbox_dir(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// The command `airlock sandbox ARGS...` with this home's variables.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = crate::support::test_user::airlock(self.dir.path());
        command
            .arg("sandbox")
            .args(args)
            .env("AIRLOCK_SANDBOX_DIR", self.root())
            .env("AIRLOCK_HOME", self.airlock_home())
            .current_dir(self.scratch());
        command
    }

    /// `airlock sandbox ARGS...`, bounded, with extra environment variables.
    pub fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> BoundedOutput {
        let mut command = self.command(args);
        for (name, value) in env {
            command.env(name, value);
        }
        run_bounded(&mut command, SANDBOX_TIMEOUT)
    }

    /// `airlock sandbox ARGS...`, bounded.
    pub fn run(&self, args: &[&str]) -> BoundedOutput {
        self.run_with_env(args, &[])
    }

    /// `airlock sandbox ARGS...` that must succeed; its stdout.
    pub fn must(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert_eq!(
            status(&output),
            0,
            "airlock sandbox {args:?} failed: {}",
            output.stderr
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `exec NAME --json -- sh -c SCRIPT`, parsed.
    pub fn exec_json(&self, name: &str, script: &str) -> JsonExec {
        self.exec_json_with(name, &[], script)
    }

    /// `exec NAME --json FLAGS -- sh -c SCRIPT`, parsed.
    pub fn exec_json_with(&self, name: &str, flags: &[&str], script: &str) -> JsonExec {
        let mut args = vec!["exec", name, "--json"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        let output = self.run(&args);
        parse_json_exec(&output)
    }

    /// The recorded state of a sandbox.
    pub fn state(&self, name: &str) -> Value {
        let path = self.sandbox_dir(name).join("control/state.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).expect("state.json is JSON")
    }

    /// The daemon's PID of a sandbox.
    pub fn daemon_pid(&self, name: &str) -> i32 {
        let pid = self.state(name)["daemon"]["pid"]
            .as_i64()
            .expect("daemon pid");
        i32::try_from(pid).expect("pid")
    }

    /// The sandbox's audit log text.
    pub fn audit_text(&self, name: &str) -> String {
        std::fs::read_to_string(self.sandbox_dir(name).join("control/audit.jsonl"))
            .unwrap_or_default()
    }
}

impl Drop for SandboxHome {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.root()) else {
            return;
        };
        let names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        if names.is_empty() {
            return;
        }
        let mut args = vec!["rm"];
        args.extend(names.iter().map(String::as_str));
        let _ = self.run(&args);
    }
}

/// The exit code of a bounded run (panics if it was killed at the deadline).
pub fn status(output: &BoundedOutput) -> i32 {
    let status = output
        .status
        .unwrap_or_else(|| panic!("airlock sandbox timed out; stderr: {}", output.stderr));
    status
        .code()
        .unwrap_or_else(|| panic!("airlock sandbox killed by a signal: {status:?}"))
}

/// Parses `exec --json` output; panics unless every line is a stream line and the last
/// one a report.
pub fn parse_json_exec(output: &BoundedOutput) -> JsonExec {
    let text = String::from_utf8_lossy(&output.stdout);
    let mut parsed = JsonExec {
        stdout: Vec::new(),
        stderr: Vec::new(),
        report: Value::Null,
    };
    for line in text.lines() {
        assert!(
            parsed.report.is_null(),
            "a line after the report: {text}\n{}",
            output.stderr
        );
        let value: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{}", output.stderr));
        match value["stream"].as_str() {
            Some("stdout") => parsed
                .stdout
                .push(value["line"].as_str().expect("line").to_owned()),
            Some("stderr") => parsed
                .stderr
                .push(value["line"].as_str().expect("line").to_owned()),
            _ => parsed.report = value,
        }
    }
    assert!(
        parsed.report.get("exit").is_some(),
        "no report in: {text}\nstderr: {}",
        output.stderr
    );
    parsed
}

/// Whether any process's command line contains `marker`.
pub fn process_with_marker(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
    })
}

/// Whether the process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Waits (at most `limit`) until `condition` holds; returns whether it did.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    let mut budget = 100_000usize;
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                return found;
            }
            let path = entry.path();
            if path.is_dir() && !path.is_symlink() {
                pending.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// Writes a policy with an LLM route to the loopback upstream on `port` (its key read from
/// `LLM_KEY` of the creator's environment, injected on the route only) and returns the
/// `create` flags that use it.
pub fn llm_route_flags(home: &SandboxHome, port: u16, upstream_ca: &Path) -> Vec<String> {
    let policy = home.scratch().join("llm.yaml");
    std::fs::write(&policy, llm_route_policy(port)).expect("write the route policy");
    vec![
        "--policy".into(),
        policy.to_string_lossy().into_owned(),
        "--resolve".into(),
        "allowed.test:127.0.0.1".into(),
        "--upstream-ca".into(),
        upstream_ca.to_string_lossy().into_owned(),
    ]
}

/// Asserts that the route's answer (the loopback upstream's echo, first stdout line) shows
/// `path`, that the upstream received exactly the injected real key, and that the key did
/// not come back.
pub fn assert_routed(run: &JsonExec, hit: &crate::support::upstream::Hit, path: &str, real: &str) {
    let answer: Value =
        serde_json::from_str(&run.stdout[0]).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    assert_eq!(answer["path"], path, "{run:?}");
    let authorization: Vec<&String> = hit
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        authorization,
        [&format!("Bearer {real}")],
        "the key is injected, the agent's own replaced"
    );
    assert!(
        !run.stdout.join("\n").contains(real),
        "the real key came back: {run:?}"
    );
}

/// The route policy of [`llm_route_flags`].
fn llm_route_policy(port: u16) -> String {
    format!(
        "version: 1
secrets:
  LLM_KEY:
    env: LLM_KEY
    hosts: [api.example.invalid]
    inject: {{header: Authorization, format: \"Bearer {{value}}\"}}
routes:
  - prefix: /llm/fake/
    upstream: https://allowed.test:{port}/api/v1/
    secret: LLM_KEY
"
    )
}

/// A fresh "real" secret for one test: `ghp_` and 36 random letters and digits. Made at
/// run time so that no file on the machine (this source, a test binary) holds it, and a
/// search for it from inside a sandbox finds only real leaks.
pub fn real_secret() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 36];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("/dev/urandom"),
        &mut bytes,
    )
    .expect("random bytes");
    let random: String = bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    format!("ghp_{random}")
}

/// A git server on loopback that demands `real` as password, with the repository of
/// [`make_repository`](crate::support::fixture_server::make_repository) in `repos/repo.git`
/// and its working copy at `source`; `flags` let a sandbox reach it as `other.test` with
/// `GIT_TOKEN` (read from the creator's environment) swapped in.
pub struct GitSetup {
    /// The server's repositories (`repo.git`).
    pub repos: PathBuf,
    /// The user's repository (a working copy) to create sandboxes from.
    pub source: PathBuf,
    /// The server; stops when dropped.
    pub server: crate::support::fixture_server::FixtureServer,
    /// `--resolve`, `--upstream-ca`, `--allow` and `--secret` for `create`.
    pub flags: Vec<String>,
}

impl GitSetup {
    /// Builds the repository and starts the server.
    pub fn new(home: &SandboxHome, pki: &crate::support::TestPki, real: &str) -> GitSetup {
        let repos = home.scratch().join("repos");
        std::fs::create_dir_all(&repos).expect("repos");
        crate::support::fixture_server::make_repository(&repos, &home.scratch());
        // The user's own repository belongs to the user; the server's stay root's.
        if let Some(uid) = crate::support::test_user::uid() {
            crate::support::test_user::chown_tree(&home.scratch().join("source"), uid);
        }
        let server =
            crate::support::fixture_server::FixtureServer::git_with_password(pki, &repos, real);
        let flags = vec![
            "--resolve".into(),
            "other.test:127.0.0.1".into(),
            "--upstream-ca".into(),
            pki.upstream_ca_cert.to_string_lossy().into_owned(),
            "--allow".into(),
            format!("other.test:{}", server.port),
            "--secret".into(),
            "GIT_TOKEN@other.test".into(),
        ];
        GitSetup {
            repos,
            source: home.scratch().join("source"),
            server,
            flags,
        }
    }

    /// The flags plus `--repo SOURCE` and `extra`.
    pub fn repo_flags(&self, extra: &[&str]) -> Vec<String> {
        let mut flags = self.flags.clone();
        flags.extend(["--repo".into(), self.source.to_string_lossy().into_owned()]);
        flags.extend(extra.iter().map(|s| (*s).to_owned()));
        flags
    }

    /// The subject of `reference`'s last commit in the git directory `git_dir`.
    pub fn subject(git_dir: &Path, reference: &str) -> String {
        let output = crate::support::tool("git")
            .arg("--git-dir")
            .arg(git_dir)
            .args(["log", "-1", "--format=%s", reference])
            .output()
            .expect("git log");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}
