//! The walk of the writable directories for write-protected names, `.git` directories,
//! bare-repository shapes and cache directories (docs/security.md, "What the command can
//! read and write"): run at the start of a run ([`crate::fs_confine`]) and again at its end
//! ([`crate::quarantine`]).
//!
//! The walk is bounded in time, not in entries, so that no tree is too large to work in: a
//! few threads share one queue of directories, and when the deadline passes the directories
//! not yet read are returned as [`Found::unwalked`]. The start makes those read-only (a
//! protected name in them stays unwritable, unseen); the end check fails on them.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use airlock_policy::filesystem::{FsRules, GIT_DIR_NAME, ProtectedIndex};

/// How deep below a writable directory it looks: deeper than any path the kernel resolves
/// (`PATH_MAX` holds at most 2048 components), so in effect every level.
const MAX_WALK_DEPTH: usize = 2048;
/// Directories that hold no protected name worth the walk: package trees, and (inside a
/// `.git` directory) git's object and LFS stores.
const SKIPPED_DIRS: [&str; 1] = ["node_modules"];
/// The file that marks a cache directory (a build tree such as cargo's `target/`): its
/// contents are build output, not configuration, and are not walked.
const CACHE_MARKER: &str = "CACHEDIR.TAG";
/// Directories skipped inside a `.git` directory.
const SKIPPED_GIT_DIRS: [&str; 2] = ["objects", "lfs"];
/// How many threads read directories at once, at most.
const MAX_WORKERS: usize = 4;
/// How many entries of one directory are read between two looks at the clock.
const CLOCK_EVERY: usize = 256;
/// How many unwalked directories are returned at most: more are merged into their parents
/// (each becomes one read-only mount).
pub(crate) const MAX_UNWALKED: usize = 256;

/// What a walk found below the writable directories.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Every write-protected name (and every `.git` that is not a directory).
    pub(crate) protected: Vec<PathBuf>,
    /// Every `.git` directory.
    pub(crate) git_dirs: Vec<PathBuf>,
    /// Every other directory shaped as a git directory (`HEAD`, `objects/`, `refs/`): git
    /// run inside it takes it for a bare repository and reads its `config` and hooks.
    pub(crate) bare_dirs: Vec<PathBuf>,
    /// Cache directories (`CACHEDIR.TAG`) left unwalked.
    pub(crate) caches: Vec<PathBuf>,
    /// Directories that could not be read.
    pub(crate) unreadable: Vec<PathBuf>,
    /// Directories the deadline left unread (at most [`MAX_UNWALKED`] per walk, nested
    /// ones merged), sorted.
    pub(crate) unwalked: Vec<PathBuf>,
}

impl Found {
    /// Adds `other`'s findings to these.
    fn absorb(&mut self, other: Found) {
        self.protected.extend(other.protected);
        self.git_dirs.extend(other.git_dirs);
        self.bare_dirs.extend(other.bare_dirs);
        self.caches.extend(other.caches);
        self.unreadable.extend(other.unreadable);
        self.unwalked.extend(other.unwalked);
    }

    /// Sorts every list, so that a walk's result does not depend on thread timing.
    fn sort(&mut self) {
        for list in [
            &mut self.protected,
            &mut self.git_dirs,
            &mut self.bare_dirs,
            &mut self.caches,
            &mut self.unreadable,
            &mut self.unwalked,
        ] {
            list.sort();
            list.dedup();
        }
    }
}

/// One walk's fixed inputs, shared by its threads.
struct Walk<'a> {
    names: ProtectedIndex<'a>,
    /// The canonical writable directory walked.
    dir: &'a Path,
    /// How the rules know `dir`.
    written: &'a Path,
    /// `None` at the start; at the end, the directories the start skipped.
    known_skips: Option<&'a [PathBuf]>,
    deadline: Instant,
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// The directories waiting to be read, and how many are being read.
struct Queue {
    pending: VecDeque<(PathBuf, usize)>,
    busy: usize,
    expired: bool,
}

