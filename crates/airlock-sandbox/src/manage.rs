//! The management operations of `airlock sandbox` (and of any orchestrator) over a state
//! root, each choosing its [`Provider`] from the kind recorded for the sandbox: the one
//! place a [`ProviderKind`] becomes a provider ([`provider`]). The CLI parses flags, calls
//! these and prints; nothing here prints.

use std::path::PathBuf;

use crate::reap::{Scan, reap};
use crate::state::SandboxState;
use crate::{
    CreateOptions, DockerProvider, LocalProvider, Provider, ProviderKind, SandboxError,
    SandboxName, Sandboxes, workspace,
};

/// The provider of `kind` over `sandboxes`.
pub fn provider(kind: ProviderKind, sandboxes: &Sandboxes) -> Box<dyn Provider> {
    match kind {
        ProviderKind::Local => Box::new(LocalProvider::new(sandboxes.clone())),
        ProviderKind::Docker => Box::new(DockerProvider::new(sandboxes.clone())),
    }
}

/// The default state root with `airlock` as this process's own binary, after cleaning
/// what crashed daemons left (`scan`: how far to look; see [`crate::reap`]). Returns the
/// sandboxes and one line per thing removed (for the caller to print).
pub fn open_current(scan: Scan) -> Result<(Sandboxes, Vec<String>), SandboxError> {
    let exe = std::env::current_exe().map_err(|source| SandboxError::Spawn {
        what: "airlock (finding its own binary)".into(),
        source,
    })?;
    let root = crate::state::default_root()?;
    let sandboxes = Sandboxes::open(root, exe)?;
    let removed = reap(&sandboxes, scan);
    Ok((sandboxes, removed))
}

/// Creates the sandbox `options.name`, which must not exist yet, with the provider
/// `options.provider`; returns its recorded state once commands can run in it.
pub fn create(
    sandboxes: &Sandboxes,
    options: &CreateOptions,
) -> Result<SandboxState, SandboxError> {
    if sandboxes.exists(&options.name) {
        return Err(SandboxError::Exists(options.name.to_string()));
    }
    provider(options.provider, sandboxes).ensure_running(options)?;
    sandboxes.load(&options.name)
}

/// Stops and removes the sandbox `name` with the provider it was made with (local when
/// its state cannot be read); [`SandboxError::NotFound`] when there is no such sandbox.
pub fn remove(sandboxes: &Sandboxes, name: &SandboxName) -> Result<(), SandboxError> {
    if !sandboxes.exists(name) {
        return Err(SandboxError::NotFound(name.to_string()));
    }
    let kind = sandboxes
        .load(name)
        .map_or(ProviderKind::Local, |s| s.provider);
    provider(kind, sandboxes).teardown(name)
}

/// Where [`export`] brought a branch back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exported {
    /// The branch.
    pub branch: String,
    /// The repository it was fetched into.
    pub target: PathBuf,
}

/// Brings `branch` (default: the task branch) of the workspace of sandbox `name` back
/// into the repository `to` (default: the local repository the sandbox was cloned from);
/// `force` replaces the branch there even if that is not a fast-forward.
pub fn export(
    sandboxes: &Sandboxes,
    name: &SandboxName,
    branch: Option<&str>,
    to: Option<PathBuf>,
    force: bool,
) -> Result<Exported, SandboxError> {
    let state = sandboxes.load(name)?;
    let Some(record) = &state.workspace else {
        return Err(SandboxError::Unsupported(format!(
            "sandbox {name} has no repository (create it with --repo)"
        )));
    };
    let branch = branch.map_or_else(|| record.branch.clone(), str::to_owned);
    let target = match to {
        Some(path) => path,
        None if workspace::is_local_source(&record.source) => PathBuf::from(&record.source),
        None => {
            return Err(SandboxError::Unsupported(format!(
                "sandbox {name} was cloned from {}: name the repository to export into with --to",
                record.source
            )));
        }
    };
    workspace::export(&record.bare_on_host, &branch, &target, force)?;
    Ok(Exported { branch, target })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandboxes() -> (tempfile::TempDir, Sandboxes) {
        let root = tempfile::tempdir().expect("root");
        let sandboxes = Sandboxes::open(root.path(), "/bin/true").expect("sandboxes");
        (root, sandboxes)
    }

    #[test]
    fn each_kind_gets_its_own_provider() {
        let (_root, sandboxes) = sandboxes();
        for kind in [ProviderKind::Local, ProviderKind::Docker] {
            assert_eq!(provider(kind, &sandboxes).kind(), kind);
        }
    }

    #[test]
    fn removing_an_unknown_sandbox_says_so() {
        let (_root, sandboxes) = sandboxes();
        let name = SandboxName::parse("nobody").expect("name");
        assert!(matches!(
            remove(&sandboxes, &name),
            Err(SandboxError::NotFound(n)) if n == "nobody"
        ));
    }

    #[test]
    fn creating_over_an_existing_sandbox_is_refused_before_any_provider_runs() {
        let (_root, sandboxes) = sandboxes();
        let name = SandboxName::parse("taken").expect("name");
        std::fs::create_dir_all(sandboxes.dir(&name)).expect("dir");
        let options = CreateOptions::new(name, ProviderKind::Docker);
        assert!(matches!(
            create(&sandboxes, &options),
            Err(SandboxError::Exists(n)) if n == "taken"
        ));
    }

    #[test]
    fn the_docker_provider_refuses_a_creation_without_an_image() {
        let (_root, sandboxes) = sandboxes();
        let name = SandboxName::parse("no-image").expect("name");
        let options = CreateOptions::new(name.clone(), ProviderKind::Docker);
        assert!(matches!(
            create(&sandboxes, &options),
            Err(SandboxError::Unsupported(why)) if why.contains("--image")
        ));
        assert!(!sandboxes.exists(&name));
    }
}
