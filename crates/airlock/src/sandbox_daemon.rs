//! `airlock sandbox daemon` and `airlock sandbox hold`: the entry points of the
//! `airlock-sandbox-daemon` crate (started by `airlock sandbox create`, never by hand, the
//! daemon's configuration on standard input). This module reads the configuration, runs
//! the daemon on the binary's runtime and turns its failures into [`DaemonError`] (printed
//! to the daemon log, which `create` shows; exit 125).

use std::process::ExitCode;

use airlock_sandbox::DaemonConfig;

use crate::error::DaemonError;
use crate::run_cmd;

pub(crate) use airlock_sandbox_daemon::ADMIN_SOCKET;

/// Runs the daemon with the configuration its launcher writes on standard input; returns
/// when the sandbox is torn down.
pub(crate) fn run() -> Result<ExitCode, DaemonError> {
    let config = DaemonConfig::read_from(std::io::stdin().lock()).map_err(DaemonError::Config)?;
    run_cmd::on_runtime(airlock_sandbox_daemon::serve(config))
        .map_err(DaemonError::Runtime)?
        .map_err(from_library)?;
    Ok(ExitCode::SUCCESS)
}

/// The binary's error for a failure of the daemon library.
fn from_library(error: airlock_sandbox_daemon::DaemonError) -> DaemonError {
    use airlock_sandbox_daemon::DaemonError as Library;
    match error {
        Library::Signals(e) => DaemonError::Signals(e),
        Library::Setup(errors) => DaemonError::Setup(errors),
        Library::Proxy(e) => DaemonError::Proxy(e),
        Library::Serve(why) => DaemonError::Serve(why),
    }
}

/// `airlock sandbox hold`: the process a local sandbox's namespaces are kept alive by.
pub(crate) fn hold() -> ExitCode {
    airlock_sandbox_daemon::hold()
}
