//! `airlock sandbox daemon` (started by `airlock sandbox create`, never by hand, with its
//! [`DaemonConfig`] on standard input): one process per sandbox that prepares its session
//! with `airlock-session`, holds the policy and the real secret values in memory, builds
//! the sandbox's confinement through its provider, serves its only network exactly as
//! `airlock run` does (transparent proxy and DNS on sockets made inside the sandbox's
//! network namespace), records the sandbox's state, prints `ready`, and tears everything
//! down on `SIGTERM`/`SIGINT` or when the confinement disappears.
//!
//! Setup failures ([`DaemonError`]) are printed (to the daemon log, which `create` shows)
//! and exit 125 with everything built so far removed.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use airlock_proxy::Proxy;
use airlock_sandbox::state::{Confinement, ProcessId, SandboxState, WorkspaceRecord};
use airlock_sandbox::{ProviderKind, SandboxName, Sandboxes, workspace};
use tokio::sync::watch;

use airlock_sandbox::DaemonConfig;
use airlock_session::serve::Signals;
use airlock_session::sources::PolicySources;
use airlock_session::{JailMode, Session, SessionConfig, Upstream};

use crate::error::DaemonError;
use crate::run_cmd;

/// Variables of the creator's environment that commands in a local sandbox keep.
const KEPT_VARIABLES: [&str; 11] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "SHELL",
    "TMPDIR",
];
/// Where the CA bundle is copied inside a container.
const CONTAINER_BUNDLE: &str = "/etc/airlock-ca-bundle.pem";
/// The default `PATH` inside a container.
const CONTAINER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The workspace's mount point inside a container.
const CONTAINER_WORKSPACE: &str = "/workspace";
/// The admin API's socket in the sandbox's control directory.
pub const ADMIN_SOCKET: &str = "admin.sock";
/// How often a container is checked for being alive.
const CONTAINER_POLL: Duration = Duration::from_secs(2);

/// `--provider` on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderArg {
    /// Linux namespaces.
    Local,
    /// A Docker (or Podman) container.
    Docker,
}

impl From<ProviderArg> for ProviderKind {
    fn from(arg: ProviderArg) -> ProviderKind {
        match arg {
            ProviderArg::Local => ProviderKind::Local,
            ProviderArg::Docker => ProviderKind::Docker,
        }
    }
}

/// Runs the daemon with the configuration its launcher writes on standard input; returns
/// when the sandbox is torn down.
pub fn run() -> Result<ExitCode, DaemonError> {
    let config = DaemonConfig::read_from(std::io::stdin().lock()).map_err(DaemonError::Config)?;
    run_cmd::on_runtime(serve(config)).map_err(DaemonError::Runtime)?
}

/// The session of the sandbox whose audit log is `log`: namespace capture, enforce or
/// report mode, no asks (nobody could answer them).
fn session_config(args: &DaemonConfig, log: &Path) -> SessionConfig {
    SessionConfig {
        sources: PolicySources {
            policies: args.policies.clone(),
            allows: args.allows.clone(),
            secrets: args.secrets.clone(),
            profile: None,
        },
        upstream: Upstream {
            resolve: args.resolve.clone(),
            cas: args.upstream_cas.clone(),
        },
        log: Some(log.display().to_string()),
        audit_max_size: args.audit_max_size,
        audit_format: airlock_audit::ocsf::Format::Airlock,
        jail: JailMode::Namespace,
        mode: if args.report {
            airlock_policy::mode::Mode::Report
        } else {
            airlock_policy::mode::Mode::Enforce
        },
        ask_timeout: airlock_proxy::ask::DEFAULT_ASK_TIMEOUT,
    }
}

/// Everything about the sandbox that does not depend on the provider.
struct Plan {
    name: SandboxName,
    sandboxes: Sandboxes,
    session: Session,
    workspace: Option<WorkspaceRecord>,
    secret_hosts: Vec<(String, Vec<String>)>,
    surrogate_names: Vec<String>,
    limits: airlock_sandbox::Limits,
}

/// Builds and serves the sandbox until it is told to stop or its confinement ends.
async fn serve(args: DaemonConfig) -> Result<ExitCode, DaemonError> {
    let mut termination = Signals::install().map_err(DaemonError::Signals)?;
    let (plan, config) = Plan::prepare(&args).map_err(DaemonError::Setup)?;
    let proxy = Proxy::new(config)?;
    airlock_session::rotation::watch_proxy(&proxy);
    airlock_session::panic_redaction::install(&proxy);
    // The admin API (events, backlog) on the control directory's socket, hidden from the
    // sandbox: `airlock watch --sandbox NAME` attaches to it (docs/watch.md).
    let admin_socket = plan.sandboxes.control_dir(&plan.name).join(ADMIN_SOCKET);
    let _admin = match plan.session.serve_admin_at(&proxy, admin_socket).await {
        Ok(socket) => Some(socket),
        Err(e) => {
            eprintln!("airlock: warning: this sandbox has no admin API: {e}");
            None
        }
    };
    let (stop, _) = watch::channel(false);
    let result = match args.provider {
        ProviderKind::Local => serve_local(&plan, proxy, &stop, &mut termination).await,
        ProviderKind::Docker => serve_docker(&args, &plan, proxy, &stop, &mut termination).await,
    };
    stop.send_replace(true);
    plan.session.audit.flush();
    result.map_err(DaemonError::Serve)?;
    Ok(ExitCode::SUCCESS)
}

