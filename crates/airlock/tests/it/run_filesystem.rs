//! Filesystem confinement of `airlock run` and local sandboxes (docs/security.md, "What
//! the command can read and write"), tried as an attacker inside would, both as root and
//! as an ordinary user (`setpriv --reuid`) whose home holds real-looking credential files.
//! Every canary must stay unreadable, every write outside the writable set and to a
//! protected name must fail, and the files must be unchanged on the host afterwards.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::clients::{BoundedOutput, run_bounded};
use crate::support::run;

/// The unprivileged uid the tests switch to when they run as root.
const TEST_UID: u32 = 61_500;
/// Credential stores planted in the home, each holding a canary line.
const CANARY_FILES: [&str; 12] = support::test_user::HOME_CANARIES;
/// Files that make code run later on the host: they must be unchanged after the run.
const PROTECTED_FILES: [&str; 6] = [
    "proj/.git/hooks/pre-commit",
    "proj/.git/config",
    "proj/.envrc",
    "proj/.vscode/settings.json",
    ".bashrc",
    ".profile",
];

/// Who runs `airlock run`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Identity {
    /// Root (as CI is).
    Root,
    /// An ordinary user: [`TEST_UID`] when the tests run as root, else the tester.
    User,
}

/// The identities this machine can test: both as root, the tester alone otherwise.
fn identities() -> Vec<Identity> {
    if nix::unistd::geteuid().is_root() {
        vec![Identity::Root, Identity::User]
    } else {
        // Half the test is skipped: a failure under AIRLOCK_TEST_REQUIRE, as in CI.
        support::skip_or_fail("the root half of the filesystem tests needs root: run as root");
        vec![Identity::User]
    }
}

/// A home with credential canaries and a project, owned by the identity that runs.
struct Place {
    dir: tempfile::TempDir,
    identity: Identity,
}

impl Place {
    fn new(identity: Identity) -> Place {
        // Not under /tmp: the jail has a private /tmp, and the home must be the host's.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let place = Place { dir, identity };
        let home = place.home();
        for file in CANARY_FILES.iter().chain(&PROTECTED_FILES) {
            let path = home.join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(&path, format!("CANARY-{file}\n")).expect("canary");
        }
        std::fs::create_dir_all(home.join("proj/src")).expect("project");
        std::fs::create_dir_all(home.join(".cache")).expect("cache");
        if place.switches_user() {
            support::test_user::chown_tree(place.dir.path(), TEST_UID);
        }
        place
    }

    fn switches_user(&self) -> bool {
        self.identity == Identity::User && nix::unistd::geteuid().is_root()
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn project(&self) -> PathBuf {
        self.home().join("proj")
    }

    /// `airlock run ARGS...` in the project, as this place's identity, with HOME set.
    fn run(&self, args: &[&str]) -> BoundedOutput {
        let airlock = env!("CARGO_BIN_EXE_airlock");
        let mut command = if self.switches_user() {
            let mut command = support::test_user::wrap(TEST_UID);
            command.arg(airlock);
            command
        } else {
            Command::new(airlock)
        };
        command
            .arg("run")
            .args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.home())
            .env("SSH_AUTH_SOCK", self.home().join(".ssh/agent.sock"))
            .current_dir(self.project());
        run_bounded(&mut command, Duration::from_secs(60))
    }
}

