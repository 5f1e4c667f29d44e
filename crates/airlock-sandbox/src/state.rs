//! The state directory: one directory per sandbox that outlives every process.
//!
//! ```text
//! <root>/                      AIRLOCK_SANDBOX_DIR, else $XDG_STATE_HOME/airlock/sandboxes,
//!                              else ~/.local/state/airlock/sandboxes (mode 0700)
//!   <name>/control/state.json  written by the daemon once the sandbox is ready
//!   <name>/control/daemon.log  the daemon's standard error
//!   <name>/control/audit.jsonl the sandbox's audit log
//!   <name>/workspace/          the private workspace (bare clone + task worktree)
//! ```
//!
//! The whole root is hidden from every sandbox (and from `airlock run`); a local sandbox
//! sees only its own `workspace/`, bound back inside the hidden root. Nothing read back
//! is trusted as written (docs/security.md): a state file must be a regular file owned by
//! this user with mode 0600, at most [`MAX_STATE_BYTES`], of the expected shape; a cgroup
//! path must be one airlock names; the engine program is found on `PATH` by its name
//! (`docker` or `podman`), never run from a recorded path. Liveness is read from the
//! kernel: a process is identified by its PID, its start time and its owner, so a
//! recycled PID or another user's process is never mistaken for the daemon.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{ProviderKind, SandboxError, SandboxName};

/// The environment variable naming the state root.
pub const ROOT_VARIABLE: &str = "AIRLOCK_SANDBOX_DIR";
/// The environment variable naming the `airlock` binary sandboxes are started with.
pub const BINARY_VARIABLE: &str = "AIRLOCK_BIN";

/// A process identified beyond its PID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    /// The host PID.
    pub pid: i32,
    /// Its start time in clock ticks since boot (`/proc/PID/stat` field 22).
    pub start_time: u64,
}

impl ProcessId {
    /// The identity of the running process `pid`, if there is one.
    pub fn of(pid: i32) -> Option<ProcessId> {
        start_time(pid).map(|start_time| ProcessId { pid, start_time })
    }

    /// Whether that very process is still alive (not a zombie) and belongs to this user.
    pub fn is_alive(&self) -> bool {
        self.pid > 1 && start_time(self.pid) == Some(self.start_time) && owned_by_us(self.pid)
    }
}

/// Whether `/proc/PID` belongs to this process's effective user.
fn owned_by_us(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let euid = nix::unistd::geteuid().as_raw();
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == euid)
}

/// Whether process `pid` runs a program named like `airlock` (the daemon is executed from
/// it and the jail forked from the daemon): a recorded PID that is some other program of
/// this user is never signalled or joined.
fn runs_program(pid: i32, airlock: &Path) -> bool {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    let exe = exe.to_string_lossy();
    let exe = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
    let running = Path::new(exe).file_name();
    running.is_some() && running == airlock.file_name()
}

/// The parent PID of `pid` (field 4 of `/proc/PID/stat`).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The engine a state file names, found on `PATH` by its name (never run from the
/// recorded path).
pub(crate) fn engine_of(recorded: &std::path::Path) -> Result<crate::docker::Docker, SandboxError> {
    crate::docker::Docker::named(recorded).ok_or_else(|| {
        SandboxError::Unsupported(format!(
            "the container engine {} is not on PATH",
            recorded.display()
        ))
    })
}

/// The largest state file airlock reads back.
pub const MAX_STATE_BYTES: u64 = 1 << 20;

/// Reads a file airlock wrote for itself: a regular file (not a link), owned by this
/// user, mode 0600 or stricter, at most [`MAX_STATE_BYTES`]. Anything else is refused as
/// not written by airlock.
pub(crate) fn read_private_file(path: &Path) -> Result<String, SandboxError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => SandboxError::CorruptState {
                path: path.to_owned(),
                why: "it is a symbolic link, not a file airlock wrote".into(),
            },
            _ => SandboxError::state(path, e),
        })?;
    let metadata = file.metadata().map_err(|e| SandboxError::state(path, e))?;
    let euid = nix::unistd::geteuid().as_raw();
    let why = if !metadata.is_file() {
        Some("it is not a regular file".to_owned())
    } else if metadata.uid() != euid {
        Some(format!(
            "it is owned by uid {}, not by uid {euid}",
            metadata.uid()
        ))
    } else if metadata.mode() & 0o077 != 0 {
        Some(format!(
            "its mode is {:o}, not 0600",
            metadata.mode() & 0o777
        ))
    } else if metadata.len() > MAX_STATE_BYTES {
        Some(format!("it is larger than {MAX_STATE_BYTES} bytes"))
    } else {
        None
    };
    if let Some(why) = why {
        return Err(SandboxError::CorruptState {
            path: path.to_owned(),
            why: format!("{why}: not written by airlock; remove the sandbox directory"),
        });
    }
    let mut text = String::new();
    file.take(MAX_STATE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| SandboxError::state(path, e))?;
    Ok(text)
}

