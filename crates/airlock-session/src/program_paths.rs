//! What a `process:` rule entry stands for (docs/policy.md, "Rules per program"): a bare
//! name every executable of that name on the command's `PATH` (and, for `git`, its remote
//! helpers), an absolute path the file it names; both canonicalised, each entry resolved
//! once. [`ExeCheck`] answers a rule's question for one executable (`policy explain
//! --process`); a jail's connections ask through `crate::process_lookup`.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use airlock_policy::programs::{HELPER_DIRS, ProgramCheck, helpers};

/// `PATH` of a command whose environment has none (as the jail's).
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Most entries remembered (entries come from policies: a few dozen at most).
const MAX_CACHED: usize = 4096;

/// Resolves `process` entries against one `PATH`, remembering each answer.
pub struct ProgramPaths {
    /// The absolute directories of `PATH`, in order.
    path: Vec<PathBuf>,
    /// Entries already resolved.
    cache: Mutex<HashMap<String, Arc<[PathBuf]>>>,
}

impl ProgramPaths {
    /// For the command whose environment is `env` (its `PATH`, else [`DEFAULT_PATH`]).
    pub fn for_env(env: &[(OsString, OsString)]) -> ProgramPaths {
        let path = env
            .iter()
            .find(|(key, _)| key == "PATH")
            .map_or(OsStr::new(DEFAULT_PATH), |(_, value)| value.as_os_str());
        ProgramPaths::for_path(path)
    }

    /// For the `PATH` value `path` (relative directories are left out).
    pub fn for_path(path: &OsStr) -> ProgramPaths {
        ProgramPaths {
            path: std::env::split_paths(path)
                .filter(|dir| dir.is_absolute())
                .collect(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The canonical executables `entry` stands for (none when nothing matches).
    pub fn resolve(&self, entry: &str) -> Arc<[PathBuf]> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = cache.get(entry) {
            return found.clone();
        }
        let found: Arc<[PathBuf]> = self.lookup(entry).into();
        if cache.len() < MAX_CACHED {
            cache.insert(entry.to_owned(), found.clone());
        }
        found
    }

    /// Resolves `entry` without the cache.
    fn lookup(&self, entry: &str) -> Vec<PathBuf> {
        let mut found = Vec::new();
        if entry.starts_with('/') {
            add_executable(&mut found, Path::new(entry));
            return found;
        }
        for dir in &self.path {
            add_executable(&mut found, &dir.join(entry));
        }
        let helpers = helpers(entry);
        if !helpers.is_empty() {
            let prefixes: Vec<PathBuf> = found
                .iter()
                .filter_map(|exe| exe.parent()?.parent().map(Path::to_path_buf))
                .collect();
            for prefix in prefixes {
                for dir in HELPER_DIRS {
                    for helper in helpers {
                        add_executable(&mut found, &prefix.join(dir).join(helper));
                    }
                }
            }
        }
        found
    }
}

/// Adds `candidate`'s canonical path to `found` when it is an executable file.
fn add_executable(found: &mut Vec<PathBuf>, candidate: &Path) {
    let Ok(real) = std::fs::canonicalize(candidate) else {
        return;
    };
    let executable = std::fs::metadata(&real)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0);
    if executable && !found.contains(&real) {
        found.push(real);
    }
}

/// One executable, as `process:` rules see it (`policy explain --process PATH`).
pub struct ExeCheck {
    exe: PathBuf,
    programs: ProgramPaths,
}

impl ExeCheck {
    /// The executable at `exe` (canonicalised when it exists, as the kernel would name
    /// it), with names resolved on `programs`.
    pub fn new(exe: &Path, programs: ProgramPaths) -> ExeCheck {
        let exe = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
        ExeCheck { exe, programs }
    }

    /// The executable, canonical.
    pub fn exe(&self) -> &Path {
        &self.exe
    }
}

impl ProgramCheck for ExeCheck {
    fn is(&self, entry: &str) -> bool {
        self.programs.resolve(entry).contains(&self.exe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_on_path_to_canonical_executables() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(bin.join("plain"), "").unwrap();
        std::os::unix::fs::symlink(&bin, dir.path().join("alias")).unwrap();
        let path = format!(
            "{}:{}:relative",
            dir.path().join("alias").display(),
            bin.display()
        );
        let programs = ProgramPaths::for_path(OsStr::new(&path));
        let real = std::fs::canonicalize(&tool).unwrap();
        assert_eq!(&*programs.resolve("tool"), std::slice::from_ref(&real));
        assert!(programs.resolve("plain").is_empty(), "not executable");
        assert!(programs.resolve("missing").is_empty());
        let via_alias = dir.path().join("alias/tool");
        assert_eq!(
            &*programs.resolve(via_alias.to_str().unwrap()),
            std::slice::from_ref(&real)
        );
        let check = ExeCheck::new(&via_alias, ProgramPaths::for_path(OsStr::new(&path)));
        assert!(check.is("tool"));
        assert!(!check.is("plain"));
    }

    #[test]
    fn git_stands_for_its_remote_helpers() {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "bin/git",
            "libexec/git-core/git-remote-https",
            "libexec/git-core/git-other",
        ] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let programs = ProgramPaths::for_path(dir.path().join("bin").as_os_str());
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            &*programs.resolve("git"),
            &[
                root.join("bin/git"),
                root.join("libexec/git-core/git-remote-https")
            ]
        );
    }
}
