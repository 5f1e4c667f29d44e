//! The `local` provider: `airlock run`'s namespaces kept alive as a named sandbox.
//!
//! The daemon builds the jail (user, network, mount, PID, IPC and UTS namespaces; every
//! address local; the host's files read-only, airlock's whole state hidden except this
//! sandbox's own workspace) around a process that only waits, and serves the jail's listeners. Each command
//! joins those namespaces ([`airlock_jail::JailEntry`]) as a process of the caller, so its
//! output and exit status come straight back and no root is needed.

use std::process::Command;

use airlock_jail::JailEntry;

use crate::exec::{self, EXEC_ID_VARIABLE, ExecStream, Usage};
use crate::state::{Confinement, Health, Sandboxes};
use crate::{CreateOptions, ExecRequest, Provider, ProviderKind, SandboxError, SandboxName};

/// Sandboxes made of Linux namespaces, no container engine needed.
#[derive(Clone, Debug)]
pub struct LocalProvider {
    sandboxes: Sandboxes,
}

impl LocalProvider {
    /// The local provider over `sandboxes`.
    pub fn new(sandboxes: Sandboxes) -> LocalProvider {
        LocalProvider { sandboxes }
    }
}

impl Provider for LocalProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Local
    }

    fn ensure_running(&self, options: &CreateOptions) -> Result<(), SandboxError> {
        crate::launch::ensure_running(self, &self.sandboxes, options)
    }

    fn exec(&self, name: &SandboxName, request: ExecRequest) -> Result<ExecStream, SandboxError> {
        let state = self.sandboxes.running(name)?;
        let Confinement::Local {
            jail,
            cgroups,
            writable,
        } = &state.confinement
        else {
            return Err(crate::launch::wrong_provider(&state, self.kind()));
        };
        let Some((program, arguments)) = request.argv.split_first() else {
            return Err(SandboxError::Unsupported("an empty command".into()));
        };
        let spawn_error = |source| SandboxError::Spawn {
            what: format!("a command in sandbox {name}"),
            source,
        };
        let mut entry = JailEntry::open(jail.pid).map_err(spawn_error)?;
        // Other sandboxes (made before or after this one) are inside airlock's state
        // root, which the jail covers whole; Landlock confines writes to the workspace and
        // the sandbox's other writable directories.
        let workspace = [self.sandboxes.workspace_dir(name)];
        let writable = if writable.is_empty() {
            &workspace[..]
        } else {
            &writable[..]
        };
        entry.confine_writes(writable).map_err(spawn_error)?;
        entry.join_cgroups(cgroups).map_err(spawn_error)?;
        let exec_id = exec::new_exec_id();
        let mut command = Command::new(program);
        command
            .args(arguments)
            .env_clear()
            .envs(state.env.iter().map(|(k, v)| (k, v)))
            .envs(request.env.iter().map(|(k, v)| (k, v)))
            .env(EXEC_ID_VARIABLE, &exec_id);
        let cwd = request.cwd.clone().unwrap_or_else(|| state.workdir.clone());
        entry.install(&mut command, &cwd).map_err(spawn_error)?;
        exec::stream(command, &request, exec_id, Usage::Measured)
    }

    fn teardown(&self, name: &SandboxName) -> Result<(), SandboxError> {
        crate::launch::stop_and_remove(&self.sandboxes, name, |state| {
            // The jail dies with its daemon (parent-death signal); make sure of it.
            if let Some(Confinement::Local { jail, cgroups, .. }) = state.map(|s| &s.confinement) {
                if jail.is_alive() {
                    // Identity checked by `is_alive`.
                    crate::signal::send(jail.pid, nix::sys::signal::Signal::SIGKILL);
                }
                crate::cgroup::remove(cgroups);
            }
        })
    }

    fn health(&self, name: &SandboxName) -> Result<Health, SandboxError> {
        self.sandboxes.health(name)
    }
}
