//! A session prepared from its typed [`SessionConfig`]: the policy read and compiled,
//! the secrets read and given surrogates, the CA loaded (created if missing), the audit
//! log opened, the command's CA bundle and environment made, airlock's own paths listed
//! for the jail to hide, and the proxy configured. Everything is read and checked before
//! anything starts; every error found is returned.
//!
//! `airlock run`, `airlock mcp` and the sandbox daemon prepare a [`Session`]; `airlock
//! proxy` prepares its proxy alone ([`crate::standalone`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use airlock_audit::AuditLog;
use airlock_policy::model::SecretSource;
use airlock_policy::{CompiledPolicy, Policy};
use airlock_proxy::ca::{self, CertificateAuthority};
use airlock_proxy::{Proxy, ProxyConfig, TunnelRefusal};

use crate::config::SessionConfig;
use crate::log::{LogTarget, open_log};
use crate::sources::{PolicySources, split_format};

/// Everything read and checked before the command starts.
pub struct Session {
    /// The combined policy.
    pub policy: Policy,
    /// The command's environment (before mode-specific proxy variables).
    pub env: Vec<(OsString, OsString)>,
    /// The CA bundle given to the command; its directory is removed when the session ends.
    pub bundle: PathBuf,
    _bundle_dir: tempfile::TempDir,
    /// airlock's own paths the command must not see (state, CA, policies, secret files,
    /// logs, agent sockets), besides the policy's `filesystem` rules.
    pub airlock_hidden: Vec<airlock_policy::filesystem::Entry>,
    /// The audit log.
    pub audit: AuditLog,
    /// The user's credential files projected with surrogates (or hidden) for this run.
    pub credential_files: crate::credential_files::CredentialFiles,
    /// Where the audit log goes.
    log: LogTarget,
    /// The directory of the run's admin socket (hidden from the jail), or why there is none.
    run_dir: Result<PathBuf, String>,
    /// The policy sources (read again by the admin API's reloads and saves).
    sources: PolicySources,
    /// `enforce`, `report` or `ask`.
    mode: airlock_policy::mode::Mode,
}

/// The secrets of a policy: their credential store and real values.
struct Secrets {
    credentials: airlock_credentials::Credentials,
    real_values: Vec<String>,
}

impl Secrets {
    fn read(policy: &Policy) -> Result<Secrets, Vec<String>> {
        let values = crate::secret_sources::read_all(&policy.secrets)?;
        let real_values = values.iter().map(|(_, value)| value.clone()).collect();
        let credentials =
            airlock_credentials::Credentials::new(values).map_err(|e| vec![e.to_string()])?;
        Ok(Secrets {
            credentials,
            real_values,
        })
    }
}

