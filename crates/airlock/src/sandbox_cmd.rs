//! `airlock sandbox ...`: named, long-lived sandboxes for orchestrators (create, exec with
//! streamed output, ls, rm, export): the flags, and the output of what
//! `airlock_sandbox::manage` does (the daemon is `airlock-sandbox-daemon`'s).
//!
//! Every subcommand first cleans what a crash left behind (a container whose daemon is
//! gone). Exit statuses: `exec` returns the command's status (124 on `--timeout`); every
//! failure of airlock itself is 125. `SIGINT`, `SIGTERM` or `SIGHUP` to `exec` kills its
//! command (and the command's descendants) in the sandbox.
//!
//! `exec --json` and `ls --json` speak a versioned line protocol ([`PROTOCOL`],
//! docs/python.md): fields may be added within a version; removing, renaming or changing
//! the meaning of one is a new version.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use airlock_sandbox::manage::{self, Exported};
use airlock_sandbox::reap::Scan;
use airlock_sandbox::state::SandboxState;
use airlock_sandbox::{
    CreateOptions, ExecEvent, ExecRequest, Health, Limits, ProviderKind, SandboxError, SandboxName,
    Sandboxes, workspace,
};

use crate::policy_args::PolicyArgs;
use airlock_session::serve::Signals;

use crate::error::{Error, SETUP_FAILED};
use crate::run_cmd::UpstreamArgs;

/// The version of the `--json` line protocol of `exec` and `ls`, carried by `exec`'s
/// exit report and by every `ls` line as `"protocol"`.
pub(crate) const PROTOCOL: u32 = 1;

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

/// `airlock sandbox` subcommands.
#[derive(clap::Subcommand)]
pub(crate) enum SandboxCommand {
    /// Create a sandbox and start its proxy; returns once commands can run in it.
    Create(CreateArgs),
    /// Run a command in a sandbox, streaming its output.
    Exec(ExecArgs),
    /// List sandboxes and whether they are running.
    Ls(LsArgs),
    /// Stop sandboxes and remove everything they made (workspace included).
    Rm(RmArgs),
    /// Bring a branch of a sandbox's workspace back into a repository.
    Export(ExportArgs),
    /// The per-sandbox daemon (started by `create`, its configuration on standard input).
    #[command(hide = true)]
    Daemon,
    /// The process that keeps a local sandbox's namespaces alive.
    #[command(hide = true)]
    Hold,
}

/// Flags of `airlock sandbox create`.
#[derive(clap::Args)]
pub(crate) struct CreateArgs {
    /// The sandbox's name (a-z 0-9 - _ . ; at most 63).
    name: String,
    /// Policy sources and secrets (as for `airlock run`).
    #[command(flatten)]
    policy: PolicyArgs,
    /// Upstream pins and trust (as for `airlock run`).
    #[command(flatten)]
    upstream: UpstreamArgs,
    /// Which confinement.
    #[arg(long, value_enum, default_value_t = ProviderArg::Local)]
    provider: ProviderArg,
    /// The container image (docker provider; it needs `sleep`, and `git` and `sh` for --repo).
    #[arg(long, value_name = "IMG")]
    image: Option<String>,
    /// A repository (path or URL) cloned into the sandbox's private workspace.
    #[arg(long, value_name = "URL|PATH")]
    repo: Option<String>,
    /// The task branch the worktree is on (default `airlock/NAME`).
    #[arg(long, value_name = "B", requires = "repo")]
    branch: Option<String>,
    /// Memory limit in MiB.
    #[arg(long = "memory", value_name = "MIB")]
    memory_mib: Option<u64>,
    /// CPU limit, in CPUs (for example 1.5).
    #[arg(long = "cpus", value_name = "N")]
    cpus: Option<f64>,
    /// Maximum number of processes.
    #[arg(long = "pids", value_name = "N")]
    pids: Option<u64>,
    /// `enforce` refuses what the policy refuses; `report` lets through what is refused
    /// only for host, method or path and logs it with `"would":"deny"` (as for `run`).
    #[arg(long, value_name = "enforce|report", default_value = "enforce", value_parser = crate::policy_args::parse_mode_without_ask)]
    mode: airlock_policy::mode::Mode,
    /// Rotate the sandbox's audit log before it grows beyond SIZE (`100M`, `1G`, bytes):
    /// audit.jsonl.1 ... audit.jsonl.5 keep the previous ones.
    #[arg(long = "audit-max-size", value_name = "SIZE", value_parser = airlock_policy::size::parse_size)]
    audit_max_size: Option<u64>,
}

/// Flags of `airlock sandbox exec`.
#[derive(clap::Args)]
pub(crate) struct ExecArgs {
    /// The sandbox.
    name: String,
    /// One JSON object per line: `{"stream":"stdout"|"stderr","line":...}`, then
    /// `{"exit":N,"timed_out":...,"wall_ms":...,"user_ms":...,"system_ms":...,"max_rss_kib":...,
    /// "protocol":1}`.
    #[arg(long)]
    json: bool,
    /// Working directory inside the sandbox (default: the task worktree or the workspace).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// An environment variable for this command. Repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Wall-clock limit in seconds: the command and its descendants are killed (status 124).
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Pass this process's standard input to the command (read to its end first).
    #[arg(long)]
    stdin: bool,
    /// The command and its arguments.
    #[arg(value_name = "CMD", required = true, num_args = 1.., trailing_var_arg = true)]
    command: Vec<String>,
}

