//! `airlock watch`: attaches the live view (`airlock-watch`, docs/watch.md) to the admin
//! API of a run or a proxy. Exit status 0 when the user quits or the run's event stream
//! ends, 1 when the API cannot be reached or answers with an error, 2 for usage errors.

use std::io::IsTerminal;
use std::path::PathBuf;

use airlock_control::Listen;
use airlock_watch::{Client, app};

/// `airlock watch` flags.
#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// The admin API: `unix:PATH` or a TCP address. Default: the newest `airlock run` of
    /// this user.
    #[arg(long, value_name = "unix:PATH|ADDR")]
    pub admin: Option<Listen>,
    /// A file holding the admin API's bearer token.
    #[arg(long = "admin-token-file", value_name = "F")]
    pub admin_token_file: Option<PathBuf>,
    /// Print the events as JSON lines (one audit line each) instead of the full-screen view.
    #[arg(long)]
    pub json: bool,
}

/// Runs `airlock watch`.
pub fn run(args: WatchArgs) -> Result<(), String> {
    let admin = match args.admin {
        Some(admin) => admin,
        None => Listen::Unix(airlock_session::run_socket::newest_run().ok_or(
            "no running `airlock run` of this user was found: start one, or give \
             --admin unix:PATH or ADDR (a proxy's admin API)",
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
