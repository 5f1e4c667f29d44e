//! `airlock run`: runs one command so that its only way out is airlock's proxy.
//!
//! Everything is read and checked first (policy, secrets, CA, audit log, upstream trust);
//! any failure exits 125 and the command is never started. Then, by `--jail`:
//!
//! * `namespace` (the default on Linux): the command runs in `airlock-jail`'s user,
//!   network, mount and PID namespaces. The jail's listening sockets are served here, in
//!   the host's network namespace: port 53 (UDP and TCP) by `airlock-dns` with one
//!   [`NameMap`], every other TCP port by the proxy in transparent mode (the original
//!   destination, SNI, `Host` and the DNS map give the name). No proxy variables are set.
//! * `env`: the command runs directly with `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` (and
//!   lower-case twins) pointing at an explicit proxy on `127.0.0.1`; advisory only, and
//!   said so on stderr every time.
//!
//! What the command sees: its own environment minus proxy variables, minus every secret's
//! source variable and every variable holding a real secret value; plus each secret's
//! surrogate under the secret's name, `AIRLOCK=1`, and the CA-trust variables pointing at
//! a bundle of the system roots and the airlock CA (also bind-mounted over the system
//! bundle paths in namespace mode).
//!
//! What it cannot see (namespace mode; hidden by the mount namespace): the CA directory
//! (`AIRLOCK_HOME`, holding the key and the default audit logs), the policy files, `file:`
//! secret sources, the audit log file, `$XDG_RUNTIME_DIR` and `/run/user/UID`,
//! `/tmp/.X11-unix` and the `SSH_AUTH_SOCK` socket. Abstract UNIX sockets are per network
//! namespace and so unreachable. Every other UNIX socket file found under `/run`, `/var/run`,
//! `/tmp`, `/var/tmp` and `/dev/shm` when the command starts (a Docker daemon, tmux,
//! D-Bus...) is covered by `/dev/null` ([`airlock_session::host_sockets`]). What remains: sockets
//! created on the host *after* the command started, and sockets elsewhere in the file
//! system (the rest of the tree stays visible, read-write as the user).
//!
//! Exit status: the command's own (128 + signal when killed); 126/127 when it cannot be
//! executed / is not found; 125 for any failure of airlock itself, and when airlock stopped
//! the jail because a credential file it binds over was replaced on the host where its
//! directory could not be made private to the run
//! ([`airlock_session::private_parents`], [`airlock_session::replace_watch`]). In namespace mode the
//! command has a session of its own and, when airlock runs on a terminal, a pseudo-terminal
//! relayed here ([`airlock_jail::Terminal`]: raw mode, window size changes passed on);
//! `SIGINT`, `SIGTERM` and `SIGHUP` that reach airlock are forwarded to it. In env mode the
//! terminal delivers `SIGINT` to the command directly and airlock ignores it. When it ends, the proxy and DNS stop, the audit
//! log is flushed, and if anything was refused one summary line goes to stderr.
//!
//! `airlock mcp` runs the same session with a [`Relay`]: the command's standard input and
//! output are then pipes handed to the relay instead of airlock's own.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use airlock_proxy::{Proxy, ProxyConfig};
use airlock_session::env::PROXY_VARIABLES;
use airlock_session::serve::{DRAIN_TIMEOUT, Signals, stop_signal};
use airlock_session::{Session, SessionConfig, Upstream};
use nix::sys::signal::Signal;
use tokio::sync::watch;

use crate::error::{RunError, SETUP_FAILED};
use crate::policy_args::PolicyArgs;

/// How the command is confined.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum JailMode {
    /// `namespace` on Linux, `env` elsewhere.
    #[default]
    Auto,
    /// Linux user, network, mount and PID namespaces: every connection is captured.
    Namespace,
    /// Proxy variables only: advisory, programs can bypass it.
    Env,
}

/// `--resolve` and `--upstream-ca`: how upstreams are found and trusted (`run` and
/// `sandbox create`).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct UpstreamArgs {
    /// Pin the upstream address of HOST (exempt from the private-address guard); curl's
    /// HOST:PORT:ADDR pins it on that port only. Repeatable.
    #[arg(long = "resolve", value_name = "HOST[:PORT]:ADDR")]
    pub resolve: Vec<String>,
    /// A PEM CA that upstream servers may be signed by, besides the system roots. Repeatable.
    #[arg(long = "upstream-ca", value_name = "F")]
    pub upstream_ca: Vec<PathBuf>,
}