/// Flags of `airlock sandbox ls`.
#[derive(clap::Args)]
pub(crate) struct LsArgs {
    /// One JSON object per sandbox and line.
    #[arg(long)]
    json: bool,
}

/// Flags of `airlock sandbox rm`.
#[derive(clap::Args)]
pub(crate) struct RmArgs {
    /// The sandboxes.
    #[arg(required = true)]
    names: Vec<String>,
}

/// Flags of `airlock sandbox export`.
#[derive(clap::Args)]
pub(crate) struct ExportArgs {
    /// The sandbox.
    name: String,
    /// The branch to bring back (default: the sandbox's task branch).
    #[arg(long, value_name = "B")]
    branch: Option<String>,
    /// The repository to fetch into (default: the local repository the sandbox was
    /// created from).
    #[arg(long, value_name = "PATH")]
    to: Option<PathBuf>,
    /// Replace the branch there even if that is not a fast-forward.
    #[arg(long)]
    force: bool,
}

/// Runs `airlock sandbox ...`.
pub(crate) fn run(command: SandboxCommand) -> Result<ExitCode, Error> {
    let status = match command {
        SandboxCommand::Daemon => crate::sandbox_daemon::run()?,
        SandboxCommand::Hold => crate::sandbox_daemon::hold(),
        SandboxCommand::Create(args) => create(args)?,
        SandboxCommand::Exec(args) => exec(args)?,
        SandboxCommand::Ls(args) => ls(&args)?,
        SandboxCommand::Rm(args) => rm(&args)?,
        SandboxCommand::Export(args) => export(&args)?,
    };
    Ok(status)
}

/// The state root and this binary, after cleaning what crashed daemons left (`scan`: how
/// far to look; see [`airlock_sandbox::reap`]).
fn sandboxes(scan: Scan) -> Result<Sandboxes, SandboxError> {
    let (sandboxes, removed) = manage::open_current(scan)?;
    for line in removed {
        eprintln!("airlock: {line}");
    }
    Ok(sandboxes)
}

fn create(args: CreateArgs) -> Result<ExitCode, SandboxError> {
    let sandboxes = sandboxes(Scan::Engine)?;
    let name = SandboxName::parse(&args.name)?;
    let kind = ProviderKind::from(args.provider);
    // Refused before the mode is announced (`manage::create` checks again).
    if sandboxes.exists(&name) {
        return Err(SandboxError::Exists(name.to_string()));
    }
    let absolute = |path: &str| -> String {
        let (format, file) = match airlock_session::sources::split_format(path) {
            Ok((Some(_), file)) => (path[..path.len() - file.len()].to_owned(), file),
            _ => (String::new(), path),
        };
        let file =
            std::path::absolute(file).map_or_else(|_| file.to_owned(), |p| p.display().to_string());
        format!("{format}{file}")
    };
    let mut options = CreateOptions::new(name.clone(), kind);
    options.policies = args
        .policy
        .selection
        .policies
        .iter()
        .map(|p| absolute(p))
        .collect();
    options.allows = args.policy.selection.allows.clone();
    options.secrets = args.policy.secrets.clone();
    options.resolve = args.upstream.resolve.clone();
    options.upstream_cas = args
        .upstream
        .upstream_ca
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    options.image = args.image.clone();
    options.repo = args.repo.as_deref().map(|repo| {
        if workspace::is_local_source(repo) {
            absolute(repo)
        } else {
            repo.to_owned()
        }
    });
    options.branch = args.branch.clone();
    options.report = args.mode == airlock_policy::mode::Mode::Report;
    airlock_session::sources::announce_mode(args.mode);
    options.audit_max_size = args.audit_max_size;
    options.limits = Limits {
        memory_mib: args.memory_mib,
        millicpus: args.cpus.map(|cpus| (cpus * 1000.0).round() as u64),
        pids: args.pids,
    };
    let state = manage::create(&sandboxes, &options)?;
    eprintln!(
        "airlock: sandbox {name} is running ({} provider); work directory {}",
        kind.as_str(),
        state.workdir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn exec(args: ExecArgs) -> Result<ExitCode, SandboxError> {
    let sandboxes = sandboxes(Scan::Recorded)?;
    let name = SandboxName::parse(&args.name)?;
    let state = sandboxes.load(&name)?;
    let mut request = ExecRequest::new(args.command.clone());
    request.cwd = args.cwd.clone();
    for pair in &args.env {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(SandboxError::Unsupported(format!(
                "--env {pair:?}: expected NAME=VALUE"
            )));
        };
        request.env.push((key.to_owned(), value.to_owned()));
    }
    if let Some(seconds) = args.timeout {
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(SandboxError::Unsupported(format!(
                "--timeout {seconds}: expected a positive number of seconds"
            )));
        }
        request.timeout = Some(Duration::from_secs_f64(seconds));
    }
    if args.stdin {
        let mut input = Vec::new();
        std::io::stdin()
            .read_to_end(&mut input)
            .map_err(|source| SandboxError::Spawn {
                what: "reading standard input".into(),
                source,
            })?;
        request.stdin = Some(input);
    }
    // Caught before the command starts, so that stopping this process always stops it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| SandboxError::Spawn {
            what: "airlock (signal handling)".into(),
            source,
        })?;
    let mut signals = {
        let _entered = runtime.enter();
        Signals::install().map_err(|source| SandboxError::Spawn {
            what: "airlock (signal handlers)".into(),
            source,
        })?
    };
    let events = manage::provider(state.provider, &sandboxes).exec(&name, request)?;
    let canceller = events.canceller();
    std::thread::spawn(move || {
        runtime.block_on(signals.any());
        canceller.cancel();
    });
    let mut stdout = std::io::stdout().lock();
    let mut status = i32::from(SETUP_FAILED);
    for event in events {
        let written = if args.json {
            let value = match &event {
                ExecEvent::Stdout(line) => serde_json::json!({"stream": "stdout", "line": line}),
                ExecEvent::Stderr(line) => serde_json::json!({"stream": "stderr", "line": line}),
                ExecEvent::Exit(report) => {
                    let mut value = serde_json::to_value(report).unwrap_or_default();
                    if let Some(object) = value.as_object_mut() {
                        let status = object.remove("status").unwrap_or_default();
                        object.insert("exit".into(), status);
                        object.insert("protocol".into(), PROTOCOL.into());
                    }
                    value
                }
            };
            writeln!(stdout, "{value}").and_then(|()| stdout.flush())
        } else {
            match &event {
                ExecEvent::Stdout(line) => writeln!(stdout, "{line}").and_then(|()| stdout.flush()),
                ExecEvent::Stderr(line) => writeln!(std::io::stderr(), "{line}"),
                ExecEvent::Exit(_) => Ok(()),
            }
        };
        if let ExecEvent::Exit(report) = &event {
            status = report.status;
        }
        // A closed standard output (the reader went away) ends the streaming, not the command.
        if written.is_err() {
            break;
        }
    }
    Ok(ExitCode::from(u8::try_from(status).unwrap_or(SETUP_FAILED)))
}

