//! Private parent directories of the credential files (docs/secrets.md, "Private parent
//! directories"): for each credential store the policy turns on, the directory holding its
//! file (`~/.claude`, `~/.codex`, `~/.config/gh`, `~/.docker`, `~`) is shown inside the jail
//! as a directory of the run's own, so that the store file's *name* is never shared with
//! the host. A host program renaming a new file over the store file (the user's own Claude
//! Code refreshing outside), creating it (a `claude login` outside) or removing it then
//! changes nothing inside: without a shared name there is no bind for the kernel to detach.
//!
//! This module owns the host side: it prepares each private directory in a 0700 directory
//! of the run (every other entry of the host directory a placeholder the jail binds the
//! host's entry over, links recreated as the same link, the projected copy itself at the
//! store's name, an empty placeholder for a hidden store), and at the end copies back what
//! the command wrote at the top level of a writable one ([`crate::private_copy_back`]).
//! Where a directory cannot be made private, the caller falls back to the bind of the file
//! and the replace watch ([`crate::replace_watch`]) and says so; one holding more than
//! [`MAX_ENTRIES`] entries stops the run before it starts instead.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};

/// The most entries a directory may hold to be made private.
pub const MAX_ENTRIES: usize = 4096;
/// The largest top-level file copied into (and back from) a writable private directory;
/// a bigger one is bound live.
pub const MAX_COPY_FILE: u64 = 8 << 20;
/// The most bytes copied into (and back from) the private directories of one run.
pub const MAX_COPY_TOTAL: u64 = 64 << 20;

/// How a store's file is shown in its private directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// The projected copy (a file of the run), hard-linked in: airlock's refreshes rewrite
    /// it in place and so reach the jail.
    Projected(PathBuf),
    /// An empty read-only file.
    Hidden,
    /// Nothing: the name is absent inside whatever the host does.
    Absent,
}

/// A file's identity and state as `lstat` gives them: device, inode, size, modification
/// and change times.
pub(crate) type Fingerprint = (u64, u64, u64, i64, i64, i64, i64);

/// The fingerprint of `metadata`.
pub(crate) fn fingerprint(metadata: &std::fs::Metadata) -> Fingerprint {
    (
        metadata.dev(),
        metadata.ino(),
        metadata.size(),
        metadata.mtime(),
        metadata.mtime_nsec(),
        metadata.ctime(),
        metadata.ctime_nsec(),
    )
}

/// One private directory.
#[derive(Debug)]
pub(crate) struct Parent {
    /// The host directory (canonical).
    pub(crate) host: PathBuf,
    /// The run's directory shown in its place.
    pub(crate) private: PathBuf,
    /// Whether the command may write in it (the plan makes the host directory writable).
    pub(crate) writable: bool,
    /// Names bound live from the host.
    pub(crate) live: Vec<OsString>,
    /// Names made read-only (the store files shown).
    pub(crate) read_only: Vec<OsString>,
    /// The store file names in it (never copied back).
    pub(crate) stores: Vec<OsString>,
    /// Where store files that are links lead in it (never copied back).
    pub(crate) store_targets: Vec<PathBuf>,
    /// Top-level files copied in: name and the host file's fingerprint then.
    pub(crate) copied: HashMap<OsString, Fingerprint>,
    /// Links recreated from the host: name and target (one left as it was is not copied
    /// back, nor said).
    pub(crate) links: HashMap<OsString, PathBuf>,
    /// Top-level names the plan hides: never copied (bound live, then covered).
    hidden: Vec<OsString>,
}

/// The private directories of one run; removed when dropped.
#[derive(Debug, Default)]
pub struct PrivateParents {
    pub(crate) parents: Vec<Parent>,
    /// Host directories shown as they are, each with why (said on the start line).
    pub fallbacks: Vec<(PathBuf, String)>,
    /// Host directories with more than [`MAX_ENTRIES`] entries, each with its count: the
    /// run does not start ([`PrivateParents::for_run`]).
    pub crowded: Vec<(PathBuf, usize)>,
    dir: Option<crate::run_dirs::RunDir>,
}

/// What the plan says of the paths around a store's directory.
pub struct PlanView<'a> {
    /// Writable paths, canonical.
    pub writable: &'a [PathBuf],
    /// Write-protected paths, canonical.
    pub protected: &'a [PathBuf],
    /// Hidden paths, canonical.
    pub hidden: &'a [PathBuf],
    /// Where the run's own directory is made (`AIRLOCK_HOME/run`, hidden inside:
    /// [`crate::run_dirs`]).
    pub runs: &'a Path,
}