/// The lines of a run, after checking that airlock itself succeeded.
fn lines(output: &BoundedOutput) -> Vec<String> {
    let code = run::code(output);
    assert_eq!(code, 0, "airlock run failed: {}", output.stderr);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Run inside the jail: every probe prints one `NAME=RESULT` line.
const PROBES: &str = r#"
for f in $CANARIES; do
  if cat "$HOME/$f" 2>/dev/null | grep -q CANARY; then echo "read=$f"; fi
done
echo "ssh_entries=$(ls -A "$HOME/.ssh" 2>/dev/null | wc -l)"
echo "state_entries=$(ls -A "$HOME/.local/share/airlock" 2>/dev/null | wc -l)"
for f in $PROTECTED; do
  (echo planted >> "$HOME/$f") 2>/dev/null && echo "wrote=$f"
done
(echo planted > "$HOME/.git/hooks/post-checkout") 2>/dev/null && echo wrote=new-hook
(echo x > "$HOME/outside") 2>/dev/null && echo wrote=home
(echo x > "$HOME/.cache/x") 2>/dev/null && echo wrote=cache
(echo x > /usr/local/planted) 2>/dev/null && echo wrote=usr
(echo ok > src/made) && echo wrote_project=yes
(echo ok > /tmp/inside) && echo wrote_tmp=yes
[ -e "$HOST_TMP_MARKER" ] && echo saw_host_tmp=yes
echo "agent_var=${SSH_AUTH_SOCK:-unset}"
echo "devices=$(ls /dev | tr '\n' ' ')"
"#;

/// Run inside the jail as well when the launcher is root.
const ROOT_PROBES: &str = r#"
(echo x > /etc/planted) 2>/dev/null && echo wrote=etc
(echo x > /etc/cron.d/planted) 2>/dev/null && echo wrote=cron
echo "shadow_bytes=$(cat /etc/shadow 2>/dev/null | wc -c)"
(echo '|/tmp/x' > /proc/sys/kernel/core_pattern) 2>/dev/null && echo wrote=core_pattern
(echo h > /proc/sysrq-trigger) 2>/dev/null && echo wrote=sysrq
(echo 1 > /sys/kernel/mm/ksm/run) 2>/dev/null && echo wrote=sys
mount -t tmpfs none /mnt 2>/dev/null && echo mounted=yes
umount /etc/shadow 2>/dev/null && echo unmounted=yes
[ -e /dev/vda ] || [ -e /dev/sda ] || [ -e /dev/mem ] && echo disk_device=yes
echo root_done=1
"#;

#[test]
fn credential_stores_stay_hidden_and_writes_stay_in_the_project() {
    if !run::namespaces_available("credential_stores_stay_hidden_and_writes_stay_in_the_project") {
        return;
    }
    for identity in identities() {
        let place = Place::new(identity);
        let marker = tempfile::NamedTempFile::new().expect("host /tmp marker");
        let mut script = format!(
            "CANARIES='{}'; PROTECTED='{}'; HOST_TMP_MARKER='{}'\n{PROBES}",
            CANARY_FILES.join(" "),
            PROTECTED_FILES.join(" "),
            marker.path().display()
        );
        script = script.replace("$HOME/.git", "$HOME/proj/.git");
        if identity == Identity::Root {
            script.push_str(ROOT_PROBES);
        }
        let log = place.dir.path().join("audit.jsonl");
        let log_arg = log.display().to_string();
        let output = place.run(&["--verbose", "--log", &log_arg, "--", "sh", "-c", &script]);
        let lines = lines(&output);
        let bad: Vec<&String> = lines
            .iter()
            .filter(|l| {
                l.starts_with("read=")
                    || l.starts_with("wrote=")
                    || l.starts_with("saw_")
                    || l.starts_with("mounted")
                    || l.starts_with("unmounted")
                    || l.starts_with("disk_")
            })
            .collect();
        assert!(
            bad.is_empty(),
            "{identity:?}: escapes {bad:?}\n{lines:?}\n{}",
            output.stderr
        );
        for expected in [
            "ssh_entries=0",
            "state_entries=0",
            "wrote_project=yes",
            "wrote_tmp=yes",
            "agent_var=unset",
        ] {
            assert!(
                lines.iter().any(|l| l == expected),
                "{identity:?}: no {expected}: {lines:?}"
            );
        }
        let devices = lines
            .iter()
            .find(|l| l.starts_with("devices="))
            .expect("devices");
        for device in ["null", "zero", "urandom", "tty", "pts", "shm"] {
            assert!(devices.contains(device), "{devices}");
        }
        if identity == Identity::Root {
            assert!(lines.iter().any(|l| l == "shadow_bytes=0"), "{lines:?}");
            assert!(lines.iter().any(|l| l == "root_done=1"), "{lines:?}");
        }
        // On the host: protected files unchanged, the project file made, nothing else.
        let home = place.home();
        for file in CANARY_FILES.iter().chain(&PROTECTED_FILES) {
            let text = std::fs::read_to_string(home.join(file)).expect("still there");
            assert_eq!(
                text,
                format!("CANARY-{file}\n"),
                "{identity:?}: {file} changed"
            );
        }
        assert!(!home.join("proj/.git/hooks/post-checkout").exists());
        assert!(!home.join("outside").exists());
        assert!(!Path::new("/usr/local/planted").exists());
        assert!(!Path::new("/etc/planted").exists());
        let made = home.join("proj/src/made");
        let owner = std::fs::metadata(&made).expect("the project file").uid();
        if place.switches_user() {
            assert_eq!(
                owner, TEST_UID,
                "the file belongs to the user who ran airlock"
            );
        }
        assert!(
            output.stderr.contains("read-only mounts + landlock"),
            "--verbose names the layers: {}",
            output.stderr
        );
        let start = run::read_lines(&log)
            .into_iter()
            .find(|line| line["kind"] == "policy")
            .expect("a start line");
        let message = start["message"].as_str().expect("message");
        assert!(
            message.starts_with("start jail:") && message.contains("landlock"),
            "the audit's start line names the layers: {message}"
        );
    }
}

#[test]
fn filesystem_rules_widen_and_narrow_what_the_command_sees() {
    if !run::namespaces_available("filesystem_rules_widen_and_narrow_what_the_command_sees") {
        return;
    }
    for identity in identities() {
        let place = Place::new(identity);
        let policy = place.dir.path().join("fs.yaml");
        std::fs::write(
            &policy,
            "version: 1\nfilesystem:\n  writable: [\".\", \"~/.cache\"]\n  \
             readable: [\"~/.netrc\", \"~/.ssh/id_ed25519\"]\n  hidden: [\"src\"]\n  \
             protected: [\"docs/keep\"]\n",
        )
        .expect("policy");
        std::fs::create_dir_all(place.project().join("docs/keep")).expect("docs");
        std::fs::write(place.project().join("src/private.txt"), "PRIVATE\n").expect("file");
        if place.switches_user() {
            support::test_user::chown_tree(place.dir.path(), TEST_UID);
        }
        let script = "cat ~/.netrc; cat ~/.ssh/id_ed25519; cat ~/.aws/credentials 2>/dev/null; \
                      cat src/private.txt 2>/dev/null; (echo x > ~/.cache/ok) && echo cache=yes; \
                      (echo x > docs/keep/x) 2>/dev/null && echo wrote=keep; \
                      (echo x > ~/.netrc) 2>/dev/null && echo wrote=netrc; echo done";
        let policy_arg = policy.display().to_string();
        let output = place.run(&["--policy", &policy_arg, "--", "sh", "-c", script]);
        let lines = lines(&output);
        assert_eq!(
            lines,
            [
                "CANARY-.netrc",
                "CANARY-.ssh/id_ed25519",
                "cache=yes",
                "done"
            ],
            "{identity:?}: {}",
            output.stderr
        );
    }
}

#[test]
fn a_path_that_cannot_be_confined_stops_the_run_naming_it() {
    if !run::namespaces_available("a_path_that_cannot_be_confined_stops_the_run_naming_it") {
        return;
    }
    let place = Place::new(Identity::User);
    let policy = place.dir.path().join("fs.yaml");
    std::fs::write(
        &policy,
        "version: 1\nfilesystem:\n  writable: [\"~/missing-cache\"]\n",
    )
    .expect("policy");
    let marker = place.project().join("ran");
    let script = format!("touch {}", marker.display());
    let policy_arg = policy.display().to_string();
    let output = place.run(&["--policy", &policy_arg, "--", "sh", "-c", &script]);
    assert_eq!(run::code(&output), 125, "{}", output.stderr);
    assert!(
        output.stderr.contains("~/missing-cache"),
        "{}",
        output.stderr
    );
    assert!(!marker.exists(), "the command must not run");
    let bad = place.dir.path().join("bad.yaml");
    std::fs::write(&bad, "version: 1\nfilesystem:\n  writeable: [\".\"]\n").expect("policy");
    let bad_arg = bad.display().to_string();
    let output = place.run(&["--policy", &bad_arg, "--", "true"]);
    assert_eq!(run::code(&output), 125, "{}", output.stderr);
    assert!(output.stderr.contains("writeable"), "{}", output.stderr);
}

#[test]
fn policy_explain_fs_says_read_write_or_hidden_and_why() {
    let place = Place::new(Identity::User);
    let explain = |path: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
        command
            .args(["policy", "explain", "--json", "--fs", path])
            .env("HOME", place.home())
            .current_dir(place.project());
        let output = run_bounded(&mut command, Duration::from_secs(20));
        assert_eq!(run::code(&output), 0, "{}", output.stderr);
        let value: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("one JSON object");
        value["access"].as_str().expect("access").to_owned()
    };
    assert_eq!(explain("src/main.rs"), "write");
    assert_eq!(explain(".git/hooks/pre-commit"), "read (write-protected)");
    assert_eq!(explain("../.ssh/id_ed25519"), "hidden");
    assert_eq!(explain("/etc/shadow"), "hidden");
    assert_eq!(explain("/usr/bin"), "read");
}
