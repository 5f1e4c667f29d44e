//! The credential files' private parent directories under `airlock run` (docs/secrets.md,
//! "Private parent directories"): `~/.claude` is shown as a directory of the run's own.
//! A login the host creates during the run stays invisible inside (and is not set aside
//! at the end); Claude Code's save pattern (temporary file + rename of a top-level file, a
//! new top-level file) works and lands on the host at the end, while a link, a FIFO, a
//! store file's name, a write-protected name and a file the host changed meanwhile are not
//! copied back; a directory too crowded to be made private stops the run before it
//! starts. `.ci/run` also runs this as an ordinary user.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::run_credential_files::{make_home, run_in};
use crate::support::run::{RunHome, namespaces_available};

const POLICY: &str = "version: 1\ncredentials:\n  files: [claude]\nfilesystem:\n  writable: \
                      [\"~/.claude\"]\n  protected: [\"~/.claude/settings.json\", \"~/.claude/hooks\"]\n";

/// Waits (bounded: 60 s) for `started` to exist, then runs `then`; returns whether it saw it.
fn when_started(
    started: PathBuf,
    then: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !started.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        then();
        started.exists()
    })
}

/// G2: a store file absent at the start that the host creates during the run (`claude
/// login` outside) is never readable inside; the host's file is left alone at the end.
#[test]
fn a_login_created_on_the_host_during_the_run_is_invisible() {
    if !namespaces_available("a_login_created_on_the_host_during_the_run_is_invisible") {
        return;
    }
    let run = RunHome::new();
    let files = vec![(".claude/projects/.keep", String::new())];
    let home = make_home(&run, &files, POLICY);
    let host = home.join(".claude/.credentials.json");
    let canary = "sk-ant-oat01-HOSTloginCANARY0123456789abcdefghijklmnopqrstuvwxyz";
    let login = format!("{{\"claudeAiOauth\":{{\"accessToken\":\"{canary}\"}}}}");
    let creator = {
        let host = host.clone();
        when_started(home.join(".claude/projects/started"), move || {
            std::fs::write(&host, login).expect("host login");
        })
    };
    let script = "touch ~/.claude/projects/started; i=0; while [ $i -lt 100 ]; do \
                  cat ~/.claude/.credentials.json 2>/dev/null; sleep 0.1; i=$((i+1)); done; \
                  echo FINISHED";
    let (stdout, stderr, status) = run_in(&run, &home, &[], script);
    assert!(
        creator.join().expect("creator"),
        "the command never started"
    );
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "FINISHED", "{stderr}");
    assert!(!stderr.contains(canary));
    assert!(
        std::fs::read_to_string(&host)
            .expect("host")
            .contains(canary),
        "the host's login was not left alone: {stderr}"
    );
    assert!(
        !home
            .join(".claude/.credentials.json.airlock-quarantine")
            .exists(),
        "{stderr}"
    );
}