/// Writes `text` to `path` atomically with mode 0600 (a temporary file renamed over it).
pub(crate) fn write_private_file(path: &Path, text: &str) -> Result<(), SandboxError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temporary = path.with_extension("tmp");
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)
        .map_err(|e| SandboxError::state(&temporary, e))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| SandboxError::state(&temporary, e))?;
    std::fs::rename(&temporary, path).map_err(|e| SandboxError::state(path, e))
}

/// Field 22 of `/proc/PID/stat`, or `None` for a missing or zombie process.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // `after_name` starts at field 3; field 22 is 19 further on.
    fields.nth(18)?.parse().ok()
}

/// How a sandbox is confined, as recorded by its daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Confinement {
    /// The jail of [`crate::LocalProvider`]: its outer process, whose namespaces commands join.
    Local {
        /// The jail's outer process.
        jail: ProcessId,
        /// The control groups the sandbox's processes are in (one per hierarchy), when
        /// resource limits apply.
        cgroups: Vec<PathBuf>,
        /// The directories commands may write (the workspace, then the policy's
        /// `filesystem.writable`), for the Landlock layer of each joining command.
        #[serde(default)]
        writable: Vec<PathBuf>,
    },
    /// The container of [`crate::DockerProvider`].
    Docker {
        /// The container's ID.
        container: String,
        /// The engine binary (`docker` or `podman`).
        engine: PathBuf,
    },
}

/// The private workspace, when the sandbox was created with a repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRecord {
    /// Where the repository came from (a path, made absolute, or a URL).
    pub source: String,
    /// The task branch checked out in the worktree.
    pub branch: String,
    /// The bare clone, as the host sees it.
    pub bare_on_host: PathBuf,
    /// The worktree, as the sandbox sees it.
    pub worktree_inside: PathBuf,
}

/// What the daemon records once the sandbox is ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxState {
    /// The sandbox's name.
    pub name: String,
    /// Which provider made it.
    pub provider: ProviderKind,
    /// The daemon holding the proxy and the real secrets.
    pub daemon: ProcessId,
    /// The confinement commands run in.
    pub confinement: Confinement,
    /// The environment every command starts with (surrogates, never real values).
    pub env: Vec<(String, String)>,
    /// The default working directory of commands, as the sandbox sees it.
    pub workdir: PathBuf,
    /// The private workspace, if any.
    pub workspace: Option<WorkspaceRecord>,
    /// Seconds since the epoch when the sandbox became ready.
    pub created_unix: u64,
    /// The policy sources it was created with, for `ls`.
    pub policy: Vec<String>,
}

impl SandboxState {
    /// What a state file must satisfy beyond its shape: its own name, cgroup paths that
    /// airlock makes for this sandbox, an engine named `docker` or `podman`.
    fn check(&self, name: &SandboxName, airlock: &Path) -> Result<(), String> {
        if self.name != name.as_str() {
            return Err(format!("it names sandbox {:?}, not {name}", self.name));
        }
        if self.daemon.is_alive() && !runs_program(self.daemon.pid, airlock) {
            return Err(format!(
                "its daemon PID {} is not an airlock process",
                self.daemon.pid
            ));
        }
        // The jail is forked by the daemon (and not readable through /proc/PID/exe: it is
        // not dumpable): it must be the live daemon's child.
        if let Confinement::Local { jail, .. } = &self.confinement
            && jail.is_alive()
            && !(self.daemon.is_alive() && parent_of(jail.pid) == Some(self.daemon.pid))
        {
            return Err(format!(
                "its jail PID {} is not its daemon's child",
                jail.pid
            ));
        }
        match &self.confinement {
            Confinement::Local { cgroups, .. } => cgroups
                .iter()
                .find(|path| !crate::cgroup::is_sandbox_group(path, name))
                .map_or(Ok(()), |path| {
                    Err(format!(
                        "{} is not a control group airlock made",
                        path.display()
                    ))
                }),
            Confinement::Docker { engine, .. } => crate::docker::Docker::named(engine)
                .map(|_| ())
                .ok_or_else(|| format!("engine {} is neither docker nor podman", engine.display())),
        }
    }
}

