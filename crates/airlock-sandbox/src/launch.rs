//! Starting and stopping a sandbox's daemon (`airlock sandbox daemon`).
//!
//! The daemon is started detached (own session, standard error appended to
//! `control/daemon.log`) with the creator's environment, from which it reads the real
//! secret values; it never writes them anywhere. Its configuration ([`DaemonConfig`]) is
//! written on its standard input, which is then closed. It prints `ready` on standard
//! output once the sandbox can run commands (after writing `state.json`), or exits with
//! its reasons in the log. A creation that fails or times out kills the daemon and removes
//! the sandbox's directory: nothing is left half-made.

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::daemon_config::DaemonConfig;
use crate::state::{ProcessId, Sandboxes, create_private_dir};
use crate::{ProviderKind, SandboxError, SandboxName};

/// How long a daemon may take to report ready (a container engine can be slow).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a daemon gets to tear down after `SIGTERM` before `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Resource limits of a sandbox, where the provider can apply them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Memory limit in MiB.
    pub memory_mib: Option<u64>,
    /// CPU limit in thousandths of a CPU (1500 = 1.5 CPUs).
    pub millicpus: Option<u64>,
    /// Maximum number of processes.
    pub pids: Option<u64>,
}

/// Everything a sandbox is created with. It is also what its daemon is started with
/// ([`DaemonConfig::options`]): serialised whole except [`CreateOptions::daemon_env`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateOptions {
    /// The sandbox's name.
    pub name: SandboxName,
    /// Its provider.
    pub provider: ProviderKind,
    /// `--policy [FORMAT:]FILE` sources (made absolute by the caller).
    pub policies: Vec<String>,
    /// `--allow RULE` shorthands.
    pub allows: Vec<String>,
    /// `--secret SPEC`s; real values come from this process's environment or files.
    pub secrets: Vec<String>,
    /// `--resolve HOST:ADDR` pins.
    pub resolve: Vec<String>,
    /// `--upstream-ca F` files.
    pub upstream_cas: Vec<PathBuf>,
    /// The image (docker provider).
    pub image: Option<String>,
    /// A repository (path or URL) cloned into the private workspace.
    pub repo: Option<String>,
    /// The task branch (default `airlock/<name>`).
    pub branch: Option<String>,
    /// Resource limits.
    pub limits: Limits,
    /// Report mode (`--mode report`): requests refused only for host, method or path pass
    /// and are logged as would-be refusals.
    pub report: bool,
    /// Variables added to the daemon's environment (which is otherwise this process's):
    /// where `--secret` real values are read from, `AIRLOCK_HOME`. The daemon keeps them
    /// in memory only; commands in the sandbox never see them. Never serialised: it
    /// reaches the daemon as its environment, not in its [`DaemonConfig`].
    #[serde(skip)]
    pub daemon_env: Vec<(String, String)>,
    /// Rotate the sandbox's audit log beyond this many bytes (`--audit-max-size`).
    pub audit_max_size: Option<u64>,
}

impl CreateOptions {
    /// Options for `name` with `provider` and nothing else (no policy: nothing allowed).
    pub fn new(name: SandboxName, provider: ProviderKind) -> CreateOptions {
        CreateOptions {
            name,
            provider,
            policies: Vec::new(),
            allows: Vec::new(),
            secrets: Vec::new(),
            resolve: Vec::new(),
            upstream_cas: Vec::new(),
            image: None,
            repo: None,
            branch: None,
            limits: Limits::default(),
            report: false,
            daemon_env: Vec::new(),
            audit_max_size: None,
        }
    }
}

/// Starts the daemon of a new sandbox and waits until it reports ready.
pub(crate) fn start(sandboxes: &Sandboxes, options: &CreateOptions) -> Result<(), SandboxError> {
    let name = &options.name;
    let dir = sandboxes.dir(name);
    // Creating the directory is the lock: a second creation of the same name fails here.
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(SandboxError::Exists(name.to_string()));
        }
        Err(e) => return Err(SandboxError::state(&dir, e)),
    }
    let result = start_in(sandboxes, options);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

// `pre_exec` is unsafe by signature.
#[allow(unsafe_code)]
fn start_in(sandboxes: &Sandboxes, options: &CreateOptions) -> Result<(), SandboxError> {
    let name = &options.name;
    create_private_dir(&sandboxes.dir(name))?;
    let control = sandboxes.control_dir(name);
    create_private_dir(&control)?;
    create_private_dir(&sandboxes.workspace_dir(name))?;
    let log_path = control.join("daemon.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| SandboxError::state(&log_path, e))?;
    let mut command = Command::new(sandboxes.airlock_binary());
    command
        .arg("sandbox")
        .arg("daemon")
        .envs(options.daemon_env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log);
    // SAFETY: setsid is async-signal-safe; the daemon gets its own session so that the
    // creator's terminal and process group do not reach it.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|source| SandboxError::Spawn {
        what: format!("{} sandbox daemon", sandboxes.airlock_binary().display()),
        source,
    })?;
    let pid = i32::try_from(child.id()).unwrap_or(0);
    if let Some(id) = ProcessId::of(pid) {
        let pid_file = control.join("daemon.pid");
        let text = serde_json::to_string(&id).unwrap_or_default();
        crate::state::write_private_file(&pid_file, &text)?;
    }
    // Handed over before anything is read: the daemon reads its standard input to the end
    // first. A daemon that died already says why in its log, read below.
    if let Some(stdin) = child.stdin.take() {
        let _ = DaemonConfig::new(sandboxes, options).write_to(stdin);
    }
    let stdout = child.stdout.take();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Some(stdout) = stdout else { return };
        let mut first = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut first);
        let _ = sender.send(first);
    });
    let ready = receiver.recv_timeout(READY_TIMEOUT);
    match ready {
        Ok(line) if line.trim() == "ready" => {
            // The daemon lives on; reap it in the background so it never stays a zombie
            // of a long-lived library user.
            std::thread::spawn(move || child.wait());
            Ok(())
        }
        other => {
            let _ = child.kill();
            let _ = child.wait();
            let why = match other {
                Err(_) => format!(
                    "the daemon did not report ready within {}s",
                    READY_TIMEOUT.as_secs()
                ),
                Ok(_) => last_lines(&log_path),
            };
            Err(SandboxError::Setup {
                name: name.to_string(),
                why,
            })
        }
    }
}

