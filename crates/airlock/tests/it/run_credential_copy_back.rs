//! The bounds of the copy-back of a run's private parent directories (docs/secrets.md,
//! "Private parent directories"; review 15 of issue 35): the copy-back never takes the
//! host directory past 4,096 entries (so the next run still makes it private), one budget
//! of entries and bytes bounds the whole copy-back of a run (checked before reading: the
//! end of a maximal attack takes seconds), and a name a store file's link leads to is
//! never written, in the directory itself or below it. `.ci/run` also runs this as an
//! ordinary user.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::run_credential_files::{make_home, run_in};
use crate::support::run::{RunHome, namespaces_available};

const POLICY: &str = "version: 1\ncredentials:\n  files: [claude]\nfilesystem:\n  writable: \
                      [\"~/.claude\"]\n";

/// A Claude login in the store file's shape.
const LOGIN: &str = "{\"claudeAiOauth\":{\"accessToken\":\"sk-ant-oat01-REALcopyBACK0123456789abcdefghijklmnopqrstuvwxyz\",\"expiresAt\":1}}";

/// The entries of `dir`.
fn entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).expect("list").count()
}

/// Whether the audit says `reason` of a path ending in `end`.
fn audited(run: &RunHome, reason: &str, end: &str) -> bool {
    run.audit_lines().iter().any(|line| {
        line["kind"] == "fs"
            && line["reason"] == reason
            && line["path"].as_str().is_some_and(|p| p.ends_with(end))
    })
}

/// F1: new names that would take `~/.claude` past 3,072 entries (three quarters of the
/// 4,096 a private directory may hold; review 16) are left out (said,
/// counted, audited), and the next run still makes it private.
#[test]
fn a_crowded_copy_back_stays_under_the_limit() {
    if !namespaces_available("a_crowded_copy_back_stays_under_the_limit") {
        return;
    }
    let run = RunHome::new();
    let mut files = vec![(".claude/.credentials.json", LOGIN.to_owned())];
    let names: Vec<String> = (0..3066).map(|n| format!(".claude/f{n}")).collect();
    files.extend(names.iter().map(|name| (name.as_str(), String::new())));
    let home = make_home(&run, &files, POLICY);
    let dir = home.join(".claude");
    assert_eq!(entries(&dir), 3067);
    let script = "cd ~/.claude && for n in $(seq 1 20); do echo x > new$n; done; echo DONE";
    let (stdout, stderr, status) = run_in(&run, &home, &[], script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "DONE", "{stderr}");
    assert_eq!(entries(&dir), 3072, "{stderr}");
    assert!(stderr.contains("15 new names left out"), "{stderr}");
    assert!(audited(&run, "not copied back", "/.claude"), "{stderr}");
    let (stdout, stderr, status) = run_in(&run, &home, &[], "echo AGAIN");
    assert_eq!((status, stdout.trim()), (0, "AGAIN"), "{stderr}");
    assert!(stderr.contains("private to the run"), "{stderr}");
    assert!(!stderr.contains("shown as it is"), "{stderr}");
}

/// F2: ten new directories of 4,000 files each and 72 MiB of large files: one budget
/// (4,096 entries, 64 MiB) for the whole copy-back, checked before reading; the end takes
/// seconds and says once how much was left out.
#[test]
fn a_maximal_copy_back_ends_within_seconds() {
    if !namespaces_available("a_maximal_copy_back_ends_within_seconds") {
        return;
    }
    let run = RunHome::new();
    let files = vec![
        (".claude/.credentials.json", LOGIN.to_owned()),
        (".claude/projects/.keep", String::new()),
    ];
    let home = make_home(&run, &files, POLICY);
    // `projects` is bound live: the end mark lands on the host at once.
    let script = "set -e; cd ~/.claude; for d in 0 1 2 3 4 5 6 7 8 9; do mkdir d$d; \
                  (cd d$d && seq 1 4000 | xargs touch); done; mkdir big; \
                  for n in 1 2 3 4 5 6 7 8 9; do head -c 8388608 /dev/zero > big/b$n; done; \
                  date +%s > projects/ended; echo DONE";
    let (stdout, stderr, status) = run_in(&run, &home, &[], script);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    let ended = std::fs::read_to_string(home.join(".claude/projects/ended")).expect("mark");
    let ended: u64 = ended.trim().parse().expect("seconds");
    let took = Duration::from_secs(now.saturating_sub(ended));
    assert!(took <= Duration::from_secs(10), "the end took {took:?}");
    let dir = home.join(".claude");
    let mut copied = 0;
    let mut bytes = 0;
    for sub in std::fs::read_dir(&dir).expect("list").flatten() {
        if sub.path().is_dir() && sub.file_name() != "projects" {
            copied += 1;
            for file in std::fs::read_dir(sub.path()).expect("sub").flatten() {
                copied += 1;
                bytes += file.metadata().expect("metadata").len();
            }
        }
    }
    assert!(copied <= 4096, "{copied} entries copied back");
    assert!(bytes <= 64 << 20, "{bytes} bytes copied back");
    let left_out = stderr
        .lines()
        .filter(|line| line.contains("entries left out"))
        .collect::<Vec<_>>();
    assert_eq!(left_out.len(), 1, "{stderr}");
    let count: usize = left_out[0]
        .split(" entries left out")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(count > 40_000 - 4096, "{count}: {stderr}");
    assert!(stderr.lines().count() < 100, "{stderr}");
    assert!(audited(&run, "not copied back", "/.claude"), "{stderr}");
}

/// F3: `.credentials.json` is a link to a name that is absent (beside it, or in a
/// directory below): the command could create that name and have the user's store hold
/// its token. Since review 16 (which passed the copy-back's check of the link's targets
/// through links and aliases) such a store stops the run before the command starts.
#[test]
fn a_store_link_to_an_absent_name_stops_the_run() {
    if !namespaces_available("a_store_link_to_an_absent_name_stops_the_run") {
        return;
    }
    for target in ["creds-real.json", "sub/creds.json"] {
        let run = RunHome::new();
        let files = vec![(".claude/projects/.keep", String::new())];
        let home = make_home(&run, &files, POLICY);
        let dir = home.join(".claude");
        std::os::unix::fs::symlink(target, dir.join(".credentials.json")).expect("link");
        if let Some(uid) = crate::support::test_user::uid() {
            crate::support::test_user::chown_tree(&run.scratch(), uid);
        }
        let script = format!("mkdir -p ~/.claude/sub; echo planted > ~/.claude/{target}; echo RAN");
        let (stdout, stderr, status) = run_in(&run, &home, &[], &script);
        assert_eq!(status, 125, "{target}: {stdout}\n{stderr}");
        assert!(!stdout.contains("RAN"), "{target}: the command ran");
        assert!(
            stderr.contains("is a symbolic link that does not lead to a file"),
            "{target}: {stderr}"
        );
        assert!(
            std::fs::symlink_metadata(dir.join(target)).is_err(),
            "{target} reached the host: {stderr}"
        );
    }
}
