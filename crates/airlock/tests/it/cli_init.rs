//! `airlock init` and `airlock profile` through the real binary (docs/contract.md, "Policy
//! discovery and agent profiles"): the starter passes `airlock policy check`, an existing
//! file is kept without `--force`, `--profile` writes the agent's key as a secret, and
//! `profile list|show` print the built-in profiles with their versions.

use std::process::Command;
use std::time::Duration;

use crate::support::clients::{BoundedOutput, run_bounded};

/// `airlock ARGS...` in `dir`, bounded in time.
fn airlock(dir: &std::path::Path, args: &[&str]) -> BoundedOutput {
    let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
    command.args(args).current_dir(dir);
    run_bounded(&mut command, Duration::from_secs(30))
}

fn code(output: &BoundedOutput) -> i32 {
    output.status.and_then(|s| s.code()).expect("exited")
}

fn stdout(output: &BoundedOutput) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn init_writes_a_starter_that_checks_and_keeps_an_existing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = airlock(dir.path(), &["init"]);
    assert_eq!(code(&written), 0, "{}", written.stderr);
    let path = dir.path().join("airlock.yaml");
    let text = std::fs::read_to_string(&path).expect("airlock.yaml");
    assert!(text.contains("version: 1") && text.contains("# "), "{text}");
    let check = airlock(dir.path(), &["policy", "check", "airlock.yaml"]);
    assert_eq!(code(&check), 0, "{}{}", stdout(&check), check.stderr);
    // Again: refused, the file unchanged.
    std::fs::write(&path, "version: 1\n# mine\n").expect("edit");
    let again = airlock(dir.path(), &["init"]);
    assert_eq!(code(&again), 1, "{}", again.stderr);
    assert!(again.stderr.contains("--force"), "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(&path).expect("kept"),
        "version: 1\n# mine\n"
    );
    // --force replaces it, here with an agent's starter.
    let forced = airlock(dir.path(), &["init", "--force", "--profile", "codex"]);
    assert_eq!(code(&forced), 0, "{}", forced.stderr);
    let text = std::fs::read_to_string(&path).expect("replaced");
    assert!(text.contains("OPENAI_API_KEY: {preset: openai}"), "{text}");
    assert!(text.contains("#       - host: api.openai.com"), "{text}");
    let check = airlock(dir.path(), &["policy", "check", "airlock.yaml"]);
    assert_eq!(code(&check), 0, "{}{}", stdout(&check), check.stderr);
    let unknown = airlock(dir.path(), &["init", "--profile", "cursor"]);
    assert_eq!(code(&unknown), 2, "{}", unknown.stderr);
}

#[test]
fn profile_list_and_show_print_the_built_in_profiles_with_their_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = stdout(&airlock(dir.path(), &["profile", "list"]));
    for (name, version) in [("claude", 2), ("codex", 2), ("aider", 1), ("gemini", 1)] {
        let version = format!("version {version} ");
        assert!(
            list.lines()
                .any(|l| l.starts_with(name) && l.contains(&version)),
            "{list}"
        );
    }
    let shown = airlock(dir.path(), &["profile", "show", "claude"]);
    assert_eq!(code(&shown), 0, "{}", shown.stderr);
    let text = stdout(&shown);
    assert!(
        text.starts_with("# airlock profile `claude` (Claude Code), version 2."),
        "{text}"
    );
    for fragment in [
        "host: api.anthropic.com",
        "~/.claude.json",
        "~/.claude/settings.json",
    ] {
        assert!(text.contains(fragment), "{fragment}: {text}");
    }
    // What `show` prints is a policy `policy check` accepts.
    std::fs::write(dir.path().join("claude.yaml"), &text).expect("write");
    let check = airlock(dir.path(), &["policy", "check", "claude.yaml"]);
    assert_eq!(code(&check), 0, "{}{}", stdout(&check), check.stderr);
    let unknown = airlock(dir.path(), &["profile", "show", "cursor"]);
    assert_eq!(code(&unknown), 2, "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("claude, codex, aider, gemini"),
        "{}",
        unknown.stderr
    );
}