impl Plan {
    fn prepare(args: &DaemonConfig) -> Result<(Plan, airlock_proxy::ProxyConfig), Vec<String>> {
        let name = SandboxName::parse(&args.name).map_err(|e| vec![e.to_string()])?;
        let exe = std::env::current_exe()
            .map_err(|e| vec![format!("cannot find the airlock binary: {e}")])?;
        let sandboxes = Sandboxes::open(&args.root, exe).map_err(|e| vec![e.to_string()])?;
        let log = sandboxes.control_dir(&name).join("audit.jsonl");
        let (session, config) = Session::prepare(&session_config(args, &log))?;
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
        let workspace = match &args.repo {
            None => None,
            Some(repo) => Some(workspace_record(args, &sandboxes, &name, repo)?),
        };
        let plan = Plan {
            name,
            sandboxes,
            session,
            workspace,
            secret_hosts,
            surrogate_names,
            limits: args.limits.clone(),
        };
        Ok((plan, config))
    }

    /// The environment of every command: kept variables of the creator (local only), the
    /// surrogates, `AIRLOCK=1`, the CA-trust variables and git's credential helper.
    fn command_env(&self, provider: ProviderKind) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        for (name, value) in &self.session.env {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
                continue;
            };
            let is_surrogate = self.surrogate_names.iter().any(|s| s == name);
            let kept = provider == ProviderKind::Local && KEPT_VARIABLES.contains(&name);
            if is_surrogate || kept || name == "AIRLOCK" {
                env.push((name.to_owned(), value.to_owned()));
            }
        }
        let bundle = match provider {
            ProviderKind::Local => self.session.bundle.display().to_string(),
            ProviderKind::Docker => {
                env.push(("PATH".into(), CONTAINER_PATH.into()));
                env.push(("HOME".into(), "/root".into()));
                CONTAINER_BUNDLE.to_owned()
            }
        };
        for variable in airlock_session::env::CA_BUNDLE_VARIABLES {
            env.push((variable.to_owned(), bundle.clone()));
        }
        env.extend(workspace::git_credential_env(&self.secret_hosts));
        env
    }

    /// Records the state and tells the creator the sandbox is ready.
    fn announce(
        &self,
        provider: ProviderKind,
        confinement: Confinement,
        workdir: PathBuf,
    ) -> Result<(), String> {
        let daemon = ProcessId::of(i32::try_from(std::process::id()).unwrap_or(0))
            .ok_or("cannot read the daemon's own process identity")?;
        let state = SandboxState {
            name: self.name.to_string(),
            provider,
            daemon,
            confinement,
            env: self.command_env(provider),
            workdir,
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
        // SAFETY: dup2 onto our own standard output; `null` stays open until after it.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) } < 0 {
            return Err(format!(
                "cannot detach standard output: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
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

/// The workspace of a sandbox created with `--repo`.
fn workspace_record(
    args: &DaemonConfig,
    sandboxes: &Sandboxes,
    name: &SandboxName,
    repo: &str,
) -> Result<WorkspaceRecord, Vec<String>> {
    let branch = args
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
    let inside = match args.provider {
        ProviderKind::Local => host_workspace.clone(),
        ProviderKind::Docker => PathBuf::from(CONTAINER_WORKSPACE),
    };
    Ok(WorkspaceRecord {
        source,
        worktree_inside: inside.join(workspace::worktree_dir_name(&branch)),
        branch,
        bare_on_host: workspace::bare_path(&host_workspace),
    })
}

/// The working directory of commands: the task worktree, else the workspace.
fn default_workdir(plan: &Plan, workspace_inside: &Path) -> PathBuf {
    plan.workspace.as_ref().map_or_else(
        || workspace_inside.to_owned(),
        |w| w.worktree_inside.clone(),
    )
}

/// The local provider: a jail around a process that only waits.
async fn serve_local(
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    termination: &mut Signals,
) -> Result<(), String> {
    use airlock_jail::{Jail, JailSpec};
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the airlock binary: {e}"))?;
    let (workspace, fs) = sandbox_filesystem(plan)?;
    let writable = fs.confinement.writable.clone();
    // The holder is this binary, executed inside the jail: bound in at its own path, since
    // it may lie where the jail shows something else (a virtual environment under /tmp).
    let mut bind_files = airlock_session::env::bundle_binds(&plan.session.bundle);
    bind_files.push((exe.clone(), exe.clone()));
    let spec = JailSpec {
        argv: vec![
            exe.into_os_string(),
            OsString::from("sandbox"),
            OsString::from("hold"),
        ],
        env: Vec::new(),
        cwd: workspace,
        tcp_ports: plan.session.tcp_ports(),
        hide_paths: fs.hidden,
        hide_if_present: airlock_session::host_sockets::scan(),
        bind_files,
        filesystem: Some(fs.confinement),
        stdio: None,
        terminal: None,
    };
    let jail = tokio::task::spawn_blocking(move || Jail::spawn(spec))
        .await
        .map_err(|e| format!("the jail launcher failed: {e}"))?
        .map_err(|e| e.to_string())?;
    let tag = airlock_sandbox::cgroup::tag(&plan.name, std::process::id());
    let cgroups = airlock_sandbox::cgroup::create(&tag, &plan.limits)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    // The jail's outer process and its init (forked already) join before the holder
    // starts; everything forked later inherits.
    let mut members = vec![jail.pid()];
    members.extend(children_of(jail.pid()));
    for pid in members {
        if let Err(e) = airlock_sandbox::cgroup::add_process(&cgroups, pid) {
            airlock_sandbox::cgroup::remove(&cgroups);
            return Err(e.to_string());
        }
    }
    let recorded = (&cgroups[..], &writable[..]);
    let result = serve_jail(plan, proxy, stop, jail, recorded, termination).await;
    airlock_sandbox::cgroup::remove(&cgroups);
    result
}

/// A local sandbox's filesystem: the whole of airlock's state hidden (every sandbox,
/// this one's control directory included), its own workspace the one writable directory
/// besides any the policy names, and the policy's other `filesystem` rules.
fn sandbox_filesystem(
    plan: &Plan,
) -> Result<(PathBuf, airlock_session::fs_confine::FsPlan), String> {
    let workspace = plan.sandboxes.workspace_dir(&plan.name);
    let mut place = airlock_session::fs_confine::Place::current()?;
    place.cwd = workspace.clone();
    place.workspace = std::fs::canonicalize(&workspace).ok();
    let mut fs = plan.session.policy.filesystem.clone();
    let mut writable = vec![workspace.display().to_string()];
    writable.extend(fs.writable.take().unwrap_or_default());
    fs.writable = Some(writable);
    let mut hidden = plan.session.airlock_hidden.clone();
    hidden.push(airlock_policy::filesystem::Entry {
        path: plan.sandboxes.root().to_owned(),
        why: "airlock's sandbox state (every sandbox)".into(),
    });
    let plan = airlock_session::fs_confine::plan(&fs, &place, hidden)?;
    Ok((workspace, plan))
}

/// The PIDs of the children of `pid` (from `/proc/PID/task/*/children`).
fn children_of(pid: i32) -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    children
}

/// Serves a built jail: starts its holder, records the sandbox, waits for the end.
async fn serve_jail(
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    mut jail: airlock_jail::RunningJail,
    (cgroups, writable): (&[PathBuf], &[PathBuf]),
    termination: &mut Signals,
) -> Result<(), String> {
    let env = &plan.session.env;
    let served = airlock_session::serve::serve_handed(
        std::mem::take(&mut jail.listeners),
        airlock_session::process_lookup::identifying_joinable(proxy, jail.pid(), env),
        &plan.session.audit,
        &stop.subscribe(),
    )?;
    let jail_id = ProcessId::of(jail.pid()).ok_or("the jail vanished while starting")?;
    let signaller = jail.signaller();
    let (started_sender, started) = tokio::sync::oneshot::channel();
    let running = tokio::task::spawn_blocking(move || {
        let start = jail.start();
        let failed = start.is_err();
        let _ = started_sender.send(start.map_err(|e| e.to_string()));
        if failed {
            return;
        }
        let _ = jail.wait();
    });
    started
        .await
        .map_err(|_| "the jail ended while starting".to_owned())??;
    let workdir = default_workdir(plan, &plan.sandboxes.workspace_dir(&plan.name));
    let confinement = Confinement::Local {
        jail: jail_id,
        cgroups: cgroups.to_vec(),
        writable: writable.to_vec(),
    };
    if let Err(e) = plan.announce(ProviderKind::Local, confinement, workdir) {
        let _ = signaller.signal(libc::SIGKILL);
        return Err(e);
    }
    tokio::select! {
        () = termination.any() => {}
        _ = running => eprintln!("airlock: sandbox {}: its namespaces ended", plan.name),
    }
    // The holder ignores nothing: SIGKILL ends the jail's init and every process in it.
    let _ = signaller.signal(libc::SIGKILL);
    // The proxy drains (in-flight exchanges finish) and DNS ends.
    stop.send_replace(true);
    served.finish().await;
    Ok(())
}

/// The docker provider: a container with no network but airlock's capture.
async fn serve_docker(
    args: &DaemonConfig,
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    termination: &mut Signals,
) -> Result<(), String> {
    use airlock_sandbox::docker::{Docker, RunSpec};
    let image = args
        .image
        .clone()
        .ok_or("the docker provider needs --image")?;
    let docker = blocking(|| Docker::detect().map_err(|e| e.to_string())).await?;
    let spec = RunSpec {
        name: format!("airlock-{}", plan.name),
        image,
        labels: vec![
            (airlock_sandbox::SANDBOX_LABEL.into(), plan.name.to_string()),
            (
                airlock_sandbox::ROOT_LABEL.into(),
                plan.sandboxes.root().display().to_string(),
            ),
        ],
        memory_bytes: args
            .limits
            .memory_mib
            .map(|mib| mib.saturating_mul(1024 * 1024)),
        cpus: args.limits.millicpus.map(|milli| milli as f64 / 1000.0),
        pids_limit: args
            .limits
            .pids
            .map(|pids| u32::try_from(pids).unwrap_or(u32::MAX)),
        workspace: Some(plan.sandboxes.workspace_dir(&plan.name)),
    };
    let starting = docker.clone();
    let id = blocking(move || starting.run_detached(&spec).map_err(|e| e.to_string())).await?;
    let result = serve_container(plan, proxy, stop, &docker, &id, termination).await;
    let remover = docker.clone();
    let removed = blocking(move || remover.remove(&id).map_err(|e| e.to_string())).await;
    result.and(removed)
}

/// Captures the container's network, serves it, records the sandbox and waits for the end.
async fn serve_container(
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    docker: &airlock_sandbox::docker::Docker,
    id: &airlock_sandbox::docker::ContainerId,
    termination: &mut Signals,
) -> Result<(), String> {
    let (inspecting, container) = (docker.clone(), id.clone());
    let pid = blocking(move || inspecting.init_pid(&container).map_err(|e| e.to_string())).await?;
    let tcp_ports = plan.session.tcp_ports();
    let listeners = blocking(move || {
        let netns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|e| format!("cannot open the container's network namespace: {e}"))?;
        airlock_jail::capture_network_namespace(&netns, &tcp_ports).map_err(|e| e.to_string())
    })
    .await?;
    let served = airlock_session::serve::serve_handed(
        listeners,
        proxy,
        &plan.session.audit,
        &stop.subscribe(),
    )?;
    let (copying, container, bundle) = (docker.clone(), id.clone(), plan.session.bundle.clone());
    blocking(move || {
        copying
            .copy_into(&container, &bundle, CONTAINER_BUNDLE)
            .map_err(|e| e.to_string())?;
        // Tools that ignore the CA variables read the system bundle: where the image has
        // one, it becomes airlock's (system roots plus the airlock CA).
        for system in airlock_session::env::SYSTEM_BUNDLES {
            let _ = copying.copy_into(&container, &bundle, system);
        }
        Ok::<(), String>(())
    })
    .await?;
    let workdir = default_workdir(plan, Path::new(CONTAINER_WORKSPACE));
    let confinement = Confinement::Docker {
        container: id.to_string(),
        engine: docker.program().to_owned(),
    };
    plan.announce(ProviderKind::Docker, confinement, workdir)?;
    let (watching, container) = (docker.clone(), id.clone());
    let ended = async move {
        loop {
            tokio::time::sleep(CONTAINER_POLL).await;
            let (checking, id) = (watching.clone(), container.clone());
            let running =
                blocking(move || Ok::<bool, String>(checking.is_running(&id).unwrap_or(false)))
                    .await;
            if running != Ok(true) {
                return;
            }
        }
    };
    tokio::select! {
        () = termination.any() => {}
        () = ended => eprintln!("airlock: sandbox {}: its container stopped", plan.name),
    }
    // The proxy drains (in-flight exchanges finish) and DNS ends.
    stop.send_replace(true);
    served.finish().await;
    Ok(())
}

/// Runs blocking work (the container engine's CLI) off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("a blocking task failed: {e}"))?
}

/// `airlock sandbox hold`: the process a local sandbox's namespaces are kept alive by.
pub fn hold() -> ExitCode {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
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
        let config = super::session_config(&read, log);
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
        let report = DaemonConfig {
            report: true,
            ..read
        };
        assert_eq!(super::session_config(&report, log).mode, Mode::Report);
    }
}
