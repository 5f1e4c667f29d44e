//! The write-back of refreshed logins (docs/secrets.md, "Refreshes"): the proxy hands
//! the real tokens of each refresh it carried out to [`Writeback`], which puts them in the
//! host's credential file so that the user's next session (inside airlock or not) starts
//! with them. The file is rewritten byte for byte but for the changed values
//! ([`airlock_credfiles::refresh::rewrite_file`]), in place (the same inode, so that the
//! projection bound over it in a running jail stays; a complete copy is fsynced first, for
//! a crash mid-write, in a 0700 directory of airlock's own that the jail cannot see, never
//! beside the file, where the command may be able to read; mode and owner are the file's
//! own), under an advisory lock (`flock` on the host file itself, opened without following
//! a link and without blocking, a regular file only; the wait is bounded) so that runs
//! sharing one home do not lose a refresh. Re-read under the lock: when its refresh token
//! is no longer the one this run last knew (another run refreshed meanwhile), the fresher
//! login wins (Claude's `expiresAt`, Codex's `last_refresh`; a tie goes to this run). The
//! proxy calls the sink from its async tasks: the blocking part runs through
//! `tokio::task::block_in_place`, so that the runtime's other tasks move to another
//! thread. Each outcome is a `kind: credentials` audit line, names only.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};
use airlock_credfiles::refresh::{self, Field, Login, NewTokens, Stamp, Watch};
use airlock_proxy::refresh::{RefreshSink, Refreshes};
use nix::fcntl::{Flock, FlockArg};

/// The largest credential file read.
const MAX_FILE: u64 = 1024 * 1024;

/// How long a write-back waits for another run's lock.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// The directory, under airlock's own (hidden) directory, of the crash copies.
pub const STATE_DIR: &str = "writeback";

/// A projected login file as the session knows it: its login, host path and the
/// (secret name, real value) of each token projected from it.
pub struct LoginFile {
    /// The login.
    pub login: Login,
    /// The host file.
    pub file: PathBuf,
    /// The projected copy the command sees (rewritten with the new surrogates).
    pub copy: Option<ProjectedCopy>,
    /// `(secret name, real value)` per token (names `file:<store>:<field>`).
    pub tokens: Vec<(String, String)>,
}

/// The command's copy of a login file, and its bytes as airlock last wrote them (updated
/// after each refresh, so that the end-of-run check does not take airlock's own rewrite
/// for the command's).
pub struct ProjectedCopy {
    /// The copy, in the run's private directory.
    pub path: PathBuf,
    /// Its bytes as airlock last wrote them.
    pub shown: Arc<Mutex<Vec<u8>>>,
}

/// The refreshes of the session's projected logins, writing back through a
/// [`Writeback`]; `None` when no projected login has a refresh token.
/// `state` is airlock's own directory (hidden from the jail) under which the crash copies
/// go ([`STATE_DIR`]).
pub fn refreshes(files: &[LoginFile], audit: &AuditLog, state: &Path) -> Option<Arc<Refreshes>> {
    let mut watches = Vec::new();
    let mut known = HashMap::new();
    let mut copies = HashMap::new();
    for file in files {
        let secrets: Vec<(Field, String)> = file
            .tokens
            .iter()
            .filter_map(|(name, _)| Some((field_of(name)?, name.clone())))
            .collect();
        let Some(refresh) = file
            .tokens
            .iter()
            .find(|(name, _)| field_of(name) == Some(Field::Refresh))
        else {
            continue;
        };
        known.insert(file.file.clone(), refresh.1.clone());
        if let Some(copy) = &file.copy {
            copies.insert(copy.path.clone(), Arc::clone(&copy.shown));
        }
        watches.push(Watch {
            login: file.login,
            file: file.file.clone(),
            copy: file.copy.as_ref().map(|copy| copy.path.clone()),
            secrets,
        });
    }
    if watches.is_empty() {
        return None;
    }
    let sink = Arc::new(Writeback {
        audit: audit.clone(),
        known: Mutex::new(known),
        copies,
        state: state.join(STATE_DIR),
    });
    Some(Arc::new(Refreshes::new(watches, sink)))
}

/// [`refreshes`] of the files a session projected (Claude Code's and Codex's logins).
pub fn for_projected(
    projected: &[crate::credential_files::ProjectedFile],
    audit: &AuditLog,
    state: &Path,
) -> Option<Arc<Refreshes>> {
    let files: Vec<LoginFile> = projected
        .iter()
        .filter_map(|file| {
            let login = match file.store {
                airlock_credfiles::Store::Claude => Login::Claude,
                airlock_credfiles::Store::Codex => Login::Codex,
                _ => return None,
            };
            Some(LoginFile {
                login,
                file: file.host_path.clone(),
                copy: Some(ProjectedCopy {
                    path: file.copy_path.clone(),
                    shown: Arc::clone(&file.projected),
                }),
                tokens: file
                    .tokens
                    .iter()
                    .map(|token| (token.secret.clone(), token.real.clone()))
                    .collect(),
            })
        })
        .collect();
    refreshes(&files, audit, state)
}