/// Claude Code's save pattern in a writable `~/.claude` lands on the host; what must not
/// go back does not, and a file the host changed during the run keeps the host's version.
#[test]
fn top_level_writes_are_copied_back_with_their_limits() {
    if !namespaces_available("top_level_writes_are_copied_back_with_their_limits") {
        return;
    }
    let run = RunHome::new();
    let files = vec![
        (".claude/.claude.json", "{\"numStartups\":1}\n".to_owned()),
        (".claude/notes.txt", "start\n".to_owned()),
        (".claude/settings.json", "{}\n".to_owned()),
        (".claude/projects/.keep", String::new()),
    ];
    let home = make_home(&run, &files, POLICY);
    let dir = home.join(".claude");
    let changer = {
        let (notes, changed) = (dir.join("notes.txt"), dir.join("projects/changed"));
        when_started(dir.join("projects/started"), move || {
            std::fs::write(&notes, "host\n").expect("host change");
            std::fs::write(&changed, "").expect("host mark");
        })
    };
    let script = "set -e; cd ~/.claude; \
        printf '{\"numStartups\":2}\\n' > .claude.json.tmp.7; mv .claude.json.tmp.7 .claude.json; \
        echo fresh > new.txt; echo mine > notes.txt; touch projects/started; \
        ln -s /etc/passwd link; mkfifo fifo; mkdir -p newdir/sub; echo deep > newdir/sub/f; \
        ln -s /etc/passwd newdir/link; mkdir hooks; echo x > hooks/h.sh; \
        echo planted > .credentials.json; \
        (echo x > settings.json) 2>/dev/null && echo SETTINGS-WRITTEN; \
        echo planted-settings > settings.json.tmp; (mv settings.json.tmp settings.json) 2>/dev/null || true; \
        i=0; while [ $i -lt 100 ] && [ ! -e projects/changed ]; do sleep 0.1; i=$((i+1)); done; \
        echo DONE";
    let (stdout, stderr, status) = run_in(&run, &home, &[], script);
    assert!(
        changer.join().expect("changer"),
        "the command never started"
    );
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("DONE") && !stdout.contains("SETTINGS-WRITTEN"),
        "{stdout}\n{stderr}"
    );
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    assert_eq!(
        read(".claude.json").as_deref(),
        Some("{\"numStartups\":2}\n")
    );
    assert_eq!(read("new.txt").as_deref(), Some("fresh\n"));
    assert_eq!(read("notes.txt").as_deref(), Some("host\n"), "{stderr}");
    assert!(
        stderr.contains("notes.txt") && stderr.contains("changed on the host"),
        "{stderr}"
    );
    assert_eq!(read("settings.json").as_deref(), Some("{}\n"), "{stderr}");
    // A new directory goes back with its regular files, not its links.
    assert_eq!(read("newdir/sub/f").as_deref(), Some("deep\n"), "{stderr}");
    assert!(std::fs::symlink_metadata(dir.join("newdir/link")).is_err());
    for name in ["link", "fifo", "hooks", ".credentials.json"] {
        assert!(
            std::fs::symlink_metadata(dir.join(name)).is_err(),
            "{name} reached the host: {stderr}"
        );
    }
    let audit = run.audit_lines();
    let said = |reason: &str, name: &str| {
        audit.iter().any(|line| {
            line["kind"] == "fs"
                && line["reason"] == reason
                && line["path"].as_str().is_some_and(|p| p.ends_with(name))
        })
    };
    assert!(said("copied back", "/new.txt") && said("not copied back", "/notes.txt"));
    assert!(said("not copied back", "/hooks"), "{stderr}");
    // Unchanged write-protected files that were there are not mentioned.
    assert!(
        !stderr.contains("settings.json: the command's version"),
        "{stderr}"
    );
}

/// A directory too crowded to be made private (more than 4,096 entries) stops the run
/// before the command starts (125), naming the directory, its count and what to do:
/// falling back to the bind and the replace watch would leave a rename window.
#[test]
fn a_crowded_directory_stops_the_run_before_it_starts() {
    if !namespaces_available("a_crowded_directory_stops_the_run_before_it_starts") {
        return;
    }
    let run = RunHome::new();
    let login = "{\"claudeAiOauth\":{\"accessToken\":\"sk-ant-oat01-REALcrowdedACCESS0123456789abcdefghijklmnopqrstuv\",\"expiresAt\":1}}".to_owned();
    let mut files = vec![(".claude/.credentials.json", login)];
    let names: Vec<String> = (0..4100).map(|n| format!(".claude/f{n}")).collect();
    files.extend(names.iter().map(|name| (name.as_str(), String::new())));
    files.push((".claude/projects/.keep", String::new()));
    let home = make_home(&run, &files, POLICY);
    let (stdout, stderr, status) = run_in(&run, &home, &[], "echo STARTED");
    assert_eq!(status, 125, "{stdout}\n{stderr}");
    assert!(!stdout.contains("STARTED"), "{stdout}\n{stderr}");
    let dir = std::fs::canonicalize(home.join(".claude")).expect("dir");
    let said = format!("{} holds 4102 entries, more than the 4096", dir.display());
    assert!(stderr.contains(&said), "{stderr}");
    assert!(
        stderr.contains("remove entries from it, or turn its store off in `credentials.files`"),
        "{stderr}"
    );
    assert!(!stderr.contains("shown as it is"), "{stderr}");
}