impl UpstreamArgs {
    /// The typed pins and trust.
    pub(crate) fn upstream(&self) -> Upstream {
        Upstream {
            resolve: self.resolve.clone(),
            cas: self.upstream_ca.clone(),
        }
    }
}

/// Flags of `airlock run`.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Policy sources and secrets.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The agent profile added to the policy.
    #[command(flatten)]
    pub profile: crate::policy_args::ProfileArg,
    /// Upstream pins and trust.
    #[command(flatten)]
    pub upstream: UpstreamArgs,
    /// Audit log destination: a file (appended to) or `-` for stdout; default: a new file
    /// under the CA directory's `logs/`.
    #[arg(long, value_name = "FILE|-")]
    pub log: Option<String>,
    /// Rotate the audit log file before it grows beyond SIZE (`100M`, `1G`, bytes):
    /// FILE.1 ... FILE.5 keep the previous ones. A `--log` file's directory is then hidden
    /// from the command like the file itself.
    #[arg(long = "audit-max-size", value_name = "SIZE", value_parser = airlock_policy::size::parse_size)]
    pub audit_max_size: Option<u64>,
    /// How audit lines are written: `airlock` (docs/contract.md §5) or `ocsf` (OCSF 1.2.0
    /// events; docs/operations.md, "OCSF lines").
    #[arg(long = "audit-format", value_name = "FORMAT", default_value = "airlock",
          value_parser = airlock_audit::ocsf::Format::parse)]
    pub audit_format: airlock_audit::ocsf::Format,
    /// `--audit-otlp` and its companions.
    #[command(flatten)]
    pub otlp: crate::audit_otlp_args::OtlpArgs,
    /// How the command is confined.
    #[arg(long, value_enum, default_value_t = JailMode::Auto)]
    pub jail: JailMode,
    /// Say on stderr how the command is confined (namespaces, filesystem layers).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// `enforce` refuses what the policy refuses; `report` lets through what is refused
    /// only for host, method or path and logs it with `"would":"deny"`; `ask` holds such a
    /// request until it is answered through the admin API (or --ask-timeout passes).
    #[arg(long, value_name = "enforce|report|ask", default_value = "enforce", value_parser = crate::policy_args::parse_mode)]
    pub mode: airlock_policy::mode::Mode,
    /// In ask mode, how long a held request waits for its answer (`60s`, `2m`, `500ms`)
    /// before it is refused with `"asked":true`.
    #[arg(long = "ask-timeout", value_name = "DURATION", default_value = "60s", value_parser = crate::policy_args::parse_ask_timeout)]
    pub ask_timeout: std::time::Duration,
    /// The command and its arguments.
    #[arg(
        value_name = "CMD",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

/// Runs `airlock run` and returns the command's exit status.
pub(crate) fn run(args: RunArgs) -> Result<ExitCode, RunError> {
    run_with(args, None)
}

/// Runs a session as `airlock run` does; with a `relay`, the command's standard input and
/// output are pipes handed to it instead of airlock's own (`airlock mcp`).
pub(crate) fn run_with(args: RunArgs, relay: Option<Box<dyn Relay>>) -> Result<ExitCode, RunError> {
    let status = on_runtime(run_session(args, relay)).map_err(RunError::Runtime)??;
    Ok(ExitCode::from(u8::try_from(status).unwrap_or(SETUP_FAILED)))
}

/// Takes over the command's standard input and output (`airlock mcp`).
pub(crate) trait Relay: Send {
    /// Starts relaying, given airlock's ends of the command's stdin (`to_command`) and
    /// stdout (`from_command`) pipes, before the command starts; the task ends once the
    /// command's output was relayed. `Err` is a setup failure: 125, the command is not
    /// started.
    fn start(
        self: Box<Self>,
        session: &Session,
        to_command: OwnedFd,
        from_command: OwnedFd,
    ) -> Result<tokio::task::JoinHandle<()>, String>;
}

