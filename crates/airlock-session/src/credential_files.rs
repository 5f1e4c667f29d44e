//! The user's credential files inside a run (docs/secrets.md, "Credential files"): for
//! each store the policy's `credentials` section turns on whose file exists under the
//! home, the file is read (bounded), projected with surrogates, the copy written into a
//! private directory of the run and bound over the real path inside the jail, and its
//! tokens added to the policy as ordinary secrets (names `file:STORE:FIELD`, never put in
//! the command's environment). A file that cannot be projected, and a store the policy
//! hides, is hidden. A store turned on whose file is absent is write-protected: a file the
//! command creates there is quarantined at the end ([`crate::quarantine`]), so it cannot
//! plant a login the user's next session outside would use. At the end of the run a copy
//! the command changed is a `kind: credentials` audit line (names only); the host's file
//! is never touched here.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};
use airlock_credfiles::{MAX_FILE_SIZE, Store, Token, project};
use airlock_policy::Policy;
use airlock_policy::filesystem::Entry;

/// One projected file.
#[derive(Debug, Clone)]
pub struct ProjectedFile {
    /// Its store.
    pub store: Store,
    /// The user's file (the host path; also where the copy is bound inside the jail).
    pub host_path: PathBuf,
    /// The projected copy in the run's private directory.
    pub copy_path: PathBuf,
    /// Its tokens: secret names, real values and surrogates.
    pub tokens: Vec<Token>,
    /// The projected bytes as airlock last wrote them (at the start, then after each
    /// refresh: [`crate::credential_writeback`]), to tell a change at the end.
    pub projected: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

/// The credential files of a run.
#[derive(Default)]
pub struct CredentialFiles {
    /// The files projected.
    pub projected: Vec<ProjectedFile>,
    /// Files hidden: the store, the path and why.
    pub hidden: Vec<(Store, PathBuf, String)>,
    /// Stores turned on whose file is absent: the path is write-protected for the run (a
    /// file the command creates there is set aside at the end, as any protected path's).
    pub absent: Vec<(Store, PathBuf)>,
    /// The private directory holding the copies (removed when the run ends).
    dir: Option<crate::run_dirs::RunDir>,
}

impl CredentialFiles {
    /// The credential files of a session in the launcher's home: projected when
    /// `project` (the caller binds the copies), otherwise every file the policy turns on
    /// is hidden. Prints the start line.
    pub fn for_session(policy: &mut Policy, project: bool) -> Result<CredentialFiles, String> {
        if policy.credentials.is_empty() {
            return Ok(CredentialFiles::default());
        }
        let place = crate::fs_confine::Place::current()?;
        let files = if project {
            CredentialFiles::prepare(policy, &place.home, &crate::run_dirs::root()?)?
        } else {
            let mut files = CredentialFiles::default();
            for store in Store::ALL {
                let path = place.home.join(store.home_path());
                let on = policy.credentials.is_projected(store.name())
                    || policy.credentials.is_hidden(store.name());
                if on && path.exists() {
                    let why = "not projected outside `airlock run`'s namespace jail".to_owned();
                    files.hidden.push((store, path, why));
                }
            }
            if !files.hidden.is_empty() {
                let names: Vec<&str> = files.hidden.iter().map(|(s, _, _)| s.name()).collect();
                eprintln!(
                    "airlock: credential files: not projected outside `airlock run`'s namespace \
                     jail: {} (a jail hides them; --jail env cannot)",
                    names.join(", ")
                );
            }
            return Ok(files);
        };
        if let Some(line) = files.start_line() {
            eprintln!("{line}");
        }
        Ok(files)
    }

