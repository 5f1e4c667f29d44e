//! The run's watch over the host files its jail covers by a bind of their own: the
//! credential projections and the hidden credential files whose directory could not be
//! made private to the run (docs/secrets.md, "Private parent directories", fallback;
//! docs/security.md, known gaps). Files in a private parent directory
//! ([`crate::private_parents`]) share no name with the host and are not watched. Linux lets a process rename or unlink over a
//! dentry that is a mount point only in *another* mount namespace and then detaches those
//! mounts: a host process that replaces such a file (Claude Code saving its login by temp
//! file + rename) would uncover the real file inside the jail, whose directory may be bound
//! read-write. This module watches (inotify, on a thread of its own) each such file's
//! directory for the file's name (moved in, created, deleted, moved away) and the file
//! itself (deleted, moved); on the first such event it runs the action the caller gave (the
//! run kills the jail) *first*, then says so on stderr and writes a `kind: credentials`
//! audit line (`deny`), so that a blocked stderr cannot hold the kill back. airlock's own
//! write-back rewrites the file in place and so never triggers it. The kill comes after
//! the rename: the window is in docs/security.md.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

/// How often the watch thread looks at its stop flag (milliseconds).
const POLL_MS: u16 = 200;

/// A watched file replaced on the host: the file and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The host file.
    pub path: PathBuf,
    /// What happened to it.
    pub why: String,
}

/// What to do when a file is replaced (the run kills the jail).
type Action = Box<dyn FnOnce() + Send>;

/// What the watch thread and the run share.
#[derive(Default)]
struct State {
    replaced: Option<Replaced>,
    action: Option<Action>,
}

/// A running watch; stopped when dropped.
pub struct ReplaceWatch {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Per watched directory: `(name, host file)` of each watched file in it.
type Names = HashMap<WatchDescriptor, Vec<(OsString, PathBuf)>>;

impl ReplaceWatch {
    /// Watches `files` (the host paths the jail binds over: projections, hidden files; one
    /// absent at start has nothing to uncover and is skipped); `None` when there are none.
    /// `Err`: a watch could not be set (the run must not start: it could not stop on a
    /// replacement).
    pub fn start(files: &[PathBuf], audit: &AuditLog) -> Result<Option<ReplaceWatch>, String> {
        let files: Vec<&PathBuf> = files.iter().filter(|file| file.exists()).collect();
        if files.is_empty() {
            return Ok(None);
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
            .map_err(|e| format!("cannot watch the credential files: {e}"))?;
        let mut names: Names = HashMap::new();
        let mut selves: HashMap<WatchDescriptor, PathBuf> = HashMap::new();
        for file in files {
            for path in watched_paths(file) {
                let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
                    continue;
                };
                let why = |e: nix::Error| format!("cannot watch {}: {e}", path.display());
                let dir_mask = AddWatchFlags::IN_MOVED_TO
                    | AddWatchFlags::IN_CREATE
                    | AddWatchFlags::IN_DELETE
                    | AddWatchFlags::IN_MOVED_FROM
                    | AddWatchFlags::IN_ONLYDIR;
                let wd = inotify.add_watch(dir, dir_mask).map_err(why)?;
                names
                    .entry(wd)
                    .or_default()
                    .push((name.to_owned(), (*file).clone()));
                let self_mask = AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_DONT_FOLLOW;
                let wd = inotify.add_watch(&path, self_mask).map_err(why)?;
                selves.insert(wd, (*file).clone());
            }
        }
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop, audit) = (Arc::clone(&state), Arc::clone(&stop), audit.clone());
            std::thread::Builder::new()
                .name("airlock-replace-watch".to_owned())
                .spawn(move || watch(&inotify, &names, &selves, &stop, &state, &audit))
                .map_err(|e| format!("cannot watch the credential files: {e}"))?
        };
        Ok(Some(ReplaceWatch {
            state,
            stop,
            thread: Some(thread),
        }))
    }

    /// Runs `action` once when a file is replaced: at once if one already was.
    pub fn on_replaced(&self, action: impl FnOnce() + Send + 'static) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.replaced.is_some() {
            drop(state);
            action();
        } else {
            state.action = Some(Box::new(action));
        }
    }

    /// The replacement seen, if any.
    pub fn replaced(&self) -> Option<Replaced> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replaced
            .clone()
    }
}

