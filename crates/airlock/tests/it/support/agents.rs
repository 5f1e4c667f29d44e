//! The real agent CLIs from PyPI for the `agents_cli` tests: Claude Code (bundled in
//! `claude-agent-sdk`), Codex (bundled in `openai-codex-cli-bin`) and aider (`aider-chat`),
//! each installed once into its own venv under the target directory (made from
//! `/usr/bin/python3`, so that the ordinary test user can run it too); the scripted model
//! server of `tests/fixtures/model_server.py`; a place (a home with credential canaries
//! and a project) owned by whoever runs airlock; and the probe the agent runs as its tool
//! call.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

use super::clients::{BoundedOutput, run_bounded};
use super::pki::TestPki;

/// How long one agent run under `airlock run` may take.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(180);

/// The text every scripted final answer is (`tests/fixtures/model_server.py`).
pub const FINAL_TEXT: &str = "AIRLOCK-AGENT-DONE";

/// One of the agent CLIs under test.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Agent {
    /// Claude Code, as bundled by the `claude-agent-sdk` wheel.
    Claude,
    /// Codex, as bundled by the `openai-codex-cli-bin` wheel.
    Codex,
    /// aider, the `aider-chat` package.
    Aider,
}

impl Agent {
    /// The PyPI package that carries it.
    pub fn package(self) -> &'static str {
        match self {
            Agent::Claude => "claude-agent-sdk",
            Agent::Codex => "openai-codex-cli-bin",
            Agent::Aider => "aider-chat",
        }
    }

    /// The profile name (and the command's name).
    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Aider => "aider",
        }
    }

    /// The agent's executable, installed on first use (fails the test when it cannot be).
    pub fn executable(self) -> PathBuf {
        static INSTALLED: [OnceLock<PathBuf>; 3] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        INSTALLED[self as usize]
            .get_or_init(|| install(self))
            .clone()
    }

    /// The API host its model server stands in for.
    pub fn api_host(self) -> &'static str {
        match self {
            Agent::Claude => "api.anthropic.com",
            Agent::Codex | Agent::Aider => "api.openai.com",
        }
    }

    /// The environment variable its key is read from, and the secret preset covering it.
    /// Codex's `exec` reads `CODEX_API_KEY` (it sends no `OPENAI_API_KEY`).
    pub fn key(self) -> (&'static str, &'static str) {
        match self {
            Agent::Claude => ("ANTHROPIC_API_KEY", "anthropic"),
            Agent::Codex => ("CODEX_API_KEY", "openai"),
            Agent::Aider => ("OPENAI_API_KEY", "openai"),
        }
    }

    /// The settings file that makes the agent run commands on the host later (hooks,
    /// notify, test and lint commands): present before the run, to stay unwritable.
    pub fn hook_settings(self) -> &'static str {
        match self {
            Agent::Claude => ".claude/settings.json",
            Agent::Codex => ".codex/config.toml",
            Agent::Aider => ".aider.conf.yml",
        }
    }

    /// The directory below the home the agent keeps its state in.
    pub fn state_dir(self) -> &'static str {
        match self {
            Agent::Claude => ".claude",
            Agent::Codex => ".codex",
            Agent::Aider => ".aider",
        }
    }

    /// The arguments of a non-interactive run whose model asks for the probe.
    pub fn arguments(self) -> Vec<String> {
        let args: &[&str] = match self {
            Agent::Claude => &["-p", "Run the probe.", "--allowedTools", "Bash"],
            // airlock is the sandbox: Codex's own (nested) one stays off.
            Agent::Codex => &[
                "exec",
                // A model Codex offers its shell to as a plain function tool (its default
                // model gets a JavaScript "code mode" tool instead).
                "--model",
                "gpt-4.1",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "Run the probe.",
            ],
            // aider runs no command the model proposes under --yes-always (it asks
            // explicitly); it runs its test command after the model's edit and hands a
            // failing one's output back to the model: that is its tool loop.
            Agent::Aider => &[
                "--model",
                "gpt-4.1",
                "--edit-format",
                "whole",
                "--no-git",
                "--yes-always",
                "--no-check-update",
                "--analytics-disable",
                "--no-show-model-warnings",
                "--no-pretty",
                "--auto-test",
                "--test-cmd",
                "sh probe.sh",
                "--message",
                "Write the notes file.",
            ],
        };
        args.iter().map(|a| (*a).to_string()).collect()
    }
}

/// Where [`install`] puts the venv of `agent`.
fn venv_dir(agent: Agent) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("agent-cli-venv-{}", agent.name()))
}

