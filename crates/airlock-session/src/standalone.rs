//! The proxy of `airlock proxy` prepared from its typed [`StandaloneConfig`]: policy,
//! secrets (and their surrogates, written out on request), the CA, upstream pins and
//! trust and the audit destination, all read and checked before the proxy starts; every
//! error found is returned.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_audit::AuditLog;
use airlock_policy::CompiledPolicy;
use airlock_proxy::ca::{self, CertificateAuthority};
use airlock_proxy::upstream::parse_pin;
use airlock_proxy::{ProxyConfig, TunnelRefusal};

use crate::config::Upstream;
use crate::sources::PolicySources;

/// Everything `airlock proxy` prepares its proxy from.
#[derive(Clone, Debug)]
pub struct StandaloneConfig {
    /// Policy files, allow rules and secret specs.
    pub sources: PolicySources,
    /// Upstream pins and trust.
    pub upstream: Upstream,
    /// Audit log destination: a file (appended to) or `-` for standard output; `None`:
    /// no log kept.
    pub log: Option<String>,
    /// Rotate the log file beyond this many bytes.
    pub audit_max_size: Option<u64>,
    /// How audit lines are written: airlock's shape or OCSF (`--audit-format`).
    pub audit_format: airlock_audit::ocsf::Format,
    /// Every audit line also exported over OTLP (`--audit-otlp`); without `--log`, no file
    /// is kept.
    pub audit_otlp: Option<airlock_audit::otlp::Config>,
    /// The CA certificate and key; `None`: the CA of `airlock ca path`, created if
    /// missing.
    pub ca: Option<(PathBuf, PathBuf)>,
    /// Where to write `NAME=SURROGATE` lines (mode 0600) for every secret.
    pub surrogates_out: Option<PathBuf>,
    /// Whether the proxy serves captured (transparent) connections: gateway mode.
    pub transparent: bool,
    /// Whether an admin API is served (it streams and counts audit lines even when none
    /// are kept).
    pub admin: bool,
    /// `enforce`, `report` or `ask`.
    pub mode: airlock_policy::mode::Mode,
    /// In ask mode, how long a held request waits for its answer.
    pub ask_timeout: Duration,
}

/// Reads and checks everything; returns the proxy's configuration or every error found.
pub fn prepare(config: &StandaloneConfig) -> Result<ProxyConfig, Vec<String>> {
    // Seeds aws-lc and makes the leaf key meanwhile (docs/benchmarks.md, "Start-up").
    ca::prepare_leaf_key();
    let policy = config.sources.load()?;
    if config.sources.has_no_rules() {
        eprintln!("airlock: no --policy and no --allow: every request will be refused");
    } else if policy.network.allow.is_empty() {
        eprintln!("airlock: the policy has no allow rule: every request will be refused");
    }
    let compiled = CompiledPolicy::compile(&policy).map_err(|e| vec![e.to_string()])?;
    let credentials = PolicySources::credentials(&policy).map_err(|e| vec![e])?;
    if let Some(path) = &config.surrogates_out {
        write_surrogates(path, &credentials.surrogates())
            .map_err(|e| vec![format!("--surrogates-out {}: {e}", path.display())])?;
    }
    let mut errors = Vec::new();
    let mut resolve = HashMap::new();
    for spec in &config.upstream.resolve {
        match parse_pin(spec) {
            Ok((name, ip)) => {
                resolve.insert(name, ip);
            }
            Err(e) => errors.push(e),
        }
    }
    let ca = load_ca(config.ca.as_ref()).map_err(|e| errors.push(e)).ok();
    let options = airlock_audit::LogOptions {
        max_size: config.audit_max_size,
    };
    let audit = match config.log.as_deref() {
        None if config.audit_otlp.is_some() => AuditLog::open_exported(
            None,
            options,
            None,
            config.audit_format,
            config.audit_otlp.as_ref(),
        )
        .map_err(|e| errors.push(e.to_string()))
        .ok(),
        None if config.admin => AuditLog::discarding()
            .map_err(|e| errors.push(e.to_string()))
            .ok(),
        None => Some(AuditLog::disabled()),
        Some(dest) => signing_beside_ca(config.ca.as_ref())
            .and_then(|signing| {
                AuditLog::open_exported(
                    Some(dest),
                    options,
                    Some(signing),
                    config.audit_format,
                    config.audit_otlp.as_ref(),
                )
                .map_err(|e| e.to_string())
            })
            .map_err(|e| errors.push(format!("--log {dest}: {e}")))
            .ok(),
    };
    let (Some(ca), Some(audit)) = (ca, audit) else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut proxy = ProxyConfig::new(compiled, ca, credentials, audit);
    proxy.mode = config.mode;
    proxy.asks = crate::sources::asks(config.ask_timeout);
    crate::sources::announce_mode(config.mode);
    proxy.resolve = resolve;
    proxy.upstream_cas = config.upstream.cas.clone();
    if config.transparent {
        proxy.tunnel_refusal = TunnelRefusal::InsideTls;
    }
    Ok(proxy)
}

/// The key the log's checkpoints are signed with: beside the given CA's key, or in the
/// default CA directory (created on first use, `airlock_audit::signing`).
fn signing_beside_ca(
    given: Option<&(PathBuf, PathBuf)>,
) -> Result<airlock_audit::checkpoint::Signing, String> {
    let dir = match given {
        Some((_, key)) => key
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned(),
        None => ca::default_dir().map_err(|e| e.to_string())?,
    };
    airlock_audit::checkpoint::Signing::beside(&dir)
}

/// The given CA, or the default one (created if missing).
fn load_ca(given: Option<&(PathBuf, PathBuf)>) -> Result<CertificateAuthority, String> {
    match given {
        Some((cert, key)) => CertificateAuthority::load(cert, key).map_err(|e| e.to_string()),
        None => {
            let dir = ca::default_dir().map_err(|e| e.to_string())?;
            ca::init(&dir, false).map_err(|e| e.to_string())?;
            CertificateAuthority::load_dir(&dir).map_err(|e| e.to_string())
        }
    }
}

/// Writes `NAME=SURROGATE` lines to `path`, created (or truncated) with mode 0600.
fn write_surrogates(path: &Path, surrogates: &[(String, String)]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // An existing file keeps its mode on open: narrow it before writing.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    let mut text = String::new();
    for (name, surrogate) in surrogates {
        text.push_str(name);
        text.push('=');
        text.push_str(surrogate);
        text.push('\n');
    }
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn surrogates_are_written_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("surrogates");
        std::fs::write(&path, "old").expect("write");
        let pairs = [("KEY".to_owned(), "sk-surrogate".to_owned())];
        super::write_surrogates(&path, &pairs).expect("written");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "KEY=sk-surrogate\n"
        );
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
