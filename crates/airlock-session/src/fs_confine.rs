//! The filesystem half of a jail, from the policy's `filesystem` section to the jail's
//! [`FsConfinement`] (docs/security.md, "What the command can read and write"): entries
//! resolved and canonicalised, missing hidden paths left out, the write-protected names
//! found inside the writable directories (a bounded walk), and airlock's own state hidden.
//! Anything that cannot be confined as asked is an error naming the path (exit 125).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use airlock_jail::FsConfinement;
use airlock_policy::filesystem::{Entry, FsRules, Launcher};
use airlock_policy::model::Filesystem;

/// How many directory entries the walk for protected names looks at, in all.
const MAX_WALK_ENTRIES: usize = 500_000;
/// How deep below a writable directory it looks.
const MAX_WALK_DEPTH: usize = 24;
/// Directories that hold no protected name worth the walk: package trees, and (inside a
/// `.git` directory) git's object and LFS stores.
const SKIPPED_DIRS: [&str; 1] = ["node_modules"];
/// The file that marks a cache directory (a build tree such as cargo's `target/`): its
/// contents are build output, not configuration, and are not walked.
const CACHE_MARKER: &str = "CACHEDIR.TAG";
/// Directories skipped inside a `.git` directory.
const SKIPPED_GIT_DIRS: [&str; 2] = ["objects", "lfs"];

/// A filesystem plan ready for the jail.
#[derive(Debug, Default)]
pub struct FsPlan {
    /// What the jail's mounts need.
    pub confinement: FsConfinement,
    /// Every existing hidden path, canonical.
    pub hidden: Vec<PathBuf>,
}

impl FsPlan {
    /// One line for `--verbose` and the audit's start line.
    pub fn summary(&self) -> String {
        let writable: Vec<String> = self
            .confinement
            .writable
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        format!(
            "writable {}; {} hidden, {} write-protected",
            writable.join(", "),
            self.hidden.len(),
            self.confinement.protected.len()
        )
    }
}

/// Where this launch happens.
pub struct Place {
    /// The launcher's home directory.
    pub home: PathBuf,
    /// The working directory.
    pub cwd: PathBuf,
    /// The launcher's uid.
    pub uid: u32,
    /// A local sandbox's own workspace: writable although it lies in airlock's hidden state.
    pub workspace: Option<PathBuf>,
}

impl Place {
    /// The current process's home (`HOME`), working directory and uid.
    pub fn current() -> Result<Place, String> {
        let cwd = std::env::current_dir()
            .map_err(|e| format!("cannot read the working directory: {e}"))?;
        let uid = nix::unistd::getuid();
        // HOME, else the user database (daemons and orchestrators may run without HOME).
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                nix::unistd::User::from_uid(uid)
                    .ok()
                    .flatten()
                    .map(|user| user.dir)
            })
            .ok_or("neither HOME nor the user database names a home directory")?;
        Ok(Place {
            home,
            cwd,
            uid: uid.as_raw(),
            workspace: None,
        })
    }
}

/// Builds the plan: `extra_hidden` are airlock's own paths (state, CA, secret files, logs).
pub fn plan(fs: &Filesystem, place: &Place, extra_hidden: Vec<Entry>) -> Result<FsPlan, String> {
    let launcher = Launcher {
        home: &place.home,
        cwd: &place.cwd,
        uid: place.uid,
    };
    let rules = FsRules::new(fs, launcher, extra_hidden);
    let hidden = existing(rules.hidden.iter().map(|e| e.path.clone()));
    let mut writable: Vec<(PathBuf, &Entry)> = Vec::new();
    for entry in &rules.writable {
        let path = canonical_dir(entry)?;
        if path == Path::new("/") {
            return Err(format!(
                "{} is the root directory: a writable / would confine nothing; run from a \
                 project directory or list narrower filesystem.writable entries",
                entry.why
            ));
        }
        if let Some(cover) = hidden.iter().find(|h| path.starts_with(h))
            && place.workspace.as_ref() != Some(&path)
        {
            return Err(format!(
                "{} ({}) lies in the hidden {}: airlock does not make a hidden path \
                 writable; work elsewhere, or lift a built-in entry with filesystem.readable",
                entry.why,
                path.display(),
                cover.display()
            ));
        }
        if !writable.iter().any(|(known, _)| *known == path) {
            writable.push((path, entry));
        }
    }
    let exceptions = existing(rules.exceptions.iter().cloned());
    let mut protected = existing(rules.protected_paths.iter().cloned());
    for (dir, entry) in &writable {
        walk_protected(&rules, dir, &entry.path, &mut protected)?;
    }
    protected.sort();
    protected.dedup();
    let writable = writable.into_iter().map(|(path, _)| path).collect();
    Ok(FsPlan {
        confinement: FsConfinement {
            writable,
            protected,
            readable_exceptions: exceptions,
            landlock: true,
        },
        hidden: drop_nested(hidden),
    })
}

