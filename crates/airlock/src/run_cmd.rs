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
//! D-Bus...) is covered by `/dev/null` ([`crate::host_sockets`]). What remains: sockets
//! created on the host *after* the command started, and sockets elsewhere in the file
//! system (the rest of the tree stays visible, read-write as the user).
//!
//! Exit status: the command's own (128 + signal when killed); 126/127 when it cannot be
//! executed / is not found; 125 for any failure of airlock itself. While the command runs
//! `SIGINT` is ignored here (the terminal delivers it to the command directly) and
//! `SIGTERM`/`SIGHUP` are forwarded to it. When it ends, the proxy and DNS stop, the audit
//! log is flushed, and if anything was refused one summary line goes to stderr.
//!
//! `airlock mcp` runs the same session with a [`Relay`]: the command's standard input and
//! output are then pipes handed to the relay instead of airlock's own.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use airlock_audit::AuditLog;
use airlock_policy::model::SecretSource;
use airlock_policy::{CompiledPolicy, Policy};
use airlock_proxy::ca::{self, CertificateAuthority};
use airlock_proxy::upstream::parse_pin;
use airlock_proxy::{Proxy, ProxyConfig, TunnelRefusal};
use tokio::sync::watch;

use crate::policy_args::{PolicyArgs, split_format};

/// The exit status for every failure of airlock itself (the command was not started).
pub(crate) const SETUP_FAILED: u8 = 125;

/// How long in-flight connections get once the command has ended.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// System CA bundle paths: read for the system roots (first one found) and covered by
/// airlock's bundle inside the jail (every one that exists).
pub(crate) const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Variables that point TLS clients of common runtimes at a CA bundle.
pub(crate) const CA_BUNDLE_VARIABLES: [&str; 13] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
    "DENO_CERT",
    "HTTPLIB2_CA_CERTS",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "NIX_SSL_CERT_FILE",
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
];

/// Proxy variables: removed in namespace mode, set in env mode.
const PROXY_VARIABLES: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// How the command is confined.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JailMode {
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
pub struct UpstreamArgs {
    /// Pin the upstream address of HOST (exempt from the private-address guard). Repeatable.
    #[arg(long = "resolve", value_name = "HOST:ADDR")]
    pub resolve: Vec<String>,
    /// A PEM CA that upstream servers may be signed by, besides the system roots. Repeatable.
    #[arg(long = "upstream-ca", value_name = "F")]
    pub upstream_ca: Vec<PathBuf>,
}

/// Flags of `airlock run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Policy sources and secrets.
    #[command(flatten)]
    pub policy: PolicyArgs,
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
    #[arg(long = "audit-max-size", value_name = "SIZE", value_parser = airlock_audit::parse_size)]
    pub audit_max_size: Option<u64>,
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

/// Turns a command-line parse error into the process exit: for `airlock run` (and `mcp`) every usage
/// error is a failure of airlock itself (125, docs/contract.md §2); `--help`/`--version` and the
/// other subcommands keep clap's own statuses.
pub fn exit_on_parse_error(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let is_run = std::env::args_os()
        .skip(1)
        .find(|arg| !arg.to_string_lossy().starts_with('-'))
        .is_some_and(|arg| arg == "run" || arg == "mcp");
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if is_run && !informational {
        let _ = error.print();
        std::process::exit(i32::from(SETUP_FAILED));
    }
    error.exit()
}

/// Runs `airlock run` and returns the exit status.
pub fn run(args: RunArgs) -> ExitCode {
    run_with(args, None)
}

/// Runs a session as `airlock run` does; with a `relay`, the command's standard input and
/// output are pipes handed to it instead of airlock's own (`airlock mcp`).
pub(crate) fn run_with(args: RunArgs, relay: Option<Box<dyn Relay>>) -> ExitCode {
    on_runtime(async {
        let status = run_session(args, relay).await;
        ExitCode::from(u8::try_from(status).unwrap_or(SETUP_FAILED))
    })
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
    fn start(relay: Option<Box<dyn Relay>>, session: &Session) -> Result<Option<Self>, String> {
        let Some(relay) = relay else {
            return Ok(None);
        };
        let pipes = std::io::pipe().and_then(|stdin| Ok((stdin, std::io::pipe()?)));
        let ((stdin, to_command), (from_command, stdout)) =
            pipes.map_err(|e| format!("cannot create the command's pipes: {e}"))?;
        let task = relay.start(session, to_command.into(), from_command.into())?;
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

/// Runs `work` on a two-thread runtime (125 if there is none); blocking tasks (a jail
/// waiting for a stray process) get 100 ms, then the exit goes on without them.
pub(crate) fn on_runtime(work: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("airlock: cannot start the async runtime: {e}");
            return ExitCode::from(SETUP_FAILED);
        }
    };
    let status = runtime.block_on(work);
    runtime.shutdown_timeout(Duration::from_millis(100));
    status
}