/// The token a secret named `file:<store>:<field>[:<label>]` holds.
fn field_of(name: &str) -> Option<Field> {
    let field = name.split(':').nth(2)?;
    match field {
        "accessToken" | "access_token" => Some(Field::Access),
        "refreshToken" | "refresh_token" => Some(Field::Refresh),
        "idToken" | "id_token" => Some(Field::Id),
        _ => None,
    }
}

/// Writes refreshed tokens back to the host files.
pub struct Writeback {
    audit: AuditLog,
    /// The refresh token this run last knew per host file (real values).
    known: Mutex<HashMap<PathBuf, String>>,
    /// Per projected copy, its bytes as airlock last wrote them.
    copies: HashMap<PathBuf, Arc<Mutex<Vec<u8>>>>,
    /// airlock's own directory for crash copies (0700, hidden from the jail).
    state: PathBuf,
}

impl RefreshSink for Writeback {
    fn refreshed(&self, watch: &Watch, real: NewTokens, shown: NewTokens, host: bool) {
        blocking(|| self.refreshed_now(watch, &real, &shown, host));
    }
}

/// Runs `work` (file I/O, fsyncs, a bounded lock wait) off the async runtime's worker: on
/// a multi-thread runtime through `block_in_place`, elsewhere (tests, no runtime) as is.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

impl Writeback {
    /// [`RefreshSink::refreshed`], on a thread that may block.
    fn refreshed_now(&self, watch: &Watch, real: &NewTokens, shown: &NewTokens, host: bool) {
        let now = now();
        // The command's copy first: a CLI that reads its file again finds tokens that work.
        if let Some(copy) = &watch.copy {
            match rewrite_in_place(watch.login, copy, shown, &now) {
                Ok(written) => {
                    if let Some(shown) = self.copies.get(copy) {
                        *shown.lock().unwrap_or_else(PoisonError::into_inner) = written;
                    }
                }
                Err(e) => eprintln!(
                    "airlock: the projected {} login could not be updated: {e}",
                    watch.login.name()
                ),
            }
        }
        if host {
            self.write_host(watch, real, &now);
        }
    }

    /// Writes `tokens` back to `watch`'s host file and audits the outcome. In the proxy's
    /// order, under one lock: done before the command gets its answer (a small file;
    /// another run's lock is waited for, bounded).
    fn write_host(&self, watch: &Watch, tokens: &NewTokens, now: &Stamp) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = known.get(&watch.file).cloned();
        let outcome = write_back(
            watch.login,
            &watch.file,
            tokens,
            previous.as_deref(),
            now,
            &self.state,
        );
        if let (Ok(_), Some(refresh)) = (&outcome, &tokens.refresh) {
            known.insert(watch.file.clone(), refresh.clone());
        }
        let names = Field::ALL
            .iter()
            .filter(|field| tokens.get(**field).is_some())
            .filter_map(|field| watch.secret(*field).map(str::to_owned))
            .collect();
        let (decision, message) = match &outcome {
            Ok(Outcome::Written) => (Decision::Allow, "written back to the host file".to_owned()),
            Ok(Outcome::Merged) => (
                Decision::Allow,
                "written back to the host file, replacing an older refresh by another run"
                    .to_owned(),
            ),
            Ok(Outcome::KeptNewer) => (
                Decision::Deny,
                "not written back: the host file holds a newer refresh by another run".to_owned(),
            ),
            Err(e) => (Decision::Deny, format!("write-back failed: {e}")),
        };
        if let Err(e) = &outcome {
            eprintln!(
                "airlock: the refreshed {} login could not be written back to {}: {e}",
                watch.login.name(),
                watch.file.display()
            );
        }
        self.audit.record(AuditEvent {
            kind: Kind::Credentials,
            decision,
            name: Some(watch.login.name().to_owned()),
            path: Some(watch.file.display().to_string()),
            secrets: names,
            message: Some(message),
            ..AuditEvent::default()
        });
    }
}

/// Rewrites the command's projected copy (the run's own file) in place with `shown`.
fn rewrite_in_place(
    login: Login,
    copy: &Path,
    shown: &NewTokens,
    now: &Stamp,
) -> Result<Vec<u8>, String> {
    let current = read_bounded_path(copy)?;
    let rewritten = refresh::rewrite_file(login, &current, shown, now)
        .map_err(|e| format!("cannot rewrite the copy: {e}"))?;
    let mut file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(copy)
        .map_err(|e| format!("cannot open the copy: {e}"))?;
    file.write_all(&rewritten)
        .and_then(|()| file.set_len(rewritten.len() as u64))
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write the copy: {e}"))?;
    Ok(rewritten)
}

/// What a write-back did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The file held the refresh token this run knew: the new tokens replace it.
    Written,
    /// Another run had refreshed, less recently: the new tokens replace its.
    Merged,
    /// Another run had refreshed more recently: the file is left as it is.
    KeptNewer,
}