/// A started relay: the command's ends of its pipes and the relaying task.
struct Relaying {
    stdin: OwnedFd,
    stdout: OwnedFd,
    task: tokio::task::JoinHandle<()>,
}

impl Relaying {
    /// Makes the pipes and starts `relay` (nothing when there is none).
    fn start(relay: Option<Box<dyn Relay>>, session: &Session) -> Result<Option<Self>, RunError> {
        let Some(relay) = relay else {
            return Ok(None);
        };
        let pipes = std::io::pipe().and_then(|stdin| Ok((stdin, std::io::pipe()?)));
        let ((stdin, to_command), (from_command, stdout)) = pipes
            .map_err(|e| RunError::Relay(format!("cannot create the command's pipes: {e}")))?;
        let task = relay
            .start(session, to_command.into(), from_command.into())
            .map_err(RunError::Relay)?;
        Ok(Some(Relaying {
            stdin: stdin.into(),
            stdout: stdout.into(),
            task,
        }))
    }

    /// Hands the command's ends of its pipes to the jail; returns the relaying task.
    #[cfg(target_os = "linux")]
    fn attach(
        relaying: Option<Self>,
        spec: &mut airlock_jail::JailSpec,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let relaying = relaying?;
        spec.stdio = Some(airlock_jail::JailStdio {
            stdin: std::sync::Arc::new(relaying.stdin),
            stdout: std::sync::Arc::new(relaying.stdout),
        });
        Some(relaying.task)
    }

    /// Waits (a bounded time) until the command's output was relayed.
    async fn finish(task: Option<tokio::task::JoinHandle<()>>) {
        if let Some(task) = task {
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, task).await;
        }
    }
}

/// Runs `work` on a two-thread runtime (`Err` if there is none); blocking tasks (a jail
/// waiting for a stray process) get 100 ms, then the exit goes on without them.
pub(crate) fn on_runtime<T>(work: impl std::future::Future<Output = T>) -> std::io::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let done = runtime.block_on(work);
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(done)
}

impl RunArgs {
    /// The session's typed configuration, `--jail` resolved for this platform: the policy
    /// discovered and the profile picked when none was named.
    fn session_config(&self) -> SessionConfig {
        SessionConfig {
            sources: crate::policy_args::run_sources(&self.policy, &self.profile, &self.command),
            upstream: self.upstream.upstream(),
            log: self.log.clone(),
            audit_max_size: self.audit_max_size,
            audit_format: self.audit_format,
            audit_otlp: self.otlp.config(),
            jail: effective_mode(self.jail),
            project_credential_files: effective_mode(self.jail)
                == airlock_session::JailMode::Namespace,
            mode: self.mode,
            ask_timeout: self.ask_timeout,
        }
    }
}

/// Prepares the session, runs the command in it and returns the command's shell status.
async fn run_session(args: RunArgs, relay: Option<Box<dyn Relay>>) -> Result<i32, RunError> {
    let session_config = args.session_config();
    let (mut session, config) = Session::prepare(&session_config).map_err(RunError::Setup)?;
    let profile = session_config.sources.profile;
    crate::policy_args::create_profile_paths(profile).map_err(|e| RunError::Setup(vec![e]))?;
    crate::profile_guard::add_env(&mut session.env, profile);
    let guard =
        crate::profile_guard::Guard::start(profile).map_err(|e| RunError::Setup(vec![e]))?;
    let relaying = Relaying::start(relay, &session)?;
    let status = match effective_mode(args.jail) {
        airlock_session::JailMode::Env => run_env(&args, &session, config, relaying).await,
        airlock_session::JailMode::Namespace => {
            run_namespace(&args, &session, config, relaying).await
        }
    };
    guard.finish();
    session.credential_files.audit_changes(&session.audit);
    session.audit.flush();
    // The process may end before the log's last handle goes: the export's bounded flush.
    session
        .audit
        .wait_exported(airlock_audit::otlp::SHUTDOWN_FLUSH);
    session.print_summary();
    status
}

