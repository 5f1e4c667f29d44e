//! The errors of the binary, one type per command path, and how each becomes an exit
//! status (docs/contract.md §2, "Exit statuses") and lines on stderr. Every message is
//! printed after `airlock: ` and says what went wrong and, where it can, what to do.

use std::net::SocketAddr;
use std::process::ExitCode;

/// The exit status for every failure of airlock itself in `run`, `mcp` and `sandbox` (the
/// command was not started).
pub(crate) const SETUP_FAILED: u8 = 125;

/// A failure of `airlock run` or `airlock mcp`: 125 (the command was not started, or
/// airlock itself failed around it), or 126/127 when the command cannot be executed / is
/// not found.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    /// Problems found while preparing the session, each its own line.
    #[error("{}", .0.join("\n"))]
    Setup(Vec<String>),
    /// No async runtime.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// `--log -` with `airlock mcp`.
    #[error(
        "--log - cannot be used with `airlock mcp`: standard output carries the MCP \
         messages; give a file"
    )]
    McpLogToStdout,
    /// The server's name cannot be used, or a relay could not start (the message says
    /// what to give instead).
    #[error("{0}")]
    Relay(String),
    /// The proxy could not be built from its configuration.
    #[error("{0}")]
    Proxy(#[from] airlock_proxy::SetupError),
    /// Ask mode without the run's admin API, through which asks are answered.
    #[error("ask mode needs the run's admin API: {0}")]
    AskWithoutAdmin(String),
    /// The explicit proxy of `--jail env` cannot listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The explicit proxy's own address cannot be read.
    #[error("cannot read the proxy's address: {0}")]
    ProxyAddress(std::io::Error),
    /// Signal handlers cannot be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The command cannot be started (`--jail env`): 127 when it is not found, else 126.
    #[error("cannot run {program}: {source}")]
    Exec {
        /// The command.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Waiting for the command failed (`--jail env`).
    #[error("waiting for the command failed: {0}")]
    Wait(std::io::Error),
    /// The filesystem confinement cannot be planned, or the jail's sockets served.
    #[error("{0}")]
    Confine(String),
    /// The jail failed once started: its own status (127/126 when the command cannot be
    /// executed, the message then naming it; else 125).
    #[cfg(target_os = "linux")]
    #[error("{}", jail_message(.program, .error))]
    Jail {
        /// The command (its first word).
        program: String,
        /// What failed.
        error: airlock_jail::JailError,
    },
    /// The jail could not be built: 125, whatever the failure.
    #[cfg(target_os = "linux")]
    #[error("{0}")]
    JailSetup(airlock_jail::JailError),
    /// The task launching the jail failed.
    #[error("the jail launcher failed: {0}")]
    Launcher(tokio::task::JoinError),
    /// The task running the jail failed.
    #[error("the jail failed: {0}")]
    Jailed(tokio::task::JoinError),
    /// `--jail namespace` off Linux.
    #[cfg(not(target_os = "linux"))]
    #[error("--jail namespace needs Linux; choose --jail env")]
    NeedsLinux,
}

/// What a failed jail says: the command's name when it cannot be executed.
#[cfg(target_os = "linux")]
fn jail_message(program: &str, error: &airlock_jail::JailError) -> String {
    match error {
        airlock_jail::JailError::Exec { source, .. } => format!("cannot run {program}: {source}"),
        other => other.to_string(),
    }
}

/// The line that follows a jail failure `airlock doctor` can explain (namespaces refused,
/// a kernel feature missing).
pub(crate) const DOCTOR_HINT: &str =
    "`airlock doctor` checks what the jail needs on this machine and prints the remedy";

/// Whether `error` is a refusal of the kernel that `airlock doctor` checks for.
#[cfg(target_os = "linux")]
fn doctor_explains(error: &airlock_jail::JailError) -> bool {
    use airlock_jail::{JailError, SetupStep};
    match error {
        JailError::NamespacesUnavailable { .. } => true,
        JailError::Setup { step, .. } => matches!(
            step,
            SetupStep::Unshare
                | SetupStep::MountPrivate
                | SetupStep::MountProc
                | SetupStep::ReadOnlyRoot
                | SetupStep::Landlock
                | SetupStep::SystemCallFilter
        ),
        _ => false,
    }
}

impl RunError {
    /// The jail's failure once started, naming `command`'s first word.
    #[cfg(target_os = "linux")]
    pub(crate) fn jail(error: airlock_jail::JailError, command: &[std::ffi::OsString]) -> RunError {
        let program = command.first().map(|p| p.to_string_lossy().into_owned());
        RunError::Jail {
            program: program.unwrap_or_default(),
            error,
        }
    }

    /// The exit status (docs/contract.md §2).
    fn status(&self) -> u8 {
        match self {
            RunError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => 127,
            RunError::Exec { .. } => 126,
            #[cfg(target_os = "linux")]
            RunError::Jail { error, .. } => {
                u8::try_from(error.exit_status()).unwrap_or(SETUP_FAILED)
            }
            _ => SETUP_FAILED,
        }
    }

    /// The lines to print.
    fn lines(&self) -> Vec<String> {
        match self {
            RunError::Setup(errors) => errors.clone(),
            #[cfg(target_os = "linux")]
            RunError::Jail { error, .. } | RunError::JailSetup(error) if doctor_explains(error) => {
                vec![self.to_string(), DOCTOR_HINT.to_owned()]
            }
            other => vec![other.to_string()],
        }
    }
}

/// A failure of `airlock proxy`: exit status 1.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// Problems found while preparing the proxy, each its own line.
    #[error("{}", .0.join("\n"))]
    Setup(Vec<String>),
    /// No async runtime.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The proxy could not be built from its configuration.
    #[error("{0}")]
    Proxy(#[from] airlock_proxy::SetupError),
    /// The admin API or policy reloading could not start.
    #[error("{0}")]
    Admin(String),
    /// Signal handlers cannot be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// The `--listen` address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A `--transparent` or `--dns` address cannot be bound.
    #[error("{0}")]
    Gateway(String),
}

impl ProxyError {
    /// The lines to print.
    fn lines(&self) -> Vec<String> {
        match self {
            ProxyError::Setup(errors) => errors.clone(),
            other => vec![other.to_string()],
        }
    }
}

/// A failure of `airlock sandbox daemon`: 125, everything built so far removed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DaemonError {
    /// No async runtime.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The launcher's configuration cannot be read.
    #[error(
        "cannot read the daemon's configuration on standard input: {0} (`airlock sandbox \
         daemon` is started by `airlock sandbox create`)"
    )]
    Config(serde_json::Error),
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