/// The executable inside an installed venv, asked from the package itself.
fn locate(agent: Agent, venv: &Path) -> Option<PathBuf> {
    let code = match agent {
        Agent::Claude => {
            "import os, claude_agent_sdk as m; \
             print(os.path.join(os.path.dirname(m.__file__), '_bundled', 'claude'))"
        }
        Agent::Codex => "import codex_cli_bin as m; print(m.bundled_codex_path())",
        Agent::Aider => "import aider, sys, os; print(os.path.join(sys.prefix, 'bin', 'aider'))",
    };
    let output = Command::new(venv.join("bin/python"))
        .args(["-c", code])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let runs = output.status.success()
        && Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success());
    runs.then_some(path)
}

/// Installs `agent`'s package into its venv unless it is there already; prints the time
/// taken and fails the test (never skips) when python3 or PyPI is not available.
fn install(agent: Agent) -> PathBuf {
    let venv = venv_dir(agent);
    if let Some(path) = locate(agent, &venv) {
        return path;
    }
    let started = std::time::Instant::now();
    let made = Command::new("/usr/bin/python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the agent CLI tests need /usr/bin/python3 with venv (Debian packages python3, \
                 python3-venv): {e}"
            )
        });
    assert!(made.status.success(), "python3 -m venv failed: {made:?}");
    let installed = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(agent.package())
        .output()
        .expect("run pip");
    let path = locate(agent, &venv);
    assert!(
        installed.status.success() && path.is_some(),
        "the agent CLI tests need `{}` from PyPI; pip install failed: {}",
        agent.package(),
        String::from_utf8_lossy(&installed.stderr)
    );
    eprintln!(
        "installed {} into {} in {:.0?}",
        agent.package(),
        venv.display(),
        started.elapsed()
    );
    path.expect("checked above")
}

/// The scripted model server (`tests/fixtures/model_server.py`) on `address:443`,
/// recording every request; killed on drop.
pub struct ModelServer {
    child: Child,
    record: PathBuf,
}

impl ModelServer {
    /// Starts it on `address:443` with the test PKI's leaf certificate; its tool calls run
    /// `command`; requests are recorded to `record`.
    pub fn start(pki: &TestPki, address: &str, record: &Path, command: &str) -> ModelServer {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/model_server.py"
        );
        let mut child = crate::support::tool("python3")
            .arg(script)
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key)
            .args([address, "443"])
            .arg(record)
            .arg(command)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the model server");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("model server: {line}");
            }
        });
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let port = receiver.recv_timeout(Duration::from_secs(15));
        let server = ModelServer {
            child,
            record: record.to_path_buf(),
        };
        assert_eq!(
            port.as_deref().map(str::trim),
            Ok("443"),
            "the model server did not start on {address}:443"
        );
        server
    }

    /// Every request recorded so far.
    pub fn requests(&self) -> Vec<Value> {
        super::run::read_lines(&self.record)
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A recorded request's header values named `name` (any case).
pub fn header_values(request: &Value, name: &str) -> Vec<String> {
    request["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|pair| {
            pair[0]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        })
        .filter_map(|pair| pair[1].as_str().map(str::to_string))
        .collect()
}

/// The probe the model's tool call runs (`sh probe.sh` in the project): it writes what it
/// saw to `probe-report.txt` and prints it (the tool result the model gets back).
/// `key` is the key's variable, `hooks` the hook settings below the home; `fail` ends it
/// with status 1 (aider hands a failing test command's output to the model).
pub fn probe_script(key: &str, hooks: &str, fail: bool) -> String {
    format!(
        r#"{{
echo "AIRLOCK-PROBE"
echo "key=${key}"
if cat "$HOME/.ssh/id_ed25519" 2>/dev/null | grep -q CANARY; then echo ssh=read; else echo ssh=unreadable; fi
status=$(curl -sS -o refusal.json -w '%{{http_code}}' -m 20 https://unlisted.test/probe 2>/dev/null)
echo "unlisted=$status $(grep -o '"reason":"[a-z_]*"' refusal.json)"
rm -f refusal.json
if (echo planted >> "$HOME/{hooks}") 2>/dev/null; then echo hooks=written; else echo hooks=refused; fi
}} > probe-report.txt 2>&1
cat probe-report.txt
{exit}
"#,
        exit = if fail { "exit 1" } else { "exit 0" },
    )
}