/// `auto` resolved for this platform.
fn effective_mode(requested: JailMode) -> airlock_session::JailMode {
    match requested {
        JailMode::Auto if cfg!(target_os = "linux") => airlock_session::JailMode::Namespace,
        JailMode::Auto | JailMode::Env => airlock_session::JailMode::Env,
        JailMode::Namespace => airlock_session::JailMode::Namespace,
    }
}

/// `--jail env`: the command runs directly, pointed at an explicit proxy.
async fn run_env(
    args: &RunArgs,
    session: &Session,
    config: ProxyConfig,
    relaying: Option<Relaying>,
) -> Result<i32, RunError> {
    eprintln!(
        "airlock: --jail env is advisory: the command is only asked to use the proxy \
         (HTTP_PROXY/HTTPS_PROXY/ALL_PROXY) and programs can bypass it; use --jail namespace \
         to enforce the policy"
    );
    let proxy = Proxy::new(config)?;
    airlock_session::rotation::watch_proxy(&proxy);
    airlock_session::panic_redaction::install(&proxy);
    let _admin = session
        .serve_admin(&proxy, args.verbose)
        .await
        .map_err(RunError::AskWithoutAdmin)?;
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| RunError::Listen {
            addr: listen,
            source,
        })?;
    let address = listener.local_addr().map_err(RunError::ProxyAddress)?;
    let (stop, stopped) = watch::channel(false);
    let serving = tokio::spawn(proxy.serve(listener, stop_signal(stopped.clone())));

    let proxy_url = format!("http://{address}");
    let mut env = session.env.clone();
    for variable in PROXY_VARIABLES {
        if !variable.eq_ignore_ascii_case("NO_PROXY") {
            env.push((variable.into(), proxy_url.clone().into()));
        }
    }
    let Some((program, arguments)) = args.command.split_first() else {
        return Err(RunError::Setup(vec![
            "no command given: airlock run [FLAGS] -- CMD [ARGS...]".to_owned(),
        ]));
    };
    let signals = Signals::install().map_err(RunError::Signals)?;
    let mut command = tokio::process::Command::new(program);
    command.args(arguments).env_clear().envs(env);
    let relay_task = relaying.map(|relaying| {
        command.stdin(relaying.stdin).stdout(relaying.stdout);
        relaying.task
    });
    let spawned = command.spawn();
    // The command's ends of its pipes must not stay open here.
    drop(command);
    let status = match spawned {
        Err(source) => Err(RunError::Exec {
            program: program.to_string_lossy().into_owned(),
            source,
        }),
        Ok(mut child) => {
            let pid = child.id();
            // The pid is our child, not yet reaped (the waiting task holds it).
            let child_pid = pid
                .and_then(|pid| i32::try_from(pid).ok())
                .filter(|pid| *pid > 0)
                .map(nix::unistd::Pid::from_raw);
            let forward = move |signal: i32| {
                if let (Some(pid), Ok(signal)) = (child_pid, Signal::try_from(signal)) {
                    let _ = nix::sys::signal::kill(pid, signal);
                }
            };
            let waited = signals.forward_until(child.wait(), false, forward).await;
            waited.map(exit_status_of).map_err(RunError::Wait)
        }
    };
    Relaying::finish(relay_task).await;
    let _ = stop.send(true);
    let _ = tokio::time::timeout(DRAIN_TIMEOUT * 2, serving).await;
    status
}

/// The shell status of a finished process.
fn exit_status_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(i32::from(SETUP_FAILED))
}

/// What [`plan_jail`] keeps for after the command: the plan's summary, the working
/// directory and the end check.
#[cfg(target_os = "linux")]
struct JailPlan {
    summary: String,
    cwd: std::path::PathBuf,
    end_check: airlock_session::quarantine::EndCheck,
    /// The credential files' private parent directories (copied back at the end).
    private: airlock_session::private_parents::PrivateParents,
}

