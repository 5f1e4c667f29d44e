//! The typed configuration of a session: what the command-line flags of `airlock run` and
//! `airlock mcp`, and the sandbox daemon's configuration, become before anything is read.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use airlock_proxy::upstream::parse_pin;

use crate::sources::PolicySources;

/// How the command of a session is confined (`--jail`, resolved for the platform).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JailMode {
    /// Linux user, network, mount and PID namespaces: every connection is captured.
    Namespace,
    /// Proxy variables only: advisory, programs can bypass it.
    Env,
}

/// How upstreams are found and trusted (`--resolve`, `--upstream-ca`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Upstream {
    /// `HOST:ADDR` pins (exempt from the private-address guard).
    pub resolve: Vec<String>,
    /// PEM CA files upstream servers may be signed by, besides the system roots.
    pub cas: Vec<PathBuf>,
}

impl Upstream {
    /// The pins by name; every bad pin is an error naming it.
    pub fn pins(&self) -> Result<HashMap<String, std::net::IpAddr>, Vec<String>> {
        let mut errors = Vec::new();
        let mut resolve = HashMap::new();
        for spec in &self.resolve {
            match parse_pin(spec) {
                Ok((name, ip)) => {
                    resolve.insert(name, ip);
                }
                Err(e) => errors.push(format!("--resolve {spec}: {e}")),
            }
        }
        if errors.is_empty() {
            Ok(resolve)
        } else {
            Err(errors)
        }
    }
}

/// Everything a session is prepared from: what `airlock run` takes on its command line,
/// what the sandbox daemon is given by its launcher.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Policy files, allow rules and secret specs.
    pub sources: PolicySources,
    /// Upstream pins and trust.
    pub upstream: Upstream,
    /// Audit log destination: a file (appended to) or `-` for standard output; `None`: a
    /// new file under the CA directory's `logs/`.
    pub log: Option<String>,
    /// Rotate the audit log file beyond this many bytes.
    pub audit_max_size: Option<u64>,
    /// How audit lines are written: airlock's shape or OCSF (`--audit-format`).
    pub audit_format: airlock_audit::ocsf::Format,
    /// Every audit line also exported over OTLP (`--audit-otlp`).
    pub audit_otlp: Option<airlock_audit::otlp::Config>,
    /// How the command is confined.
    pub jail: JailMode,
    /// `enforce`, `report` or `ask`.
    pub mode: airlock_policy::mode::Mode,
    /// In ask mode, how long a held request waits for its answer.
    pub ask_timeout: Duration,
    /// Project the user's credential files the policy turns on (the caller binds the
    /// copies, [`crate::credential_files::CredentialFiles::binds`]); otherwise such files
    /// are hidden.
    pub project_credential_files: bool,
}

#[cfg(test)]
mod tests {
    use super::Upstream;

    #[test]
    fn pins_are_read_and_every_bad_one_is_named() {
        let good = Upstream {
            resolve: vec!["api.example.com:127.0.0.1".into()],
            cas: Vec::new(),
        };
        let pins = good.pins().expect("pins");
        assert_eq!(
            pins.get("api.example.com")
                .map(ToString::to_string)
                .as_deref(),
            Some("127.0.0.1")
        );
        let bad = Upstream {
            resolve: vec!["nocolon".into(), "x.example:notanip".into()],
            cas: Vec::new(),
        };
        let errors = bad.pins().expect_err("bad pins");
        assert_eq!(errors.len(), 2);
        assert!(errors[0].starts_with("--resolve nocolon: "), "{errors:?}");
    }
}
