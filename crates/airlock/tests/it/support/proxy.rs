//! The real `airlock proxy` binary as a child process: started with the test PKI and an
//! audit log in a private directory, ready once it prints its listen line, killed (and
//! reaped) on drop. Its stderr and stdout are collected.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::clients::run_bounded;
use super::pki::TestPki;

/// The binary under test.
pub const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock");
/// What the proxy prints on stderr once bound.
const LISTEN_PREFIX: &str = "airlock: proxy listening on ";
/// How long the proxy may take to print its listen line.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Collects the flags of one proxy run.
pub struct ProxyBuilder<'a> {
    pki: &'a TestPki,
    dir: tempfile::TempDir,
    args: Vec<String>,
    audit_log: Option<PathBuf>,
    policy_count: usize,
    env: Vec<(String, String)>,
    /// A program (and its arguments) the proxy runs under; the binary and its arguments
    /// follow (`unshare -rm sh -c '...; exec "$0" "$@"'`).
    wrapper: Vec<String>,
}

impl<'a> ProxyBuilder<'a> {
    /// A proxy with the test PKI and an audit log file; no rule yet (default deny).
    pub fn new(pki: &'a TestPki) -> ProxyBuilder<'a> {
        let dir = tempfile::tempdir().expect("proxy tempdir");
        let audit_log = dir.path().join("audit.jsonl");
        ProxyBuilder {
            pki,
            dir,
            args: Vec::new(),
            audit_log: Some(audit_log),
            policy_count: 0,
            env: Vec::new(),
            wrapper: Vec::new(),
        }
    }

    /// Runs the proxy under `wrapper` (a program and its arguments, which then get the
    /// binary and its arguments: it must exec them with the same process id).
    pub fn wrapped(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|s| (*s).to_string()).collect();
        self
    }

    /// The proxy's private directory (audit log, policy files); removed with the proxy.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Adds one command-line argument as given (for flags without a builder method).
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_string());
        self
    }

    /// Sets an environment variable for the proxy process.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds `--allow RULE`.
    pub fn allow(mut self, rule: &str) -> Self {
        self.args.extend(["--allow".to_string(), rule.to_string()]);
        self
    }

    /// The `json_deny` policy of the body-guard tests: `allowed.test` on `port` guarded
    /// (`/tools/*/type` `web_search`/`web_search_preview*` as `network.allow[0]`, and
    /// `/stream`), `other.test` on `port` without guards; both resolved to 127.0.0.1. The
    /// outbound guard is off (`dlp: {credentials: off}`, no secrets), so that only the
    /// `json_deny` guards look at bodies.
    pub fn json_deny_guards(self, port: u16) -> Self {
        let yaml = format!(
            "version: 1\ndlp: {{credentials: off}}\nnetwork:\n  allow:\n    - host: allowed.test\n      ports: [{port}]\n      json_deny:\n        - path: /tools/*/type\n          values: [\"web_search\", \"web_search_preview*\"]\n        - path: /stream\n    - host: other.test\n      ports: [{port}]\n"
        );
        self.policy(&yaml)
            .resolve_loopback("allowed.test")
            .resolve_loopback("other.test")
    }

    /// Adds `--resolve HOST:127.0.0.1`.
    pub fn resolve_loopback(mut self, host: &str) -> Self {
        self.args
            .extend(["--resolve".to_string(), format!("{host}:127.0.0.1")]);
        self
    }

    /// Writes `yaml` to a file and adds `--policy FILE`.
    pub fn policy(mut self, yaml: &str) -> Self {
        self.policy_count += 1;
        let path = self
            .dir
            .path()
            .join(format!("policy{}.yaml", self.policy_count));
        std::fs::write(&path, yaml).expect("write policy");
        self.args
            .extend(["--policy".to_string(), path.display().to_string()]);
        self
    }

    /// Adds `--secret SPEC`.
    pub fn secret(mut self, spec: &str) -> Self {
        self.args.extend(["--secret".to_string(), spec.to_string()]);
        self
    }

    /// Replaces the audit log file by `--log TARGET` exactly as given.
    pub fn log_target(mut self, target: &str) -> Self {
        self.audit_log = None;
        self.args.extend(["--log".to_string(), target.to_string()]);
        self
    }

    fn command(&self) -> Command {
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(AIRLOCK);
                command
            }
            None => Command::new(AIRLOCK),
        };
        command
            .arg("proxy")
            .args(["--listen", "127.0.0.1:0"])
            .arg("--ca-cert")
            .arg(&self.pki.proxy_ca_cert)
            .arg("--ca-key")
            .arg(&self.pki.proxy_ca_key)
            .arg("--upstream-ca")
            .arg(&self.pki.upstream_ca_cert)
            .args(&self.args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if let Some(log) = &self.audit_log {
            command.arg("--log").arg(log);
        }
        command
    }

    /// Starts the proxy and waits (bounded) for its listen line; panics with its stderr if
    /// it exits or stays silent.
    pub fn start(self) -> Proxy {
        let mut command = self.command();
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn airlock proxy");
        let stderr = child.stderr.take().expect("stderr pipe");
        let mut stdout = child.stdout.take().expect("stdout pipe");
        let collected_stdout = Arc::new(Mutex::new(Vec::new()));
        let stdout_collected = Arc::clone(&collected_stdout);
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => stdout_collected
                        .lock()
                        .expect("stdout lock")
                        .extend_from_slice(&buf[..n]),
                }
            }
        });
        let collected = Arc::new(Mutex::new(String::new()));
        let reader_collected = Arc::clone(&collected);
        let (sender, receiver) = mpsc::channel::<SocketAddr>();
        thread::spawn(move || {
            let mut sender = Some(sender);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.trim().strip_prefix(LISTEN_PREFIX)
                    && let Ok(addr) = rest.trim().parse::<SocketAddr>()
                    && let Some(sender) = sender.take()
                {
                    let _ = sender.send(addr);
                }
                let mut all = reader_collected.lock().expect("stderr lock");
                all.push_str(&line);
                all.push('\n');
            }
        });
        match receiver.recv_timeout(START_TIMEOUT) {
            Ok(addr) => Proxy {
                child,
                addr,
                stderr: collected,
                stdout: collected_stdout,
                audit_log: self.audit_log,
                dir: self.dir,
            },
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                // Give the reader a moment to collect the last lines.
                thread::sleep(Duration::from_millis(100));
                let text = collected.lock().expect("stderr lock").clone();
                panic!(
                    "airlock proxy did not print {LISTEN_PREFIX:?} within {START_TIMEOUT:?} \
                     (exit: {status:?}); args: {:?}\nstderr:\n{text}",
                    self.args
                );
            }
        }
    }

    /// Runs the proxy expecting it to refuse to start; returns its exit status (`None` when
    /// it was still running after `timeout` and had to be killed) and its stderr.
    pub fn start_expecting_exit(self, timeout: Duration) -> (Option<ExitStatus>, String) {
        let mut command = self.command();
        let output = run_bounded(&mut command, timeout);
        (output.status, output.stderr)
    }
}

