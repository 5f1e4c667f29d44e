//! The `airlock` command line: parses flags into the typed configurations of
//! `airlock-session` and the other crates, runs the command, prints errors.
//!
//! Exit statuses follow docs/contract.md §2: every command path returns its own error type
//! ([`error`]), which [`try_main`]'s caller prints and turns into the status: usage errors
//! are 2 (clap's own; 125 for `run` and `mcp`), `run`/`mcp`/`sandbox` failures 125,
//! `proxy`, `ca` and `watch` failures 1. `policy` decides its own statuses: `check` 0/1,
//! `explain` 0 (allow) / 1 (deny) / 2 (error); `doctor` 0 (ready) / 1 (something `run`
//! needs is missing); `logs` 0 / 1; `init` 0 (written) / 1; `profile` 0. Printing
//! commands end quietly when their reader goes away ([`out`]).

#![warn(unreachable_pub, missing_docs)]

// The output macros, before the modules that use them.
mod out;

mod audit_cmd;
mod audit_otlp_args;
mod ca_cmd;
mod completions_cmd;
#[cfg(target_os = "linux")]
mod doctor_cmd;
mod error;
// Unsafe allowed in this module only: the allocator's tuning call, under its SAFETY comment.
#[allow(unsafe_code)]
mod heap;
mod init_cmd;
mod logs_cmd;
mod mcp_cmd;
mod policy_args;
mod policy_cmd;
mod policy_suggest;
mod profile_cmd;
mod profile_guard;
mod proxy_cmd;
mod run_cmd;
#[cfg(target_os = "linux")]
mod sandbox_cmd;
#[cfg(target_os = "linux")]
mod sandbox_daemon;
mod watch_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::Error;

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
    /// Write a commented starter policy, ./airlock.yaml (`--profile NAME` for an agent).
    Init(init_cmd::InitArgs),
    /// List and show the built-in agent profiles (claude, codex, aider, gemini).
    #[command(subcommand)]
    Profile(profile_cmd::ProfileCommand),
    /// Manage the local CA that signs interception certificates.
    #[command(subcommand)]
    Ca(ca_cmd::CaCommand),
    /// Named, long-lived sandboxes for orchestrators: create, exec, ls, rm, export.
    #[cfg(target_os = "linux")]
    #[command(subcommand)]
    Sandbox(sandbox_cmd::SandboxCommand),
    /// Watch a run's or a proxy's decisions live and answer `--mode ask` prompts.
    Watch(watch_cmd::WatchArgs),
    /// Check that this machine can run the jail: namespaces, Landlock, cgroups, the CA...
    #[cfg(target_os = "linux")]
    Doctor(doctor_cmd::DoctorArgs),
    /// List, show and prune the audit logs of past runs.
    Logs(logs_cmd::LogsArgs),
    /// Verify audit logs: their hash chain and signed checkpoints.
    #[command(subcommand)]
    Audit(audit_cmd::AuditCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions_cmd::CompletionsArgs),
    /// Print the manual page (roff), or write one page per command into a directory.
    Man(completions_cmd::ManArgs),
}

fn main() -> ExitCode {
    heap::keep_freed_memory();
    match try_main() {
        Ok(status) => status,
        Err(error) => error.report(),
    }
}

/// Parses the command line and runs the command: its exit status, or the error that ends
/// it.
fn try_main() -> Result<ExitCode, Error> {
    let cli = Cli::try_parse().map_err(|error| Error::Usage {
        error,
        run: is_run_command(),
    })?;
    let status = match cli.command {
        Command::Run(args) => run_cmd::run(args)?,
        Command::Mcp(args) => mcp_cmd::run(args)?,
        Command::Proxy(args) => proxy_cmd::run(args)?,
        Command::Policy(cmd) => policy_cmd::run(cmd),
        Command::Init(args) => init_cmd::run(&args),
        Command::Profile(cmd) => profile_cmd::run(cmd),
        Command::Ca(cmd) => {
            ca_cmd::run(cmd)?;
            ExitCode::SUCCESS
        }
        #[cfg(target_os = "linux")]
        Command::Sandbox(cmd) => sandbox_cmd::run(cmd)?,
        Command::Watch(args) => {
            watch_cmd::run(args).map_err(Error::Watch)?;
            ExitCode::SUCCESS
        }
        #[cfg(target_os = "linux")]
        Command::Doctor(args) => doctor_cmd::run(&args),
        Command::Logs(args) => logs_cmd::run(args).map_err(Error::Logs)?,
        Command::Audit(cmd) => audit_cmd::run(cmd),
        Command::Completions(args) => completions_cmd::completions(&args, cli_command()),
        Command::Man(args) => completions_cmd::man(&args, cli_command()).map_err(Error::Man)?,
    };
    Ok(status)
}

/// The command line's definition, for the completion scripts and the manual pages.
fn cli_command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Whether the subcommand is `run` or `mcp` (the first argument not starting with `-`),
/// whose usage errors are failures of airlock itself (125, docs/contract.md §2).
fn is_run_command() -> bool {
    std::env::args_os()
        .skip(1)
        .find(|arg| !arg.to_string_lossy().starts_with('-'))
        .is_some_and(|arg| arg == "run" || arg == "mcp")
}