async fn run_session(args: RunArgs, relay: Option<Box<dyn Relay>>) -> i32 {
    let mode = effective_mode(args.jail);
    let (session, config) = match Session::prepare(&args, mode) {
        Ok(prepared) => prepared,
        Err(errors) => {
            for error in errors {
                eprintln!("airlock: {error}");
            }
            return i32::from(SETUP_FAILED);
        }
    };
    let relaying = match Relaying::start(relay, &session) {
        Ok(relaying) => relaying,
        Err(error) => {
            eprintln!("airlock: {error}");
            return i32::from(SETUP_FAILED);
        }
    };
    let status = match mode {
        JailMode::Env => run_env(&args, &session, config, relaying).await,
        _ => run_namespace(&args, &session, config, relaying).await,
    };
    session.audit.flush();
    session.print_summary();
    status
}

/// `auto` resolved for this platform.
fn effective_mode(requested: JailMode) -> JailMode {
    match requested {
        JailMode::Auto if cfg!(target_os = "linux") => JailMode::Namespace,
        JailMode::Auto => JailMode::Env,
        other => other,
    }
}

/// Everything read and checked before the command starts.
pub(crate) struct Session {
    /// The combined policy.
    pub(crate) policy: Policy,
    /// The command's environment (before mode-specific proxy variables).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// The CA bundle given to the command; its directory is removed when the session ends.
    pub(crate) bundle: PathBuf,
    _bundle_dir: tempfile::TempDir,
    /// airlock's own paths the command must not see (state, CA, policies, secret files,
    /// logs, agent sockets), besides the policy's `filesystem` rules.
    pub(crate) airlock_hidden: Vec<airlock_policy::filesystem::Entry>,
    /// The audit log and where it goes.
    pub(crate) audit: AuditLog,
    log: LogTarget,
    /// The directory of the run's admin socket (hidden from the jail), or why there is none.
    run_dir: Result<PathBuf, String>,
}

/// Where the audit log goes, and where this session's lines start in it.
enum LogTarget {
    /// Standard output: lines cannot be read back for the summary.
    Stdout,
    /// A file; this session's lines start at `start`.
    File { path: PathBuf, start: u64 },
}