impl Session {
    /// Reads and checks everything; returns the session and the proxy's configuration.
    pub fn prepare(config: &SessionConfig) -> Result<(Session, ProxyConfig), Vec<String>> {
        // Seeds aws-lc and makes the leaf key meanwhile (docs/benchmarks.md, "Start-up").
        ca::prepare_leaf_key();
        let mut policy = config.sources.load()?;
        let credential_files = crate::credential_files::CredentialFiles::for_session(
            &mut policy,
            config.project_credential_files,
        )
        .map_err(|e| vec![e])?;
        if !config.project_credential_files
            && let Some(profile) = config.sources.profile
        {
            // A sign-in file stands for the key only where it is projected.
            profile.check_key(&policy).map_err(|e| vec![e])?;
        }
        if config.sources.has_no_rules() {
            eprintln!(
                "airlock: no --policy, no --allow, no ./airlock.yaml or ~/.config/airlock/policy.yaml \
                 and no agent profile: all network access is refused (`airlock init` writes a \
                 starter policy)"
            );
        } else if policy.network.allow.is_empty() {
            eprintln!("airlock: the policy has no allow rule: all network access is refused");
        }
        let compiled = CompiledPolicy::compile(&policy).map_err(|e| vec![e.to_string()])?;
        let secrets = Secrets::read(&policy)?;
        let surrogates: Vec<(String, String)> = secrets
            .credentials
            .surrogates()
            .into_iter()
            .filter(|(name, _)| !name.starts_with(airlock_credfiles::SECRET_PREFIX))
            .collect();

        let mut errors = Vec::new();
        let resolve = config
            .upstream
            .pins()
            .map_err(|mut bad| errors.append(&mut bad))
            .unwrap_or_default();
        for ca_file in &config.upstream.cas {
            if !ca_file.is_file() {
                errors.push(format!("--upstream-ca {}: no such file", ca_file.display()));
            }
        }
        let ca_dir = ca::default_dir().map_err(|e| vec![e.to_string()])?;
        let ca = ca::init(&ca_dir, false)
            .and_then(|_| CertificateAuthority::load_dir(&ca_dir))
            .map_err(|e| vec![e.to_string()])?;
        let (audit, log) = open_log(
            config.log.as_deref(),
            &ca_dir,
            config.audit_max_size,
            config.audit_format,
            config.audit_otlp.as_ref(),
        )
        .map_err(|e| vec![e])?;
        if !errors.is_empty() {
            return Err(errors);
        }

        let bundle_dir = tempfile::Builder::new()
            .prefix("airlock-run-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .map_err(|e| vec![format!("cannot create a private directory: {e}")])?;
        let bundle = bundle_dir.path().join("ca-bundle.pem");
        crate::env::write_bundle(&bundle, ca.cert_pem())
            .map_err(|e| vec![format!("cannot write the CA bundle: {e}")])?;

        let env = crate::env::command_env(
            &policy,
            &secrets.real_values,
            &surrogates,
            &bundle,
            config.jail,
        );
        let mut airlock_hidden = airlock_paths(config, &policy, &ca_dir, &log);
        airlock_hidden.extend(credential_files.hidden_entries());
        let run_dir = crate::run_socket::ensure_runtime_dir();
        if let Ok(dir) = &run_dir {
            airlock_hidden.push(airlock_policy::filesystem::Entry {
                path: dir.clone(),
                why: "the admin sockets of airlock runs".to_owned(),
            });
        }

        let mut proxy = ProxyConfig::new(compiled, ca, secrets.credentials, audit.clone());
        proxy.resolve = resolve;
        proxy.upstream_cas = config.upstream.cas.clone();
        proxy.tunnel_refusal = TunnelRefusal::InsideTls;
        proxy.limits.drain_timeout = crate::serve::DRAIN_TIMEOUT;
        proxy.mode = config.mode;
        proxy.asks = crate::sources::asks(config.ask_timeout);
        proxy.refreshes = crate::credential_writeback::for_projected(
            &credential_files.projected,
            &audit,
            &ca_dir,
        );
        crate::sources::announce_mode(config.mode);
        let session = Session {
            policy,
            env,
            bundle,
            _bundle_dir: bundle_dir,
            airlock_hidden,
            audit,
            credential_files,
            log,
            run_dir,
            sources: config.sources.clone(),
            mode: config.mode,
        };
        Ok((session, proxy))
    }

    /// The TCP ports captured in the jail: 80, 443 and every port a rule names (53 is the
    /// jail's own).
    pub fn tcp_ports(&self) -> Vec<u16> {
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
    pub fn print_summary(&self) {
        self.log.print_summary();
    }

    /// Serves the admin API on the Unix socket `path` (a sandbox's control socket, which
    /// `airlock watch --sandbox NAME` attaches to; docs/watch.md).
    pub async fn serve_admin_at(
        &self,
        proxy: &Proxy,
        path: PathBuf,
    ) -> Result<crate::run_socket::SocketFile, String> {
        crate::admin::serve_at(&self.sources, proxy, &self.audit, path).await
    }

    /// Serves the run's admin API on its socket (docs/contract.md "Admin API"). Without it
    /// ask mode cannot be answered: then the session must not start (`Err`: why there is
    /// no admin API); in other modes a warning. With `verbose` (or in ask mode) the
    /// socket's path goes to stderr.
    pub async fn serve_admin(
        &self,
        proxy: &Proxy,
        verbose: bool,
    ) -> Result<Option<crate::run_socket::SocketFile>, String> {
        let served = match &self.run_dir {
            Ok(dir) => crate::admin::serve_run(&self.sources, proxy, &self.audit, dir).await,
            Err(e) => Err(e.clone()),
        };
        let ask = self.mode == airlock_policy::mode::Mode::Ask;
        match served {
            Ok(socket) => {
                if ask || verbose {
                    eprintln!(
                        "airlock: admin API listening on unix:{}",
                        socket.0.display()
                    );
                }
                Ok(Some(socket))
            }
            Err(e) if ask => Err(e),
            Err(e) => {
                eprintln!("airlock: warning: this run has no admin API: {e}");
                Ok(None)
            }
        }
    }
}

/// airlock's own paths that the command must never see, whatever `filesystem.readable`
/// says: its CA and state directories, the policy files, file sources of secrets, the
/// audit log and the agent sockets.
fn airlock_paths(
    config: &SessionConfig,
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
    for spec in &config.sources.policies {
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
        if config.audit_max_size.is_some()
            && config.log.is_some()
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
pub fn airlock_state_roots() -> Vec<PathBuf> {
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