/// Finds every write-protected name below the writable directory `dir` (canonical;
/// `written` is how the rules know it). Symbolic links are not followed: a link itself
/// is protected when its name is. At the start of a run (`known_skips` is `None`) every
/// cache directory is skipped; at its end only the directories skipped at the start are
/// (caches and unwalked), so that a `CACHEDIR.TAG` the command wrote hides nothing. What
/// `deadline` leaves unread is added to [`Found::unwalked`].
pub(crate) fn walk(
    rules: &FsRules,
    dir: &Path,
    written: &Path,
    known_skips: Option<&[PathBuf]>,
    deadline: Instant,
    found: &mut Found,
) {
    if known_skips.is_some_and(|known| known.iter().any(|k| dir.starts_with(k))) {
        return;
    }
    if is_bare_like(dir) {
        found.bare_dirs.push(dir.to_owned());
    }
    let walk = Walk {
        names: rules.index(),
        dir,
        written,
        known_skips,
        deadline,
        queue: Mutex::new(Queue {
            pending: VecDeque::from([(dir.to_owned(), 0usize)]),
            busy: 0,
            expired: false,
        }),
        changed: Condvar::new(),
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS));
    let mut here = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..workers).map(|_| scope.spawn(|| walk.work())).collect();
        let mut here = Found::default();
        for thread in threads {
            // A panicking worker (none is expected) leaves its part unwalked, never unseen.
            match thread.join() {
                Ok(part) => here.absorb(part),
                Err(_) => here.unwalked.push(dir.to_owned()),
            }
        }
        here
    });
    let queue = walk.queue.into_inner().unwrap_or_else(|e| e.into_inner());
    here.unwalked
        .extend(queue.pending.into_iter().map(|(path, _)| path));
    here.unwalked = coalesce(std::mem::take(&mut here.unwalked), dir, MAX_UNWALKED);
    let unwalked = here.unwalked.clone();
    here.protected
        .retain(|p| !unwalked.iter().any(|u| p.starts_with(u)));
    found.absorb(here);
    found.sort();
}

impl Walk<'_> {
    /// One thread's share: directories from the queue until it is empty or time is up.
    fn work(&self) -> Found {
        let mut found = Found::default();
        while let Some((current, depth)) = self.next() {
            let subdirs = self.read(&current, depth, &mut found);
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.pending.extend(subdirs);
            queue.busy -= 1;
            self.changed.notify_all();
        }
        found
    }

    /// The next directory to read, or `None` when the walk is over (every directory read,
    /// or the deadline passed).
    fn next(&self) -> Option<(PathBuf, usize)> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if queue.expired || Instant::now() >= self.deadline {
                queue.expired = true;
                self.changed.notify_all();
                return None;
            }
            if let Some(item) = queue.pending.pop_front() {
                queue.busy += 1;
                return Some(item);
            }
            if queue.busy == 0 {
                self.changed.notify_all();
                return None;
            }
            let wait = self.deadline.saturating_duration_since(Instant::now());
            queue = self
                .changed
                .wait_timeout(queue, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Reads one directory: its findings go to `found`, its subdirectories to walk are
    /// returned. A directory the deadline interrupts is unwalked as a whole.
    fn read(&self, current: &Path, depth: usize, found: &mut Found) -> Vec<(PathBuf, usize)> {
        let mut subdirs = Vec::new();
        // A directory removed meanwhile (by the host: the command cannot remove the mount
        // points that lead to protected names) holds nothing to find; any other error
        // leaves it unread.
        let entries = match std::fs::read_dir(current) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return subdirs,
            Err(_) => {
                found.unreadable.push(current.to_owned());
                return subdirs;
            }
        };
        for (count, entry) in entries.enumerate() {
            if count % CLOCK_EVERY == CLOCK_EVERY - 1 && Instant::now() >= self.deadline {
                found.unwalked.push(current.to_owned());
                return Vec::new();
            }
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => {
                    found.unreadable.push(current.to_owned());
                    break;
                }
            };
            if let Some(subdir) = self.look_at(current, depth, &entry, found) {
                subdirs.push((subdir, depth + 1));
            }
        }
        subdirs
    }

    /// Records what one entry is; returns it when it is a directory to walk.
    fn look_at(
        &self,
        current: &Path,
        depth: usize,
        entry: &std::fs::DirEntry,
        found: &mut Found,
    ) -> Option<PathBuf> {
        let path = entry.path();
        let name = entry.file_name();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let relative = path.strip_prefix(self.dir).unwrap_or(&path);
        if self
            .names
            .protects_last(self.written, &self.written.join(relative))
            || (name == GIT_DIR_NAME && !is_dir)
        {
            found.protected.push(path);
            return None;
        }
        if name == "HEAD"
            && current.file_name().is_some_and(|n| n != GIT_DIR_NAME)
            && current != self.dir
            && is_bare_like(current)
        {
            found.bare_dirs.push(current.to_owned());
        }
        if !is_dir {
            return None;
        }
        if depth >= MAX_WALK_DEPTH {
            found.unwalked.push(path);
            return None;
        }
        if name == GIT_DIR_NAME {
            found.git_dirs.push(path.clone());
        }
        self.walked(current, &name, path, found)
    }

    /// Whether the directory `path` (named `name`, in `current`) is walked: not a package
    /// tree, a git object store, a cache or (at the end) a directory the start skipped.
    fn walked(
        &self,
        current: &Path,
        name: &std::ffi::OsStr,
        path: PathBuf,
        found: &mut Found,
    ) -> Option<PathBuf> {
        // Object stores anywhere inside a `.git` (a submodule's under `.git/modules`).
        let in_git = current
            .strip_prefix(self.dir)
            .is_ok_and(|inner| inner.components().any(|c| c.as_os_str() == GIT_DIR_NAME));
        let skipped_before = self.known_skips.is_some_and(|known| known.contains(&path));
        let cache = match self.known_skips {
            None => std::fs::symlink_metadata(path.join(CACHE_MARKER)).is_ok_and(|m| m.is_file()),
            Some(_) => skipped_before,
        };
        if cache {
            found.caches.push(path.clone());
        }
        let skipped = SKIPPED_DIRS.iter().any(|skip| name == *skip)
            || (in_git && SKIPPED_GIT_DIRS.iter().any(|skip| name == *skip))
            || cache;
        (!skipped).then_some(path)
    }
}