impl Session {
    /// Reads and checks everything; returns the session and the proxy's configuration.
    pub(crate) fn prepare(
        args: &RunArgs,
        mode: JailMode,
    ) -> Result<(Session, ProxyConfig), Vec<String>> {
        let policy = args.policy.load()?;
        if args.policy.selection.is_empty() {
            eprintln!("airlock: no --policy and no --allow: all network access is refused");
        } else if policy.network.allow.is_empty() {
            eprintln!("airlock: the policy has no allow rule: all network access is refused");
        }
        let compiled = CompiledPolicy::compile(&policy).map_err(|e| vec![e.to_string()])?;
        let values = crate::secret_sources::read_all(&policy.secrets)?;
        let real_values: Vec<String> = values.iter().map(|(_, value)| value.clone()).collect();
        let credentials =
            airlock_credentials::Credentials::new(values).map_err(|e| vec![e.to_string()])?;
        let surrogates = credentials.surrogates();

        let mut errors = Vec::new();
        let mut resolve = HashMap::new();
        for spec in &args.upstream.resolve {
            match parse_pin(spec) {
                Ok((name, ip)) => {
                    resolve.insert(name, ip);
                }
                Err(e) => errors.push(format!("--resolve {spec}: {e}")),
            }
        }
        for ca_file in &args.upstream.upstream_ca {
            if !ca_file.is_file() {
                errors.push(format!("--upstream-ca {}: no such file", ca_file.display()));
            }
        }
        let ca_dir = ca::default_dir().map_err(|e| vec![e.to_string()])?;
        let ca = ca::init(&ca_dir, false)
            .and_then(|_| CertificateAuthority::load_dir(&ca_dir))
            .map_err(|e| vec![e.to_string()])?;
        let (audit, log) =
            open_log(args.log.as_deref(), &ca_dir, args.audit_max_size).map_err(|e| vec![e])?;
        if !errors.is_empty() {
            return Err(errors);
        }

        let bundle_dir = tempfile::Builder::new()
            .prefix("airlock-run-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .map_err(|e| vec![format!("cannot create a private directory: {e}")])?;
        let bundle = bundle_dir.path().join("ca-bundle.pem");
        write_bundle(&bundle, ca.cert_pem())
            .map_err(|e| vec![format!("cannot write the CA bundle: {e}")])?;

        let env = command_env(&policy, &real_values, &surrogates, &bundle, mode);
        let mut airlock_hidden = airlock_paths(args, &policy, &ca_dir, &log);
        let run_dir = crate::run_socket::ensure_runtime_dir();
        if let Ok(dir) = &run_dir {
            airlock_hidden.push(airlock_policy::filesystem::Entry {
                path: dir.clone(),
                why: "the admin sockets of airlock runs".to_owned(),
            });
        }

        let mut config = ProxyConfig::new(compiled, ca, credentials, audit.clone());
        config.resolve = resolve;
        config.upstream_cas = args.upstream.upstream_ca.clone();
        config.tunnel_refusal = TunnelRefusal::InsideTls;
        config.limits.drain_timeout = DRAIN_TIMEOUT;
        config.mode = args.mode;
        config.asks = crate::policy_args::asks(args.ask_timeout);
        crate::policy_args::announce_mode(args.mode);
        let session = Session {
            policy,
            env,
            bundle,
            _bundle_dir: bundle_dir,
            airlock_hidden,
            audit,
            log,
            run_dir,
        };
        Ok((session, config))
    }

    /// The TCP ports captured in the jail: 80, 443 and every port a rule names (53 is the
    /// jail's own).
    pub(crate) fn tcp_ports(&self) -> Vec<u16> {
        let mut ports = vec![80, 443];
        for rule in &self.policy.network.allow {
            ports.extend_from_slice(rule.effective_ports());
        }
        ports.retain(|port| *port != 53 && *port != 0);
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// One stderr line when anything was refused (file logs only).
    fn print_summary(&self) {
        let LogTarget::File { path, start } = &self.log else {
            return;
        };
        let Ok(text) = read_from(path, *start) else {
            return;
        };
        let would = count_would_deny(&text);
        if would > 0 {
            eprintln!(
                "airlock: report mode: {would} {} would have been refused — `airlock policy \
                 suggest {}` prints allow rules for them",
                if would == 1 { "request" } else { "requests" },
                path.display()
            );
        }
        let refusals = count_refusals(&text);
        let total: u64 = refusals.values().sum();
        if total == 0 {
            return;
        }
        let mut by_count: Vec<(&String, &u64)> = refusals.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut shown: Vec<String> = by_count
            .iter()
            .take(3)
            .map(|(host, count)| format!("{host} ×{count}"))
            .collect();
        if by_count.len() > 3 {
            shown.push("...".to_owned());
        }
        let noun = if total == 1 { "request" } else { "requests" };
        eprintln!(
            "airlock: {total} {noun} refused ({}) — see {}",
            shown.join(", "),
            path.display()
        );
    }
}

/// Opens the audit log: `--log` as given, or a new file under `<ca_dir>/logs/`, rotated
/// beyond `max_size` bytes. A rotated `--log` file's directory must not hold the working
/// directory: it is hidden from the command ([`airlock_paths`]).
fn open_log(
    dest: Option<&str>,
    ca_dir: &Path,
    max_size: Option<u64>,
) -> Result<(AuditLog, LogTarget), String> {
    let path = match dest {
        Some("-") => {
            let audit = AuditLog::open("-").map_err(|e| format!("--log -: {e}"))?;
            return Ok((audit, LogTarget::Stdout));
        }
        Some(file) => PathBuf::from(file),
        None => {
            let logs = ca_dir.join("logs");
            std::fs::create_dir_all(&logs)
                .map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            logs.join(format!("run-{stamp}-{}.jsonl", std::process::id()))
        }
    };
    let text = path
        .to_str()
        .ok_or_else(|| format!("--log {}: not a UTF-8 path", path.display()))?;
    let options = airlock_audit::LogOptions { max_size };
    let audit = AuditLog::open_with(text, options).map_err(|e| format!("--log {text}: {e}"))?;
    let start = std::fs::metadata(&path).map_or(0, |m| m.len());
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    if max_size.is_some() && dest.is_some() {
        check_rotated_log_dir(&path)?;
    }
    Ok((audit, LogTarget::File { path, start }))
}

/// A rotated log's directory is hidden from the command (the files rotation creates would
/// otherwise show in it): refused when it holds the working directory.
fn check_rotated_log_dir(log: &Path) -> Result<(), String> {
    let dir = log.parent().unwrap_or(Path::new("/"));
    let cwd = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    if cwd.starts_with(dir) {
        return Err(format!(
            "--audit-max-size: the log's directory {} holds the working directory and cannot \
             be hidden from the command; put the rotated log in a directory of its own",
            dir.display()
        ));
    }
    Ok(())
}

/// The log's text after `start` (this session's lines).
fn read_from(path: &Path, start: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// Requests that report mode let through (`"would":"deny"`; a folded line counts for its
/// `count`).
fn count_would_deny(text: &str) -> u64 {
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|value| value.get("would").and_then(|w| w.as_str()) == Some("deny"))
        .map(|value| {
            value
                .get("count")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(1)
        })
        .sum()
}

/// Refusals per host (or DNS name) in `text`'s log lines.
fn count_refusals(text: &str) -> BTreeMap<String, u64> {
    let mut refusals = BTreeMap::new();
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if value.get("decision").and_then(|d| d.as_str()) != Some("deny") {
            continue;
        }
        let host = value
            .get("host")
            .or_else(|| value.get("name"))
            .and_then(|h| h.as_str())
            .map(str::to_owned)
            .or_else(|| stdio_mcp_label(&value))
            .unwrap_or_else(|| "?".to_owned());
        let count = value.get("count").and_then(serde_json::Value::as_u64);
        *refusals.entry(host).or_insert(0) += count.unwrap_or(1);
    }
    refusals
}

/// `mcp SERVER: TOOL` for a refused call to a stdio MCP server (its line has no host).
fn stdio_mcp_label(value: &serde_json::Value) -> Option<String> {
    let server = value.get("server")?.as_str()?;
    let tool = value.get("tool").and_then(|t| t.as_str()).unwrap_or("?");
    Some(format!("mcp {server}: {tool}"))
}

/// Writes the system roots (first system bundle found) followed by the airlock CA.
fn write_bundle(path: &Path, ca_pem: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::new();
    if let Some(system) = SYSTEM_BUNDLES
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
    {
        text.push_str(&system);
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    text.push_str("# airlock interception CA\n");
    text.push_str(ca_pem);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// The command's environment: airlock's own minus proxy variables and anything holding a
/// real secret, plus surrogates, `AIRLOCK=1` and the CA-trust variables.
fn command_env(
    policy: &Policy,
    real_values: &[String],
    surrogates: &[(String, String)],
    bundle: &Path,
    mode: JailMode,
) -> Vec<(OsString, OsString)> {
    let source_vars: Vec<&str> = policy
        .secrets
        .iter()
        .filter_map(|secret| match &secret.source {
            SecretSource::Env(var) => Some(var.as_str()),
            _ => None,
        })
        .collect();
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, value)| {
            let name_text = name.to_string_lossy();
            if source_vars.contains(&name_text.as_ref())
                || PROXY_VARIABLES.contains(&name_text.as_ref())
                || CA_BUNDLE_VARIABLES.contains(&name_text.as_ref())
                || name_text == "AIRLOCK"
            {
                return false;
            }
            if mode == JailMode::Namespace
                && (name_text == "SSH_AUTH_SOCK" || name_text == "GPG_AGENT_INFO")
            {
                return false;
            }
            let value = value.to_string_lossy();
            !real_values
                .iter()
                .any(|real| !real.is_empty() && value.contains(real.as_str()))
        })
        .filter(|(name, _)| {
            !surrogates
                .iter()
                .any(|(secret, _)| name.to_string_lossy() == *secret)
        })
        .collect();
    for (name, surrogate) in surrogates {
        env.push((name.into(), surrogate.into()));
    }
    env.push(("AIRLOCK".into(), "1".into()));
    for variable in CA_BUNDLE_VARIABLES {
        env.push((variable.into(), bundle.as_os_str().to_owned()));
    }
    env
}

/// airlock's own paths that the command must never see, whatever `filesystem.readable`
/// says: its CA and state directories, the policy files, file sources of secrets, the
/// audit log and the agent sockets.
fn airlock_paths(
    args: &RunArgs,
    policy: &Policy,
    ca_dir: &Path,
    log: &LogTarget,
) -> Vec<airlock_policy::filesystem::Entry> {
    let entry = |path: PathBuf, why: &str| airlock_policy::filesystem::Entry {
        path,
        why: why.to_owned(),
    };
    let mut entries = vec![entry(ca_dir.to_owned(), "airlock's CA and state directory")];
    for root in airlock_state_roots() {
        entries.push(entry(root, "airlock's state directory (sandboxes)"));
    }
    for spec in &args.policy.selection.policies {
        if let Ok((_, path)) = split_format(spec) {
            entries.push(entry(PathBuf::from(path), "a policy file of this run"));
        }
    }
    for secret in &policy.secrets {
        if let SecretSource::File(path) = &secret.source {
            entries.push(entry(path.clone(), "the file source of a secret"));
        }
    }
    if let LogTarget::File { path, .. } = log {
        entries.push(entry(path.clone(), "the audit log"));
        if args.audit_max_size.is_some()
            && args.log.is_some()
            && let Some(dir) = path.parent()
        {
            entries.push(entry(dir.to_owned(), "the rotated audit log's directory"));
        }
    }
    if let Some(runtime_dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        entries.push(entry(
            PathBuf::from(runtime_dir),
            "the runtime directory (agent sockets)",
        ));
    }
    entries.push(entry(
        PathBuf::from("/tmp/.X11-unix"),
        "the X server's sockets",
    ));
    for variable in ["SSH_AUTH_SOCK", "GPG_AGENT_INFO"] {
        if let Some(socket) = std::env::var_os(variable) {
            let socket = PathBuf::from(socket);
            // GPG_AGENT_INFO is `PATH:PID:1`.
            let path = socket
                .to_str()
                .and_then(|text| text.split(':').next())
                .map_or(socket.clone(), PathBuf::from);
            entries.push(entry(path, "an agent socket"));
        }
    }
    entries
}

/// Where airlock keeps sandboxes and other state (hidden in every jail).
pub(crate) fn airlock_state_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(root) = airlock_sandbox::state::default_root() {
        if let Some(parent) = root.parent().filter(|p| p.ends_with("airlock")) {
            roots.push(parent.to_owned());
        }
        roots.push(root);
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        roots.push(PathBuf::from(&home).join(".config/airlock"));
        roots.push(PathBuf::from(&home).join(".local/state/airlock"));
        roots.push(PathBuf::from(home).join(".local/share/airlock"));
    }
    roots
}