/// The moment of now, as the host files write it.
pub fn now() -> Stamp {
    let time = SystemTime::now();
    let unix_ms = time
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default();
    Stamp {
        unix_ms,
        rfc3339: airlock_audit::format_timestamp(time),
    }
}

/// Writes `tokens` to `path` (a `login` file) under its lock; `previous` is the refresh
/// token this run last knew the file to hold; `state` is airlock's private directory for
/// the crash copy.
pub fn write_back(
    login: Login,
    path: &Path,
    tokens: &NewTokens,
    previous: Option<&str>,
    now: &Stamp,
    state: &Path,
) -> Result<Outcome, String> {
    let path = std::fs::canonicalize(path).map_err(|e| format!("cannot resolve the file: {e}"))?;
    let name = path
        .file_name()
        .ok_or("the file has no name")?
        .to_string_lossy()
        .into_owned();
    let file = lock(&path)?;
    let current = read_bounded(&file)?;
    let on_file = refresh::file_refresh_token(login, &current);
    let mut outcome = Outcome::Written;
    if on_file.is_some() && on_file.as_deref() != previous {
        let theirs = refresh::file_freshness(login, &current);
        let ours = refresh::new_freshness(login, tokens, now);
        if theirs.is_some() && theirs > ours {
            return Ok(Outcome::KeptNewer);
        }
        outcome = Outcome::Merged;
    }
    let rewritten = refresh::rewrite_file(login, &current, tokens, now)
        .map_err(|e| format!("cannot rewrite the file: {e}"))?;
    replace(&file, state, &name, &rewritten)?;
    Ok(outcome)
}

/// Opens the host file at `path` (read-write, not following a link, not blocking: a FIFO
/// put there cannot hang the write-back), refuses anything but a regular file, and takes
/// its advisory lock, waiting at most [`LOCK_WAIT`].
fn lock(path: &Path) -> Result<Flock<File>, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot open the file: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat the file: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    let started = Instant::now();
    let mut file = file;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((back, _)) if started.elapsed() < LOCK_WAIT => {
                file = back;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err((_, errno)) => return Err(format!("cannot lock the file: {errno}")),
        }
    }
}

/// The bytes of the file at `path`, at most [`MAX_FILE`].
fn read_bounded_path(path: &Path) -> Result<Vec<u8>, String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot read the file: {e}"))?;
    read_bounded(&file)
}

/// The bytes of an open regular file from its start, at most [`MAX_FILE`].
fn read_bounded(file: &File) -> Result<Vec<u8>, String> {
    if !file.metadata().is_ok_and(|meta| meta.is_file()) {
        return Err("not a regular file".to_owned());
    }
    let mut bytes = Vec::new();
    let mut at = 0u64;
    let mut chunk = vec![0u8; 64 * 1024];
    while at <= MAX_FILE {
        let read = file
            .read_at(&mut chunk, at)
            .map_err(|e| format!("cannot read the file: {e}"))?;
        if read == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..read]);
        at += read as u64;
    }
    if bytes.len() as u64 > MAX_FILE {
        return Err("the file is larger than airlock reads".to_owned());
    }
    Ok(bytes)
}

/// Replaces the content of the locked `file` by `bytes` **in place** (the same inode): a
/// rename over the file would detach the projection bound over it inside a running jail
/// (Linux lazily unmounts a mount whose mountpoint is renamed over from another mount
/// namespace), showing the command the host's file, real tokens and all. For a crash
/// mid-write, a complete copy is written and fsynced first into `state` (airlock's own
/// directory, 0700, hidden from the jail; the copy 0600) and removed once the file is
/// synced; if the in-place write fails, that copy is left for the user and the error names
/// it.
fn replace(file: &File, state: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    private_dir(state)
        .map_err(|e| format!("cannot write the new login to {}: {e}", state.display()))?;
    let copy = state.join(format!(
        "{}.airlock-new-{}-{nanos}",
        name.trim_start_matches('.'),
        std::process::id()
    ));
    let saved = (|| -> std::io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&copy)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        File::open(state)?.sync_all()
    })();
    if let Err(e) = saved {
        let _ = std::fs::remove_file(&copy);
        return Err(format!(
            "cannot write the new login to {}: {e}",
            state.display()
        ));
    }
    let written = file
        .write_all_at(bytes, 0)
        .and_then(|()| file.set_len(bytes.len() as u64))
        .and_then(|()| file.sync_all());
    if let Err(e) = written {
        return Err(format!(
            "cannot rewrite the file ({e}); the new login is in {}",
            copy.display()
        ));
    }
    let _ = std::fs::remove_file(&copy);
    Ok(())
}

/// Makes `dir` (and its missing parents) if needed and checks it is airlock's own: a
/// directory, not a link, owned by this user, mode 0700.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let own = meta.uid() == nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || !own || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(
            "not a private directory of this user (0700)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
