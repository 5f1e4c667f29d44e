//! Wiring of the control plane into `airlock proxy`: the policy store (always, so that
//! SIGHUP and file/git changes reload), the audit tap feeding the event hub, and the admin
//! API when `--admin` is given.

use std::sync::Arc;

use airlock_audit::AuditLog;
use airlock_control::{Admin, Hub, Listen, PolicyStore};
use airlock_proxy::Proxy;

use crate::policy_args::PolicyArgs;

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
    policy: &PolicyArgs,
    proxy: &Proxy,
    audit: &AuditLog,
    token: Option<&str>,
) -> Result<(), String> {
    let store = Arc::new(PolicyStore::new(proxy.policy().clone(), audit.clone()));
    crate::policy_reload::watch(policy.clone(), store.clone())
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    if let Some(listen) = admin_listen {
        let hub = Arc::new(Hub::default());
        let tap = hub.clone();
        audit.tap_with(Arc::new(move |line| tap.observe(line)));
        let admin = Arc::new(Admin::new(store.clone(), hub, proxy.gauges(), token));
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
