//! `airlock proxy`: runs the intercepting proxy as a daemon until SIGTERM or SIGINT.
//!
//! Reads and validates everything first (policy, secrets, CA, audit destination, upstream
//! trust; `airlock_session::standalone`) and refuses to start on any error ([`ProxyError`]:
//! exit 1, each error on stderr); once bound it prints exactly `airlock: proxy listening
//! on ADDR` on stderr. On SIGTERM/SIGINT it stops accepting, drains in-flight requests
//! (bounded), flushes the audit log and exits 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use airlock_audit::AuditLog;
use airlock_proxy::Proxy;
use airlock_session::Upstream;
use airlock_session::standalone::{self, StandaloneConfig};

use crate::error::ProxyError;

use crate::policy_args::PolicyArgs;

/// Flags of `airlock proxy`.
#[derive(clap::Args)]
pub(crate) struct ProxyArgs {
    /// Policy sources and secrets.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Address to accept proxy connections on (port 0 picks a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Worker threads serving connections, 1 to 1024 (default: one fewer than the
    /// machine's cores, at least one).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Audit log destination: a file (appended to) or `-` for stdout.
    #[arg(long, value_name = "FILE|-")]
    pub log: Option<String>,
    /// Rotate the --log file before it grows beyond SIZE (`100M`, `1G`, bytes): FILE.1 ...
    /// FILE.5 keep the previous ones.
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
    /// CA certificate signing interception certificates (with --ca-key); default: the
    /// CA of `airlock ca path`, created if missing.
    #[arg(long, value_name = "F", requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The CA's private key (with --ca-cert).
    #[arg(long, value_name = "F", requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// Pin the upstream address of HOST (exempt from the private-address guard); curl's
    /// HOST:PORT:ADDR pins it on that port only. Repeatable.
    #[arg(long = "resolve", value_name = "HOST[:PORT]:ADDR")]
    pub resolve: Vec<String>,
    /// A PEM CA that upstream servers may be signed by, besides the system roots. Repeatable.
    #[arg(long = "upstream-ca", value_name = "F")]
    pub upstream_ca: Vec<PathBuf>,
    /// Write `NAME=SURROGATE` lines (mode 0600) for every secret to this file.
    #[arg(long = "surrogates-out", value_name = "F")]
    pub surrogates_out: Option<PathBuf>,
    /// Gateway mode: accept REDIRECTed or routed connections here (repeatable); the
    /// explicit `--listen` proxy is then not opened.
    #[arg(long = "transparent", value_name = "ADDR")]
    pub transparent: Vec<SocketAddr>,
    /// Gateway mode: answer the sandbox's DNS here, UDP and TCP (repeatable; needs
    /// --transparent).
    #[arg(long = "dns", value_name = "ADDR", requires = "transparent")]
    pub dns: Vec<SocketAddr>,
    /// Serve the admin API on `unix:PATH` (a socket of mode 0600) or a TCP address (which
    /// needs --admin-token-file).
    #[arg(long, value_name = "unix:PATH|ADDR")]
    pub admin: Option<airlock_control::Listen>,
    /// A file holding the admin API's bearer token (required on every call when given).
    #[arg(long = "admin-token-file", value_name = "F", requires = "admin")]
    pub admin_token_file: Option<PathBuf>,
    /// `enforce` refuses what the policy refuses; `report` lets through what is refused
    /// only for host, method or path and logs it with `"would":"deny"`; `ask` holds such a
    /// request until it is answered through the admin API (or --ask-timeout passes).
    #[arg(long, value_name = "enforce|report|ask", default_value = "enforce", value_parser = crate::policy_args::parse_mode)]
    pub mode: airlock_policy::mode::Mode,
    /// In ask mode, how long a held request waits for its answer (`60s`, `2m`, `500ms`)
    /// before it is refused with `"asked":true`.
    #[arg(long = "ask-timeout", value_name = "DURATION", default_value = "60s", value_parser = crate::policy_args::parse_ask_timeout)]
    pub ask_timeout: std::time::Duration,
}

