//! `airlock profile list|show NAME`: the built-in agent profiles (docs/agents.md), each a
//! versioned policy fragment compiled into the binary. `show` prints the fragment as it is
//! added to the policy in force. Exit 0; an unknown name is a usage error (2).

use airlock_policy::profiles::{self, PROFILES, Profile};

use crate::out::{out, outln};

/// Subcommands of `airlock profile`.
#[derive(clap::Subcommand)]
pub(crate) enum ProfileCommand {
    /// List the built-in profiles: name, version, agent.
    List,
    /// Print one profile (policy YAML, its version in the first line).
    Show {
        /// claude, codex, aider or gemini.
        #[arg(value_name = "NAME", value_parser = parse_profile)]
        profile: &'static Profile,
    },
}

/// A profile's name, for clap (`profile show`, `init --profile`).
pub(crate) fn parse_profile(text: &str) -> Result<&'static Profile, String> {
    profiles::find(text).ok_or_else(|| format!("no such profile: use one of {}", profiles::names()))
}

/// Runs one `airlock profile` subcommand.
pub(crate) fn run(cmd: ProfileCommand) -> std::process::ExitCode {
    match cmd {
        ProfileCommand::List => {
            for profile in &PROFILES {
                outln!(
                    "{:<8} version {}  {} (picked for `airlock run -- {}`)",
                    profile.name,
                    profile.version,
                    profile.agent,
                    profile.name
                );
            }
        }
        ProfileCommand::Show { profile } => out!("{}", profile.show()),
    }
    std::process::ExitCode::SUCCESS
}
