//! Where `airlock run` serves its admin API (docs/contract.md "Admin API"): a socket of
//! mode 0600 named after the run (`run-PID.sock`) in a directory of this user's only,
//! `$XDG_RUNTIME_DIR/airlock/` or else `/tmp/airlock-UID/` (mode 0700, owned by the user,
//! not a symlink: anything else is refused). The directory is hidden from the jail, whose
//! mount namespace cannot reach it; the socket is removed when the run ends.
//! [`newest_run`] finds the most recent run of this user, for a client attaching to it.

use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The runtime directory of this user's runs (not created).
pub fn runtime_dir() -> PathBuf {
    let uid = nix::unistd::geteuid().as_raw();
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() && owned_private_dir(&dir, uid).is_ok() => {
            dir.join("airlock")
        }
        _ => std::env::temp_dir().join(format!("airlock-{uid}")),
    }
}

/// Whether `dir` is a real directory (not a symlink) owned by `uid` that nobody else can
/// enter.
fn owned_private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(format!(
            "{} is not a directory (or is a symlink)",
            dir.display()
        ));
    }
    if meta.uid() != uid {
        return Err(format!(
            "{} is owned by uid {}, not {uid}",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} has mode {:04o}: group or others can enter it",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Creates (if needed) and checks the runtime directory; returns it.
pub fn ensure_runtime_dir() -> Result<PathBuf, String> {
    let dir = runtime_dir();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    owned_private_dir(&dir, nix::unistd::geteuid().as_raw())?;
    Ok(dir)
}

/// The socket path of the run with process id `pid` in `dir`.
pub fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("run-{pid}.sock"))
}

/// Removes the run's socket when dropped.
pub struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The newest of `candidates` (socket path, modification time), if any.
fn newest(candidates: impl IntoIterator<Item = (PathBuf, SystemTime)>) -> Option<PathBuf> {
    candidates
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
        .map(|(path, _)| path)
}

/// The admin socket of this user's most recent `airlock run` that still has one (for a
/// client attaching without `--admin`: `airlock watch`).
pub fn newest_run() -> Option<PathBuf> {
    let dir = runtime_dir();
    owned_private_dir(&dir, nix::unistd::geteuid().as_raw()).ok()?;
    let entries = std::fs::read_dir(&dir).ok()?;
    let sockets = entries
        .filter_map(Result::ok)
        .take(4096)
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            if !(name.starts_with("run-") && name.ends_with(".sock")) {
                return None;
            }
            let meta = entry.metadata().ok()?;
            let modified = meta.modified().ok()?;
            meta.file_type()
                .is_socket()
                .then(|| (entry.path(), modified))
        });
    newest(sockets)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_newest_run_wins() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let runs = vec![
            (PathBuf::from("/r/run-1.sock"), t),
            (PathBuf::from("/r/run-3.sock"), t + Duration::from_secs(5)),
            (PathBuf::from("/r/run-2.sock"), t + Duration::from_secs(1)),
        ];
        assert_eq!(newest(runs), Some(PathBuf::from("/r/run-3.sock")));
        assert_eq!(newest(Vec::new()), None);
    }

    #[test]
    fn a_shared_or_linked_directory_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let base = tempfile::tempdir().expect("dir");
        let uid = nix::unistd::geteuid().as_raw();
        let private = base.path().join("private");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&private)
            .expect("mkdir");
        assert!(owned_private_dir(&private, uid).is_ok());
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&private, &link).expect("symlink");
        assert!(owned_private_dir(&link, uid).is_err());
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(owned_private_dir(&private, uid).is_err());
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(owned_private_dir(&private, uid.wrapping_add(1)).is_err());
    }
}
