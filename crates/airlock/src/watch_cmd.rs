//! `airlock watch`: attaches the live view (`airlock-watch`, docs/watch.md) to the admin
//! API of a run, a proxy or a sandbox. Exit status 0 when the user quits or the run's
//! event stream ends, 1 when the API cannot be reached or answers with an error, 2 for
//! usage errors.

use std::io::IsTerminal;
use std::path::PathBuf;

use airlock_control::Listen;
use airlock_watch::{Client, app};

/// `airlock watch` flags.
#[derive(clap::Args, Debug)]
pub(crate) struct WatchArgs {
    /// The admin API: `unix:PATH` or a TCP address. Default: the newest `airlock run` of
    /// this user.
    #[arg(long, value_name = "unix:PATH|ADDR", conflicts_with = "sandbox")]
    pub admin: Option<Listen>,
    /// A file holding the admin API's bearer token.
    #[arg(long = "admin-token-file", value_name = "F")]
    pub admin_token_file: Option<PathBuf>,
    /// Attach to the sandbox NAME (`airlock sandbox create NAME`) instead of a run.
    #[arg(long, value_name = "NAME")]
    pub sandbox: Option<String>,
    /// Print the events as JSON lines (one audit line each) instead of the full-screen view.
    #[arg(long)]
    pub json: bool,
}

/// Runs `airlock watch`.
pub(crate) fn run(args: WatchArgs) -> Result<(), String> {
    let admin = match (args.admin, &args.sandbox) {
        (Some(admin), _) => admin,
        (None, Some(name)) => Listen::Unix(sandbox_socket(name)?),
        (None, None) => Listen::Unix(airlock_session::run_socket::newest_run().ok_or(
            "no running `airlock run` of this user was found: start one, or give \
             --admin unix:PATH or ADDR (a proxy's admin API), or --sandbox NAME",
        )?),
    };
    let token = airlock_session::admin::read_token(Some(&admin), args.admin_token_file.as_deref())
        .map_err(|errors| errors.join("; "))?;
    if !args.json && !std::io::stdout().is_terminal() {
        return Err("standard output is not a terminal: use --json for a stream of lines".into());
    }
    let client = Client::new(admin, token);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    let result = if args.json {
        runtime.block_on(app::print_json(client))
    } else {
        runtime.block_on(app::run(client))
    };
    result.map_err(|e| e.to_string())
}

/// The admin socket of the running sandbox `name`: `<root>/<name>/control/admin.sock`,
/// which its daemon serves (docs/watch.md).
fn sandbox_socket(name: &str) -> Result<PathBuf, String> {
    let name = airlock_sandbox::SandboxName::parse(name).map_err(|e| format!("--sandbox: {e}"))?;
    let root = airlock_sandbox::state::default_root().map_err(|e| e.to_string())?;
    let socket = root
        .join(name.as_str())
        .join("control")
        .join(crate::sandbox_daemon::ADMIN_SOCKET);
    if !socket.exists() {
        return Err(format!(
            "no running sandbox named {name} serves an admin API ({} is missing): \
             `airlock sandbox ls` lists them",
            socket.display()
        ));
    }
    Ok(socket)
}