/// The last lines of the daemon's log (its error report), or a pointer to it.
fn last_lines(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.strip_prefix("airlock: ").unwrap_or(l))
        .collect();
    let tail = lines[lines.len().saturating_sub(8)..].join("\n");
    if tail.is_empty() {
        format!("the daemon exited without a report (see {})", log.display())
    } else {
        tail
    }
}

/// Stops the daemon of `name` (if alive), waits for its teardown, kills it if it does not
/// end in time, and removes the sandbox's directory.
pub(crate) fn stop_and_remove(
    sandboxes: &Sandboxes,
    name: &SandboxName,
    cleanup: impl FnOnce(Option<&crate::state::SandboxState>),
) -> Result<(), SandboxError> {
    if !sandboxes.exists(name) {
        return Ok(());
    }
    let state = sandboxes.load(name).ok();
    let daemon = state
        .as_ref()
        .map(|state| state.daemon)
        .or_else(|| sandboxes.starting_daemon(name));
    if let Some(daemon) = daemon.filter(ProcessId::is_alive) {
        // The identity (pid and start time) was just checked.
        crate::signal::send(daemon.pid, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while daemon.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if daemon.is_alive() {
            crate::signal::send(daemon.pid, Signal::SIGKILL);
        }
    }
    // Whatever the daemon left (it crashed, or was killed): the provider removes it.
    cleanup(state.as_ref());
    let dir = sandboxes.dir(name);
    std::fs::remove_dir_all(&dir).map_err(|e| SandboxError::state(&dir, e))
}

/// `Provider::ensure_running` shared by the providers: a running sandbox is left alone, a
/// new one is started and its workspace provisioned (a failure removes it again).
pub(crate) fn ensure_running(
    provider: &impl crate::Provider,
    sandboxes: &Sandboxes,
    options: &CreateOptions,
) -> Result<(), SandboxError> {
    let name = &options.name;
    if sandboxes.exists(name) {
        let state = sandboxes.running(name)?;
        if state.provider != provider.kind() {
            return Err(wrong_provider(&state, provider.kind()));
        }
        return Ok(());
    }
    start(sandboxes, options)?;
    if let Err(error) = provision_workspace(provider, sandboxes, name) {
        let _ = provider.teardown(name);
        return Err(error);
    }
    Ok(())
}

/// The error for a sandbox used through the wrong provider.
pub(crate) fn wrong_provider(
    state: &crate::state::SandboxState,
    asked: ProviderKind,
) -> SandboxError {
    SandboxError::WrongProvider {
        name: state.name.clone(),
        actual: state.provider.as_str(),
        asked: asked.as_str(),
    }
}

/// Clones the sandbox's repository (host side for a local path, inside for a URL) and
/// adds the task worktree from inside.
fn provision_workspace(
    provider: &impl crate::Provider,
    sandboxes: &Sandboxes,
    name: &SandboxName,
) -> Result<(), SandboxError> {
    use crate::workspace;
    let state = sandboxes.running(name)?;
    let Some(record) = state.workspace.clone() else {
        return Ok(());
    };
    let bare_inside = record
        .worktree_inside
        .parent()
        .map(workspace::bare_path)
        .unwrap_or_default();
    let mut steps = Vec::new();
    if workspace::is_local_source(&record.source) {
        workspace::clone_local(std::path::Path::new(&record.source), &record.bare_on_host)?;
    } else {
        steps.push((
            "clone",
            workspace::clone_remote_command(&record.source, &bare_inside),
        ));
    }
    steps.push((
        "worktree add",
        workspace::add_worktree_command(&bare_inside, &record.worktree_inside, &record.branch),
    ));
    for (step, argv) in steps {
        let mut request = crate::ExecRequest::new(argv);
        request.cwd = Some(PathBuf::from("/"));
        request.timeout = Some(Duration::from_secs(600));
        let mut errors = Vec::new();
        let mut status = None;
        for event in provider.exec(name, request)? {
            match event {
                crate::ExecEvent::Stderr(line) | crate::ExecEvent::Stdout(line) => {
                    if errors.len() < 20 {
                        errors.push(line);
                    }
                }
                crate::ExecEvent::Exit(report) => status = Some(report.status),
            }
        }
        if status != Some(0) {
            return Err(SandboxError::Git {
                step: step.into(),
                why: format!("exit status {status:?}: {}", errors.join("\n")),
            });
        }
    }
    Ok(())
}
