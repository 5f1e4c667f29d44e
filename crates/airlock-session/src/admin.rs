//! Wiring of the control plane into `airlock proxy`: the policy store (always, so that
//! SIGHUP and file/git changes reload), the audit tap feeding the event hub, and the admin
//! API when `--admin` is given; and into `airlock run`, whose admin API is always served
//! on its own socket ([`serve_run`], [`crate::run_socket`]). Both answer the asks of
//! `--mode ask`, `save` writing to the first `--policy` file.

use std::sync::Arc;

use airlock_audit::AuditLog;
use airlock_control::pending::{AskRoutes, SaveTarget};
use airlock_control::{Admin, Hub, Listen, PolicyStore};
use airlock_proxy::Proxy;

use crate::sources::PolicySources;

/// Reads `--admin-token-file` (trimmed; empty is an error) and refuses a TCP `--admin`
/// without it.
pub fn read_token(
    admin: Option<&Listen>,
    token_file: Option<&std::path::Path>,
) -> Result<Option<String>, Vec<String>> {
    let token = match token_file {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| vec![format!("--admin-token-file {}: {e}", path.display())])?;
            let token = text.trim().to_owned();
            if token.is_empty() {
                return Err(vec![format!(
                    "--admin-token-file {}: the file is empty",
                    path.display()
                )]);
            }
            Some(token)
        }
    };
    if let (Some(Listen::Tcp(addr)), None) = (admin, &token) {
        return Err(vec![
            airlock_control::AdminError::TcpWithoutToken(*addr).to_string(),
        ]);
    }
    Ok(token)
}

/// Starts policy reloading and, with `--admin`, the admin API (its address on stderr as
/// `airlock: admin API listening on ADDR`).
pub async fn start(
    admin_listen: Option<&Listen>,
    policy: &PolicySources,
    proxy: &Proxy,
    audit: &AuditLog,
    token: Option<&str>,
) -> Result<(), String> {
    let store = Arc::new(PolicyStore::new(proxy.policy().clone(), audit.clone()));
    crate::policy_reload::watch(policy.clone(), store.clone())
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    if let Some(listen) = admin_listen {
        let admin = build(policy, proxy, audit, store.clone(), token);
        let bound = admin.bind(listen).await.map_err(|e| e.to_string())?;
        let shown = match (&bound, listen) {
            (airlock_control::server::Bound::Tcp(listener), _) => listener
                .local_addr()
                .map_or_else(|_| format!("{listen:?}"), |a| a.to_string()),
            (_, Listen::Unix(path)) => format!("unix:{}", path.display()),
            (_, Listen::Tcp(addr)) => addr.to_string(),
        };
        eprintln!("airlock: admin API listening on {shown}");
        tokio::spawn(admin.serve(bound));
    }
    Ok(())
}

/// The admin API's state: the event hub fed by the audit tap and by the asks, and the ask
/// routes saving to the first `--policy` file.
fn build(
    policy: &PolicySources,
    proxy: &Proxy,
    audit: &AuditLog,
    store: Arc<PolicyStore>,
    token: Option<&str>,
) -> Arc<Admin> {
    let hub = Arc::new(Hub::configured());
    let tap = hub.clone();
    audit.tap_with(Arc::new(move |written| tap.observe_written(written)));
    let events = hub.clone();
    proxy
        .asks()
        .on_event(Arc::new(move |line| events.announce(&line)));
    let routes = AskRoutes::new(proxy.asks().clone(), save_target(policy));
    Arc::new(Admin::new(store, hub, proxy.gauges(), token).with_asks(routes))
}

/// Where `save` answers write: the first `--policy`, if it is a native file.
fn save_target(policy: &PolicySources) -> SaveTarget {
    let Some(spec) = policy.policies.first() else {
        return SaveTarget::Unavailable(
            "no --policy file to save the rule to (the rules come from --allow only): answer \
             with scope \"run\" and add the rule to a policy file by hand"
                .to_owned(),
        );
    };
    if crate::git_source::parse(spec).is_some() {
        return SaveTarget::Unavailable(format!(
            "the first --policy ({spec}) is a git: source, which airlock does not edit"
        ));
    }
    match crate::sources::split_format(spec) {
        Ok((None, path)) => SaveTarget::File(path.into()),
        Ok((Some(_), _)) => SaveTarget::Unavailable(format!(
            "the first --policy ({spec}) is in a seed system's format, which airlock does not edit"
        )),
        Err(e) => SaveTarget::Unavailable(e),
    }
}

/// Serves `airlock run`'s admin API on `run-PID.sock` in `dir` (mode 0600, no token: only
/// this user can reach the directory); the socket goes when the returned guard drops.
pub async fn serve_run(
    policy: &PolicySources,
    proxy: &Proxy,
    audit: &AuditLog,
    dir: &std::path::Path,
) -> Result<crate::run_socket::SocketFile, String> {
    let path = crate::run_socket::socket_path(dir, std::process::id());
    serve_at(policy, proxy, audit, path).await
}

/// Serves the admin API on the Unix socket `path` (mode 0600, no token: its directory is
/// this user's only, hidden from the command): `airlock run`'s, and a sandbox daemon's in
/// its control directory (`airlock watch --sandbox NAME`). The socket goes when the
/// returned guard drops.
pub async fn serve_at(
    policy: &PolicySources,
    proxy: &Proxy,
    audit: &AuditLog,
    path: std::path::PathBuf,
) -> Result<crate::run_socket::SocketFile, String> {
    let store = Arc::new(PolicyStore::new(proxy.policy().clone(), audit.clone()));
    let admin = build(policy, proxy, audit, store, None);
    let bound = admin
        .bind(&Listen::Unix(path.clone()))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(admin.serve(bound));
    Ok(crate::run_socket::SocketFile(path))
}
