//! The filesystem half of a jail, from the policy's `filesystem` section to the jail's
//! [`FsConfinement`] (docs/security.md, "What the command can read and write"): entries
//! resolved and canonicalised, missing hidden paths left out, the write-protected names
//! found inside the writable directories (a bounded walk) with the hook directories and
//! included files git's configuration names, and airlock's own state hidden. The same
//! walk (`fs_walk`) runs again when the command has ended ([`crate::quarantine`]).
//! Anything that cannot be confined as asked is an error naming the path (exit 125).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock_jail::FsConfinement;
use airlock_policy::filesystem::{Entry, FsRules, Launcher};
use airlock_policy::model::Filesystem;

use crate::fs_walk::{Found, walk};
use crate::quarantine::EndCheck;

/// How long the start walk looks for protected names before the directories it has not
/// reached are made read-only instead (docs/security.md).
const START_WALK: Duration = Duration::from_secs(3);

/// A filesystem plan ready for the jail.
#[derive(Debug, Default)]
pub struct FsPlan {
    /// What the jail's mounts need.
    pub confinement: FsConfinement,
    /// Every existing hidden path, canonical.
    pub hidden: Vec<PathBuf>,
    /// What the end of the run checks again: the protected names the command may have
    /// created or replaced (docs/security.md).
    pub end_check: EndCheck,
    /// What the launcher should tell the user on stderr (directories the walk's time bound
    /// left read-only).
    pub notes: Vec<String>,
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
    let mut found = Found::default();
    let deadline = Instant::now() + walk_time();
    // A writable file holds no names to find.
    for (dir, entry) in writable.iter().filter(|(path, _)| path.is_dir()) {
        walk(&rules, dir, &entry.path, None, deadline, &mut found);
    }
    protected.append(&mut found.protected);
    let notes = unwalked_notes(&found.unwalked);
    // What the walk did not see (out of time, or unreadable: the command, as the same user,
    // could make it readable again) is read-only for the run.
    protected.extend(found.unwalked.iter().cloned());
    protected.extend(found.unreadable.iter().cloned());
    let home = std::fs::canonicalize(&place.home).unwrap_or_else(|_| place.home.clone());
    // Hook directories and included files inside a writable directory: protected where
    // they exist, watched by the end check where they do not (yet).
    let targets: Vec<PathBuf> = git_targets(&found.git_dirs, &home)?
        .into_iter()
        .filter(|t| {
            writable
                .iter()
                .any(|(dir, _)| t.starts_with(dir) && t != dir)
        })
        .collect();
    protected.extend(
        targets
            .iter()
            .filter(|t| std::fs::symlink_metadata(t).is_ok())
            .cloned(),
    );
    protected.sort();
    protected.dedup();
    let roots: Vec<(PathBuf, PathBuf)> = writable
        .iter()
        .filter(|(path, _)| path.is_dir())
        .map(|(path, entry)| (path.clone(), entry.path.clone()))
        .collect();
    let end_check = EndCheck::new(rules.clone(), roots, &protected, &found, targets);
    let writable = writable.into_iter().map(|(path, _)| path).collect();
    Ok(FsPlan {
        confinement: FsConfinement {
            writable,
            protected,
            readable_exceptions: exceptions,
            landlock: true,
        },
        hidden: drop_nested(hidden),
        end_check,
        notes,
    })
}

/// How long the start walk may look for protected names: [`START_WALK`], or
/// `AIRLOCK_WALK_SECONDS` (a number of seconds, more than 0 and at most 600) when set
/// (docs/operations.md).
fn walk_time() -> Duration {
    std::env::var("AIRLOCK_WALK_SECONDS")
        .ok()
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|secs| *secs > 0.0 && *secs <= 600.0)
        .map_or(START_WALK, Duration::from_secs_f64)
}

