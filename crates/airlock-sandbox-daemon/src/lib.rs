//! The daemon of one sandbox (`airlock sandbox daemon`, started by
//! `airlock_sandbox::Provider::ensure_running` with its [`DaemonConfig`] on standard input,
//! never by hand): it prepares the sandbox's session with `airlock-session`, holds the
//! policy and the real secret values in memory, builds the sandbox's confinement through
//! its provider, serves its only network exactly as `airlock run` does (transparent proxy
//! and DNS on sockets made inside the sandbox's network namespace), records the sandbox's
//! state, prints `ready`, and tears everything down on `SIGTERM`/`SIGINT` or when the
//! confinement disappears.
//!
//! What does not depend on the provider is the plan (`plan.rs`: session, workspace, the
//! environment of commands, the state record); what does is behind the daemon-side
//! provider trait (`DaemonProvider`: a local jail kept alive by a holder process, or a
//! docker container; `for_kind` is the one place a recorded `ProviderKind` becomes an
//! implementation, everything else asks the trait). A new provider implements that trait
//! here and `airlock_sandbox::Provider` (the client side: exec, teardown) in
//! `airlock-sandbox` (`airlock_sandbox::manage::provider` picks it there).
//!
//! Setup failures ([`DaemonError`]) are for the caller to print (to the daemon log, which
//! `create` shows); everything built so far is removed before they are returned.
//!
//! The crate sits above `airlock-session` (which itself uses `airlock-sandbox`'s state
//! root), so it cannot live in `airlock-sandbox` without a cycle between crates.

#![cfg(target_os = "linux")]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

mod docker;
mod local;
mod plan;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use airlock_proxy::Proxy;
use airlock_sandbox::ProviderKind;
use airlock_session::serve::Signals;
use tokio::sync::watch;

pub use airlock_sandbox::DaemonConfig;

use crate::plan::Plan;

/// The admin API's socket in the sandbox's control directory (`airlock watch --sandbox
/// NAME` attaches to it).
pub const ADMIN_SOCKET: &str = "admin.sock";

/// The arguments (after the binary) of the process that keeps a local sandbox's
/// namespaces alive: the binary runs [`hold`] for them.
pub const HOLD_ARGS: [&str; 2] = ["sandbox", "hold"];

/// What [`DaemonProvider::serve`] returns: a future borrowing the plan and the signals.
pub(crate) type Serving<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + 'a>>;

/// How one kind of confinement is built and served by the daemon.
pub(crate) trait DaemonProvider {
    /// Which provider this is (recorded in the state).
    fn kind(&self) -> ProviderKind;

    /// Where commands see the sandbox's workspace, whose host directory is
    /// `host_workspace`.
    fn workspace_inside(&self, host_workspace: &Path) -> PathBuf;

    /// Whether commands keep the creator's ordinary variables (`PATH`, `HOME`, ...).
    fn keeps_creator_variables(&self) -> bool;

    /// Variables the provider gives every command (after the session's, before the
    /// CA-trust variables).
    fn base_env(&self) -> Vec<(String, String)>;

    /// Where commands see the CA bundle whose host file is `bundle`.
    fn bundle_inside(&self, bundle: &Path) -> String;

    /// Builds the confinement, serves its network with `proxy`, records the sandbox
    /// ([`Plan::announce`]) and waits until `termination` or the confinement's end; then
    /// drains the proxy (`stop`) and removes what it built.
    fn serve<'a>(
        &'a self,
        plan: &'a Plan,
        proxy: Proxy,
        stop: &'a watch::Sender<bool>,
        termination: &'a mut Signals,
    ) -> Serving<'a>;
}

/// The daemon-side provider of `kind`.
pub(crate) fn for_kind(kind: ProviderKind) -> Box<dyn DaemonProvider> {
    match kind {
        ProviderKind::Local => Box::new(crate::local::Local),
        ProviderKind::Docker => Box::new(crate::docker::Container),
    }
}

/// Why the daemon could not build or serve its sandbox.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Signal handlers cannot be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// Problems found while preparing the sandbox's session, each its own line.
    #[error("{}", .0.join("\n"))]
    Setup(Vec<String>),
    /// The proxy could not be built from its configuration.
    #[error("{0}")]
    Proxy(#[from] airlock_proxy::SetupError),
    /// The sandbox could not be built or served.
    #[error("{0}")]
    Serve(String),
}

/// Builds and serves the sandbox `config` describes until it is told to stop or its
/// confinement ends (run it on a multi-threaded runtime: blocking work is handed off).
pub async fn serve(config: DaemonConfig) -> Result<(), DaemonError> {
    let mut termination = Signals::install().map_err(DaemonError::Signals)?;
    let provider = for_kind(config.options.provider);
    let (plan, proxy_config) =
        Plan::prepare(config, provider.as_ref()).map_err(DaemonError::Setup)?;
    let proxy = Proxy::new(proxy_config)?;
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
    let result = provider.serve(&plan, proxy, &stop, &mut termination).await;
    stop.send_replace(true);
    plan.session.audit.flush();
    result.map_err(DaemonError::Serve)
}

/// `airlock sandbox hold`: the process a local sandbox's namespaces are kept alive by;
/// it sleeps until it is killed.
pub fn hold() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