/// A running proxy.
pub struct Proxy {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<Vec<u8>>>,
    audit_log: Option<PathBuf>,
    dir: tempfile::TempDir,
}

impl Proxy {
    /// The port the proxy listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT`, for clients' proxy settings.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the proxy wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// Every byte the proxy wrote on stdout so far.
    pub fn stdout(&self) -> Vec<u8> {
        self.stdout.lock().expect("stdout lock").clone()
    }

    /// The proxy's private directory (audit log, policy files, whatever the test put there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Path of the audit log file.
    pub fn audit_log_path(&self) -> &Path {
        self.audit_log
            .as_deref()
            .expect("proxy has an audit log file")
    }

    /// Raw content of the audit log file (empty when it does not exist yet).
    pub fn audit_log_text(&self) -> String {
        std::fs::read_to_string(self.audit_log_path()).unwrap_or_default()
    }

    /// Waits (at most 10 s) until the audit log holds at least `count` complete lines and
    /// returns every line parsed as JSON; panics on a line that is not JSON.
    pub fn audit(&self, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.audit_log_text();
            let complete: Vec<&str> = text
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n') && !l.trim().is_empty())
                .collect();
            if complete.len() >= count || Instant::now() >= deadline {
                assert!(
                    complete.len() >= count,
                    "expected at least {count} audit lines within 10 s, got {}:\n{text}\nstderr:\n{}",
                    complete.len(),
                    self.stderr()
                );
                return complete
                    .iter()
                    .map(|l| {
                        serde_json::from_str(l.trim())
                            .unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}"))
                    })
                    .collect();
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits until an audit line satisfies `predicate` (at most 10 s) and returns it.
    pub fn audit_line_where(&self, what: &str, predicate: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.audit_log_text();
            let found = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| predicate(l));
            if let Some(line) = found {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no audit line {what} within 10 s; log:\n{text}\nstderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Sends SIGTERM and waits at most `timeout` for the exit; `None` when it did not exit
    /// (then it is killed on drop).
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let sent = crate::support::tool("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the proxy process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