/// Whether a sandbox can run commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Daemon and confinement are alive.
    Running,
    /// The daemon is starting (no state file yet) and alive.
    Starting,
    /// Something is gone; the reason says what.
    Dead(String),
}

/// The state root and the `airlock` binary that runs sandbox daemons.
#[derive(Clone, Debug)]
pub struct Sandboxes {
    root: PathBuf,
    airlock: PathBuf,
}

impl Sandboxes {
    /// Sandboxes under `root` (created, mode 0700, if missing), started with `airlock`.
    pub fn open(
        root: impl Into<PathBuf>,
        airlock: impl Into<PathBuf>,
    ) -> Result<Sandboxes, SandboxError> {
        let root = root.into();
        create_private_dir(&root)?;
        Ok(Sandboxes {
            root,
            airlock: airlock.into(),
        })
    }

    /// The default root (see the module doc) and binary (`$AIRLOCK_BIN`, else `airlock`
    /// from `PATH`).
    pub fn open_default() -> Result<Sandboxes, SandboxError> {
        let binary = std::env::var_os(BINARY_VARIABLE)
            .map_or_else(|| PathBuf::from("airlock"), PathBuf::from);
        Sandboxes::open(default_root()?, binary)
    }

    /// The state root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The `airlock` binary daemons are started with.
    pub fn airlock_binary(&self) -> &Path {
        &self.airlock
    }

    /// `<root>/<name>`.
    pub fn dir(&self, name: &SandboxName) -> PathBuf {
        self.root.join(name.as_str())
    }

    /// `<root>/<name>/control`: hidden from the sandbox.
    pub fn control_dir(&self, name: &SandboxName) -> PathBuf {
        self.dir(name).join("control")
    }

    /// `<root>/<name>/workspace`: the sandbox's private workspace.
    pub fn workspace_dir(&self, name: &SandboxName) -> PathBuf {
        self.dir(name).join("workspace")
    }

    /// `<root>/<name>/control/state.json`.
    pub fn state_file(&self, name: &SandboxName) -> PathBuf {
        self.control_dir(name).join("state.json")
    }

    /// Whether a directory for `name` exists.
    pub fn exists(&self, name: &SandboxName) -> bool {
        self.dir(name).exists()
    }

    /// Reads the state of `name`: `NotFound` without a directory, `NotRunning` without a
    /// state file (the daemon never became ready).
    pub fn load(&self, name: &SandboxName) -> Result<SandboxState, SandboxError> {
        if !self.exists(name) {
            return Err(SandboxError::NotFound(name.to_string()));
        }
        let path = self.state_file(name);
        if std::fs::symlink_metadata(&path).is_err() {
            return Err(SandboxError::NotRunning {
                name: name.to_string(),
                why: "its daemon never reported ready".into(),
            });
        }
        let text = read_private_file(&path)?;
        let state: SandboxState =
            serde_json::from_str(&text).map_err(|e| SandboxError::CorruptState {
                path: path.clone(),
                why: e.to_string(),
            })?;
        state
            .check(name, &self.airlock)
            .map_err(|why| SandboxError::CorruptState { path, why })?;
        Ok(state)
    }

    /// Writes the state of a sandbox atomically (a temporary file renamed over it).
    pub fn save(&self, state: &SandboxState) -> Result<(), SandboxError> {
        let name = SandboxName::parse(&state.name)?;
        let path = self.state_file(&name);
        let text = serde_json::to_string_pretty(state).map_err(|e| SandboxError::CorruptState {
            path: path.clone(),
            why: e.to_string(),
        })?;
        write_private_file(&path, &text)
    }

