//! The run's own directories (docs/secrets.md, "Private parent directories"): the projected
//! credential copies and the private parent directories are made in `AIRLOCK_HOME/run/`,
//! which the jail always hides (airlock's CA and state directory), never in `TMPDIR`,
//! which may lie inside a directory the command can reach (review 15, F0). Each is a 0700
//! directory named `PID-KIND-RANDOM`, removed when the run ends, and locked (`flock`) while
//! its run lives. A directory left by a run that was killed (its process gone, its lock
//! free) is removed when the next run makes one: bounded, never through a link, and a
//! failure is said once on stderr without failing the run.

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// The most entries of `AIRLOCK_HOME/run/` one sweep looks at.
const MAX_SWEPT: usize = 1024;

/// One directory of the run; removed (then unlocked) when dropped.
#[derive(Debug)]
pub(crate) struct RunDir {
    dir: tempfile::TempDir,
    /// Holds the directory's lock while the run lives.
    _lock: Flock<std::fs::File>,
}

impl RunDir {
    /// A new empty 0700 directory of this run in `root` ([`root`]) for `kind`
    /// (`credentials`, `parents`), after the stale ones are swept (once per process).
    pub(crate) fn create(root: &Path, kind: &str) -> Result<RunDir, String> {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| sweep(root));
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-{kind}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(root)
            .map_err(|e| format!("cannot create a private directory: {e}"))?;
        let lock = std::fs::File::open(dir.path())
            .map_err(|e| format!("cannot lock a private directory: {e}"))
            .and_then(|file| {
                Flock::lock(file, FlockArg::LockExclusiveNonblock)
                    .map_err(|(_, e)| format!("cannot lock a private directory: {e}"))
            })?;
        Ok(RunDir { dir, _lock: lock })
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// `AIRLOCK_HOME/run/` (created 0700 with `AIRLOCK_HOME` when missing): a directory, not a
/// link.
pub(crate) fn root() -> Result<PathBuf, String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot create a private directory: {e}");
    let home = airlock_proxy::ca::default_dir().map_err(|e| fail(&e))?;
    let root = home.join("run");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)
        .map_err(|e| fail(&e))?;
    match std::fs::symlink_metadata(&root) {
        Ok(metadata) if metadata.is_dir() => Ok(root),
        Ok(_) => Err(fail(&format!("{} is not a directory", root.display()))),
        Err(e) => Err(fail(&e)),
    }
}

/// Removes the directories of runs that are gone; says the first failure.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut failed = None;
    for entry in entries.take(MAX_SWEPT).flatten() {
        let path = entry.path();
        let Some(_lock) = stale(&path) else { continue };
        if let Err(e) = std::fs::remove_dir_all(&path) {
            failed.get_or_insert((path, e));
        }
    }
    if let Some((path, e)) = failed {
        eprintln!(
            "airlock: note: cannot remove {}, left by a run that ended without removing it: \
             {e}",
            path.display()
        );
    }
}

/// The lock of `path` when it is a directory (not a link) of a run that is gone: its
/// process no longer exists and its lock is free.
fn stale(path: &Path) -> Option<Flock<std::fs::File>> {
    let pid: i32 = path
        .file_name()?
        .to_str()?
        .split('-')
        .next()?
        .parse()
        .ok()?;
    if pid <= 0 || !std::fs::symlink_metadata(path).ok()?.is_dir() {
        return None;
    }
    let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
        == Err(nix::errno::Errno::ESRCH);
    if !gone {
        return None;
    }
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    Flock::lock(lock, FlockArg::LockExclusiveNonblock).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_run_is_stale_a_live_or_locked_one_is_not() {
        let root = tempfile::tempdir().expect("root");
        let live = root
            .path()
            .join(format!("{}-parents-a", std::process::id()));
        std::fs::create_dir(&live).expect("live");
        assert!(stale(&live).is_none());
        // Far above any pid the kernel hands out (pid_max is at most 2^22).
        let gone = root.path().join("99999999-parents-b");
        std::fs::create_dir(&gone).expect("gone");
        std::fs::write(gone.join("f"), "x").expect("file");
        let held = std::fs::File::open(&gone).expect("open");
        let held = Flock::lock(held, FlockArg::LockExclusiveNonblock).expect("lock");
        assert!(stale(&gone).is_none(), "a locked directory is not stale");
        drop(held);
        assert!(stale(&gone).is_some());
        let link = root.path().join("99999998-parents-c");
        std::os::unix::fs::symlink(&gone, &link).expect("link");
        assert!(stale(&link).is_none(), "a link is never followed");
        sweep(root.path());
        assert!(live.exists() && !gone.exists());
        assert!(std::fs::symlink_metadata(&link).is_ok());
        let made = RunDir::create(root.path(), "parents").expect("made");
        let name = made
            .path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with(&format!("{}-parents-", std::process::id())),
            "{name}"
        );
        assert!(stale(made.path()).is_none());
        let path = made.path().to_owned();
        drop(made);
        assert!(!path.exists());
    }
}
