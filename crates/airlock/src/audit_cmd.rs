//! `airlock audit verify FILE...`: checks the hash chain and the signed checkpoints of
//! audit log files, oldest first (`audit.jsonl.5 ... audit.jsonl.1 audit.jsonl`), and
//! names the first line altered, removed, reordered, inserted or cut off
//! (`airlock_audit::verify`; docs/operations.md, "What the audit record proves").
//!
//! Exit statuses (docs/contract.md §2): 0 the files verify; 1 they do not (the line is
//! named on stderr); 2 usage errors, a file or the public key that cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

use airlock_audit::signing::{PublicKey, public_path};
use airlock_audit::verify::{Options, verify};

use crate::out::outln;

/// `airlock audit` subcommands.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum AuditCommand {
    /// Check audit log files (oldest first) for lines altered, removed, reordered, inserted
    /// or cut off, and their checkpoints' signatures.
    Verify(VerifyArgs),
}

/// `airlock audit verify` flags.
#[derive(clap::Args, Debug)]
pub(crate) struct VerifyArgs {
    /// The log files, oldest first: `audit.jsonl.2 audit.jsonl.1 audit.jsonl`.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The public key checkpoints are signed with (default: `audit-key.pub.pem` in the CA
    /// directory, `airlock ca path`).
    #[arg(long, value_name = "PATH")]
    pub key: Option<PathBuf>,
    /// The log is still being written: lines after its last checkpoint are accepted
    /// (they are not signed yet).
    #[arg(long)]
    pub live: bool,
}

/// Runs `airlock audit`.
pub(crate) fn run(command: AuditCommand) -> ExitCode {
    match command {
        AuditCommand::Verify(args) => verify_files(&args),
    }
}

fn verify_files(args: &VerifyArgs) -> ExitCode {
    let key_path = match &args.key {
        Some(path) => path.clone(),
        None => match airlock_proxy::ca::default_dir() {
            Ok(dir) => public_path(&dir),
            Err(error) => return usage(&format!("no --key and no CA directory: {error}")),
        },
    };
    let key = match PublicKey::read(&key_path) {
        Ok(key) => key,
        Err(error) => return usage(&format!("the public key: {error}")),
    };
    let mut files = Vec::with_capacity(args.files.len());
    for path in &args.files {
        match std::fs::read(path) {
            Ok(bytes) => files.push((path.display().to_string(), bytes)),
            Err(error) => return usage(&format!("cannot read {}: {error}", path.display())),
        }
    }
    let options = Options {
        key,
        live: args.live,
    };
    match verify(&files, &options) {
        Ok(report) => {
            let start = if report.from_start {
                "from its first line"
            } else {
                "from a checkpoint (the files before it were rotated away or not given)"
            };
            outln!(
                "verified: {} line(s) in {} file(s), {} signed checkpoint(s) (key {}); the \
                 chain runs {start}",
                report.lines,
                files.len(),
                report.checkpoints,
                options.key.id()
            );
            if report.unsigned > 0 {
                outln!(
                    "{} line(s) after the last checkpoint are chained but not signed yet (--live)",
                    report.unsigned
                );
            }
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("airlock audit verify: {failure}");
            ExitCode::from(1)
        }
    }
}

fn usage(message: &str) -> ExitCode {
    eprintln!("airlock audit verify: {message}");
    ExitCode::from(2)
}