/// A writable entry, canonical; it must be an existing directory.
fn canonical_dir(entry: &Entry) -> Result<PathBuf, String> {
    let path = std::fs::canonicalize(&entry.path).map_err(|e| {
        format!(
            "{} ({}): {e}; create it or remove it from filesystem.writable",
            entry.why,
            entry.path.display()
        )
    })?;
    if !path.is_dir() {
        return Err(format!(
            "{} ({}) is not a directory: filesystem.writable takes directories",
            entry.why,
            entry.path.display()
        ));
    }
    Ok(path)
}

/// The paths that exist, canonical, without duplicates.
fn existing(paths: impl Iterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = paths
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Hidden paths without those inside another hidden directory (already covered).
fn drop_nested(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = paths.iter().filter(|p| p.is_dir()).cloned().collect();
    paths
        .into_iter()
        .filter(|path| !dirs.iter().any(|d| d != path && path.starts_with(d)))
        .collect()
}

/// Finds every write-protected name below the writable directory `dir` (canonical;
/// `written` is how the rules know it). Symbolic links are not followed: a link itself
/// is protected when its name is. Past the bounds the walk fails: a protected name left
/// unfound would be a silently weaker jail.
fn walk_protected(
    rules: &FsRules,
    dir: &Path,
    written: &Path,
    found: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let mut pending = VecDeque::from([(dir.to_owned(), 0usize)]);
    let mut seen = 0usize;
    while let Some((current, depth)) = pending.pop_front() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                return Err(format!(
                    "{} holds more than {MAX_WALK_ENTRIES} entries: airlock cannot find every \
                     write-protected name in it; list narrower filesystem.writable entries",
                    dir.display()
                ));
            }
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap_or(&path);
            if rules.is_protected(written, &written.join(relative)) {
                found.push(path);
                continue;
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let name = entry.file_name();
            let in_git = current.file_name().is_some_and(|n| n == ".git");
            let skipped = SKIPPED_DIRS.iter().any(|skip| name == *skip)
                || (in_git && SKIPPED_GIT_DIRS.iter().any(|skip| name == *skip))
                || (is_dir && path.join(CACHE_MARKER).is_file());
            if is_dir && !skipped && depth < MAX_WALK_DEPTH {
                pending.push_back((path, depth + 1));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_names_are_found_and_missing_hidden_paths_left_out() {
        let root = tempfile::tempdir().expect("tempdir");
        let home = root.path().join("home");
        let project = home.join("proj");
        for dir in [
            ".git/hooks",
            "sub/.vscode",
            "node_modules/x/.git/hooks",
            "target/.idea",
        ] {
            std::fs::create_dir_all(project.join(dir)).expect("dirs");
        }
        std::fs::write(project.join(".git/config"), "").expect("config");
        std::fs::write(project.join("sub/.envrc"), "").expect("envrc");
        std::fs::write(
            project.join("target/CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55",
        )
        .expect("tag");
        std::fs::create_dir_all(home.join(".ssh")).expect("ssh");
        let place = Place {
            home: home.clone(),
            cwd: project.clone(),
            uid: 4242,
            workspace: None,
        };
        let plan = plan(&Filesystem::default(), &place, Vec::new()).expect("plan");
        let project = std::fs::canonicalize(&project).expect("canonical");
        let mut expected = vec![
            project.join(".git/config"),
            project.join(".git/hooks"),
            project.join("sub/.envrc"),
            project.join("sub/.vscode"),
        ];
        expected.sort();
        assert_eq!(plan.confinement.protected, expected);
        assert_eq!(plan.confinement.writable, vec![project]);
        let ssh = std::fs::canonicalize(home.join(".ssh")).expect("ssh");
        assert!(plan.hidden.contains(&ssh), "{:?}", plan.hidden);
        assert!(!plan.hidden.iter().any(|p| p.ends_with(".aws")));
    }

    #[test]
    fn a_missing_writable_directory_or_the_root_is_an_error_naming_it() {
        let root = tempfile::tempdir().expect("tempdir");
        let place = Place {
            home: root.path().to_owned(),
            cwd: root.path().to_owned(),
            uid: 4242,
            workspace: None,
        };
        let fs = Filesystem {
            writable: Some(vec!["~/.cache/pip".into()]),
            ..Filesystem::default()
        };
        let error = plan(&fs, &place, Vec::new()).expect_err("missing");
        assert!(error.contains("~/.cache/pip"), "{error}");
        let fs = Filesystem {
            writable: Some(vec!["/".into()]),
            ..Filesystem::default()
        };
        let error = plan(&fs, &place, Vec::new()).expect_err("root");
        assert!(error.contains("root directory"), "{error}");
        std::fs::create_dir_all(root.path().join(".ssh/keys")).expect("ssh");
        let fs = Filesystem {
            writable: Some(vec!["~/.ssh/keys".into()]),
            ..Filesystem::default()
        };
        let error = plan(&fs, &place, Vec::new()).expect_err("hidden");
        assert!(error.contains("lies in the hidden"), "{error}");
    }
}