/// A home with credential canaries and the agent's hook settings, and a project inside it
/// holding the probe, under the target directory (the jail's `/tmp` is private), owned
/// by the test user when one is asked for.
pub struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    /// A fresh place for `agent`.
    pub fn new(agent: Agent) -> Place {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let place = Place { dir };
        let home = place.home();
        for file in super::test_user::HOME_CANARIES {
            let path = home.join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("home dirs");
            std::fs::write(&path, format!("CANARY-{file}\n")).expect("canary");
        }
        let hooks = home.join(agent.hook_settings());
        std::fs::create_dir_all(hooks.parent().expect("parent")).expect("settings dir");
        std::fs::write(&hooks, settings_content(agent)).expect("hook settings");
        std::fs::create_dir_all(home.join(agent.state_dir())).expect("state dir");
        std::fs::create_dir_all(place.project()).expect("project");
        std::fs::create_dir_all(place.logs()).expect("logs");
        let (key, _) = agent.key();
        let probe = probe_script(key, agent.hook_settings(), agent == Agent::Aider);
        std::fs::write(place.project().join("probe.sh"), probe).expect("probe");
        if agent == Agent::Aider {
            // aider keeps its histories at the git root it finds (even with --no-git):
            // the project's own, not the checkout the target directory is in.
            let init = Command::new("git")
                .args(["init", "-q"])
                .current_dir(place.project())
                .output()
                .expect("run git init");
            assert!(init.status.success(), "git init: {init:?}");
        }
        if let Some(uid) = super::test_user::uid() {
            super::test_user::chown_tree(place.dir.path(), uid);
        }
        place
    }

    /// The home (`HOME` of the run).
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The project (working directory of the run).
    pub fn project(&self) -> PathBuf {
        self.home().join("proj")
    }

    /// A directory for the audit log and the model server's record: hidden from the
    /// command (airlock hides the `--log` file's directory).
    pub fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    /// The audit log of the run.
    pub fn audit_log(&self) -> PathBuf {
        self.logs().join("audit.jsonl")
    }

    /// The probe's report, once the agent ran it.
    pub fn report(&self) -> String {
        std::fs::read_to_string(self.project().join("probe-report.txt")).unwrap_or_default()
    }

    /// `airlock run ARGS... -- AGENT AGENT-ARGS...` in the project, as the test user when
    /// one is asked for, with only PATH, HOME and the key (`key_value`) in the environment.
    pub fn run(&self, agent: Agent, args: &[String], key_value: &str) -> BoundedOutput {
        let mut command = airlock_command();
        command
            .arg("run")
            .args(args)
            .args([
                "--log".into(),
                self.audit_log().to_string_lossy().into_owned(),
            ])
            .arg("--")
            .arg(agent.executable())
            .args(agent.arguments())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.home())
            .env("AIRLOCK_HOME", self.dir.path().join("airlock-home"))
            .env(agent.key().0, key_value)
            .current_dir(self.project());
        run_bounded(&mut command, AGENT_TIMEOUT)
    }
}

/// The `airlock` binary as a command, switched to the test user (`setpriv`) when one is
/// asked for; the caller adds the arguments, the environment and the directory.
pub fn airlock_command() -> Command {
    let airlock = env!("CARGO_BIN_EXE_airlock");
    match super::test_user::uid() {
        Some(uid) => {
            let mut command = super::test_user::wrap(uid);
            command.arg(airlock);
            command
        }
        None => Command::new(airlock),
    }
}

/// The calls to Anthropic's Messages API (`POST /v1/messages...`) among `requests` (the
/// model server's record).
pub fn message_calls(requests: &[Value]) -> Vec<&Value> {
    requests
        .iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/v1/messages"))
        })
        .collect()
}

/// What the hook settings hold before the run (checked unchanged after it).
pub fn settings_content(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "{\"hooks\": {}}\n",
        Agent::Codex => "# no notify, no hooks\n",
        Agent::Aider => "check-update: false\n",
    }
}

/// Whether this machine can bind `address:443` (root, or CAP_NET_BIND_SERVICE); says
/// why not ([`crate::support::skip_or_fail`]: a failure under `AIRLOCK_TEST_REQUIRE`).
pub fn can_serve_443(address: &str) -> bool {
    match std::net::TcpListener::bind((address, 443)) {
        Ok(_) => true,
        Err(error) => crate::support::skip_or_fail(&format!(
            "binding {address}:443 was refused ({error}); the agents dial their API on the \
             default port 443: run as root (or grant CAP_NET_BIND_SERVICE)"
        )),
    }
}