    /// Projects every store `policy` turns on whose file exists under `home`; adds the
    /// tokens to `policy.secrets` (after the policy's own) and each projected path to
    /// `filesystem.readable` (so that a default-hidden store is shown, as its
    /// projection); adds each absent store file's path to `filesystem.protected`. The
    /// copies are written in a directory of the run made in `runs` (`AIRLOCK_HOME/run`,
    /// hidden inside: [`crate::run_dirs`]). `Err`: the private directory or a copy could
    /// not be written.
    pub fn prepare(
        policy: &mut Policy,
        home: &Path,
        runs: &Path,
    ) -> Result<CredentialFiles, String> {
        let mut out = CredentialFiles::default();
        for store in Store::ALL {
            let name = store.name();
            let path = home.join(store.home_path());
            let hidden = policy.credentials.is_hidden(name);
            if !hidden && !policy.credentials.is_projected(name) {
                continue;
            }
            let Ok(metadata) = std::fs::metadata(&path) else {
                // The command must not plant a login there that the user's next session
                // outside would use (review 35, F6): a protected path, quarantined at the
                // end if created (crate::quarantine).
                policy
                    .filesystem
                    .protected
                    .push(path.to_string_lossy().into_owned());
                out.absent.push((store, path));
                continue;
            };
            if hidden {
                out.hidden
                    .push((store, path, "hidden by the policy".to_owned()));
                continue;
            }
            let projection = read_bounded(&path, &metadata)
                .and_then(|bytes| project(store, &bytes).map_err(|e| e.to_string()));
            let projection = match projection {
                Ok(projection) => projection,
                Err(why) => {
                    out.hidden.push((store, path, why));
                    continue;
                }
            };
            let copy_path = out.write_copy(runs, store, &projection.bytes)?;
            policy.secrets.extend(projection.secrets);
            policy
                .filesystem
                .readable
                .push(path.to_string_lossy().into_owned());
            out.projected.push(ProjectedFile {
                store,
                host_path: path,
                copy_path,
                tokens: projection.tokens,
                projected: std::sync::Arc::new(std::sync::Mutex::new(projection.bytes)),
            });
        }
        Ok(out)
    }

    /// Writes the copy of `store`'s file (0600) into the private directory (0700, made in
    /// `runs`).
    fn write_copy(&mut self, runs: &Path, store: Store, bytes: &[u8]) -> Result<PathBuf, String> {
        use std::io::Write as _;
        if self.dir.is_none() {
            self.dir = Some(crate::run_dirs::RunDir::create(runs, "credentials")?);
        }
        let dir = self
            .dir
            .as_ref()
            .map(crate::run_dirs::RunDir::path)
            .ok_or("no directory")?;
        let path = dir.join(store.name());
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(bytes).map(|()| file))
            .map_err(|e| format!("cannot write the projected {store} file: {e}"))?;
        file.flush()
            .map_err(|e| format!("cannot write the projected {store} file: {e}"))?;
        Ok(path)
    }

    /// `(copy, host path)` binds for the jail, one per projected file.
    pub fn binds(&self) -> Vec<(PathBuf, PathBuf)> {
        self.projected
            .iter()
            .map(|file| (file.copy_path.clone(), file.host_path.clone()))
            .collect()
    }

    /// The hidden files, as entries of the jail's hidden list.
    pub fn hidden_entries(&self) -> Vec<Entry> {
        self.hidden
            .iter()
            .map(|(store, path, _)| Entry {
                path: path.clone(),
                why: format!("the {store} credential file (not projected)"),
            })
            .collect()
    }

    /// The start line: the stores projected and the files hidden, names only (the absent
    /// ones: [`CredentialFiles::absent_line`]).
    pub fn start_line(&self) -> Option<String> {
        if self.projected.is_empty() && self.hidden.is_empty() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.projected.is_empty() {
            let names: Vec<&str> = self.projected.iter().map(|f| f.store.name()).collect();
            parts.push(format!("projected with surrogates: {}", names.join(", ")));
        }
        if !self.hidden.is_empty() {
            let names: Vec<String> = self
                .hidden
                .iter()
                .map(|(store, _, why)| format!("{store} ({why})"))
                .collect();
            parts.push(format!("hidden: {}", names.join(", ")));
        }
        Some(format!("airlock: credential files: {}", parts.join("; ")))
    }