impl Drop for ReplaceWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The hidden files (`hidden`, host paths) that the jail covers by a bind of their own: those
/// whose canonical path is one of `hide_paths` (the jail's, canonical). One inside a hidden
/// directory is covered by the directory's mount and has no bind of its own to detach; one
/// absent is left to [`ReplaceWatch::start`].
pub fn bound_alone(hidden: &[PathBuf], hide_paths: &[PathBuf]) -> Vec<PathBuf> {
    hidden
        .iter()
        .filter(|path| std::fs::canonicalize(path).is_ok_and(|real| hide_paths.contains(&real)))
        .cloned()
        .collect()
}

/// The paths to watch for `file`: itself, and where its links lead when it is one (the
/// jail's bind is over the target).
fn watched_paths(file: &Path) -> Vec<PathBuf> {
    let mut paths = vec![file.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(file)
        && real != file
    {
        paths.push(real);
    }
    paths
}

/// The watch thread: reads events until stopped or a file is replaced.
fn watch(
    inotify: &Inotify,
    names: &Names,
    selves: &HashMap<WatchDescriptor, PathBuf>,
    stop: &AtomicBool,
    state: &Mutex<State>,
    audit: &AuditLog,
) {
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(POLL_MS)) {
            Ok(0) | Err(nix::Error::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return trip(state, audit, None, format!("the watch failed: {e}")),
        }
        let events = match inotify.read_events() {
            Ok(events) => events,
            Err(nix::Error::EAGAIN | nix::Error::EINTR) => continue,
            Err(e) => return trip(state, audit, None, format!("the watch failed: {e}")),
        };
        for event in &events {
            if let Some((path, why)) = replacement(event, names, selves) {
                return trip(state, audit, path, why);
            }
        }
    }
}

/// Whether `event` replaces a watched file: the file (when known) and why.
fn replacement(
    event: &InotifyEvent,
    names: &Names,
    selves: &HashMap<WatchDescriptor, PathBuf>,
) -> Option<(Option<PathBuf>, String)> {
    let mask = event.mask;
    if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
        return Some((None, "the watch lost events (queue overflow)".to_owned()));
    }
    if let Some(path) = selves.get(&event.wd) {
        let why = if mask.contains(AddWatchFlags::IN_DELETE_SELF) {
            "it was deleted on the host"
        } else if mask.contains(AddWatchFlags::IN_MOVE_SELF) {
            "it was moved away on the host"
        } else if mask.contains(AddWatchFlags::IN_IGNORED) {
            "its watch ended (the file is gone)"
        } else {
            return None;
        };
        return Some((Some(path.clone()), why.to_owned()));
    }
    let files = names.get(&event.wd)?;
    if mask.contains(AddWatchFlags::IN_IGNORED) {
        let path = files.first().map(|(_, path)| path.clone());
        return Some((
            path,
            "its directory's watch ended (the directory is gone)".to_owned(),
        ));
    }
    let name = event.name.as_ref()?;
    let (_, path) = files.iter().find(|(watched, _)| watched == name)?;
    let why = if mask.contains(AddWatchFlags::IN_MOVED_TO) {
        "another file was renamed over it on the host"
    } else if mask.contains(AddWatchFlags::IN_CREATE) {
        "a file was created in its place on the host"
    } else if mask.contains(AddWatchFlags::IN_DELETE) {
        "it was deleted on the host"
    } else if mask.contains(AddWatchFlags::IN_MOVED_FROM) {
        "it was renamed away on the host"
    } else {
        return None;
    };
    Some((Some(path.clone()), why.to_owned()))
}

