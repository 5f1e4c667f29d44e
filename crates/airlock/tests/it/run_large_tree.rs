//! Any working directory (docs/security.md, "What the command can read and write"): the
//! start-up walk for write-protected names is bounded in time, not in entries, so a tree of
//! 600,000 entries starts and stays protected, and a walk that runs out of time leaves what
//! it did not reach read-only instead of refusing to start. As root, and as the test user
//! when `AIRLOCK_TEST_UID` is set (`.ci/run`). And a failing command that names a host file
//! under the private /tmp gets a note saying why it was not there.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Instant;

use crate::support::run::{self, RunHome};

/// Writes `dirs` × `files` empty files under `root/big`, and protected names deep inside
/// (owned by the test user, when there is one, so that only the jail stops the writes).
fn plant_tree(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        let dir = root
            .join(format!("big/d{:03}/sub", d % 100))
            .join(format!("e{d}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for f in 0..files {
            std::fs::File::create(dir.join(format!("f{f}"))).expect("file");
        }
    }
    for (file, text) in [
        ("big/d042/sub/e42/.vscode/settings.json", "{}\n"),
        ("big/d099/sub/e599/inner/.git/config", "[core]\n"),
    ] {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
        if let Some(uid) = crate::support::test_user::uid() {
            crate::support::test_user::chown_tree(path.parent().expect("parent"), uid);
        }
    }
}

/// Tries to append to both deep protected files and to write a new project file.
const PROBE: &str = "echo x >> big/d042/sub/e42/.vscode/settings.json 2>/dev/null && echo wrote=vscode; \
     echo x >> big/d099/sub/e599/inner/.git/config 2>/dev/null && echo wrote=gitconfig; \
     echo ok > made && echo made=yes";

#[test]
fn a_working_directory_of_600k_entries_starts_and_keeps_deep_names_protected() {
    if !run::namespaces_available("a_working_directory_of_600k_entries_starts") {
        return;
    }
    let home = RunHome::new();
    // Not under /tmp: a tree this large there would also slow every other test's scan of
    // /tmp for host sockets (which gives up past its bound).
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let scratch = work.path().join("project");
    std::fs::create_dir(&scratch).expect("project");
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    crate::support::test_user::adopt(&scratch);
    plant_tree(&scratch, 600, 1000);
    let started = Instant::now();
    let mut command = home.command();
    command
        .args(["run", "--", "sh", "-c", PROBE])
        .env("AIRLOCK_HOME", home.airlock_home())
        .current_dir(&scratch);
    let output = crate::support::clients::run_bounded(&mut command, run::RUN_TIMEOUT);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(run::code(&output), 0, "{}\n{stdout}", output.stderr);
    assert!(
        !stdout.contains("wrote="),
        "a protected name was written: {stdout}"
    );
    assert!(
        stdout.contains("made=yes"),
        "the project was not writable: {stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(scratch.join("big/d042/sub/e42/.vscode/settings.json"))
            .expect("read"),
        "{}\n"
    );
    // Printed, not asserted: timing belongs to docs/benchmarks.md.
    eprintln!("600k entries: airlock run -- sh took {took:?}");
}

#[test]
fn a_walk_out_of_time_leaves_the_rest_read_only_and_says_so() {
    if !run::namespaces_available("a_walk_out_of_time_leaves_the_rest_read_only") {
        return;
    }
    let home = RunHome::new();
    let scratch = home.scratch();
    plant_tree(&scratch, 100, 1);
    let output = home.run_with_env(
        &["--", "sh", "-c", PROBE],
        &[("AIRLOCK_WALK_SECONDS", "0.000001")],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The command's own status: `made` cannot be written, and nothing else either.
    assert_ne!(run::code(&output), 0, "{}\n{stdout}", output.stderr);
    assert_ne!(run::code(&output), 125, "{}\n{stdout}", output.stderr);
    assert!(
        !stdout.contains("wrote=") && !stdout.contains("made=yes"),
        "{stdout}"
    );
    assert!(
        output.stderr.contains("ran out of time") && output.stderr.contains("AIRLOCK_WALK_SECONDS"),
        "no note on stderr: {}",
        output.stderr
    );
    assert!(!scratch.join("made").exists());
}

#[test]
fn a_command_failing_on_a_host_temporary_file_gets_a_note() {
    if !run::namespaces_available("a_command_failing_on_a_host_temporary_file_gets_a_note") {
        return;
    }
    let home = RunHome::new();
    let script = tempfile::Builder::new()
        .suffix(".sh")
        .tempfile_in("/tmp")
        .expect("host /tmp file");
    std::fs::write(script.path(), "echo hello\n").expect("write");
    let path = script.path().display().to_string();
    let output = home.run(&["--", "sh", &path]);
    assert_ne!(run::code(&output), 0, "{}", output.stderr);
    assert!(
        output
            .stderr
            .contains(&format!("note: {path} exists on the host"))
            && output.stderr.contains("private, empty /tmp"),
        "no note naming {path}: {}",
        output.stderr
    );
    // A command that succeeds gets no note.
    let output = home.run(&["--", "sh", "-c", &format!("test -e {path} || true")]);
    assert_eq!(run::code(&output), 0, "{}", output.stderr);
    assert!(
        !output.stderr.contains("exists on the host"),
        "{}",
        output.stderr
    );
}