    /// The line of the stores turned on whose file is absent, once the jail's plan is
    /// known: `private` tells a store file whose directory is private to the run
    /// ([`crate::private_parents`]).
    pub fn absent_line(&self, private: impl Fn(&Path) -> bool) -> Option<String> {
        let (inside, protected): (Vec<_>, Vec<_>) =
            self.absent.iter().partition(|(_, path)| private(path));
        let names = |list: &[&(Store, PathBuf)]| {
            let names: Vec<&str> = list.iter().map(|(store, _)| store.name()).collect();
            names.join(", ")
        };
        let mut parts = Vec::new();
        if !inside.is_empty() {
            parts.push(format!(
                "absent, in a directory private to the run (a file the command creates there \
                 is never copied back; one the host creates is not seen inside): {}",
                names(&inside)
            ));
        }
        if !protected.is_empty() {
            parts.push(format!(
                "absent, write-protected (a file the command creates there is set aside at \
                 the end): {}",
                names(&protected)
            ));
        }
        (!parts.is_empty()).then(|| format!("airlock: credential files: {}", parts.join("; ")))
    }

    /// At the end of the run: one `kind: credentials` audit line per projected copy the
    /// command changed (the store and the names of what changed, never a value). The
    /// host's file is not touched.
    pub fn audit_changes(&self, audit: &AuditLog) {
        for file in &self.projected {
            let now = read_bounded_path(&file.copy_path);
            let expected = file
                .projected
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if now.as_deref().ok() == Some(expected.as_slice()) {
                continue;
            }
            let what = match &now {
                Err(_) => "removed or unreadable".to_owned(),
                Ok(bytes) => changed_tokens(file, bytes),
            };
            audit.record(AuditEvent {
                kind: Kind::Credentials,
                decision: Decision::Deny,
                message: Some(format!(
                    "the command changed its copy of the {} credential file ({what}); \
                     the host's file was not changed",
                    file.store
                )),
                ..AuditEvent::default()
            });
        }
    }
}

/// Whether the agent `name` is logged in through a credential file the policy projects
/// (its store has the agent's name and its file exists under the home): then it needs no
/// key secret.
pub fn login_present(policy: &Policy, name: &str) -> bool {
    let Some(store) = Store::from_name(name) else {
        return false;
    };
    policy.credentials.is_projected(name)
        && crate::fs_confine::Place::current()
            .is_ok_and(|place| place.home.join(store.home_path()).is_file())
}

/// What `policy explain --fs` says of `target` when it is the file of a store the policy
/// turns on: `("projected (surrogates)", why)` or `("hidden", why)`; `None` otherwise.
pub fn explain(policy: &Policy, home: &Path, target: &Path) -> Option<(String, String)> {
    let store = Store::ALL.into_iter().find(|store| {
        let path = home.join(store.home_path());
        path == target || std::fs::canonicalize(&path).is_ok_and(|real| real == target)
    })?;
    let name = store.name();
    if policy.credentials.is_hidden(name) {
        let why = format!("credentials.hide names the {name} store");
        return Some(("hidden".to_owned(), why));
    }
    policy.credentials.is_projected(name).then(|| {
        let why = format!(
            "credentials.files names the {name} store: `airlock run` shows a copy with \
             surrogates in place of its tokens (hidden if it cannot be parsed; docs/secrets.md)"
        );
        ("projected (surrogates)".to_owned(), why)
    })
}

/// Which of the file's tokens are no longer the surrogate the command was given.
fn changed_tokens(file: &ProjectedFile, bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let gone: Vec<&str> = file
        .tokens
        .iter()
        .filter(|token| !text.contains(token.surrogate.as_str()))
        .map(|token| token.secret.as_str())
        .collect();
    if gone.is_empty() {
        "other fields changed".to_owned()
    } else {
        format!("tokens replaced or removed: {}", gone.join(", "))
    }
}