/// Runs the caller's action (the kill) first, then records the replacement (stderr, audit):
/// a command that keeps airlock's stderr full must not be able to delay the kill.
fn trip(state: &Mutex<State>, audit: &AuditLog, path: Option<PathBuf>, why: String) {
    let action = {
        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.replaced = Some(Replaced {
            path: path.clone().unwrap_or_default(),
            why: why.clone(),
        });
        state.action.take()
    };
    if let Some(action) = action {
        action();
    }
    let shown = path.as_ref().map_or_else(
        || "a credential file".to_owned(),
        |p| p.display().to_string(),
    );
    let message = format!(
        "{shown}: {why}; the jail's bind over it (a projection, or the cover of a hidden \
         file) may be detached (the command could see the real file), so the run was stopped"
    );
    audit.record(AuditEvent {
        kind: Kind::Credentials,
        decision: Decision::Deny,
        path: path.as_ref().map(|p| p.display().to_string()),
        message: Some(message.clone()),
        ..AuditEvent::default()
    });
    eprintln!("airlock: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(".credentials.json");
        std::fs::write(&file, "{}").expect("write");
        (dir, file)
    }

    fn started(file: &Path) -> (ReplaceWatch, mpsc::Receiver<()>) {
        let watch = ReplaceWatch::start(&[file.to_path_buf()], &AuditLog::disabled())
            .expect("start")
            .expect("a watch");
        let (tx, rx) = mpsc::channel();
        watch.on_replaced(move || {
            let _ = tx.send(());
        });
        (watch, rx)
    }

    #[test]
    fn a_rename_over_the_file_trips_the_watch() {
        let (dir, file) = setup();
        let (watch, rx) = started(&file);
        let new = dir.path().join(".credentials.json.tmp.1");
        std::fs::write(&new, "{\"new\":1}").expect("write");
        std::fs::rename(&new, &file).expect("rename");
        rx.recv_timeout(Duration::from_secs(5)).expect("tripped");
        let replaced = watch.replaced().expect("replaced");
        assert_eq!(replaced.path, file);
        assert!(replaced.why.contains("renamed over"), "{}", replaced.why);
    }

    #[test]
    fn an_unlink_trips_and_an_in_place_write_or_a_neighbour_does_not() {
        let (dir, file) = setup();
        let (watch, rx) = started(&file);
        // airlock's own write-back: in place; and other files in the directory.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"x\":2}"))
            .expect("in place");
        std::fs::write(dir.path().join("other.json"), "1").expect("other");
        std::fs::rename(dir.path().join("other.json"), dir.path().join("o2")).expect("mv");
        assert!(rx.recv_timeout(Duration::from_millis(600)).is_err());
        assert!(watch.replaced().is_none());
        std::fs::remove_file(&file).expect("unlink");
        rx.recv_timeout(Duration::from_secs(5)).expect("tripped");
        assert!(watch.replaced().is_some());
    }

    #[test]
    fn an_action_given_after_the_replacement_runs_at_once() {
        let (dir, file) = setup();
        let watch = ReplaceWatch::start(std::slice::from_ref(&file), &AuditLog::disabled())
            .expect("start")
            .expect("a watch");
        std::fs::rename(&file, dir.path().join("away")).expect("mv");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while watch.replaced().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let (tx, rx) = mpsc::channel();
        watch.on_replaced(move || {
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(1))
            .expect("ran at once");
        assert!(
            ReplaceWatch::start(&[], &AuditLog::disabled())
                .expect("ok")
                .is_none()
        );
    }

    /// Review G5: the kill comes before the audit line (and the stderr line after it), so
    /// a command that keeps stderr full cannot hold the kill back.
    #[test]
    fn the_action_runs_before_the_replacement_is_recorded() {
        use std::sync::atomic::AtomicUsize;
        let (dir, file) = setup();
        let audit = AuditLog::discarding().expect("audit");
        let lines = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&lines);
        audit.tap_with(Arc::new(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        }));
        let watch = ReplaceWatch::start(std::slice::from_ref(&file), &audit)
            .expect("start")
            .expect("a watch");
        let (tx, rx) = mpsc::channel();
        let (flushed, before) = (audit.clone(), Arc::clone(&lines));
        watch.on_replaced(move || {
            // Everything recorded so far is written: nothing yet.
            flushed.flush();
            let _ = tx.send(before.load(Ordering::SeqCst));
        });
        std::fs::write(dir.path().join("new"), "{}").expect("write");
        std::fs::rename(dir.path().join("new"), &file).expect("rename");
        let before = rx.recv_timeout(Duration::from_secs(5)).expect("tripped");
        assert_eq!(before, 0, "the audit line came before the kill");
        drop(watch);
        audit.flush();
        assert_eq!(lines.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn only_hidden_files_with_a_bind_of_their_own_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = std::fs::canonicalize(dir.path()).expect("canonical");
        let (alone, nested) = (real.join("hosts.yml"), real.join("sub/.npmrc"));
        std::fs::create_dir(real.join("sub")).expect("sub");
        std::fs::write(&alone, "x").expect("alone");
        std::fs::write(&nested, "x").expect("nested");
        let absent = real.join("absent");
        let hide_paths = vec![alone.clone(), real.join("sub")];
        let kept = bound_alone(&[alone.clone(), nested, absent], &hide_paths);
        assert_eq!(kept, vec![alone]);
    }
}