/// Completes when the proxy and DNS must stop.
pub(crate) async fn stop_signal(mut receiver: watch::Receiver<bool>) {
    // An error means the sender is gone: stopping as well.
    let _ = receiver.wait_for(|stop| *stop).await;
}

/// Serves the run's admin API on its socket (docs/contract.md "Admin API"). Without it ask
/// mode cannot be answered: then the run does not start (125); in other modes a warning.
async fn serve_admin(
    args: &RunArgs,
    session: &Session,
    proxy: &Proxy,
) -> Result<Option<crate::run_socket::SocketFile>, i32> {
    let served = match &session.run_dir {
        Ok(dir) => crate::admin::serve_run(&args.policy, proxy, &session.audit, dir).await,
        Err(e) => Err(e.clone()),
    };
    let ask = args.mode == airlock_policy::mode::Mode::Ask;
    match served {
        Ok(socket) => {
            if ask || args.verbose {
                eprintln!(
                    "airlock: admin API listening on unix:{}",
                    socket.0.display()
                );
            }
            Ok(Some(socket))
        }
        Err(e) if ask => {
            eprintln!("airlock: ask mode needs the run's admin API: {e}");
            Err(i32::from(SETUP_FAILED))
        }
        Err(e) => {
            eprintln!("airlock: warning: this run has no admin API: {e}");
            Ok(None)
        }
    }
}

