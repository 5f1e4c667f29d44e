//! The bounded walk of the writable directories for write-protected names, `.git`
//! directories, bare-repository shapes and cache directories (docs/security.md, "What the
//! command can read and write"): run at the start of a run ([`crate::fs_confine`]) and
//! again at its end ([`crate::quarantine`]).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use airlock_policy::filesystem::{FsRules, GIT_DIR_NAME};

/// How many directory entries the walk for protected names looks at, in all.
const MAX_WALK_ENTRIES: usize = 500_000;
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
}

/// Finds every write-protected name below the writable directory `dir` (canonical;
/// `written` is how the rules know it). Symbolic links are not followed: a link itself
/// is protected when its name is. At the start of a run (`known_caches` is `None`) every
/// cache directory is skipped; at its end only those skipped at the start are, so that a
/// `CACHEDIR.TAG` the command wrote hides nothing. Past the bounds the walk fails: a
/// protected name left unfound would be a silently weaker jail.
pub(crate) fn walk(
    rules: &FsRules,
    dir: &Path,
    written: &Path,
    known_caches: Option<&[PathBuf]>,
    found: &mut Found,
) -> Result<(), String> {
    let mut pending = VecDeque::from([(dir.to_owned(), 0usize)]);
    let mut seen = 0usize;
    if is_bare_like(dir) {
        found.bare_dirs.push(dir.to_owned());
    }
    let too_many = || {
        format!(
            "{} holds more than {MAX_WALK_ENTRIES} entries: airlock cannot find every \
             write-protected name in it; list narrower filesystem.writable entries",
            dir.display()
        )
    };
    while let Some((current, depth)) = pending.pop_front() {
        // A directory removed meanwhile (by the host: the command cannot remove the mount
        // points that lead to protected names) holds nothing to find; any other error
        // leaves it unread.
        let entries = match std::fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => {
                found.unreadable.push(current);
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(_) => {
                    found.unreadable.push(current.clone());
                    break;
                }
            };
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                return Err(too_many());
            }
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap_or(&path);
            let name = entry.file_name();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if rules.is_protected(written, &written.join(relative))
                || (name == GIT_DIR_NAME && !is_dir)
            {
                found.protected.push(path);
                continue;
            }
            if name == "HEAD"
                && current.file_name().is_some_and(|n| n != GIT_DIR_NAME)
                && current != dir
                && is_bare_like(&current)
            {
                found.bare_dirs.push(current.clone());
            }
            if !is_dir || depth >= MAX_WALK_DEPTH {
                continue;
            }
            if name == GIT_DIR_NAME {
                found.git_dirs.push(path.clone());
            }
            // Object stores anywhere inside a `.git` (a submodule's under `.git/modules`).
            let in_git = current
                .strip_prefix(dir)
                .is_ok_and(|inner| inner.components().any(|c| c.as_os_str() == GIT_DIR_NAME));
            let cache = std::fs::symlink_metadata(path.join(CACHE_MARKER))
                .is_ok_and(|m| m.is_file())
                && known_caches.is_none_or(|known| known.contains(&path));
            if cache {
                found.caches.push(path.clone());
            }
            let skipped = SKIPPED_DIRS.iter().any(|skip| name == *skip)
                || (in_git && SKIPPED_GIT_DIRS.iter().any(|skip| name == *skip))
                || cache;
            if !skipped {
                pending.push_back((path, depth + 1));
            }
        }
    }
    Ok(())
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