    /// Every sandbox directory's name, sorted (entries that are not valid names skipped).
    pub fn names(&self) -> Result<Vec<SandboxName>, SandboxError> {
        let entries =
            std::fs::read_dir(&self.root).map_err(|e| SandboxError::state(&self.root, e))?;
        let mut names: Vec<SandboxName> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.path().is_dir())
            .filter_map(|entry| {
                entry
                    .file_name()
                    .to_str()
                    .and_then(|n| SandboxName::parse(n).ok())
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Whether the daemon of `state` and its confinement are alive.
    pub fn health_of(&self, state: &SandboxState) -> Health {
        if !state.daemon.is_alive() {
            return Health::Dead("its daemon is gone".into());
        }
        match &state.confinement {
            Confinement::Local { jail, .. } if !jail.is_alive() => {
                Health::Dead("its namespaces are gone".into())
            }
            Confinement::Docker { container, engine } => {
                let Some(id) = crate::docker::ContainerId::parse(container) else {
                    return Health::Dead(format!("{container:?} is not a container ID"));
                };
                let Ok(docker) = engine_of(engine) else {
                    return Health::Dead(format!("its engine {} is not on PATH", engine.display()));
                };
                match docker.is_running(&id) {
                    Ok(true) => Health::Running,
                    Ok(false) => Health::Dead(format!("its container {container} is not running")),
                    Err(e) => Health::Dead(format!("its container cannot be inspected: {e}")),
                }
            }
            Confinement::Local { .. } => Health::Running,
        }
    }

    /// The health of `name`, including a daemon still starting.
    pub fn health(&self, name: &SandboxName) -> Result<Health, SandboxError> {
        match self.load(name) {
            Ok(state) => Ok(self.health_of(&state)),
            Err(SandboxError::NotRunning { .. }) => Ok(match self.starting_daemon(name) {
                Some(_) => Health::Starting,
                None => Health::Dead("its daemon never reported ready".into()),
            }),
            Err(e) => Err(e),
        }
    }

    /// The daemon of a sandbox that has no state file yet, from `control/daemon.pid`.
    pub(crate) fn starting_daemon(&self, name: &SandboxName) -> Option<ProcessId> {
        let text = read_private_file(&self.control_dir(name).join("daemon.pid")).ok()?;
        let id: ProcessId = serde_json::from_str(&text).ok()?;
        (id.is_alive() && runs_program(id.pid, &self.airlock)).then_some(id)
    }

    /// Loads `name` and checks that it can run commands: its daemon is alive and, for a
    /// local sandbox, its jail. A container is not asked about here (that costs an engine
    /// call per command): its daemon watches it and ends with it, and `docker exec` fails on
    /// a stopped container anyway.
    pub fn running(&self, name: &SandboxName) -> Result<SandboxState, SandboxError> {
        let state = self.load(name)?;
        let why = if !state.daemon.is_alive() {
            "its daemon is gone"
        } else if matches!(&state.confinement, Confinement::Local { jail, .. } if !jail.is_alive())
        {
            "its namespaces are gone"
        } else {
            return Ok(state);
        };
        Err(SandboxError::NotRunning {
            name: name.to_string(),
            why: why.to_owned(),
        })
    }
}

/// The default state root.
pub fn default_root() -> Result<PathBuf, SandboxError> {
    if let Some(root) = std::env::var_os(ROOT_VARIABLE) {
        return Ok(PathBuf::from(root));
    }
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        return Ok(PathBuf::from(state).join("airlock").join("sandboxes"));
    }
    let home = std::env::var_os("HOME").ok_or_else(|| {
        SandboxError::Unsupported(format!(
            "neither {ROOT_VARIABLE}, XDG_STATE_HOME nor HOME is set"
        ))
    })?;
    Ok(PathBuf::from(home).join(".local/state/airlock/sandboxes"))
}

/// Creates `dir` and its parents; `dir` itself gets mode 0700.
pub(crate) fn create_private_dir(dir: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| SandboxError::state(dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| SandboxError::state(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcessId::of(std::process::id() as i32).expect("own stat");
        assert!(me.is_alive());
        let recycled = ProcessId {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!recycled.is_alive());
    }
}