/// Runs the proxy until SIGTERM/SIGINT: 0 after a clean shutdown, `Err` (1) if it cannot
/// start.
pub(crate) fn run(args: ProxyArgs) -> Result<ExitCode, ProxyError> {
    crate::policy_args::set_hint_source(&args.policy.sources());
    let config = standalone::prepare(&args.standalone_config()).map_err(ProxyError::Setup)?;
    if args.mode == airlock_policy::mode::Mode::Ask && args.admin.is_none() {
        return Err(ProxyError::Setup(vec![
            "--mode ask needs --admin: asks are answered through the admin API".to_owned(),
        ]));
    }
    let token =
        airlock_session::admin::read_token(args.admin.as_ref(), args.admin_token_file.as_deref())
            .map_err(ProxyError::Setup)?;
    let threads = args.threads.map_or_else(default_threads, usize::from);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(ProxyError::Runtime)?;
    runtime.block_on(serve(args, config, token))
}

/// One worker thread fewer than the machine's cores, at least one: the proxy shares the
/// machine with the programs it serves, and every further worker adds hand-offs of tasks
/// between threads (docs/benchmarks.md, "One worker fewer than the cores").
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |cores| cores.get().saturating_sub(1).max(1))
}

/// Starts the proxy, its admin API and reloads, and serves until SIGTERM/SIGINT.
async fn serve(
    args: ProxyArgs,
    config: airlock_proxy::ProxyConfig,
    token: Option<String>,
) -> Result<ExitCode, ProxyError> {
    let listen = args.listen;
    let audit = config.audit.clone();
    let proxy = Proxy::new(config)?;
    airlock_session::admin::start(
        args.admin.as_ref(),
        &args.policy.sources(),
        &proxy,
        &audit,
        token.as_deref(),
    )
    .await
    .map_err(ProxyError::Admin)?;
    airlock_session::rotation::watch_proxy(&proxy);
    airlock_session::panic_redaction::install(&proxy);
    // Installed before anything is announced: a SIGTERM sent as soon as the
    // "listening" line appears must stop the proxy cleanly, not kill it.
    let signals = shutdown_signal().map_err(ProxyError::Signals)?;
    if !args.transparent.is_empty() {
        return run_gateway(&args, proxy, audit, signals).await;
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ProxyError::Listen {
            addr: listen,
            source,
        })?;
    let bound = listener.local_addr().unwrap_or(listen);
    eprintln!("airlock: proxy listening on {bound}");
    proxy.serve(listener, signals).await;
    Ok(ExitCode::SUCCESS)
}

/// Gateway mode: binds every `--transparent`/`--dns` address, then serves until
/// SIGTERM/SIGINT.
async fn run_gateway(
    args: &ProxyArgs,
    proxy: Proxy,
    audit: AuditLog,
    signals: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<ExitCode, ProxyError> {
    let sockets = airlock_session::gateway::GatewaySockets::bind(&args.transparent, &args.dns)
        .await
        .map_err(ProxyError::Gateway)?;
    sockets.announce();
    sockets.serve(proxy, audit, signals).await;
    Ok(ExitCode::SUCCESS)
}

impl ProxyArgs {
    /// The proxy's typed configuration.
    fn standalone_config(&self) -> StandaloneConfig {
        StandaloneConfig {
            sources: self.policy.sources(),
            upstream: Upstream {
                resolve: self.resolve.clone(),
                cas: self.upstream_ca.clone(),
            },
            log: self.log.clone(),
            audit_max_size: self.audit_max_size,
            audit_format: self.audit_format,
            audit_otlp: self.otlp.config(),
            ca: self.ca_cert.clone().zip(self.ca_key.clone()),
            surrogates_out: self.surrogates_out.clone(),
            transparent: !self.transparent.is_empty(),
            admin: self.admin.is_some(),
            mode: self.mode,
            ask_timeout: self.ask_timeout,
        }
    }
}

/// Completes on the first SIGTERM or SIGINT.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        eprintln!("airlock: shutting down");
    })
}
