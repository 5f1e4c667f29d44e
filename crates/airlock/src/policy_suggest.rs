//! `airlock policy suggest [--base POLICY]... AUDIT...`: reads audit logs and prints the
//! `network.allow` entries that would have allowed what they show refused for host,
//! method or path (or let through with `"would":"deny"` in report mode), as a complete
//! native policy on stdout. The grouping and rendering are `airlock_policy::suggest`'s;
//! this module only reads the files.
//!
//! Exit statuses (docs/contract.md §2): 0 the suggestion is on stdout (possibly with
//! nothing to suggest); 1 an audit file cannot be read or has a malformed line (each named
//! `FILE:LINE`), or a `--base` policy is invalid; 2 usage error.

use std::io::Read;
use std::process::ExitCode;

use airlock_policy::suggest::{self, Seen};
use airlock_policy::{CompiledPolicy, Policy};

use crate::out::out;
use airlock_session::sources::read_policy_source;

/// The most malformed lines reported before the rest are only counted.
const MAX_REPORTED: usize = 10;

/// Runs `policy suggest` (`--by-process`: one entry per host and program).
pub(crate) fn run(bases: &[String], audits: &[String], by_process: bool) -> ExitCode {
    let base = match load_base(bases) {
        Ok(base) => base,
        Err(errors) => return fail(&errors),
    };
    let seen = match read_audits(audits) {
        Ok(seen) => seen,
        Err(errors) => return fail(&errors),
    };
    let suggestion = suggest::suggest_by(&seen, &base, by_process);
    for (host, why) in &suggestion.skipped {
        eprintln!("airlock: not suggested: {host}: {why}");
    }
    out!("{}", suggestion.render());
    ExitCode::SUCCESS
}

fn fail(errors: &[String]) -> ExitCode {
    for error in errors.iter().take(MAX_REPORTED) {
        eprintln!("airlock: {error}");
    }
    if errors.len() > MAX_REPORTED {
        eprintln!("airlock: ... and {} more", errors.len() - MAX_REPORTED);
    }
    ExitCode::from(1)
}

/// The `--base` policies combined and compiled (an empty policy without any).
fn load_base(bases: &[String]) -> Result<CompiledPolicy, Vec<String>> {
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    for spec in bases {
        match read_policy_source(spec) {
            Ok((name, policy)) => sources.push((Some(name), policy)),
            Err(mut errs) => errors.append(&mut errs),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let policy = Policy::combine(sources).map_err(|e| vec![format!("--base: {e}")])?;
    CompiledPolicy::compile(&policy).map_err(|e| vec![format!("--base: {e}")])
}

/// Every line of every audit file (`-` is standard input), parsed; every malformed line
/// is an error naming `FILE:LINE`.
fn read_audits(audits: &[String]) -> Result<Vec<Seen>, Vec<String>> {
    let mut seen = Vec::new();
    let mut errors = Vec::new();
    for file in audits {
        let text = match read_text(file) {
            Ok(text) => text,
            Err(e) => {
                errors.push(format!("{file}: cannot read the audit log: {e}"));
                continue;
            }
        };
        for (index, line) in text.lines().enumerate() {
            match suggest::parse_line(line) {
                Ok(line) => seen.push(line),
                Err(e) => errors.push(format!("{file}:{}: {e}", index + 1)),
            }
        }
    }
    if errors.is_empty() {
        Ok(seen)
    } else {
        Err(errors)
    }
}

fn read_text(file: &str) -> std::io::Result<String> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        return Ok(text);
    }
    std::fs::read_to_string(file)
}
