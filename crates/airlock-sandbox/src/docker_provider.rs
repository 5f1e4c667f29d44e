//! The `docker` provider: a long-lived container from an image the user names, with no
//! network of its own (`--network none`) except airlock's capture.
//!
//! The daemon (root: it enters the container's network namespace) starts the container
//! with every capability dropped, `no-new-privileges`, the limits asked for, a label
//! `airlock.sandbox=<name>`, and the sandbox's private workspace mounted at `/workspace`
//! (never the user's tree); it then makes every address local inside the container's
//! network namespace and creates airlock's listeners there, exactly as the local jail
//! does, and copies the CA bundle in. Commands run with `docker exec` (standard output
//! and error kept apart), with the sandbox's environment passed per command; real keys are
//! never in it. A container whose sandbox is gone is found by its label and removed at the
//! next `airlock sandbox` command.

use crate::docker::{ContainerId, Docker};
use crate::exec::{self, EXEC_ID_VARIABLE, ExecStream, Usage};
use crate::state::{Confinement, Health, Sandboxes};
use crate::{CreateOptions, ExecRequest, Provider, ProviderKind, SandboxError, SandboxName};

/// The label every sandbox container carries, valued with the sandbox's name.
pub const SANDBOX_LABEL: &str = "airlock.sandbox";
/// The label naming the state root a container belongs to.
pub const ROOT_LABEL: &str = "airlock.root";

/// Sandboxes that are containers.
#[derive(Clone, Debug)]
pub struct DockerProvider {
    sandboxes: Sandboxes,
}

impl DockerProvider {
    /// The docker provider over `sandboxes`.
    pub fn new(sandboxes: Sandboxes) -> DockerProvider {
        DockerProvider { sandboxes }
    }

    /// Removes containers labelled for this state root whose sandbox is gone or dead.
    /// Returns the names of the sandboxes whose containers were removed.
    pub fn remove_orphans(&self) -> Result<Vec<String>, SandboxError> {
        let Ok(docker) = Docker::detect() else {
            return Ok(Vec::new());
        };
        let root = self.sandboxes.root().display().to_string();
        let mut removed = Vec::new();
        for container in docker.list_labelled(SANDBOX_LABEL)? {
            if container.labels.get(ROOT_LABEL) != Some(&root) {
                continue;
            }
            let Some(name) = container
                .labels
                .get(SANDBOX_LABEL)
                .and_then(|n| SandboxName::parse(n).ok())
            else {
                continue;
            };
            let alive = self
                .sandboxes
                .load(&name)
                .ok()
                .is_some_and(|state| state.daemon.is_alive());
            let starting = self.sandboxes.starting_daemon(&name).is_some();
            if !alive && !starting {
                docker.remove(&container.id)?;
                removed.push(name.to_string());
            }
        }
        Ok(removed)
    }
}

impl Provider for DockerProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Docker
    }

    fn ensure_running(&self, options: &CreateOptions) -> Result<(), SandboxError> {
        if options.image.is_none() {
            return Err(SandboxError::Unsupported(
                "the docker provider needs --image".into(),
            ));
        }
        crate::launch::ensure_running(self, &self.sandboxes, options)
    }

    fn exec(&self, name: &SandboxName, request: ExecRequest) -> Result<ExecStream, SandboxError> {
        let state = self.sandboxes.running(name)?;
        let Confinement::Docker { container, engine } = &state.confinement else {
            return Err(crate::launch::wrong_provider(&state, self.kind()));
        };
        if request.argv.is_empty() {
            return Err(SandboxError::Unsupported("an empty command".into()));
        }
        let exec_id = exec::new_exec_id();
        let mut env = state.env.clone();
        env.extend(request.env.iter().cloned());
        env.push((EXEC_ID_VARIABLE.to_owned(), exec_id.clone()));
        let cwd = request.cwd.clone().unwrap_or_else(|| state.workdir.clone());
        let id = container_id(container)?;
        let cwd = cwd.to_str().ok_or_else(|| {
            SandboxError::Unsupported(format!("{}: not a UTF-8 directory", cwd.display()))
        })?;
        let command =
            crate::state::engine_of(engine)?.exec_command(&id, cwd, &env, &request.argv)?;
        // `docker exec` answers 126 for a command it could not start, found or not; its
        // message tells which, and the status becomes a shell's (127 / 126).
        exec::stream_with(
            command,
            &request,
            exec_id,
            Usage::Unknown,
            Some(crate::docker::exec_failure_status),
        )
    }

    fn teardown(&self, name: &SandboxName) -> Result<(), SandboxError> {
        crate::launch::stop_and_remove(&self.sandboxes, name, |state| {
            if let Some(Confinement::Docker { container, engine }) = state.map(|s| &s.confinement)
                && let Ok(id) = container_id(container)
                && let Ok(docker) = crate::state::engine_of(engine)
            {
                let _ = docker.remove(&id);
            }
        })?;
        self.remove_orphans().map(drop)
    }

    fn health(&self, name: &SandboxName) -> Result<Health, SandboxError> {
        self.sandboxes.health(name)
    }
}

/// The recorded container ID, checked.
fn container_id(text: &str) -> Result<ContainerId, SandboxError> {
    ContainerId::parse(text).ok_or_else(|| SandboxError::CorruptState {
        path: "state.json".into(),
        why: format!("{text:?} is not a container ID"),
    })
}
