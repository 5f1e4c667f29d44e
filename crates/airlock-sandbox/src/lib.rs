//! airlock sandboxes for agent orchestrators: a named, long-lived sandbox per task whose
//! only way out is an airlock proxy holding the real keys, many commands run in it with
//! their output streamed, and its work brought back as a git branch.
//!
//! A sandbox is three things:
//!
//! * a **daemon**: one `airlock sandbox daemon` process per sandbox (its code is the
//!   `airlock-sandbox-daemon` crate), detached from the terminal, that holds the policy and the real secret values (in memory only), serves
//!   the sandbox's only network (transparent proxy and DNS) and tears everything down when
//!   it is told to stop or when the sandbox's processes disappear;
//! * a **confinement** chosen by the [`Provider`]: [`LocalProvider`] keeps `airlock run`'s
//!   user, network, mount and PID namespaces alive as the sandbox; [`DockerProvider`] runs
//!   a long-lived container with `--network none` whose network namespace gets airlock's
//!   capture (every address local, every port answered by airlock);
//! * a **state directory** (`<root>/<name>/`, see [`state`]) that outlives every process:
//!   the next command finds a crashed daemon or an orphaned container and cleans it.
//!
//! [`manage`] picks the provider a sandbox was made with and holds each management
//! operation whole (create, remove, export), for the CLI and for orchestrators alike.
//!
//! Commands run with [`Provider::exec`]: their standard output and error come back as
//! lines ([`ExecEvent`]), then the exit status and resource usage. Nothing here holds a real
//! secret: the environment of a command has the surrogates, and the daemon swaps them.
//!
//! ```no_run
//! use airlock_sandbox::{ExecEvent, ExecRequest, LocalProvider, Provider, SandboxName, Sandboxes};
//!
//! # fn main() -> Result<(), airlock_sandbox::SandboxError> {
//! let sandboxes = Sandboxes::open_default()?;
//! let provider = LocalProvider::new(sandboxes.clone());
//! let name = SandboxName::parse("task-1")?;
//! let mut request = ExecRequest::new(["git", "status"]);
//! request.timeout = Some(std::time::Duration::from_secs(60));
//! for event in provider.exec(&name, request)? {
//!     match event {
//!         ExecEvent::Stdout(line) | ExecEvent::Stderr(line) => println!("{line}"),
//!         ExecEvent::Exit(report) => println!("exit {}", report.status),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

#![warn(unreachable_pub, missing_docs)]

#[cfg(target_os = "linux")]
pub mod cgroup;
pub mod daemon_config;
#[cfg(target_os = "linux")]
mod docker_provider;
mod error;
pub mod exec;
mod launch;
#[cfg(target_os = "linux")]
mod local;
#[cfg(target_os = "linux")]
pub mod manage;
mod name;
#[cfg(target_os = "linux")]
pub mod reap;
mod signal;
pub mod state;
pub mod workspace;

pub mod docker;

use std::path::PathBuf;
use std::time::Duration;

pub use daemon_config::DaemonConfig;
#[cfg(target_os = "linux")]
pub use docker_provider::{DockerProvider, ROOT_LABEL, SANDBOX_LABEL};
pub use error::SandboxError;
pub use exec::{ExecCanceller, ExecEvent, ExecReport, ExecStream};
pub use launch::{CreateOptions, Limits};
#[cfg(target_os = "linux")]
pub use local::LocalProvider;
pub use name::SandboxName;
pub use state::{Health, Sandboxes};

/// Which kind of confinement a sandbox uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Linux user, network, mount and PID namespaces kept alive (no root needed).
    Local,
    /// A long-lived Docker (or Podman) container with airlock's capture in its network.
    Docker,
}

impl ProviderKind {
    /// The name used on the command line and in the state file.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Local => "local",
            ProviderKind::Docker => "docker",
        }
    }
}

/// One command to run in a sandbox.
#[derive(Clone, Debug, Default)]
pub struct ExecRequest {
    /// The command and its arguments (`argv[0]` searched in the sandbox's `PATH`).
    pub argv: Vec<String>,
    /// Working directory inside the sandbox; default: the sandbox's work directory (the
    /// task worktree when it has a repository).
    pub cwd: Option<PathBuf>,
    /// Variables added to (or replacing those of) the sandbox's environment.
    pub env: Vec<(String, String)>,
    /// Bytes given on standard input (then closed); `None`: empty standard input.
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit: at the deadline every process of this command is killed and the
    /// report says `timed_out` (status 124, as `timeout(1)`).
    pub timeout: Option<Duration>,
}

impl ExecRequest {
    /// A request running `argv` with every other field at its default.
    pub fn new<I, S>(argv: I) -> ExecRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            ..ExecRequest::default()
        }
    }
}

/// The interface every sandbox provider implements. A provider is cheap to build: state
/// lives in the [`Sandboxes`] directory and the sandbox's daemon, never in the value, so
/// separate processes (an orchestrator and a CLI) can manage the same sandboxes.
pub trait Provider {
    /// Which provider this is.
    fn kind(&self) -> ProviderKind;

    /// Creates the sandbox `options.name` and returns once its daemon serves its network
    /// and commands can run; a sandbox of that name that is already running is left as
    /// it is (its options are not compared). A failure leaves nothing behind.
    fn ensure_running(&self, options: &CreateOptions) -> Result<(), SandboxError>;

    /// Runs one command in the running sandbox `name`, streaming its output.
    fn exec(&self, name: &SandboxName, request: ExecRequest) -> Result<ExecStream, SandboxError>;

    /// Stops the sandbox and removes everything it made: processes, container, listeners
    /// and its state directory (the private workspace included). Idempotent.
    fn teardown(&self, name: &SandboxName) -> Result<(), SandboxError>;

    /// Whether the sandbox's daemon and confinement are alive.
    fn health(&self, name: &SandboxName) -> Result<Health, SandboxError>;
}
