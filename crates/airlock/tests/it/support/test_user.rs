//! Running the jail and sandbox tests as an ordinary user: with `AIRLOCK_TEST_UID=N` in
//! the environment of a test run as root, the harnesses start `airlock` through
//! `setpriv --reuid N --regid N --clear-groups`, with a home of real-looking credential
//! files owned by that user, and give the user the test's directories. `.ci/run` runs the
//! jail, escape and sandbox suites once as root and once this way.

use std::path::Path;
use std::process::Command;

/// The variable naming the uid to run `airlock` as.
pub const UID_VARIABLE: &str = "AIRLOCK_TEST_UID";

/// Credential files planted in the test user's home (each must stay unreadable).
pub const HOME_CANARIES: [&str; 12] = [
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".config/gh/hosts.yml",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".kube/config",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials.toml",
    ".gnupg/private-keys-v1.d/key",
    ".bash_history",
];

/// The uid to switch to, when the tests run as root and one is asked for.
pub fn uid() -> Option<u32> {
    let root = nix::unistd::geteuid().is_root();
    let uid = std::env::var(UID_VARIABLE).ok()?.parse::<u32>().ok()?;
    (root && uid != 0).then_some(uid)
}

/// `chown -R uid:uid` (links themselves, not their targets).
pub fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).expect("chown");
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).expect("read_dir").flatten() {
            chown_tree(&entry.path(), uid);
        }
    }
}

/// Prepares `dir` (a test's private directory) for the test user: a home with credential
/// canaries at `dir/user-home`, everything owned by the user. Does nothing as root alone.
pub fn adopt(dir: &Path) {
    let Some(uid) = uid() else { return };
    let home = dir.join("user-home");
    for file in HOME_CANARIES {
        let path = home.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("home dirs");
        std::fs::write(&path, format!("CANARY-{file}\n")).expect("canary");
    }
    chown_tree(dir, uid);
}

/// The `airlock` binary as a command, switched to the test user (with `dir/user-home` as
/// its home) when one is asked for.
pub fn airlock(dir: &Path) -> Command {
    let airlock = env!("CARGO_BIN_EXE_airlock");
    match uid() {
        None => Command::new(airlock),
        Some(uid) => {
            let mut command = wrap(uid);
            // The user's own home and a PATH without root's directories (such as
            // ~/.cargo/bin), which the user could not search.
            command
                .arg(airlock)
                .env("HOME", dir.join("user-home"))
                .env("PATH", "/usr/local/bin:/usr/bin:/bin");
            command
        }
    }
}

/// `setpriv` switching to `uid`, ready for the program and its arguments.
pub fn wrap(uid: u32) -> Command {
    let id = uid.to_string();
    let mut command = Command::new("setpriv");
    command.args(["--reuid", &id, "--regid", &id, "--clear-groups"]);
    command
}
