//! The configuration of a sandbox's daemon: what `airlock sandbox create` (or a library
//! user's [`crate::Provider::ensure_running`]) asked for, handed from the launcher to
//! `airlock sandbox daemon` as one JSON document on the daemon's standard input. Both
//! sides use this type, [`DaemonConfig::write_to`] and [`DaemonConfig::read_from`], so
//! what the launcher writes is exactly what the daemon reads.
//!
//! It holds the creator's options as given (secret specs included), never a value read
//! from the environment: real secret values reach the daemon through its environment
//! ([`crate::CreateOptions::daemon_env`]) and stay in its memory. Nothing of it is
//! written to a file.

use std::io::{Read, Write};
use std::path::PathBuf;

use crate::CreateOptions;
use crate::state::Sandboxes;

/// Everything a sandbox's daemon is started with: the state root and the creator's
/// [`CreateOptions`] (owned, not copied field by field; [`CreateOptions::daemon_env`] is
/// left out).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// The state root holding the sandbox's directory.
    pub root: PathBuf,
    /// What the sandbox is created with (its name checked again when read).
    pub options: CreateOptions,
}

impl DaemonConfig {
    /// The configuration of the daemon of `options.name` under `sandboxes`.
    pub fn new(sandboxes: &Sandboxes, options: &CreateOptions) -> DaemonConfig {
        DaemonConfig {
            root: sandboxes.root().to_owned(),
            options: CreateOptions {
                daemon_env: Vec::new(),
                ..options.clone()
            },
        }
    }

    /// Writes the configuration (one JSON document) for the daemon to read.
    pub fn write_to(&self, mut writer: impl Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut writer, self)?;
        writer.write_all(b"\n")?;
        writer.flush()
    }

    /// Reads a configuration written by [`DaemonConfig::write_to`], to the end of `reader`.
    pub fn read_from(mut reader: impl Read) -> Result<DaemonConfig, serde_json::Error> {
        let mut text = String::new();
        reader
            .read_to_string(&mut text)
            .map_err(serde_json::Error::io)?;
        serde_json::from_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::DaemonConfig;
    use crate::{CreateOptions, Limits, ProviderKind, SandboxName, Sandboxes};

    fn options() -> CreateOptions {
        let name = SandboxName::parse("task-1").expect("name");
        let mut options = CreateOptions::new(name, ProviderKind::Docker);
        options.policies = vec!["/p/policy.yaml".into(), "airut:/p/airut.yaml".into()];
        options.allows = vec!["GET api.example.com/v1/**".into()];
        options.secrets = vec!["API_KEY@api.example.com".into()];
        options.resolve = vec!["api.example.com:127.0.0.1".into()];
        options.upstream_cas = vec!["/p/ca.pem".into()];
        options.image = Some("debian:stable".into());
        options.repo = Some("/src/repo".into());
        options.branch = Some("airlock/task-1".into());
        options.limits = Limits {
            memory_mib: Some(512),
            millicpus: Some(1500),
            pids: Some(64),
        };
        options.report = true;
        options.audit_max_size = Some(1 << 20);
        options.daemon_env = vec![("API_KEY".into(), "sk-real-value".into())];
        options
    }

    #[test]
    fn the_daemon_reads_what_the_launcher_writes() {
        let root = tempfile::tempdir().expect("root");
        let sandboxes = Sandboxes::open(root.path(), "/bin/true").expect("sandboxes");
        let config = DaemonConfig::new(&sandboxes, &options());
        let mut written = Vec::new();
        config.write_to(&mut written).expect("written");
        let read = DaemonConfig::read_from(&written[..]).expect("read");
        assert_eq!(read, config);
        assert_eq!(read.root, sandboxes.root());
        assert_eq!(read.options.name.as_str(), "task-1");
        assert_eq!(read.options.provider, ProviderKind::Docker);
        assert_eq!(read.options.limits.millicpus, Some(1500));
        assert!(read.options.report);
        assert!(read.options.daemon_env.is_empty());
    }

    #[test]
    fn the_daemons_environment_is_not_in_its_configuration() {
        let root = tempfile::tempdir().expect("root");
        let sandboxes = Sandboxes::open(root.path(), "/bin/true").expect("sandboxes");
        let mut written = Vec::new();
        DaemonConfig::new(&sandboxes, &options())
            .write_to(&mut written)
            .expect("written");
        let text = String::from_utf8(written).expect("utf-8");
        assert!(!text.contains("sk-real-value"), "{text}");
        assert!(text.contains("API_KEY@api.example.com"), "{text}");
    }

    #[test]
    fn a_bad_configuration_is_refused() {
        assert!(DaemonConfig::read_from(&b""[..]).is_err());
        assert!(DaemonConfig::read_from(&b"{\"root\":\"/\"}"[..]).is_err());
        let root = tempfile::tempdir().expect("root");
        let sandboxes = Sandboxes::open(root.path(), "/bin/true").expect("sandboxes");
        let mut value =
            serde_json::to_value(DaemonConfig::new(&sandboxes, &options())).expect("json");
        value["unknown"] = serde_json::Value::Bool(true);
        let text = value.to_string();
        assert!(DaemonConfig::read_from(text.as_bytes()).is_err());
        let mut value =
            serde_json::to_value(DaemonConfig::new(&sandboxes, &options())).expect("json");
        value["options"]["unknown"] = serde_json::Value::Bool(true);
        assert!(DaemonConfig::read_from(value.to_string().as_bytes()).is_err());
        let mut value =
            serde_json::to_value(DaemonConfig::new(&sandboxes, &options())).expect("json");
        value["options"]["name"] = serde_json::Value::String("../other".into());
        assert!(DaemonConfig::read_from(value.to_string().as_bytes()).is_err());
    }
}