/// `--jail env`: the command runs directly, pointed at an explicit proxy.
async fn run_env(
    args: &RunArgs,
    session: &Session,
    config: ProxyConfig,
    relaying: Option<Relaying>,
) -> i32 {
    eprintln!(
        "airlock: --jail env is advisory: the command is only asked to use the proxy \
         (HTTP_PROXY/HTTPS_PROXY/ALL_PROXY) and programs can bypass it; use --jail namespace \
         to enforce the policy"
    );
    let proxy = match Proxy::new(config) {
        Ok(proxy) => proxy,
        Err(e) => {
            eprintln!("airlock: {e}");
            return i32::from(SETUP_FAILED);
        }
    };
    crate::rotation::watch_proxy(&proxy);
    crate::panic_redaction::install(&proxy);
    let _admin = match serve_admin(args, session, &proxy).await {
        Ok(socket) => socket,
        Err(status) => return status,
    };
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("airlock: cannot listen on {listen}: {e}");
            return i32::from(SETUP_FAILED);
        }
    };
    let address = match listener.local_addr() {
        Ok(address) => address,
        Err(e) => {
            eprintln!("airlock: cannot read the proxy's address: {e}");
            return i32::from(SETUP_FAILED);
        }
    };
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
        return i32::from(SETUP_FAILED);
    };
    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("airlock: cannot install signal handlers: {e}");
            return i32::from(SETUP_FAILED);
        }
    };
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
        Err(e) => {
            eprintln!("airlock: cannot run {}: {e}", program.to_string_lossy());
            if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            }
        }
        Ok(mut child) => {
            let pid = child.id();
            let forward = move |signal: i32| {
                if let Some(pid) = pid.and_then(|pid| libc::pid_t::try_from(pid).ok()) {
                    // SAFETY: kill has no memory-safety preconditions; the pid is our child,
                    // not yet reaped (the waiting task holds it).
                    unsafe {
                        libc::kill(pid, signal);
                    }
                }
            };
            let waited = signals.forward_until(child.wait(), forward).await;
            match waited {
                Ok(status) => exit_status_of(status),
                Err(e) => {
                    eprintln!("airlock: waiting for the command failed: {e}");
                    i32::from(SETUP_FAILED)
                }
            }
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

/// `SIGINT`, `SIGTERM` and `SIGHUP`, caught from the moment they are installed (a signal
/// arriving before anyone waits is kept). `airlock run` ignores `SIGINT` and forwards the
/// other two to its command; the sandbox daemon stops on any of them.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Completes when any of the three arrives.
    pub(crate) async fn any(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            _ = self.hangup.recv() => {}
        }
    }

    /// Awaits `done`, forwarding `SIGTERM`/`SIGHUP` with `forward` meanwhile.
    async fn forward_until<T>(
        mut self,
        done: impl std::future::Future<Output = T>,
        forward: impl Fn(i32),
    ) -> T {
        tokio::pin!(done);
        loop {
            tokio::select! {
                result = &mut done => return result,
                _ = self.interrupt.recv() => {}
                _ = self.terminate.recv() => forward(libc::SIGTERM),
                _ = self.hangup.recv() => forward(libc::SIGHUP),
            }
        }
    }
}