/// Any failure of the binary, by command path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The command line cannot be parsed (or help or the version was asked for).
    #[error("{error}")]
    Usage {
        /// clap's report.
        error: clap::Error,
        /// Whether the command is `run` or `mcp`, whose usage errors are 125.
        run: bool,
    },
    /// `airlock run` or `airlock mcp`.
    #[error(transparent)]
    Run(#[from] RunError),
    /// `airlock proxy`.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    /// `airlock sandbox daemon`.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// `airlock sandbox` (every other subcommand).
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Sandbox(#[from] airlock_sandbox::SandboxError),
    /// `airlock ca`: exit status 1.
    #[error(transparent)]
    Ca(#[from] airlock_proxy::ca::CaError),
    /// `airlock watch`: exit status 1, printed after `airlock watch: `.
    #[error("{0}")]
    Watch(String),
    /// `airlock logs`: exit status 1.
    #[error("{0}")]
    Logs(String),
    /// `airlock man --dir`: exit status 1.
    #[error("{0}")]
    Man(String),
}

impl Error {
    /// The exit status (docs/contract.md §2): clap's own for usage (2) and for help and
    /// the version (0), except that `run` and `mcp` answer every usage error with 125.
    pub(crate) fn status(&self) -> u8 {
        match self {
            Error::Usage { error, run } => {
                use clap::error::ErrorKind;
                let informational = matches!(
                    error.kind(),
                    ErrorKind::DisplayHelp
                        | ErrorKind::DisplayVersion
                        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                );
                if *run && !informational {
                    SETUP_FAILED
                } else {
                    u8::try_from(error.exit_code()).unwrap_or(2)
                }
            }
            Error::Run(error) => error.status(),
            Error::Proxy(_) | Error::Ca(_) | Error::Watch(_) | Error::Logs(_) | Error::Man(_) => 1,
            Error::Daemon(_) => SETUP_FAILED,
            #[cfg(target_os = "linux")]
            Error::Sandbox(_) => SETUP_FAILED,
        }
    }

    /// Prints the error (clap's report as clap prints it, every other line after
    /// `airlock: `) and returns the exit status.
    pub(crate) fn report(&self) -> ExitCode {
        let lines = match self {
            Error::Usage { error, .. } => {
                let _ = error.print();
                Vec::new()
            }
            Error::Run(error) => error.lines(),
            Error::Proxy(error) => error.lines(),
            Error::Daemon(DaemonError::Setup(errors)) => errors.clone(),
            Error::Watch(message) => {
                eprintln!("airlock watch: {message}");
                Vec::new()
            }
            #[cfg(target_os = "linux")]
            Error::Sandbox(airlock_sandbox::SandboxError::Setup { why, .. })
                if why.contains("namespaces are unavailable") =>
            {
                vec![self.to_string(), DOCTOR_HINT.to_owned()]
            }
            other => vec![other.to_string()],
        };
        for line in lines {
            eprintln!("airlock: {line}");
        }
        ExitCode::from(self.status())
    }
}

#[cfg(test)]
mod tests {
    use super::{Error, ProxyError, RunError};

    #[test]
    fn exit_statuses_follow_the_contract() {
        let not_found = std::io::Error::from(std::io::ErrorKind::NotFound);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let exec = |source| RunError::Exec {
            program: "x".into(),
            source,
        };
        assert_eq!(Error::from(exec(not_found)).status(), 127);
        assert_eq!(Error::from(exec(denied)).status(), 126);
        assert_eq!(
            Error::from(RunError::Setup(vec!["bad".into()])).status(),
            125
        );
        assert_eq!(Error::from(RunError::Confine("x".into())).status(), 125);
        assert_eq!(Error::from(ProxyError::Setup(Vec::new())).status(), 1);
    }

    #[test]
    fn usage_errors_are_125_for_run_and_clap_s_own_elsewhere() {
        use clap::error::ErrorKind;
        let usage = |kind, run| Error::Usage {
            error: clap::Error::new(kind),
            run,
        };
        assert_eq!(usage(ErrorKind::UnknownArgument, true).status(), 125);
        assert_eq!(usage(ErrorKind::UnknownArgument, false).status(), 2);
        assert_eq!(usage(ErrorKind::DisplayHelp, true).status(), 0);
        assert_eq!(usage(ErrorKind::DisplayVersion, false).status(), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn jail_failures_name_the_command_and_point_at_doctor() {
        use airlock_jail::{ExecFailure, JailError};
        let missing = JailError::Exec {
            kind: ExecFailure::NotFound,
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        };
        let error = RunError::jail(missing, &["nosuchcmd".into()]);
        assert!(error.to_string().starts_with("cannot run nosuchcmd: "));
        assert_eq!(Error::from(error).status(), 127);
        let refused = JailError::NamespacesUnavailable { why: "x".into() };
        let lines = RunError::JailSetup(refused).lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1], super::DOCTOR_HINT);
    }

    #[test]
    fn setup_problems_are_one_line_each() {
        let error = RunError::Setup(vec!["a".into(), "b".into()]);
        assert_eq!(error.lines(), vec!["a".to_owned(), "b".to_owned()]);
        assert_eq!(RunError::Confine("x\ny".into()).lines().len(), 1);
    }
}
