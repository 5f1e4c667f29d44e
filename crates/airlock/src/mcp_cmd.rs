//! `airlock mcp`: runs a stdio MCP server exactly as `airlock run` runs a command (same
//! flags, jail, proxy, filesystem confinement, audit log and exit statuses) and relays
//! newline-delimited JSON-RPC between airlock's own standard input/output and the
//! server's, under the policy's `mcp: - stdio: NAME` rule (docs/mcp.md). The decisions
//! are `airlock_mcp::stdio`'s; the pump is [`airlock_mcp::relay`].
//!
//! Standard output carries the protocol, so `--log -` is refused; a server without a
//! stdio rule is refused too (125, the server never starts): an MCP server wrapped by
//! airlock should have its tools named.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::ExitCode;

use airlock_session::Session;

use crate::error::RunError;
use crate::run_cmd::{self, Relay, RunArgs};

/// Flags of `airlock mcp`: every flag of `airlock run`, plus `--name`.
#[derive(clap::Args)]
pub(crate) struct McpArgs {
    /// The server's name in `mcp: - stdio: NAME` rules and in audit lines (`"server"`);
    /// default: the basename of CMD.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Every flag of `airlock run`, and the server's command.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Runs `airlock mcp` and returns the exit status (the server's, or 125/126/127 as
/// `airlock run`).
pub(crate) fn run(args: McpArgs) -> Result<ExitCode, RunError> {
    if args.run.log.as_deref() == Some("-") {
        return Err(RunError::McpLogToStdout);
    }
    let server =
        server_name(args.name.as_deref(), args.run.command.first()).map_err(RunError::Relay)?;
    run_cmd::run_with(args.run, Some(Box::new(StdioRelay { server })))
}

/// `--name`, or the basename of the command; it must be a name a policy can give
/// (`stdio: NAME`: no `/`, whitespace or control characters).
fn server_name(name: Option<&str>, command: Option<&std::ffi::OsString>) -> Result<String, String> {
    let name = match name {
        Some(name) => name.to_owned(),
        None => command
            .map(Path::new)
            .and_then(Path::file_name)
            .and_then(OsStr::to_str)
            .map(str::to_owned)
            .ok_or("cannot take the server's name from its command: give --name NAME")?,
    };
    if name.is_empty()
        || name.contains('/')
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "--name {name:?} is not a server name: give a name without `/`, spaces or control \
             characters, as in the policy's `stdio: NAME`"
        ));
    }
    Ok(name)
}

/// The relay of one named server.
struct StdioRelay {
    server: String,
}

impl Relay for StdioRelay {
    fn start(
        self: Box<Self>,
        session: &Session,
        to_command: OwnedFd,
        from_command: OwnedFd,
    ) -> Result<tokio::task::JoinHandle<()>, String> {
        let Some(rule) = session.policy.stdio_rule(&self.server) else {
            return Err(format!(
                "no `mcp` rule for the stdio server {0:?}: add `mcp: [{{stdio: {0}, tools: \
                 {{allow: [...], deny: [...]}}}}]` to a --policy file, or give the rule's \
                 name with --name (docs/mcp.md)",
                self.server
            ));
        };
        airlock_mcp::relay::start(
            rule.clone(),
            self.server,
            session.audit.clone(),
            to_command,
            from_command,
        )
        .map_err(|e| format!("cannot relay the server's standard input and output: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::server_name;

    #[test]
    fn the_name_defaults_to_the_commands_basename_and_must_be_plain() {
        let npx = std::ffi::OsString::from("/usr/bin/npx");
        assert_eq!(server_name(None, Some(&npx)).as_deref(), Ok("npx"));
        assert_eq!(server_name(Some("fs"), Some(&npx)).as_deref(), Ok("fs"));
        assert!(server_name(Some("a b"), Some(&npx)).is_err());
        assert!(server_name(Some("a/b"), Some(&npx)).is_err());
        assert!(server_name(Some(""), Some(&npx)).is_err());
    }
}