/// `--jail namespace`: the command runs in the jail, every connection captured.
#[cfg(target_os = "linux")]
async fn run_namespace(
    args: &RunArgs,
    session: &Session,
    config: ProxyConfig,
    relaying: Option<Relaying>,
) -> i32 {
    use airlock_jail::{Jail, JailSpec};

    let proxy = match Proxy::new(config) {
        Ok(proxy) => proxy,
        Err(e) => {
            eprintln!("airlock: {e}");
            return i32::from(SETUP_FAILED);
        }
    };
    crate::rotation::watch_proxy(&proxy);
    crate::panic_redaction::install(&proxy);
    let _admin = match serve_admin(args, session, &proxy).await {
        Ok(socket) => socket,
        Err(status) => return status,
    };
    let place = crate::fs_confine::Place::current();
    let fs = place.and_then(|place| {
        let plan = crate::fs_confine::plan(
            &session.policy.filesystem,
            &place,
            session.airlock_hidden.clone(),
        )?;
        Ok((place, plan))
    });
    let (place, fs) = match fs {
        Ok(done) => done,
        Err(e) => {
            eprintln!("airlock: {e}");
            return i32::from(SETUP_FAILED);
        }
    };
    let summary = fs.summary();
    let mut spec = JailSpec {
        argv: args.command.clone(),
        env: session.env.clone(),
        cwd: place.cwd,
        tcp_ports: session.tcp_ports(),
        hide_paths: fs.hidden,
        hide_if_present: crate::host_sockets::scan(),
        bind_files: bundle_binds(&session.bundle),
        filesystem: Some(fs.confinement),
        stdio: None,
    };
    let relay_task = Relaying::attach(relaying, &mut spec);
    // The spec, and with it the command's ends of its pipes, is gone once this returns.
    let spawned = tokio::task::spawn_blocking(move || Jail::spawn(spec)).await;
    let mut jail = match spawned {
        Ok(Ok(jail)) => jail,
        Ok(Err(e)) => {
            eprintln!("airlock: {e}");
            return i32::from(SETUP_FAILED);
        }
        Err(e) => {
            eprintln!("airlock: the jail launcher failed: {e}");
            return i32::from(SETUP_FAILED);
        }
    };

    let (stop, stopped) = watch::channel(false);
    let served = match serve_handed(
        std::mem::take(&mut jail.listeners),
        proxy,
        &session.audit,
        &stopped,
    ) {
        Ok(served) => served,
        Err(e) => {
            eprintln!("airlock: {e}");
            let _ = jail.kill();
            return i32::from(SETUP_FAILED);
        }
    };

    let signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("airlock: cannot install signal handlers: {e}");
            let _ = jail.kill();
            return i32::from(SETUP_FAILED);
        }
    };
    let signaller = jail.signaller();
    let report = Confinement {
        audit: session.audit.clone(),
        verbose: args.verbose,
        summary,
    };
    let running = tokio::task::spawn_blocking(move || {
        jail.start()?;
        report.started(jail.landlock_abi());
        jail.wait()
    });
    let forward = move |signal: i32| {
        let _ = signaller.signal(signal);
    };
    let status = match signals.forward_until(running, forward).await {
        Ok(Ok(exit)) => exit.shell_status(),
        Ok(Err(e)) => {
            let status = e.exit_status();
            eprintln!("airlock: {e}");
            status
        }
        Err(e) => {
            eprintln!("airlock: the jail failed: {e}");
            i32::from(SETUP_FAILED)
        }
    };
    Relaying::finish(relay_task).await;
    let _ = stop.send(true);
    served.finish().await;
    status
}

