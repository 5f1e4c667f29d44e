//! Everything about a sandbox that does not depend on its provider: the session prepared
//! from the daemon's configuration, the workspace record, the environment of every command
//! and the state record that tells the creator the sandbox is ready.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use airlock_sandbox::state::{Confinement, ProcessId, SandboxState, WorkspaceRecord};
use airlock_sandbox::{CreateOptions, DaemonConfig, SandboxName, Sandboxes, workspace};
use airlock_session::sources::PolicySources;
use airlock_session::{JailMode, Session, SessionConfig, Upstream};

use crate::DaemonProvider;

/// Variables of the creator's environment that commands keep where the provider keeps
/// them ([`DaemonProvider::keeps_creator_variables`]).
const KEPT_VARIABLES: [&str; 11] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SHELL",
    "TMPDIR",
];

/// Everything about the sandbox that does not depend on the provider.
pub(crate) struct Plan {
    /// The sandbox's name.
    pub(crate) name: SandboxName,
    /// The state root.
    pub(crate) sandboxes: Sandboxes,
    /// The prepared session (policy, secrets, CA bundle, audit log).
    pub(crate) session: Session,
    /// The workspace of a sandbox created with `--repo`.
    pub(crate) workspace: Option<WorkspaceRecord>,
    /// Each secret's name and hosts (git's credential helper).
    secret_hosts: Vec<(String, Vec<String>)>,
    /// The names of the surrogate variables.
    surrogate_names: Vec<String>,
    /// What the creator asked for.
    pub(crate) options: CreateOptions,
}

/// The session of the sandbox whose audit log is `log`: namespace capture, enforce or
/// report mode, no asks (nobody could answer them).
pub(crate) fn session_config(options: &CreateOptions, log: &Path) -> SessionConfig {
    SessionConfig {
        sources: PolicySources {
            policies: options.policies.clone(),
            allows: options.allows.clone(),
            secrets: options.secrets.clone(),
            profile: None,
        },
        upstream: Upstream {
            resolve: options.resolve.clone(),
            cas: options.upstream_cas.clone(),
        },
        log: Some(log.display().to_string()),
        audit_max_size: options.audit_max_size,
        audit_format: airlock_audit::ocsf::Format::Airlock,
        audit_otlp: None,
        jail: JailMode::Namespace,
        // A local sandbox's jail shows projected copies as `airlock run`'s does; a
        // container's does not bind them: there such files stay hidden (docs/secrets.md).
        project_credential_files: options.provider == airlock_sandbox::ProviderKind::Local,
        mode: if options.report {
            airlock_policy::mode::Mode::Report
        } else {
            airlock_policy::mode::Mode::Enforce
        },
        ask_timeout: airlock_proxy::ask::DEFAULT_ASK_TIMEOUT,
    }
}

impl Plan {
    /// Opens the state root, prepares the session and records the workspace; every
    /// problem found, each its own line.
    pub(crate) fn prepare(
        config: DaemonConfig,
        provider: &dyn DaemonProvider,
    ) -> Result<(Plan, airlock_proxy::ProxyConfig), Vec<String>> {
        let DaemonConfig { root, options } = config;
        let name = options.name.clone();
        let exe = std::env::current_exe()
            .map_err(|e| vec![format!("cannot find the airlock binary: {e}")])?;
        let sandboxes = Sandboxes::open(&root, exe).map_err(|e| vec![e.to_string()])?;
        let log = sandboxes.control_dir(&name).join("audit.jsonl");
        let (session, config) = Session::prepare(&session_config(&options, &log))?;
        let secret_hosts = session
            .policy
            .secrets
            .iter()
            .map(|secret| {
                let hosts = secret.hosts.iter().map(ToString::to_string).collect();
                (secret.name.clone(), hosts)
            })
            .collect();
        let surrogate_names = session
            .policy
            .secrets
            .iter()
            .map(|s| s.name.clone())
            .collect();
        let workspace = match &options.repo {
            None => None,
            Some(repo) => Some(workspace_record(
                &options, provider, &sandboxes, &name, repo,
            )?),
        };
        let plan = Plan {
            name,
            sandboxes,
            session,
            workspace,
            secret_hosts,
            surrogate_names,
            options,
        };
        Ok((plan, config))
    }

    /// The environment of every command in the sandbox.
    fn command_env(&self, provider: &dyn DaemonProvider) -> Vec<(String, String)> {
        command_env(
            provider,
            &self.session.env,
            &self.surrogate_names,
            &self.session.bundle,
            &self.secret_hosts,
        )
    }

    /// The working directory of commands: the task worktree, else the workspace as the
    /// provider's commands see it.
    pub(crate) fn default_workdir(&self, provider: &dyn DaemonProvider) -> PathBuf {
        self.workspace.as_ref().map_or_else(
            || provider.workspace_inside(&self.sandboxes.workspace_dir(&self.name)),
            |w| w.worktree_inside.clone(),
        )
    }

