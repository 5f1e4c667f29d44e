//! The `airlock` command line: parses flags, wires the crates together, prints errors.
//!
//! Exit statuses follow docs/contract.md §2: usage errors are 2 (clap's own), `policy
//! check` returns 0/1, `policy explain` 0 (allow) / 1 (deny) / 2 (error).

mod ca_cmd;
mod mcp_cmd;
mod mcp_relay;
mod policy_args;
mod policy_cmd;
mod policy_suggest;
mod proxy_cmd;
// Unsafe allowed in this module only: libc calls, each under its SAFETY comment.
#[allow(unsafe_code)]
mod run_cmd;
#[cfg(target_os = "linux")]
mod sandbox_cmd;
#[cfg(target_os = "linux")]
// Unsafe allowed in this module only: one dup2, under its SAFETY comment.
#[allow(unsafe_code)]
mod sandbox_daemon;
mod watch_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// airlock: run AI coding agents with their network cut down to a policy.
#[derive(Parser)]
#[command(name = "airlock", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command with its network cut down to a policy.
    Run(run_cmd::RunArgs),
    /// Run a stdio MCP server in the jail, relaying JSON-RPC under the policy's tool rules.
    Mcp(mcp_cmd::McpArgs),
    /// Run the intercepting proxy as a daemon.
    Proxy(proxy_cmd::ProxyArgs),
    /// Validate, explain, import and suggest policies.
    #[command(subcommand)]
    Policy(policy_cmd::PolicyCommand),
    /// Manage the local CA that signs interception certificates.
    #[command(subcommand)]
    Ca(ca_cmd::CaCommand),
    /// Named, long-lived sandboxes for orchestrators: create, exec, ls, rm, export.
    #[cfg(target_os = "linux")]
    #[command(subcommand)]
    Sandbox(sandbox_cmd::SandboxCommand),
    /// Watch a run's or a proxy's decisions live and answer `--mode ask` prompts.
    Watch(watch_cmd::WatchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|error| run_cmd::exit_on_parse_error(error));
    match cli.command {
        Command::Run(args) => run_cmd::run(args),
        Command::Mcp(args) => mcp_cmd::run(args),
        Command::Proxy(args) => proxy_cmd::run(args),
        Command::Policy(cmd) => policy_cmd::run(cmd),
        Command::Ca(cmd) => ca_cmd::run(cmd),
        #[cfg(target_os = "linux")]
        Command::Sandbox(cmd) => sandbox_cmd::run(cmd),
        Command::Watch(args) => watch_cmd::run(args),
    }
}