/// The jail's spec for this run (the filesystem planned, its notes said on stderr), and
/// what the run needs of the plan afterwards.
#[cfg(target_os = "linux")]
fn plan_jail(
    args: &RunArgs,
    session: &Session,
) -> Result<(airlock_jail::JailSpec, JailPlan), RunError> {
    let place = airlock_session::fs_confine::Place::current().map_err(RunError::Confine)?;
    let mut fs = airlock_session::fs_confine::plan(
        &session.policy.filesystem,
        &place,
        session.airlock_hidden.clone(),
    )
    .map_err(RunError::Confine)?;
    for note in &fs.notes {
        eprintln!("airlock: {note}");
    }
    let private = airlock_session::private_parents::PrivateParents::for_run(
        &session.credential_files,
        &mut fs,
    )
    .map_err(RunError::Confine)?;
    let credential_binds = private.binds(&session.credential_files);
    let private_dirs = private.jail_dirs();
    let plan = JailPlan {
        summary: fs.summary(),
        cwd: place.cwd.clone(),
        end_check: fs.end_check,
        private,
    };
    let spec = airlock_jail::JailSpec {
        argv: args.command.clone(),
        env: session.env.clone(),
        cwd: place.cwd,
        tcp_ports: session.tcp_ports(),
        hide_paths: fs.hidden,
        hide_if_present: [
            airlock_session::host_sockets::scan(),
            plan.private.root().map(PathBuf::from).into_iter().collect(),
        ]
        .concat(),
        bind_files: [
            airlock_session::env::bundle_binds(&session.bundle),
            credential_binds,
        ]
        .concat(),
        private_dirs,
        filesystem: Some(fs.confinement),
        stdio: None,
        terminal: None,
    };
    Ok((spec, plan))
}

/// The command's own pseudo-terminal, when airlock's standard streams are a terminal
/// (a background run's command reads /dev/null, said on stderr).
#[cfg(target_os = "linux")]
fn open_terminal() -> Result<Option<airlock_jail::Terminal>, RunError> {
    let terminal = |e: std::io::Error| RunError::Confine(format!("terminal: {e}"));
    if airlock_jail::Terminal::detach_background_input().map_err(terminal)? {
        eprintln!(
            "airlock: started in the background: the command's standard input is /dev/null \
             (it may not read the terminal you type in)"
        );
    }
    airlock_jail::Terminal::open().map_err(terminal)
}