    /// Records the state and tells the creator the sandbox is ready.
    pub(crate) fn announce(
        &self,
        provider: &dyn DaemonProvider,
        confinement: Confinement,
    ) -> Result<(), String> {
        let daemon = ProcessId::of(i32::try_from(std::process::id()).unwrap_or(0))
            .ok_or("cannot read the daemon's own process identity")?;
        let state = SandboxState {
            name: self.name.to_string(),
            provider: provider.kind(),
            daemon,
            confinement,
            env: self.command_env(provider),
            workdir: self.default_workdir(provider),
            workspace: self.workspace.clone(),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            policy: self.session_sources(),
        };
        self.sandboxes.save(&state).map_err(|e| e.to_string())?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "ready")
            .and_then(|()| stdout.flush())
            .map_err(|e| format!("cannot report ready: {e}"))?;
        // The creator reads one line: standard output now goes nowhere (replaced, not
        // closed, so that no file opened later can take its number).
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .map_err(|e| format!("cannot open /dev/null: {e}"))?;
        nix::unistd::dup2_stdout(&null)
            .map_err(|e| format!("cannot detach standard output: {}", std::io::Error::from(e)))
    }

    fn session_sources(&self) -> Vec<String> {
        self.session
            .policy
            .network
            .allow
            .iter()
            .map(|rule| rule.id.clone())
            .take(20)
            .collect()
    }
}

/// The environment of every command: the variables of the session (`session_env`) that
/// are surrogates (`surrogate_names`), `AIRLOCK`, or kept variables of the creator where
/// the provider keeps them; then the provider's own variables, the CA-trust variables
/// naming the bundle where commands see it, and git's credential helper.
pub(crate) fn command_env(
    provider: &dyn DaemonProvider,
    session_env: &[(OsString, OsString)],
    surrogate_names: &[String],
    bundle: &Path,
    secret_hosts: &[(String, Vec<String>)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for (name, value) in session_env {
        let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
            continue;
        };
        let is_surrogate = surrogate_names.iter().any(|s| s == name);
        let kept = provider.keeps_creator_variables() && KEPT_VARIABLES.contains(&name);
        if is_surrogate || kept || name == "AIRLOCK" {
            env.push((name.to_owned(), value.to_owned()));
        }
    }
    env.extend(provider.base_env());
    let bundle = provider.bundle_inside(bundle);
    for variable in airlock_session::env::CA_BUNDLE_VARIABLES {
        env.push((variable.to_owned(), bundle.clone()));
    }
    env.extend(workspace::git_credential_env(secret_hosts));
    env
}

/// The workspace of a sandbox created with `--repo`.
fn workspace_record(
    options: &CreateOptions,
    provider: &dyn DaemonProvider,
    sandboxes: &Sandboxes,
    name: &SandboxName,
    repo: &str,
) -> Result<WorkspaceRecord, Vec<String>> {
    let branch = options
        .branch
        .clone()
        .unwrap_or_else(|| workspace::default_branch(name.as_str()));
    workspace::check_branch(&branch).map_err(|e| vec![format!("--branch: {e}")])?;
    let source = if workspace::is_local_source(repo) {
        std::fs::canonicalize(repo)
            .map_err(|e| vec![format!("--repo {repo}: {e}")])?
            .display()
            .to_string()
    } else {
        repo.to_owned()
    };
    let host_workspace = sandboxes.workspace_dir(name);
    let inside = provider.workspace_inside(&host_workspace);
    Ok(WorkspaceRecord {
        source,
        worktree_inside: inside.join(workspace::worktree_dir_name(&branch)),
        branch,
        bare_on_host: workspace::bare_path(&host_workspace),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use airlock_policy::mode::Mode;
    use airlock_sandbox::{CreateOptions, DaemonConfig, ProviderKind, SandboxName, Sandboxes};

    #[test]
    fn the_daemon_prepares_the_session_the_launcher_asked_for() {
        let root = tempfile::tempdir().expect("root");
        let sandboxes = Sandboxes::open(root.path(), "/bin/true").expect("sandboxes");
        let name = SandboxName::parse("task-1").expect("name");
        let mut options = CreateOptions::new(name, ProviderKind::Local);
        options.policies = vec!["/p/policy.yaml".into()];
        options.allows = vec!["api.example.com".into()];
        options.secrets = vec!["KEY@api.example.com".into()];
        options.resolve = vec!["api.example.com:127.0.0.1".into()];
        options.upstream_cas = vec!["/p/ca.pem".into()];
        options.audit_max_size = Some(4096);
        let mut written = Vec::new();
        DaemonConfig::new(&sandboxes, &options)
            .write_to(&mut written)
            .expect("written");
        let read = DaemonConfig::read_from(&written[..]).expect("read");
        let log = Path::new("/state/task-1/control/audit.jsonl");
        let config = super::session_config(&read.options, log);
        assert_eq!(config.sources.policies, options.policies);
        assert_eq!(config.sources.allows, options.allows);
        assert_eq!(config.sources.secrets, options.secrets);
        assert_eq!(config.upstream.resolve, options.resolve);
        assert_eq!(config.upstream.cas, options.upstream_cas);
        assert_eq!(
            config.log.as_deref(),
            Some("/state/task-1/control/audit.jsonl")
        );
        assert_eq!(config.audit_max_size, Some(4096));
        assert_eq!(config.jail, airlock_session::JailMode::Namespace);
        assert_eq!(config.mode, Mode::Enforce);
        // A local sandbox projects credential files; a container hides them.
        assert!(config.project_credential_files);
        let container = CreateOptions {
            provider: ProviderKind::Docker,
            ..read.options.clone()
        };
        assert!(!super::session_config(&container, log).project_credential_files);
        let report = CreateOptions {
            report: true,
            ..read.options
        };
        assert_eq!(super::session_config(&report, log).mode, Mode::Report);
    }
}