impl PrivateParents {
    /// Prepares a private directory for the parent of each store file in `stores` (host
    /// path, how it is shown). A parent that cannot be made private is a fallback.
    pub fn prepare(stores: &[(PathBuf, Shown)], plan: &PlanView<'_>) -> PrivateParents {
        let mut out = PrivateParents::default();
        let mut groups: Vec<(PathBuf, Vec<(OsString, Shown)>)> = Vec::new();
        for (path, shown) in stores {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                continue;
            };
            let host = match std::fs::canonicalize(parent) {
                Ok(host) if host.is_dir() => host,
                _ => {
                    let why = "it does not exist (a file the host creates there is visible)";
                    out.fallback(parent, why.to_owned());
                    continue;
                }
            };
            match groups.iter_mut().find(|(known, _)| *known == host) {
                Some((_, names)) => names.push((name.to_owned(), shown.clone())),
                None => groups.push((host, vec![(name.to_owned(), shown.clone())])),
            }
        }
        let mut budget = MAX_COPY_TOTAL;
        for (host, names) in groups {
            if let Some(count) = count_entries(&host).filter(|count| *count > MAX_ENTRIES) {
                out.crowded.push((host, count));
                continue;
            }
            if let Err(why) = out.add(&host, &names, plan, &mut budget) {
                out.fallback(&host, why);
            }
        }
        out
    }

    fn fallback(&mut self, dir: &Path, why: String) {
        if !self.fallbacks.iter().any(|(known, _)| known == dir) {
            self.fallbacks.push((dir.to_path_buf(), why));
        }
    }

    /// Makes `host`'s private directory; `Err`: why it cannot be made.
    fn add(
        &mut self,
        host: &Path,
        names: &[(OsString, Shown)],
        plan: &PlanView<'_>,
        budget: &mut u64,
    ) -> Result<(), String> {
        if host == Path::new("/") {
            return Err("it is the root directory".to_owned());
        }
        if plan.hidden.iter().any(|hidden| host.starts_with(hidden)) {
            return Err("it is hidden".to_owned());
        }
        let writable = plan.writable.iter().any(|w| host.starts_with(w))
            && !plan.protected.iter().any(|p| host.starts_with(p));
        let private = self.new_dir(plan.runs)?;
        let stores: Vec<OsString> = names.iter().map(|(name, _)| name.clone()).collect();
        let mut parent = Parent {
            host: host.to_path_buf(),
            private,
            writable,
            live: Vec::new(),
            read_only: Vec::new(),
            store_targets: crate::store_links::targets(host, &stores),
            stores,
            copied: HashMap::new(),
            links: HashMap::new(),
            hidden: plan
                .hidden
                .iter()
                .filter(|path| path.parent() == Some(host))
                .filter_map(|path| path.file_name().map(OsString::from))
                .collect(),
        };
        let result = fill(&mut parent, budget).and_then(|()| place_stores(&mut parent, names));
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&parent.private);
            return Err(e);
        }
        let mode = std::fs::metadata(host).map_or(0o700, |m| m.mode() & 0o777);
        std::fs::set_permissions(&parent.private, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set its private copy's mode: {e}"))?;
        self.parents.push(parent);
        Ok(())
    }

    /// A new empty directory inside the run's private 0700 directory (made in `runs`).
    fn new_dir(&mut self, runs: &Path) -> Result<PathBuf, String> {
        if self.dir.is_none() {
            self.dir = Some(crate::run_dirs::RunDir::create(runs, "parents")?);
        }
        let root = self
            .dir
            .as_ref()
            .map(crate::run_dirs::RunDir::path)
            .ok_or("none")?;
        let path = root.join(self.parents.len().to_string());
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("cannot create a private directory: {e}"))?;
        Ok(path)
    }

    /// The jail's private directories.
    #[cfg(target_os = "linux")]
    pub fn jail_dirs(&self) -> Vec<airlock_jail::PrivateDir> {
        self.parents
            .iter()
            .map(|parent| airlock_jail::PrivateDir {
                target: parent.host.clone(),
                source: parent.private.clone(),
                live: parent.live.clone(),
                read_only: parent.read_only.clone(),
                writable: parent.writable,
            })
            .collect()
    }

    /// Whether `path` (a store file's host path) is shown by a private directory: its
    /// name is one of the stores of the private directory of its parent.
    pub fn holds_store(&self, path: &Path) -> bool {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return false;
        };
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        self.parents
            .iter()
            .any(|p| p.host == dir && p.stores.iter().any(|s| s == name))
    }

    /// Whether `path`'s directory is shown as a private directory (its names are not
    /// shared with the host: a host rename there changes nothing inside).
    pub fn in_private(&self, path: &Path) -> bool {
        let Some(dir) = path.parent() else {
            return false;
        };
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        self.parents.iter().any(|p| p.host == dir)
    }

    /// The run's directory holding the private directories (none without one): inside
    /// `AIRLOCK_HOME`, which the jail hides; covered once more after the private
    /// directories are shown where the caller asks it.
    pub fn root(&self) -> Option<&Path> {
        self.dir.as_ref().map(crate::run_dirs::RunDir::path)
    }

    /// The host directories made private, for the start line.
    pub fn hosts(&self) -> Vec<&Path> {
        self.parents.iter().map(|p| p.host.as_path()).collect()
    }

    /// One line for stderr: which directories are private, which fell back and why.
    pub fn start_line(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.parents.is_empty() {
            let names: Vec<String> = self
                .parents
                .iter()
                .map(|p| p.host.display().to_string())
                .collect();
            parts.push(format!("private to the run: {}", names.join(", ")));
        }
        for (dir, why) in &self.fallbacks {
            parts.push(format!(
                "{} shown as it is ({why}): a host program replacing a credential file \
                 there stops the run",
                dir.display()
            ));
        }
        (!parts.is_empty())
            .then(|| format!("airlock: credential file directories: {}", parts.join("; ")))
    }
}