/// At most `max` directories covering every one of `dirs` (all inside `root`): nested ones
/// dropped, then, while too many remain, each replaced by its parent (never above `root`).
/// Linear after the sort (a path's descendants sort right after it), so a walk cut short
/// in a directory of a million subdirectories still ends at once.
pub(crate) fn coalesce(mut dirs: Vec<PathBuf>, root: &Path, max: usize) -> Vec<PathBuf> {
    loop {
        dirs.sort();
        let mut outer: Vec<PathBuf> = Vec::with_capacity(dirs.len());
        for dir in dirs {
            if outer.last().is_none_or(|kept| !dir.starts_with(kept)) {
                outer.push(dir);
            }
        }
        if outer.len() <= max.max(1) {
            return outer;
        }
        dirs = outer
            .into_iter()
            .map(|d| match d.parent() {
                Some(parent) if d != root && parent.starts_with(root) => parent.to_owned(),
                _ => d,
            })
            .collect();
    }
}

/// Whether `dir` holds a regular `HEAD` file and `objects` and `refs` directories (links
/// not followed): what git takes for a repository when it runs inside `dir`.
fn is_bare_like(dir: &Path) -> bool {
    let is = |name: &str, dir_wanted: bool| {
        std::fs::symlink_metadata(dir.join(name))
            .is_ok_and(|m| if dir_wanted { m.is_dir() } else { m.is_file() })
    };
    is("HEAD", false) && is("objects", true) && is("refs", true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn coalesce_drops_nested_and_merges_upwards_never_above_the_root() {
        let root = Path::new("/w");
        assert_eq!(
            coalesce(paths(&["/w/a/b", "/w/a", "/w/c"]), root, 8),
            paths(&["/w/a", "/w/c"])
        );
        assert_eq!(
            coalesce(paths(&["/w/a/x", "/w/a/y", "/w/b/z"]), root, 2),
            paths(&["/w/a", "/w/b"])
        );
        assert_eq!(
            coalesce(paths(&["/w/a/x", "/w/b/y", "/w/c/z"]), root, 2),
            paths(&["/w"])
        );
        assert_eq!(coalesce(paths(&["/w"]), root, 0), paths(&["/w"]));
        assert_eq!(
            coalesce(paths(&["/w/a-c", "/w/a/b", "/w/a"]), root, 8),
            paths(&["/w/a", "/w/a-c"])
        );
        let many: Vec<PathBuf> = (0..200_000)
            .map(|i| PathBuf::from(format!("/w/big/d{i}")))
            .collect();
        assert_eq!(coalesce(many, root, MAX_UNWALKED), paths(&["/w/big"]));
    }

    #[test]
    fn a_deadline_in_the_past_leaves_the_root_unwalked_and_finds_nothing_inside() {
        let dir = std::env::temp_dir().join(format!("airlock-walk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/.git")).expect("mkdir");
        let rules = FsRules::default();
        let mut found = Found::default();
        walk(&rules, &dir, &dir, None, Instant::now(), &mut found);
        assert_eq!(found.unwalked, vec![dir.clone()]);
        assert!(found.protected.is_empty() && found.git_dirs.is_empty());
        let mut found = Found::default();
        let later = Instant::now() + std::time::Duration::from_secs(30);
        walk(&rules, &dir, &dir, None, later, &mut found);
        assert!(found.unwalked.is_empty());
        assert!(found.protected.is_empty());
        assert_eq!(found.git_dirs, vec![dir.join("a/.git")]);
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
