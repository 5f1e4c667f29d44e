//! What the command of a session sees: its environment (airlock's own minus proxy
//! variables and real secret values, plus surrogates, `AIRLOCK=1` and the CA-trust
//! variables) and the CA bundle those variables name.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use airlock_policy::Policy;
use airlock_policy::model::SecretSource;

use crate::config::JailMode;

/// System CA bundle paths: read for the system roots (first one found) and covered by
/// airlock's bundle inside the jail (every one that exists).
pub const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Variables that point TLS clients of common runtimes at a CA bundle.
pub const CA_BUNDLE_VARIABLES: [&str; 13] = [
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
pub const PROXY_VARIABLES: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// Writes the system roots (first system bundle found) followed by the airlock CA.
pub(crate) fn write_bundle(path: &Path, ca_pem: &str) -> std::io::Result<()> {
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
pub(crate) fn command_env(
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

/// The CA bundle over each system bundle path the host has, and at its own path (the
/// CA-trust variables name it; it lies in the host's /tmp, which the jail replaces).
pub fn bundle_binds(bundle: &Path) -> Vec<(PathBuf, PathBuf)> {
    SYSTEM_BUNDLES
        .iter()
        .map(Path::new)
        .filter(|path| path.is_file())
        .map(Path::to_owned)
        .chain([bundle.to_owned()])
        .map(|path| (bundle.to_owned(), path))
        .collect()
}