/// The most entries [`count_entries`] counts.
const MAX_COUNTED: usize = 1 << 20;

/// How many entries `dir` holds (at most [`MAX_COUNTED`]); `None` when it cannot be
/// listed.
pub(crate) fn count_entries(dir: &Path) -> Option<usize> {
    let entries = std::fs::read_dir(dir).ok()?;
    Some(entries.take(MAX_COUNTED).count())
}

/// Fills the private directory with every host entry except the store names: links
/// recreated, top-level files of a writable directory copied (bounded), everything else a
/// placeholder bound live.
fn fill(parent: &mut Parent, budget: &mut u64) -> Result<(), String> {
    let entries = std::fs::read_dir(&parent.host).map_err(|e| format!("cannot list it: {e}"))?;
    let mut count = 0usize;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list it: {e}"))?;
        count += 1;
        if count > MAX_ENTRIES {
            return Err(format!("it holds more than {MAX_ENTRIES} entries"));
        }
        let name = entry.file_name();
        if parent.stores.contains(&name) {
            continue;
        }
        place_entry(parent, &name, budget).map_err(|e| {
            format!(
                "cannot prepare {} in its private copy: {e}",
                Path::new(&name).display()
            )
        })?;
    }
    Ok(())
}

/// Places one host entry in the private directory.
fn place_entry(parent: &mut Parent, name: &OsString, budget: &mut u64) -> std::io::Result<()> {
    let source = parent.host.join(name);
    let target = parent.private.join(name);
    let metadata = match std::fs::symlink_metadata(&source) {
        Ok(metadata) => metadata,
        // Gone since it was listed.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if metadata.is_symlink() {
        let link = std::fs::read_link(&source)?;
        std::os::unix::fs::symlink(&link, &target)?;
        parent.links.insert(name.clone(), link);
        return Ok(());
    }
    if metadata.is_dir() {
        std::fs::DirBuilder::new().mode(0o700).create(&target)?;
        parent.live.push(name.clone());
        return Ok(());
    }
    if parent.writable
        && !parent.hidden.contains(name)
        && metadata.is_file()
        && metadata.len() <= MAX_COPY_FILE
        && metadata.len() <= *budget
        && let Some(copied) = copy_in(&source, &target)?
    {
        *budget -= copied.2;
        parent.copied.insert(name.clone(), copied);
        return Ok(());
    }
    placeholder(&target)?;
    parent.live.push(name.clone());
    Ok(())
}

