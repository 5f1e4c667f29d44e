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
//! `control/` is hidden from the sandbox; `workspace/` is what it works in. Liveness is
//! read from the kernel, never trusted from the file: a process is identified by its PID
//! *and* its start time, so a recycled PID is not mistaken for the daemon.

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

    /// Whether that very process is still alive (and not a zombie).
    pub fn is_alive(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }
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
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SandboxError::NotRunning {
                    name: name.to_string(),
                    why: "its daemon never reported ready".into(),
                });
            }
            Err(e) => return Err(SandboxError::state(path, e)),
        };
        serde_json::from_str(&text).map_err(|e| SandboxError::CorruptState {
            path,
            why: e.to_string(),
        })
    }

    /// Writes the state of a sandbox atomically (a temporary file renamed over it).
    pub fn save(&self, state: &SandboxState) -> Result<(), SandboxError> {
        let name = SandboxName::parse(&state.name)?;
        let path = self.state_file(&name);
        let temporary = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(state).map_err(|e| SandboxError::CorruptState {
            path: path.clone(),
            why: e.to_string(),
        })?;
        std::fs::write(&temporary, text).map_err(|e| SandboxError::state(&temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| SandboxError::state(&path, e))
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
                match crate::docker::Docker::at(engine.clone()).is_running(&id) {
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
        let text = std::fs::read_to_string(self.control_dir(name).join("daemon.pid")).ok()?;
        let id: ProcessId = serde_json::from_str(&text).ok()?;
        id.is_alive().then_some(id)
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
