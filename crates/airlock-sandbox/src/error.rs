//! Errors of sandbox management.

use std::path::PathBuf;

/// Everything that can go wrong managing a sandbox. The CLI maps every variant to exit
/// status 125 (airlock itself failed; the command did not run).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A name that cannot name a sandbox.
    #[error(
        "invalid sandbox name {0:?}: use 1 to 63 of a-z 0-9 - _ . starting with a letter or digit"
    )]
    InvalidName(String),
    /// No sandbox of that name exists.
    #[error("no sandbox named {0}")]
    NotFound(String),
    /// A sandbox of that name exists already.
    #[error("a sandbox named {0} exists already (remove it with `airlock sandbox rm {0}`)")]
    Exists(String),
    /// The sandbox exists but its daemon or confinement is gone.
    #[error("sandbox {name} is not running: {why} (remove it with `airlock sandbox rm {name}`)")]
    NotRunning {
        /// The sandbox.
        name: String,
        /// What was found.
        why: String,
    },
    /// The sandbox was made by another provider than the one asked.
    #[error("sandbox {name} uses the {actual} provider, not {asked}")]
    WrongProvider {
        /// The sandbox.
        name: String,
        /// The provider it was created with.
        actual: &'static str,
        /// The provider asked.
        asked: &'static str,
    },
    /// The daemon could not set the sandbox up; it reported why.
    #[error("sandbox {name} could not be created: {why}")]
    Setup {
        /// The sandbox.
        name: String,
        /// The daemon's report (or what was seen of it).
        why: String,
    },
    /// A file of the state directory could not be read or written.
    #[error("{}: {source}", path.display())]
    State {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A state file that does not parse.
    #[error("{}: not a sandbox state file: {why}", path.display())]
    CorruptState {
        /// The file.
        path: PathBuf,
        /// The parse error.
        why: String,
    },
    /// The container engine failed.
    #[error(transparent)]
    Docker(#[from] crate::docker::DockerError),
    /// A git step of the private workspace failed.
    #[error("git {step} failed: {why}")]
    Git {
        /// What was being done.
        step: String,
        /// git's error output, or the spawn error.
        why: String,
    },
    /// The command could not be started.
    #[error("cannot start {what}: {source}")]
    Spawn {
        /// What was started.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Something this provider cannot do here.
    #[error("{0}")]
    Unsupported(String),
}

impl SandboxError {
    /// A state-directory error for `path`.
    pub(crate) fn state(path: impl Into<PathBuf>, source: std::io::Error) -> SandboxError {
        SandboxError::State {
            path: path.into(),
            source,
        }
    }
}