/// `--jail namespace`: the command runs in the jail, every connection captured.
#[cfg(target_os = "linux")]
async fn run_namespace(
    args: &RunArgs,
    session: &Session,
    config: ProxyConfig,
    relaying: Option<Relaying>,
) -> Result<i32, RunError> {
    use airlock_jail::Jail;

    let proxy = Proxy::new(config)?;
    airlock_session::rotation::watch_proxy(&proxy);
    airlock_session::panic_redaction::install(&proxy);
    let _admin = session
        .serve_admin(&proxy, args.verbose)
        .await
        .map_err(RunError::AskWithoutAdmin)?;
    let (mut spec, plan) = plan_jail(args, session)?;
    // An interactive run gets a terminal of its own, relayed here; `airlock mcp` relays
    // the command's standard streams instead.
    let terminal = if relaying.is_none() {
        open_terminal()?
    } else {
        None
    };
    spec.terminal = terminal.as_ref().map(airlock_jail::Terminal::for_jail);
    let relay_task = Relaying::attach(relaying, &mut spec);
    // A credential file the jail binds over (projected, or hidden with a bind of its own)
    // outside a private parent directory, replaced on the host, stops the run
    // (docs/secrets.md).
    use airlock_session::replace_watch::{ReplaceWatch, bound_alone};
    let files = &session.credential_files;
    let hidden: Vec<PathBuf> = files.hidden.iter().map(|(_, p, _)| p.clone()).collect();
    let covered = plan.private.watched(
        &plan.private.binds(files),
        bound_alone(&hidden, &spec.hide_paths),
    );
    let replaced = ReplaceWatch::start(&covered, &session.audit).map_err(RunError::Confine)?;
    // The spec, and with it the command's ends of its pipes, is gone once this returns.
    let spawned = tokio::task::spawn_blocking(move || Jail::spawn(spec)).await;
    let mut jail = match spawned {
        Ok(Ok(jail)) => jail,
        // Every failure to build the jail is airlock's own (125), whatever its kind.
        Ok(Err(e)) => return Err(RunError::JailSetup(e)),
        Err(e) => return Err(RunError::Launcher(e)),
    };
    if let Some(watch) = &replaced {
        let killer = jail.signaller();
        watch.on_replaced(move || {
            let _ = killer.signal(Signal::SIGKILL as i32);
        });
    }
    if let Err(why) = jail.catch_all() {
        eprintln!(
            "airlock: note: {why}: inside, a connection to a port no rule names is refused \
             without an audit line (`airlock doctor`)"
        );
    }

    let (stop, stopped) = watch::channel(false);
    let served = match airlock_session::serve::serve_handed(
        std::mem::take(&mut jail.listeners),
        airlock_session::process_lookup::identifying(proxy, jail.pid(), &session.env),
        &session.audit,
        &stopped,
    ) {
        Ok(served) => served,
        Err(e) => {
            let _ = jail.kill();
            return Err(RunError::Confine(e));
        }
    };

    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            let _ = jail.kill();
            return Err(RunError::Signals(e));
        }
    };
    let terminal = match terminal.map(airlock_jail::Terminal::relay).transpose() {
        Ok(terminal) => terminal,
        Err(e) => {
            let _ = jail.kill();
            return Err(RunError::Confine(format!("terminal: {e}")));
        }
    };
    let resizing = terminal
        .as_ref()
        .map(|relay| resize_on_winch(relay.resizer()));
    let signaller = jail.signaller();
    let report = airlock_session::serve::Confinement {
        audit: session.audit.clone(),
        verbose: args.verbose,
        summary: plan.summary,
    };
    let running = tokio::task::spawn_blocking(move || {
        jail.start()?;
        report.started(jail.landlock_abi());
        jail.wait()
    });
    let forward = move |signal: i32| {
        let _ = signaller.signal(signal);
    };
    // The command has a session of its own: Ctrl-C at airlock's terminal (without a
    // relayed terminal) reaches only airlock, which passes it on.
    let status = match signals.forward_until(running, true, forward).await {
        Ok(Ok(exit)) => Ok(exit.shell_status()),
        Ok(Err(e)) => Err(RunError::jail(e, &args.command)),
        Err(e) => Err(RunError::Jailed(e)),
    };
    // Stopped by airlock (the message is said): 125.
    let status = match replaced.and_then(|watch| watch.replaced()) {
        Some(_) => Ok(i32::from(SETUP_FAILED)),
        None => status,
    };
    if status.as_ref().is_ok_and(|code| *code != 0) {
        note_hidden_temporary_paths(&args.command, &plan.cwd);
    }
    if let Some(resizing) = resizing {
        resizing.abort();
    }
    if let Some(relay) = terminal {
        let _ = tokio::task::spawn_blocking(move || relay.finish(Duration::from_secs(2))).await;
    }
    Relaying::finish(relay_task).await;
    let _ = stop.send(true);
    served.finish().await;
    // The jail is gone: what the command wrote in a writable private parent directory goes
    // back first (before the profile's state copy-back and the end check), then quarantine
    // what the command created that host tools would run.
    plan.private.copy_back(&plan.end_check, &session.audit);
    airlock_session::quarantine::finish(&plan.end_check, &session.audit, status)
}

/// After a failed command: a word on each path its arguments name under a temporary
/// directory that exists on the host but is private in the jail.
fn note_hidden_temporary_paths(argv: &[std::ffi::OsString], cwd: &std::path::Path) {
    for (path, tmp) in airlock_session::fs_confine::hidden_temporary_paths(argv, cwd) {
        eprintln!(
            "airlock: note: {} exists on the host, but the command sees a private, empty {tmp} \
             (put what the command needs in the working directory instead)",
            path.display()
        );
    }
}

/// Passes the user's window size on to the command's terminal at every `SIGWINCH`.
#[cfg(target_os = "linux")]
fn resize_on_winch(relay: airlock_jail::Resizer) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut changes) = signal(SignalKind::window_change()) else {
            return;
        };
        while changes.recv().await.is_some() {
            relay.resize();
        }
    })
}

/// Without Linux namespaces, `--jail namespace` cannot run.
#[cfg(not(target_os = "linux"))]
async fn run_namespace(
    _args: &RunArgs,
    _session: &Session,
    _config: ProxyConfig,
    _relaying: Option<Relaying>,
) -> Result<i32, RunError> {
    Err(RunError::NeedsLinux)
}