/// The CA bundle over each system bundle path the host has, and at its own path (the
/// CA-trust variables name it; it lies in the host's /tmp, which the jail replaces).
pub(crate) fn bundle_binds(bundle: &Path) -> Vec<(PathBuf, PathBuf)> {
    SYSTEM_BUNDLES
        .iter()
        .map(Path::new)
        .filter(|path| path.is_file())
        .map(Path::to_owned)
        .chain([bundle.to_owned()])
        .map(|path| (bundle.to_owned(), path))
        .collect()
}

/// How a started jail is confined: said on stderr with `--verbose`, and in the audit's
/// start line (`kind: policy`, message `start ...`).
pub(crate) struct Confinement {
    /// The audit log of the run.
    pub(crate) audit: AuditLog,
    /// Whether to say it on stderr.
    pub(crate) verbose: bool,
    /// The filesystem plan in one line.
    pub(crate) summary: String,
}

impl Confinement {
    /// Records the layers once the command started (`landlock_abi` from the jail).
    pub(crate) fn started(&self, landlock_abi: Option<u8>) {
        let landlock = match landlock_abi {
            Some(0) | None => "landlock unavailable".to_owned(),
            Some(abi) => format!("landlock v{abi}"),
        };
        let layers = format!(
            "jail: user, network, mount, pid, ipc and uts namespaces; filesystem: \
             read-only mounts + {landlock}; {}",
            self.summary
        );
        if self.verbose {
            eprintln!("airlock: {layers}");
        }
        self.audit.record(airlock_audit::AuditEvent {
            kind: airlock_audit::Kind::Policy,
            decision: airlock_audit::Decision::Allow,
            message: Some(format!("start {layers}")),
            ..airlock_audit::AuditEvent::default()
        });
    }
}

