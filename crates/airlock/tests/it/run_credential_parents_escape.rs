//! Review 15's F0 (docs/security.md): the private parent directories must not open a way
//! around the plan's hidden paths. The home `~` is made private (the netrc store turned
//! on), `~/.claude` too (the claude store), the working directory `~/proj` is writable and
//! holds `TMPDIR`, where the run's own directories once lived: there the private
//! directories' live binds (`.ssh` among them) were reachable past the hiding of `~/.ssh`.
//! Inside, the command looks for the canaries through every path it can reach (the home
//! tree, `TMPDIR`, every mount point and mount source `/proc/self/mountinfo` names) and
//! finds none; `cat ~/.ssh/id_rsa` and a policy-hidden file inside the writable working
//! directory show nothing of theirs. Review 16: neither airlock's state directory nor a
//! hidden file can be moved out from under its cover, and a store link leading nowhere
//! stops the run. `.ci/run` also runs this as an ordinary user.

use std::path::Path;

use crate::run_credential_files::make_home;
use crate::support::clients::run_bounded;
use crate::support::run::{RUN_TIMEOUT, RunHome, code, namespaces_available};

const SSH_CANARY: &str = "SSHkeyCANARYf0a1b2c3d4e5f60718293a4b5c6d7e8f9";
const HIDDEN_CANARY: &str = "HIDDENinWRITABLE-CANARY-0123456789abcdef";
const CLAUDE: &str = "sk-ant-oat01-REALescapeACCESS0123456789abcdefghijklmnopqrstuvwx";
const NETRC: &str = "REALescapeNETRCpassword0123456789ab";

const POLICY: &str = "version: 1\ncredentials:\n  files: [claude, netrc]\nfilesystem:\n  \
                      hidden: [\"~/proj/secret.txt\"]\n";

/// Looks for every canary through every reachable path; prints one line per finding and
/// `SEARCHED` at the end. Each `grep` is bounded by the small test home; `timeout` bounds
/// the whole search.
const SCRIPT: &str = r#"
pattern='CANARY|REALescape|HIDDENinWRITABLE'
cat ~/.ssh/id_rsa 2>/dev/null | grep -q CANARY && echo "FOUND: cat ~/.ssh/id_rsa"
cat ~/proj/secret.txt 2>/dev/null | grep -q CANARY && echo "FOUND: cat ~/proj/secret.txt"
ls -a "$TMPDIR" | sed 's/^/TMPDIR: /'
timeout 20 grep -rlsE "$pattern" ~ "$TMPDIR" | sed 's/^/FOUND: /'
awk '{print $4; print $5}' /proc/self/mountinfo | sort -u > /tmp/paths
while read -r p; do
  case "$p" in /proc*|/sys*|/dev*|/usr*|/lib*|/bin*|/sbin*|/etc*|/) continue;; esac
  [ -e "$p" ] || continue
  timeout 5 grep -rlsE "$pattern" "$p" | sed 's/^/FOUND: /'
done < /tmp/paths
grep -rls VISIBLEcontrol ~ | sed 's/^/CONTROL: /'
echo SEARCHED
"#;

/// Runs the search with `HOME` = `home`, `TMPDIR` = `home/proj/tmp`, in `home/proj`.
fn run_search(run: &RunHome, home: &Path) -> (String, String, i32) {
    let policy = home.join("policy.yaml");
    let mut command = run.command();
    command
        .arg("run")
        .arg("--policy")
        .arg(&policy)
        .arg("--log")
        .arg(run.log_path())
        .args(["--", "sh", "-c", SCRIPT])
        .env("AIRLOCK_HOME", run.airlock_home())
        .env("HOME", home)
        .env("TMPDIR", home.join("proj/tmp"))
        .current_dir(home.join("proj"));
    let output = run_bounded(&mut command, RUN_TIMEOUT);
    let status = code(&output);
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.stderr.clone(),
        status,
    )
}

/// F0: with `TMPDIR` inside a writable live entry of the private home, nothing the plan
/// hides is reachable, and the run's own directories are not there to walk.
#[test]
fn hidden_paths_stay_hidden_around_the_private_parents() {
    if !namespaces_available("hidden_paths_stay_hidden_around_the_private_parents") {
        return;
    }
    let run = RunHome::new();
    let login = format!("{{\"claudeAiOauth\":{{\"accessToken\":\"{CLAUDE}\",\"expiresAt\":1}}}}");
    let files = vec![
        (
            ".ssh/id_rsa",
            format!("-----BEGIN KEY-----\n{SSH_CANARY}\n"),
        ),
        (".claude/.credentials.json", login),
        (".claude/projects/.keep", String::new()),
        (
            ".netrc",
            format!("machine example.com login me password {NETRC}\n"),
        ),
        ("proj/secret.txt", format!("{HIDDEN_CANARY}\n")),
        ("proj/tmp/.keep", String::new()),
        ("proj/visible.txt", "VISIBLEcontrol\n".to_owned()),
    ];
    let home = make_home(&run, &files, POLICY);
    let (stdout, stderr, status) = run_search(&run, &home);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("SEARCHED"), "{stdout}\n{stderr}");
    let private = format!("private to the run: {}", home.display());
    assert!(
        stderr.contains(&private),
        "the home was not private: {stderr}"
    );
    assert!(
        stderr.contains(&format!("{}/.claude", home.display())),
        "{stderr}"
    );
    let found: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("FOUND"))
        .collect();
    assert!(found.is_empty(), "{found:#?}\n{stdout}\n{stderr}");
    for name in ["parents", "credentials"] {
        assert!(
            !stdout
                .lines()
                .any(|line| line.starts_with("TMPDIR: ") && line.contains(name)),
            "a run directory in TMPDIR: {stdout}"
        );
    }
    // The search itself works: it finds what the command may read.
    assert!(stdout.contains("TMPDIR: .keep"), "{stdout}");
    assert!(stdout.contains("CONTROL: "), "{stdout}");
}