/// Copies a regular file (never through a link, never a FIFO's blocking open) into the
/// private directory: its fingerprint, or `None` when it is not a regular file (any more)
/// or grew past the bound.
fn copy_in(source: &Path, target: &Path) -> std::io::Result<Option<Fingerprint>> {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(source)
    else {
        return Ok(None);
    };
    let metadata = file.metadata()?;
    if !metadata.is_file() || metadata.len() > MAX_COPY_FILE {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(MAX_COPY_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != metadata.len() {
        // Changing while read: bound live instead.
        return Ok(None);
    }
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(metadata.mode() & 0o777)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(target)?;
    std::io::Write::write_all(&mut out, &bytes)?;
    Ok(Some(fingerprint(&metadata)))
}

/// An empty file for a live bind (or a hidden store) to cover.
fn placeholder(target: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(target)
        .map(drop)
}

/// Places the store files: the projected copy hard-linked in, an empty file for a hidden
/// store (both read-only inside), nothing for an absent one.
fn place_stores(parent: &mut Parent, names: &[(OsString, Shown)]) -> Result<(), String> {
    for (name, shown) in names {
        let target = parent.private.join(name);
        let placed = match shown {
            Shown::Projected(copy) => std::fs::hard_link(copy, &target),
            Shown::Hidden => placeholder(&target),
            Shown::Absent => continue,
        };
        placed.map_err(|e| {
            format!(
                "cannot place {} in its private copy: {e}",
                Path::new(name).display()
            )
        })?;
        parent.read_only.push(name.clone());
    }
    Ok(())
}

impl PrivateParents {
    /// The private parent directories of a run's credential files, from the jail's
    /// filesystem plan: store files absent at the start in a private directory are no
    /// longer protected paths of the end check (only the host can create them there now).
    /// Says on stderr the absent stores' line and the start line. `Err`: a directory holds
    /// too many entries to be made private (the run must not start: a host program could
    /// replace a credential file under the command there), or the run's directory cannot
    /// be made.
    pub fn for_run(
        files: &crate::credential_files::CredentialFiles,
        fs: &mut crate::fs_confine::FsPlan,
    ) -> Result<PrivateParents, String> {
        let stores = store_files(files);
        if stores.is_empty() {
            return Ok(PrivateParents::default());
        }
        if let Some(path) = stores.iter().map(|(path, _)| path).find(|p| dangling(p)) {
            return Err(dangling_message(path));
        }
        let runs = crate::run_dirs::root()?;
        let view = PlanView {
            writable: &fs.confinement.writable,
            protected: &fs.confinement.protected,
            hidden: &fs.hidden,
            runs: &runs,
        };
        let parents = PrivateParents::prepare(&stores, &view);
        if let Some((dir, count)) = parents.crowded.first() {
            return Err(crowded_message(dir, *count));
        }
        let absent: Vec<PathBuf> = files
            .absent
            .iter()
            .map(|(_, path)| path.clone())
            .filter(|path| parents.holds_store(path))
            .collect();
        fs.end_check.forget(&absent);
        fs.end_check
            .skip(std::fs::canonicalize(&runs).unwrap_or_else(|_| runs.clone()));
        if let Some(line) = files.absent_line(|path| parents.holds_store(path)) {
            eprintln!("{line}");
        }
        if let Some(line) = parents.start_line() {
            eprintln!("{line}");
        }
        Ok(parents)
    }

    /// The jail's `(copy, destination)` binds of the projected files: none for a file its
    /// private directory shows itself, except over where a store file that is a link leads
    /// (that target may hold the real file: covered as before).
    pub fn binds(
        &self,
        files: &crate::credential_files::CredentialFiles,
    ) -> Vec<(PathBuf, PathBuf)> {
        let mut binds = Vec::new();
        for (copy, host) in files.binds() {
            if !self.holds_store(&host) {
                binds.push((copy, host));
                continue;
            }
            if let Ok(real) = std::fs::canonicalize(&host)
                && real != host
                && !self.holds_store(&real)
            {
                binds.push((copy, real));
            }
        }
        binds
    }

    /// The files the replace watch must still watch: the binds' destinations and the hidden
    /// store files bound alone, except those whose directory is private (a host rename there
    /// changes nothing inside).
    pub fn watched(&self, binds: &[(PathBuf, PathBuf)], bound_alone: Vec<PathBuf>) -> Vec<PathBuf> {
        binds
            .iter()
            .map(|(_, destination)| destination.clone())
            .chain(bound_alone)
            .filter(|path| {
                let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
                !self.in_private(path) && !self.in_private(&real)
            })
            .collect()
    }
}

/// Why a run does not start with `dir` holding `count` entries.
/// Whether `path` is a symbolic link whose chain does not end in a regular file: the
/// command could create the file it leads to (in a writable directory the jail shows, or
/// through the copy-back) and so plant a login the user's next session reads (review 16).
fn dangling(path: &Path) -> bool {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    is_link && !std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// The refusal of a store file that is a link leading nowhere (exit 125).
fn dangling_message(path: &Path) -> String {
    format!(
        "{} is a symbolic link that does not lead to a file: the command could create the \
         file it leads to and so choose the login your next session uses (docs/secrets.md, \
         \"Private parent directories\"): remove the link or make it lead to a file, or turn \
         its store off in `credentials.files`",
        path.display()
    )
}

fn crowded_message(dir: &Path, count: usize) -> String {
    let more = if count >= MAX_COUNTED {
        "more than "
    } else {
        ""
    };
    format!(
        "{} holds {more}{count} entries, more than the {MAX_ENTRIES} a credential file's \
         directory may hold to be made private to the run (docs/secrets.md, \"Private parent \
         directories\"): remove entries from it, or turn its store off in `credentials.files`",
        dir.display()
    )
}

/// Every store file the run shows, hides or keeps absent: host path and how its private
/// parent directory shows it.
fn store_files(files: &crate::credential_files::CredentialFiles) -> Vec<(PathBuf, Shown)> {
    let projected = files
        .projected
        .iter()
        .map(|f| (f.host_path.clone(), Shown::Projected(f.copy_path.clone())));
    let hidden = files
        .hidden
        .iter()
        .map(|(_, p, _)| (p.clone(), Shown::Hidden));
    let absent = files.absent.iter().map(|(_, p)| (p.clone(), Shown::Absent));
    projected.chain(hidden).chain(absent).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(writable: &'a [PathBuf], hidden: &'a [PathBuf], runs: &'a Path) -> PlanView<'a> {
        PlanView {
            writable,
            protected: &[],
            hidden,
            runs,
        }
    }

    #[test]
    fn a_writable_parent_copies_files_binds_directories_and_keeps_links() {
        let home = tempfile::tempdir().expect("home");
        let dir = std::fs::canonicalize(home.path())
            .expect("canonical")
            .join(".claude");
        std::fs::create_dir_all(dir.join("projects")).expect("projects");
        std::fs::write(dir.join("state.json"), "{}").expect("state");
        std::fs::write(dir.join(".credentials.json"), "REAL").expect("real");
        std::os::unix::fs::symlink("/nowhere", dir.join("link")).expect("link");
        let copy = home.path().join("copy");
        std::fs::write(&copy, "SURROGATE").expect("copy");
        let stores = [(dir.join(".credentials.json"), Shown::Projected(copy))];
        let writable = [dir.clone()];
        let runs = tempfile::tempdir().expect("runs");
        let parents = PrivateParents::prepare(&stores, &view(&writable, &[], runs.path()));
        assert!(parents.fallbacks.is_empty(), "{:?}", parents.fallbacks);
        let parent = &parents.parents[0];
        assert!(parent.writable);
        assert_eq!(parent.live, [OsString::from("projects")]);
        assert!(parent.copied.contains_key(&OsString::from("state.json")));
        let private = &parent.private;
        let shown = std::fs::read_to_string(private.join(".credentials.json")).expect("shown");
        assert_eq!(shown, "SURROGATE");
        assert_eq!(
            std::fs::read_link(private.join("link")).expect("link"),
            Path::new("/nowhere")
        );
        assert!(parents.holds_store(&dir.join(".credentials.json")));
        assert!(!parents.holds_store(&dir.join("state.json")));
    }

    #[test]
    fn hidden_missing_and_root_parents_fall_back() {
        let home = tempfile::tempdir().expect("home");
        let dir = std::fs::canonicalize(home.path()).expect("canonical");
        let stores = [
            (dir.join(".docker/config.json"), Shown::Absent),
            (dir.join("gone/hosts.yml"), Shown::Absent),
            (PathBuf::from("/netrc"), Shown::Absent),
        ];
        std::fs::create_dir(dir.join(".docker")).expect("docker");
        let hidden = [dir.join(".docker")];
        let runs = tempfile::tempdir().expect("runs");
        let parents = PrivateParents::prepare(&stores, &view(&[], &hidden, runs.path()));
        assert!(parents.parents.is_empty());
        assert_eq!(parents.fallbacks.len(), 3, "{:?}", parents.fallbacks);
        let line = parents.start_line().expect("line");
        assert!(
            line.contains("it is hidden") && line.contains("root directory"),
            "{line}"
        );
    }
}