/// The stderr lines for the directories the start walk did not reach in time.
fn unwalked_notes(unwalked: &[PathBuf]) -> Vec<String> {
    if unwalked.is_empty() {
        return Vec::new();
    }
    let shown: Vec<String> = unwalked
        .iter()
        .take(5)
        .map(|p| p.display().to_string())
        .collect();
    let more = unwalked.len().saturating_sub(shown.len());
    vec![format!(
        "the search for write-protected names ran out of time ({:.1} s) before reading {}{}; {} read-only \
         for this run (set AIRLOCK_WALK_SECONDS to allow longer, or list narrower \
         filesystem.writable entries)",
        walk_time().as_secs_f64(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        if unwalked.len() == 1 {
            "it is"
        } else {
            "they are"
        },
    )]
}

/// A writable entry, canonical; it must be an existing directory or regular file (a file
/// is bound alone: its siblings stay as they are).
fn canonical_dir(entry: &Entry) -> Result<PathBuf, String> {
    let path = std::fs::canonicalize(&entry.path).map_err(|e| {
        format!(
            "{} ({}): {e}; create it or remove it from filesystem.writable",
            entry.why,
            entry.path.display()
        )
    })?;
    if !path.is_dir() && !path.is_file() {
        return Err(format!(
            "{} ({}) is neither a directory nor a regular file: filesystem.writable takes \
             directories and files",
            entry.why,
            entry.path.display()
        ));
    }
    Ok(path)
}

/// The host paths a command's arguments name (whole, after `=`, or as words of a shell
/// line) in a temporary directory the jail makes private (`/tmp`, `/var/tmp`, `/dev/shm`):
/// they exist on the host, but the command sees an empty directory there (the working directory apart, which is bound in). For the note
/// airlock prints when such a command fails.
pub fn hidden_temporary_paths(
    argv: &[std::ffi::OsString],
    cwd: &Path,
) -> Vec<(PathBuf, &'static str)> {
    let words: Vec<String> = argv
        .iter()
        .flat_map(|arg| {
            let arg = arg.to_string_lossy();
            arg.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut paths: Vec<(PathBuf, &'static str)> = words
        .iter()
        .map(String::as_str)
        .map(|word| word.split_once('=').map_or(word, |(_, value)| value))
        .map(|word| PathBuf::from(word.trim_matches(|c| matches!(c, '\'' | '"' | ';' | ')'))))
        .filter_map(|path| {
            let tmp = ["/tmp", "/var/tmp", "/dev/shm"]
                .into_iter()
                .find(|tmp| path.starts_with(tmp) && path != Path::new(tmp))?;
            let shown = !path.starts_with(cwd) && std::fs::symlink_metadata(&path).is_ok();
            shown.then_some((path, tmp))
        })
        .collect();
    paths.dedup();
    paths
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

/// Most configuration files one launch reads (includes of includes counted).
const MAX_GIT_CONFIGS: usize = 64;
/// The largest git configuration file read.
const MAX_GIT_CONFIG_BYTES: u64 = 1 << 20;

/// The directories `core.hooksPath` names and the files `include.path` /
/// `includeIf.*.path` pull in, for every git directory found (and the user's and the
/// system's configuration), resolved as git resolves them: these make git run code as
/// surely as `.git/hooks` and `.git/config` do. A configuration that cannot be read (or
/// too many, or too large) is an error: airlock could not tell what it makes git run.
fn git_targets(git_dirs: &[PathBuf], home: &Path) -> Result<Vec<PathBuf>, String> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|x| !x.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".config"));
    let mut shared = vec![
        PathBuf::from("/etc/gitconfig"),
        home.join(".gitconfig"),
        xdg.join("git/config"),
    ];
    let mut read = 0usize;
    let mut targets = Vec::new();
    let mut shared_hooks = Vec::new();
    let mut queue: Vec<PathBuf> = std::mem::take(&mut shared);
    while let Some(file) = queue.pop() {
        if let Some((hooks, includes)) = read_git_config(&file, home, &mut read)? {
            shared_hooks.extend(hooks);
            queue.extend(includes.iter().cloned());
            targets.extend(includes);
        }
    }
    for git_dir in git_dirs {
        let work_tree = git_dir.parent().unwrap_or(git_dir);
        // The bound is per repository: a tree of many repositories is no error.
        read = 0;
        let mut hooks: Vec<String> = shared_hooks.clone();
        let mut queue = vec![git_dir.join("config")];
        while let Some(file) = queue.pop() {
            if let Some((found_hooks, includes)) = read_git_config(&file, home, &mut read)? {
                hooks.extend(found_hooks);
                queue.extend(includes.iter().cloned());
                targets.extend(includes);
            }
        }
        targets.extend(
            hooks.iter().filter_map(|value| {
                airlock_policy::gitconfig::resolve_path(value, work_tree, home)
            }),
        );
    }
    targets.sort();
    targets.dedup();
    Ok(targets)
}

/// A configuration's `core.hooksPath` values (as written) and include targets (resolved).
type GitPaths = (Vec<String>, Vec<PathBuf>);

/// One configuration file's `core.hooksPath` values and resolved include targets; nothing
/// when it does not exist. Bounded in count ([`MAX_GIT_CONFIGS`]) and size.
fn read_git_config(file: &Path, home: &Path, read: &mut usize) -> Result<Option<GitPaths>, String> {
    let Ok(metadata) = std::fs::metadata(file) else {
        return Ok(None);
    };
    *read += 1;
    if *read > MAX_GIT_CONFIGS || metadata.len() > MAX_GIT_CONFIG_BYTES || !metadata.is_file() {
        return Err(format!(
            "{}: more git configuration than airlock reads (at most {MAX_GIT_CONFIGS} regular \
             files of 1 MiB): it cannot tell which files make git run code",
            file.display()
        ));
    }
    let bytes = std::fs::read(file)
        .map_err(|e| format!("cannot read the git configuration {}: {e}", file.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let base = file.parent().unwrap_or(file);
    let (hooks, includes) = match airlock_policy::gitconfig::parse(&text) {
        Ok(entries) => (
            airlock_policy::gitconfig::hooks_path(&entries)
                .map(str::to_owned)
                .into_iter()
                .collect(),
            airlock_policy::gitconfig::include_paths(&entries)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        ),
        // Git refuses most files this reader rejects; the lenient scan keeps whatever
        // path values such a file holds, in case git reads it after all.
        Err(_) => airlock_policy::gitconfig::scan_paths(&text),
    };
    let includes = includes
        .iter()
        .filter_map(|value| airlock_policy::gitconfig::resolve_path(value, base, home))
        .collect();
    Ok(Some((hooks, includes)))
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

    #[test]
    fn a_writable_file_is_bound_alone_and_not_walked() {
        let root = tempfile::tempdir().expect("tempdir");
        let home = std::fs::canonicalize(root.path()).expect("canonical");
        std::fs::write(home.join(".claude.json"), "{}").expect("file");
        std::fs::create_dir_all(home.join("proj")).expect("proj");
        let place = Place {
            home: home.clone(),
            cwd: home.join("proj"),
            uid: 4242,
            workspace: None,
        };
        let fs = Filesystem {
            writable: Some(vec![".".into(), "~/.claude.json".into()]),
            ..Filesystem::default()
        };
        let plan = plan(&fs, &place, Vec::new()).expect("plan");
        assert_eq!(
            plan.confinement.writable,
            vec![home.join("proj"), home.join(".claude.json")]
        );
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
        assert!(plan.end_check.check().is_empty());
        let fifo = Filesystem {
            writable: Some(vec!["/dev/null".into()]),
            ..Filesystem::default()
        };
        let error = super::plan(&fifo, &place, Vec::new()).expect_err("a device");
        assert!(
            error.contains("neither a directory nor a regular file"),
            "{error}"
        );
    }
}