/// The tasks serving a jail's handed listeners.
#[cfg(target_os = "linux")]
pub(crate) struct Served {
    proxy: tokio::task::JoinHandle<()>,
    services: tokio::task::JoinSet<()>,
}

#[cfg(target_os = "linux")]
impl Served {
    /// Waits for the proxy's drain (after the stop signal was sent), then ends DNS.
    pub(crate) async fn finish(mut self) {
        let _ = tokio::time::timeout(DRAIN_TIMEOUT * 2, self.proxy).await;
        self.services.abort_all();
        while self.services.join_next().await.is_some() {}
    }
}

/// Serves sockets handed over from a jail (or a container's network namespace): port 53
/// (UDP and TCP) by `airlock-dns` with one name map, every other TCP port by the proxy in
/// transparent mode, until `stopped` turns true.
#[cfg(target_os = "linux")]
pub(crate) fn serve_handed(
    listeners: Vec<airlock_jail::HandedListener>,
    proxy: Proxy,
    audit: &AuditLog,
    stopped: &watch::Receiver<bool>,
) -> Result<Served, String> {
    use airlock_jail::Protocol;
    let names = airlock_dns::NameMap::new(airlock_dns::default_pool());
    let mut proxy_listeners = Vec::new();
    let mut services = tokio::task::JoinSet::new();
    for handed in listeners {
        let port = handed.addr.port();
        match handed.proto {
            Protocol::Udp => {
                let Ok(socket) = handed.into_udp_socket() else {
                    continue;
                };
                let serving = airlock_dns::serve_handed_udp(socket, names.clone(), audit.clone());
                services.spawn(crate::gateway::until_stopped(
                    serving,
                    stop_signal(stopped.clone()),
                ));
            }
            Protocol::Tcp => {
                let listener = handed
                    .into_tcp_listener()
                    .map_err(|_| std::io::Error::other("not a TCP socket"))
                    .and_then(|listener| {
                        listener.set_nonblocking(true)?;
                        tokio::net::TcpListener::from_std(listener)
                    })
                    .map_err(|e| format!("cannot serve the sandbox's port {port}: {e}"))?;
                if port == 53 {
                    let serving = airlock_dns::serve_tcp(listener, names.clone(), audit.clone());
                    services.spawn(crate::gateway::until_stopped(
                        serving,
                        stop_signal(stopped.clone()),
                    ));
                } else {
                    proxy_listeners.push(listener);
                }
            }
        }
    }
    let proxy = tokio::spawn(proxy.serve_transparent(
        proxy_listeners,
        crate::gateway::pool_lookup(&names),
        airlock_proxy::Capture::Jail,
        stop_signal(stopped.clone()),
    ));
    Ok(Served { proxy, services })
}

/// Without Linux namespaces, `--jail namespace` cannot run.
#[cfg(not(target_os = "linux"))]
async fn run_namespace(
    _args: &RunArgs,
    _session: &Session,
    _config: ProxyConfig,
    _relaying: Option<Relaying>,
) -> i32 {
    eprintln!("airlock: --jail namespace needs Linux; choose --jail env");
    i32::from(SETUP_FAILED)
}

#[cfg(test)]
mod tests {
    use super::count_refusals;

    #[test]
    fn refusals_are_named_by_host_dns_name_or_stdio_server() {
        let log = [
            r#"{"kind":"http","decision":"deny","host":"evil.example","count":3}"#,
            r#"{"kind":"dns","decision":"deny","name":"x.example"}"#,
            r#"{"kind":"mcp","decision":"deny","server":"fs","tool":"exec"}"#,
            r#"{"kind":"mcp","decision":"allow","server":"fs","tool":"read_file"}"#,
            "not json",
        ]
        .join("\n");
        let refusals = count_refusals(&log);
        let listed: Vec<(&str, u64)> = refusals.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            listed,
            vec![("evil.example", 3), ("mcp fs: exec", 1), ("x.example", 1)]
        );
    }
}