/// The bytes of a regular file no larger than [`MAX_FILE_SIZE`].
fn read_bounded(path: &Path, metadata: &std::fs::Metadata) -> Result<Vec<u8>, String> {
    if !metadata.is_file() {
        return Err("not a regular file".to_owned());
    }
    if metadata.len() > MAX_FILE_SIZE {
        return Err(format!("larger than {MAX_FILE_SIZE} bytes"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_SIZE + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot be read: {}", e.kind()))?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(format!("larger than {MAX_FILE_SIZE} bytes"));
    }
    Ok(bytes)
}

fn read_bounded_path(path: &Path) -> Result<Vec<u8>, String> {
    let metadata = std::fs::metadata(path).map_err(|e| e.to_string())?;
    read_bounded(path, &metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_are_projected_hidden_or_left_alone() {
        let home = tempfile::tempdir().expect("home");
        std::fs::write(
            home.path().join(".netrc"),
            "machine h.example.com login me password REALnetrcCANARY0123\n",
        )
        .expect("netrc");
        std::fs::write(home.path().join(".npmrc"), "_auth=REALnpmCANARY0123\n").expect("npmrc");
        std::fs::write(home.path().join(".pypirc"), "[pypi]\npassword = x\n").expect("pypirc");
        let mut policy = Policy::default();
        policy.credentials.projected = vec!["netrc".into(), "npm".into(), "git".into()];
        policy.credentials.hidden = vec!["pypi".into()];
        let runs = tempfile::tempdir().expect("runs");
        let files =
            CredentialFiles::prepare(&mut policy, home.path(), runs.path()).expect("prepared");
        assert_eq!(files.projected.len(), 1);
        assert_eq!(files.hidden.len(), 2);
        assert_eq!(policy.secrets.len(), 1);
        assert!(policy.secrets[0].name.starts_with("file:netrc:"));
        let copy = std::fs::read_to_string(&files.projected[0].copy_path).expect("copy");
        assert!(!copy.contains("REALnetrcCANARY0123"));
        let line = files.start_line().expect("line");
        assert!(line.contains("projected with surrogates: netrc"), "{line}");
        assert!(
            line.contains("npm (") && line.contains("pypi (hidden by the policy)"),
            "{line}"
        );
        assert!(!line.contains("REAL"));
        assert_eq!(files.binds()[0].1, home.path().join(".netrc"));
        // The absent git file is write-protected (review 35, F6).
        let git = home.path().join(".git-credentials");
        assert_eq!(files.absent, [(Store::Git, git.clone())]);
        assert!(
            policy
                .filesystem
                .protected
                .contains(&git.to_string_lossy().into_owned())
        );
        assert!(!line.contains("absent"), "{line}");
        let absent = files.absent_line(|_| false).expect("absent");
        assert!(absent.contains("absent, write-protected"), "{absent}");
        assert!(absent.ends_with(": git"), "{absent}");
        let private = files.absent_line(|path| path == git).expect("private");
        assert!(
            private.contains("private to the run") && !private.contains("write-protected"),
            "{private}"
        );
    }

    #[test]
    fn explain_names_projected_and_hidden_stores() {
        let home = Path::new("/home/u");
        let mut policy = Policy::default();
        policy.credentials.projected = vec!["claude".into(), "gh".into()];
        policy.credentials.hidden = vec!["gh".into()];
        let claude = explain(&policy, home, &home.join(".claude/.credentials.json"));
        assert_eq!(
            claude.map(|(word, _)| word).as_deref(),
            Some("projected (surrogates)")
        );
        let gh = explain(&policy, home, &home.join(".config/gh/hosts.yml"));
        assert_eq!(gh.map(|(word, _)| word).as_deref(), Some("hidden"));
        assert!(explain(&policy, home, &home.join(".netrc")).is_none());
        assert!(explain(&policy, home, &home.join("other")).is_none());
    }
}