/// Tries to move airlock's state directory (`AIRLOCK_HOME` at its default place under
/// the home) and a hidden file's directory out from under their covers, then to plant a
/// link where the run's private copy of the home lies; prints what succeeded.
const MOVE_SCRIPT: &str = r#"
q=$(grep -o 'run/[0-9]*-parents-[A-Za-z0-9]*' /proc/self/mountinfo | head -1)
[ -n "$q" ] && echo "NAMED: $q"
mv ~/.local/share ~/.local/s2 2>/dev/null && echo "MOVED: share"
mv ~/.local ~/.l2 2>/dev/null && echo "MOVED: local"
mv ~/proj/conf ~/proj/conf2 2>/dev/null && echo "MOVED: conf"
mkdir -p ~/.local/share/airlock/"$q" 2>/dev/null && ln -s ~/.ssh ~/.local/share/airlock/"$q"/1 \
  2>/dev/null && echo "PLANTED"
echo MOVES-TRIED
"#;

/// Review 16 (R16-0, R16-2): with the working directory `~` (writable) and `AIRLOCK_HOME`
/// at its default `~/.local/share/airlock`, the directories between the home and a hidden
/// path are mount points: the command can rename none of them, so it can neither carry
/// airlock's state (the CA key) or a hidden file to a name the next run shows, nor swap
/// the path of the run's private copies and have the copy-back read `~/.ssh` into the home.
#[test]
fn hidden_paths_and_airlock_state_cannot_be_moved_away() {
    if !namespaces_available("hidden_paths_and_airlock_state_cannot_be_moved_away") {
        return;
    }
    let run = RunHome::new();
    let policy = "version: 1\ncredentials:\n  files: [netrc]\nfilesystem:\n  hidden: \
                  [\"~/proj/conf/secret.env\"]\n";
    let files = vec![
        (
            ".ssh/id_rsa",
            format!("-----BEGIN KEY-----\n{SSH_CANARY}\n"),
        ),
        (
            ".netrc",
            format!("machine example.com login me password {NETRC}\n"),
        ),
        ("proj/conf/secret.env", format!("{HIDDEN_CANARY}\n")),
        (".local/share/.keep", String::new()),
    ];
    let home = make_home(&run, &files, policy);
    let state = home.join(".local/share/airlock");
    let mut command = run.command();
    command
        .args(["run", "--policy"])
        .arg(home.join("policy.yaml"))
        .arg("--log")
        .arg(run.log_path())
        .args(["--", "sh", "-c", MOVE_SCRIPT])
        .env("AIRLOCK_HOME", &state)
        .env("HOME", &home)
        .env_remove("XDG_DATA_HOME")
        .current_dir(&home);
    let output = run_bounded(&mut command, RUN_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let context = format!("{stdout}\n{}", output.stderr);
    assert_eq!(code(&output), 0, "{context}");
    assert!(stdout.contains("MOVES-TRIED"), "{context}");
    // The attack has what it needs: the private copy's name is in the mount table.
    assert!(stdout.contains("NAMED: run/"), "{context}");
    for what in ["MOVED", "PLANTED"] {
        assert!(!stdout.contains(what), "{context}");
    }
    assert!(home.join("proj/conf/secret.env").is_file(), "{context}");
    assert!(state.join("run").is_dir(), "{context}");
    assert!(
        !home.join("id_rsa").exists(),
        "a hidden key copied out: {context}"
    );
    assert!(
        !context.contains("quarantined"),
        "the end check walked airlock's own: {context}"
    );
}

/// Review 16 (R16-1): a store file that is a link leading nowhere stops the run before it
/// starts: the command could otherwise create the file it leads to (here in a live,
/// writable directory of the private `~/.claude`) and choose the user's next login.
#[test]
fn a_store_link_leading_nowhere_stops_the_run() {
    if !namespaces_available("a_store_link_leading_nowhere_stops_the_run") {
        return;
    }
    let run = RunHome::new();
    let files = vec![
        (".claude/projects/.keep", String::new()),
        ("proj/tmp/.keep", String::new()),
    ];
    let policy = "version: 1\ncredentials:\n  files: [claude]\n";
    let home = make_home(&run, &files, policy);
    let link = home.join(".claude/.credentials.json");
    std::os::unix::fs::symlink("projects/creds.json", &link).expect("link");
    let (stdout, stderr, status) = run_search(&run, &home);
    assert_eq!(status, 125, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("is a symbolic link that does not lead to a file"),
        "{stderr}"
    );
    assert!(!stdout.contains("SEARCHED"), "the command ran: {stdout}");
    assert!(!home.join(".claude/projects/creds.json").exists());
}