fn ls(args: &LsArgs) -> Result<ExitCode, SandboxError> {
    let sandboxes = sandboxes(Scan::Engine)?;
    let mut stdout = std::io::stdout().lock();
    if !args.json {
        let _ = writeln!(
            stdout,
            "{:<24} {:<8} {:<10} WORKDIR",
            "NAME", "PROVIDER", "STATUS"
        );
    }
    for name in sandboxes.names()? {
        let state: Option<SandboxState> = sandboxes.load(&name).ok();
        let health = sandboxes
            .health(&name)
            .unwrap_or_else(|e| Health::Dead(e.to_string()));
        let (status, why) = match &health {
            Health::Running => ("running", String::new()),
            Health::Starting => ("starting", String::new()),
            Health::Dead(why) => ("dead", why.clone()),
        };
        let provider = state.as_ref().map_or("?", |s| s.provider.as_str());
        let workdir = state
            .as_ref()
            .map(|s| s.workdir.display().to_string())
            .unwrap_or_default();
        let line = if args.json {
            serde_json::json!({
                "name": name.as_str(), "provider": provider, "status": status, "reason": why,
                "workdir": workdir,
                "branch": state.as_ref().and_then(|s| s.workspace.as_ref()).map(|w| w.branch.clone()),
                "created_unix": state.as_ref().map(|s| s.created_unix),
                "protocol": PROTOCOL,
            })
            .to_string()
        } else {
            format!(
                "{:<24} {:<8} {:<10} {workdir}",
                name.as_str(),
                provider,
                status
            )
        };
        let _ = writeln!(stdout, "{line}");
    }
    Ok(ExitCode::SUCCESS)
}

fn rm(args: &RmArgs) -> Result<ExitCode, SandboxError> {
    let sandboxes = sandboxes(Scan::Engine)?;
    let mut failed = false;
    for text in &args.names {
        let result = SandboxName::parse(text).and_then(|name| manage::remove(&sandboxes, &name));
        if let Err(error) = result {
            eprintln!("airlock: {error}");
            failed = true;
        }
    }
    Ok(if failed {
        ExitCode::from(SETUP_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

fn export(args: &ExportArgs) -> Result<ExitCode, SandboxError> {
    let sandboxes = sandboxes(Scan::Recorded)?;
    let name = SandboxName::parse(&args.name)?;
    let Exported { branch, target } = manage::export(
        &sandboxes,
        &name,
        args.branch.as_deref(),
        args.to.clone(),
        args.force,
    )?;
    eprintln!(
        "airlock: branch {branch} of sandbox {name} exported into {}",
        target.display()
    );
    Ok(ExitCode::SUCCESS)
}
