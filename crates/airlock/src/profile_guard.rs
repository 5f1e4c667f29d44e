//! The JSON state files of an agent profile (docs/agents.md, "What stays out of reach"):
//! `~/.claude.json` is Claude Code's state *and* its list of user- and project-level MCP
//! servers, which Claude Code starts on the host. Claude Code saves it through a lock and
//! a temporary file beside it, which the read-only home refuses; so the agent works on a
//! copy in its writable directory (`CLAUDE_CONFIG_DIR`), made at the start. At the end the
//! copy goes back to the home when the guarded keys did not change; when they did, it is
//! set aside as `NAME.airlock-quarantine` and the home's file is left as it was. The copy
//! is never followed through a link (the command could have planted one). A key holding a
//! real credential is named on stderr at the start (the command can read it).

use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use airlock_policy::profiles::{GuardedFile, Profile, guarded_values};

/// The largest state file read (Claude Code's grows with its history).
const MAX_STATE_BYTES: u64 = 256 << 20;

/// The guarded values of a file: `None` when it is not a JSON object.
type Values = Option<Vec<(String, serde_json::Value)>>;

/// What one guarded file held at the start.
struct Watched {
    /// The home's file.
    path: PathBuf,
    /// The agent's working copy, when it works on one.
    copy: Option<PathBuf>,
    /// The guard.
    guard: &'static GuardedFile,
    /// The guarded values at the start.
    values: Values,
}

/// The guarded files of one run.
#[derive(Default)]
pub(crate) struct Guard {
    watched: Vec<Watched>,
}

/// Adds the profile's variables to the command's environment, unless airlock's own
/// environment sets them (`~/` resolved against the home).
pub(crate) fn add_env(env: &mut Vec<(OsString, OsString)>, profile: Option<&Profile>) {
    let (Some(profile), Ok(place)) = (profile, airlock_session::fs_confine::Place::current())
    else {
        return;
    };
    for (name, value) in profile.env {
        if std::env::var_os(name).is_none() && !env.iter().any(|(n, _)| n == name) {
            let value = airlock_policy::filesystem::resolve(value, &place.home, &place.cwd);
            env.push((OsString::from(name), value.into_os_string()));
        }
    }
}

impl Guard {
    /// Reads the profile's guarded files and makes the working copies (nothing without a
    /// profile or a home). `Err`: a working copy could not be made (exit 125).
    pub(crate) fn start(profile: Option<&Profile>) -> Result<Guard, String> {
        let Some(profile) = profile else {
            return Ok(Guard::default());
        };
        let place = airlock_session::fs_confine::Place::current()?;
        let at = |text: &str| airlock_policy::filesystem::resolve(text, &place.home, &place.cwd);
        let mut watched = Vec::new();
        for guard in profile.guarded {
            let path = at(guard.file);
            let bytes = read_bounded(&path);
            let text = bytes.as_deref().map(String::from_utf8_lossy);
            let values = text.as_deref().and_then(|t| guarded_values(t, guard.keys));
            if let Some(text) = &text {
                warn_secrets(guard, text);
            }
            let copy = guard.copy.map(at);
            if let Some(copy) = &copy {
                make_copy(copy, bytes.as_deref()).map_err(|e| {
                    format!(
                        "{}: cannot make its working copy {}: {e}",
                        guard.file,
                        copy.display()
                    )
                })?;
            }
            watched.push(Watched {
                path,
                copy,
                guard,
                values,
            });
        }
        Ok(Guard { watched })
    }

    /// Compares each file with its start; says on stderr what it did.
    pub(crate) fn finish(self) {
        for watched in self.watched {
            let file = watched.copy.as_deref().unwrap_or(&watched.path);
            let Some(bytes) = read_bounded(file) else {
                continue;
            };
            // Not JSON now: nothing in it runs, and nothing is copied back.
            let Some(now) = guarded_values(&String::from_utf8_lossy(&bytes), watched.guard.keys)
            else {
                continue;
            };
            let unchanged = Some(&now) == watched.values.as_ref()
                || (watched.values.is_none() && now.is_empty());
            match (&watched.copy, unchanged) {
                (Some(copy), true) => copy_back(&watched, copy, &bytes),
                (_, false) => set_aside(&watched, file),
                (None, true) => {}
            }
        }
    }
}

/// The file's bytes, when it is a regular file (not a link) no larger than
/// [`MAX_STATE_BYTES`].
fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    if !metadata.is_file() || metadata.len() > MAX_STATE_BYTES {
        return None;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_STATE_BYTES), &mut bytes).ok()?;
    Some(bytes)
}

/// Replaces whatever is at `copy` (a link is removed, not followed) by `bytes`, mode
/// 0600; without bytes (no file in the home) the agent starts afresh.
fn make_copy(copy: &Path, bytes: Option<&[u8]>) -> std::io::Result<()> {
    match std::fs::remove_file(copy) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let Some(bytes) = bytes else {
        return Ok(());
    };
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(copy)?;
    std::io::Write::write_all(&mut out, bytes)
}

/// Writes the working copy's bytes over the home's file (through a temporary file beside
/// it and a rename), then removes the copy.
fn copy_back(watched: &Watched, copy: &Path, bytes: &[u8]) {
    let target = std::fs::canonicalize(&watched.path).unwrap_or_else(|_| watched.path.clone());
    let temporary = PathBuf::from(format!(
        "{}.airlock-{}",
        target.display(),
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut out| std::io::Write::write_all(&mut out, bytes))
        .and_then(|()| std::fs::rename(&temporary, &target));
    match written {
        Ok(()) => {
            let _ = std::fs::remove_file(copy);
        }
        Err(e) => {
            let _ = std::fs::remove_file(&temporary);
            eprintln!(
                "airlock: {}: the run's state could not be copied back from {} ({e}); it is \
                 still there",
                watched.guard.file,
                copy.display()
            );
        }
    }
}

/// Renames the changed `file` to `FILE.airlock-quarantine` (the home's file, when the
/// agent worked on it in place, is then gone until the user puts it back).
fn set_aside(watched: &Watched, file: &Path) {
    let keys = watched.guard.keys.join(", ");
    let aside = PathBuf::from(format!("{}.airlock-quarantine", file.display()));
    match std::fs::rename(file, &aside) {
        Ok(()) => eprintln!(
            "airlock: {}: {keys} changed during the run (the agent would start those \
             programs on the host): not copied back; the run's file is {}: review it",
            watched.guard.file,
            aside.display()
        ),
        Err(e) => eprintln!(
            "airlock: {}: {keys} changed during the run and {} cannot be set aside ({e}): \
             review it before running the agent outside airlock",
            watched.guard.file,
            file.display()
        ),
    }
}

/// Names the credential keys the file holds.
fn warn_secrets(guard: &GuardedFile, text: &str) {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    for key in guard.secrets {
        if map
            .get(*key)
            .is_some_and(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        {
            eprintln!(
                "airlock: warning: {} holds `{key}`, a real credential the command can read \
                 there; use an API key secret (--secret) and remove it from the file",
                guard.file
            );
        }
    }
}
