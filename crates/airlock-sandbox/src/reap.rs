//! Cleaning what crashed daemons left behind, run by every `airlock sandbox` command
//! before its own work: a sandbox whose daemon is gone gets its container removed, or its
//! jail killed and its control groups removed. Its directory stays (`ls` shows it dead and
//! `export` still works) until `rm`.

use crate::docker::ContainerId;
use crate::state::{Confinement, Sandboxes};
use crate::{DockerProvider, SandboxName};

/// How far to look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Only what the state files record (no container-engine call unless a sandbox died):
    /// cheap enough for every command.
    Recorded,
    /// Also every container labelled for this state root whose sandbox is gone, found by
    /// asking the engine (what a deleted state directory would otherwise leave running).
    Engine,
}

/// Cleans up after dead daemons; returns one line per thing removed.
pub fn reap(sandboxes: &Sandboxes, scan: Scan) -> Vec<String> {
    let mut removed = Vec::new();
    for name in sandboxes.names().unwrap_or_default() {
        let Ok(state) = sandboxes.load(&name) else {
            continue;
        };
        let marker = sandboxes.control_dir(&name).join("reaped");
        if state.daemon.is_alive() || marker.exists() {
            continue;
        }
        let cleaned = match &state.confinement {
            Confinement::Local { jail, cgroups, .. } => {
                if jail.is_alive() {
                    // Identity checked by `is_alive`.
                    crate::signal::send(jail.pid, nix::sys::signal::Signal::SIGKILL);
                }
                crate::cgroup::remove(cgroups);
                true
            }
            Confinement::Docker { container, engine } => {
                let docker = crate::state::engine_of(engine).ok();
                match ContainerId::parse(container)
                    .zip(docker)
                    .map(|(id, docker)| docker.remove(&id))
                {
                    Some(Ok(())) => {
                        removed.push(orphan_line(&name));
                        true
                    }
                    _ => false,
                }
            }
        };
        if cleaned {
            let _ = std::fs::write(&marker, b"");
        }
    }
    if scan == Scan::Engine
        && let Ok(names) = DockerProvider::new(sandboxes.clone()).remove_orphans()
    {
        removed.extend(
            names
                .iter()
                .filter_map(|n| SandboxName::parse(n).ok())
                .map(|n| orphan_line(&n)),
        );
    }
    removed
}

fn orphan_line(name: &SandboxName) -> String {
    format!("removed the orphaned container of sandbox {name}")
}
