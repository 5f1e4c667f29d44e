//! The end check of a confined run (docs/security.md, "What the command can read and
//! write"): read-only binds protect the names that *exist* when the command starts; a name
//! it *creates* (a `.cursor/mcp.json`, a `.git/commondir`, a new `.git` with a hook) cannot
//! be bound in advance. When the command has ended (the jail's PID namespace is gone, so
//! nothing inside can race this), the writable directories are walked again with the same
//! rules, and every protected name that was created or replaced during the run is
//! *quarantined*: renamed in place to `NAME.airlock-quarantine` (`-2`, `-3`... when taken),
//! never deleted, never followed (a link is renamed as a link), said on stderr, and
//! recorded in the audit log (kind `fs`, names only).
//!
//! A `.git` directory the command created (`git init`, `git clone`) keeps the agent's
//! work: only its executable parts go to quarantine, namely a `hooks` directory holding
//! anything but `*.sample` files, a `config` holding any key not known to run nothing
//! ([`airlock_policy::gitconfig`]), an `info` holding more than `exclude`, and every
//! `commondir`, `config.worktree`, `worktrees` and `modules`. A `.git` that replaced the
//! one present at the start goes to quarantine whole. A directory the command shaped as a
//! bare repository (`HEAD`, `objects/`, `refs/`: git run inside it would read its `config`
//! and hooks) is treated as a new repository.
//!
//! Fail closed: a directory that cannot be read, a rename that fails or the bounds of the
//! walk make the check fail; the launcher then says so and exits 125. A protected path
//! (or a directory) removed meanwhile is said, not a failure: the command cannot remove
//! one (each is a mount point in the jail), so the host did.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock_policy::filesystem::FsRules;

use crate::fs_walk::{Found, walk};

/// How long the end check's walk may take; past it the check fails (exit 125).
const END_WALK: Duration = Duration::from_secs(120);

/// The suffix of a quarantined name.
pub const QUARANTINE_SUFFIX: &str = ".airlock-quarantine";
/// How many numbered quarantine names are tried before giving up.
const MAX_QUARANTINE_NAMES: usize = 100;
/// The exit status of a run whose end check could not be completed (airlock's own failure).
const CHECK_FAILED: i32 = 125;
/// Files a new repository's `info` directory may hold.
const INERT_INFO_FILES: [&str; 1] = ["exclude"];
/// Inside a new repository: names that go to quarantine whatever they hold.
const NEW_REPOSITORY_REDIRECTS: [&str; 4] =
    ["commondir", "config.worktree", "worktrees", "modules"];

/// A file's identity: device and inode, as `lstat` gives them.
type Identity = (u64, u64);

/// What the start of a run knew, to compare with its end.
#[derive(Debug, Default)]
pub struct EndCheck {
    /// The rules that say which names are protected.
    rules: FsRules,
    /// Writable directories: canonical, and as the rules know them.
    roots: Vec<(PathBuf, PathBuf)>,
    /// Every protected path, `.git` directory and git target present at the start.
    known: HashMap<PathBuf, Identity>,
    /// The protected paths of the start (they must still be there).
    protected: Vec<PathBuf>,
    /// Hook directories and included files git's configuration names.
    targets: Vec<PathBuf>,
    /// Directories the start walk skipped (caches, and those it left read-only: out of
    /// time or unreadable): skipped again.
    skips: Vec<PathBuf>,
}

/// One thing the end check did or could not do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// `path` was renamed to `to`; `why` says what it was.
    Quarantined {
        /// The protected name as the command left it.
        path: PathBuf,
        /// Where it is now.
        to: PathBuf,
        /// Created, replaced, or the part of a new repository that runs code.
        why: &'static str,
    },
    /// The check could not be completed for this reason.
    Unchecked(String),
    /// A protected path of the start is no longer there. The command cannot remove one
    /// (each is a mount point in the jail), so something outside the run did; said, not
    /// a failure.
    Gone(PathBuf),
}

fn identity(path: &Path) -> Option<Identity> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl EndCheck {
    /// Records the start: `protected` are the paths the jail binds read-only.
    pub(crate) fn new(
        rules: FsRules,
        roots: Vec<(PathBuf, PathBuf)>,
        protected: &[PathBuf],
        found: &Found,
        targets: Vec<PathBuf>,
    ) -> EndCheck {
        let known = protected
            .iter()
            .chain(&found.git_dirs)
            .chain(&found.bare_dirs)
            .chain(&targets)
            .filter_map(|path| Some((path.clone(), identity(path)?)))
            .collect();
        EndCheck {
            rules,
            roots,
            known,
            protected: protected.to_vec(),
            targets,
            skips: found
                .caches
                .iter()
                .chain(&found.unwalked)
                .chain(&found.unreadable)
                .cloned()
                .collect(),
        }
    }

    /// Whether `path` (absolute, canonical) is write-protected: a protected path of the
    /// start or of the rules, or a protected name inside a writable directory.
    pub fn protects(&self, path: &Path) -> bool {
        if self.protected.iter().any(|p| path.starts_with(p)) {
            return true;
        }
        self.roots.iter().any(|(real, base)| {
            path.strip_prefix(real)
                .is_ok_and(|rest| self.rules.is_protected(base, &base.join(rest)))
        })
    }

    /// Stops treating `paths` as protected paths: store files of a private parent
    /// directory, absent at the start, that only the host can create (a `claude login`
    /// outside the run must not be set aside; docs/secrets.md).
    pub fn forget(&mut self, paths: &[PathBuf]) {
        self.rules.protected_paths.retain(|p| !paths.contains(p));
    }

    /// Leaves `dir` out of the end walk: airlock's own directories of the run (hidden from
    /// the command, so nothing in them is the command's), which a writable directory may
    /// hold (review 16).
    pub fn skip(&mut self, dir: PathBuf) {
        self.skips.push(dir);
    }

    /// Whether `path` is the same file it was at the start.
    fn unchanged(&self, path: &Path) -> bool {
        self.known
            .get(path)
            .is_some_and(|id| identity(path) == Some(*id))
    }

    /// Walks the writable directories again and quarantines what the command created or
    /// replaced. Every finding is returned; none means nothing was found. The cheap part
    /// first (which repositories changed: a `stat` each; every protected name renamed),
    /// then the per-repository checks (which run git), bounded by [`END_WALK`] too: past
    /// it the check is said unfinished (exit 125) rather than left hanging.
    pub fn check(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        let found = self.walk_again(&mut findings);
        let changed: Vec<&PathBuf> = found
            .git_dirs
            .iter()
            .filter(|dir| !self.unchanged(dir))
            .collect();
        let settled: HashSet<PathBuf> = changed.iter().map(|dir| (*dir).clone()).collect();
        self.settle_protected(&found, &settled, &mut findings);
        let deadline = Instant::now() + END_WALK;
        let mut late = false;
        let mut out_of_time = || {
            late = late || Instant::now() >= deadline;
            late
        };
        let mut late_findings = Vec::new();
        for git_dir in changed {
            if out_of_time() {
                break;
            }
            if self.known.contains_key(git_dir) {
                let why = "a .git directory that replaced the one there at the start";
                settle(&mut late_findings, git_dir, why);
            } else {
                self.check_new_repository(git_dir, &mut late_findings);
            }
        }
        for git_dir in &found.git_dirs {
            if out_of_time() {
                break;
            }
            self.check_gitlinks(git_dir, &settled, &mut late_findings);
        }
        for bare in &found.bare_dirs {
            if out_of_time() {
                break;
            }
            if !self.unchanged(bare) && !within(&settled, bare) {
                self.check_new_repository(bare, &mut late_findings);
            }
        }
        if late {
            late_findings.push(Finding::Unchecked(format!(
                "the end check ran out of time ({} s) checking the repositories created or \
                 replaced during the run",
                END_WALK.as_secs()
            )));
        }
        findings.append(&mut late_findings);
        self.note_gone(&mut findings);
        findings
    }

    /// The end walk, its unwalked and unreadable directories said as findings.
    fn walk_again(&self, findings: &mut Vec<Finding>) -> Found {
        let mut found = Found::default();
        let deadline = Instant::now() + END_WALK;
        for (dir, written) in &self.roots {
            walk(
                &self.rules,
                dir,
                written,
                Some(&self.skips),
                deadline,
                &mut found,
            );
        }
        for dir in &found.unwalked {
            findings.push(Finding::Unchecked(format!(
                "the end check ran out of time ({} s) before {}: a protected name created in it \
                 would go unseen",
                END_WALK.as_secs(),
                dir.display()
            )));
        }
        for dir in &found.unreadable {
            findings.push(Finding::Unchecked(format!(
                "cannot read {}: a protected name in it would go unseen",
                dir.display()
            )));
        }
        found
    }

    /// Renames every protected name (and watched target) created or replaced during the
    /// run, outside the repositories that changed (checked as a whole).
    fn settle_protected(
        &self,
        found: &Found,
        settled: &HashSet<PathBuf>,
        findings: &mut Vec<Finding>,
    ) {
        for path in found.protected.iter().chain(&self.targets) {
            if within(settled, path)
                || self.unchanged(path)
                || std::fs::symlink_metadata(path).is_err()
            {
                continue;
            }
            let why = if self.known.contains_key(path) {
                "replaced during the run"
            } else {
                "created during the run"
            };
            settle(findings, path, why);
        }
    }

    /// A finding for each protected path that is gone and was not moved by this check.
    fn note_gone(&self, findings: &mut Vec<Finding>) {
        let moved: HashSet<PathBuf> = findings.iter().filter_map(moved_path).collect();
        for path in &self.protected {
            if identity(path).is_none() && !within(&moved, path) {
                findings.push(Finding::Gone(path.clone()));
            }
        }
    }

    /// The submodules (gitlinks) `git_dir`'s index names: the host's `git status` recurses
    /// into each one that has a `.git`, wherever it lies, also where the walk does not look
    /// (`node_modules`, cache directories). A `.git` there that was not present at the start
    /// is checked as a new repository (or set aside, when it is a file or a link).
    fn check_gitlinks(
        &self,
        git_dir: &Path,
        settled: &HashSet<PathBuf>,
        findings: &mut Vec<Finding>,
    ) {
        let Some(work_tree) = git_dir.parent() else {
            return;
        };
        let links = match gitlinks(git_dir, work_tree) {
            Ok(links) => links,
            Err(why) => {
                findings.push(Finding::Unchecked(format!(
                    "cannot list the submodules of {}: {why}",
                    git_dir.display()
                )));
                return;
            }
        };
        for path in links {
            let dot_git = work_tree.join(path).join(".git");
            let Ok(metadata) = std::fs::symlink_metadata(&dot_git) else {
                continue;
            };
            if self.known.contains_key(&dot_git) || within(settled, &dot_git) {
                continue;
            }
            if metadata.is_dir() {
                self.check_new_repository(&dot_git, findings);
            } else {
                settle(
                    findings,
                    &dot_git,
                    "a submodule's .git created during the run",
                );
            }
        }
    }

    /// A `.git` directory (or a directory shaped as a bare repository) the command created:
    /// its executable parts to quarantine.
    fn check_new_repository(&self, git_dir: &Path, findings: &mut Vec<Finding>) {
        let hooks = git_dir.join("hooks");
        if std::fs::symlink_metadata(&hooks).is_ok() && !only_samples(&hooks) {
            settle(
                findings,
                &hooks,
                "hooks of a repository created during the run",
            );
        }
        let config = git_dir.join("config");
        if std::fs::symlink_metadata(&config).is_ok() && !inert_config(&config) {
            settle(
                findings,
                &config,
                "configuration that runs programs, of a repository created during the run",
            );
        }
        let info = git_dir.join("info");
        if std::fs::symlink_metadata(&info).is_ok() && !only_files(&info, &INERT_INFO_FILES) {
            settle(
                findings,
                &info,
                "info of a repository created during the run",
            );
        }
        for name in NEW_REPOSITORY_REDIRECTS {
            let path = git_dir.join(name);
            if std::fs::symlink_metadata(&path).is_ok() {
                settle(findings, &path, "created during the run");
            }
        }
    }
}

/// The path a finding moved to quarantine, if it moved one.
fn moved_path(finding: &Finding) -> Option<PathBuf> {
    match finding {
        Finding::Quarantined { path, .. } => Some(path.clone()),
        _ => None,
    }
}

/// Whether `path` is one of `dirs` or lies inside one (a lookup per ancestor).
fn within(dirs: &HashSet<PathBuf>, path: &Path) -> bool {
    path.ancestors().any(|ancestor| dirs.contains(ancestor))
}

/// A real directory whose entries are all regular `*.sample` files (what `git init` puts
/// in `hooks`).
fn only_samples(dir: &Path) -> bool {
    entries_where(dir, |name, is_file| is_file && name.ends_with(".sample"))
}

/// A real directory whose entries are all regular files named in `names`.
fn only_files(dir: &Path, names: &[&str]) -> bool {
    entries_where(dir, |name, is_file| is_file && names.contains(&name))
}

/// Whether `dir` is a real directory (not a link) whose every entry passes `keep`; any
/// error is `false`.
fn entries_where(dir: &Path, keep: impl Fn(&str, bool) -> bool) -> bool {
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.into_iter().all(|entry| {
        entry.is_ok_and(|entry| {
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| keep(name, is_file))
        })
    })
}

/// Whether `config` is a regular file of at most 1 MiB that git's reader understands and
/// that holds only keys known to run nothing.
fn inert_config(config: &Path) -> bool {
    let regular =
        std::fs::symlink_metadata(config).is_ok_and(|m| m.is_file() && m.len() <= 1 << 20);
    let Some(text) = regular
        .then(|| std::fs::read_to_string(config).ok())
        .flatten()
    else {
        return false;
    };
    // Two readings must agree that nothing runs: the parser's, and a line scan for the
    // names of keys and sections that run programs, which no quirk of the parser hides.
    !mentions_running_keys(&text)
        && airlock_policy::gitconfig::parse(&text)
            .is_ok_and(|entries| airlock_policy::gitconfig::active_keys(&entries).is_empty())
}

/// Whether any line of a git configuration starts (after white space) with the name of a
/// key that makes git run a program, or opens an `include`/`includeIf` or `alias` section.
fn mentions_running_keys(text: &str) -> bool {
    const RUNNING: [&str; 18] = [
        "fsmonitor",
        "hookspath",
        "sshcommand",
        "pager",
        "editor",
        "askpass",
        "command",
        "textconv",
        "clean",
        "smudge",
        "process",
        "helper",
        "program",
        "uploadpack",
        "receivepack",
        "gitproxy",
        "worktree",
        "path",
    ];
    text.lines().any(|line| {
        let line = line.trim_start().to_ascii_lowercase();
        line.starts_with("[include")
            || line.starts_with("[alias")
            || RUNNING.iter().any(|key| {
                line.strip_prefix(key).is_some_and(|rest| {
                    rest.trim_start().is_empty() || rest.trim_start().starts_with('=')
                })
            })
    })
}

/// How long listing a repository's gitlinks may take.
const GITLINK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The paths of the gitlinks (mode 160000) in the index of `git_dir`, as the host's git
/// reads it; none when git is not installed or cannot read the index (then no host git
/// follows the links either). Git that does not answer in time (an index the command made
/// huge) is an error: the check cannot say what is linked. Its configuration and hooks are the ones
/// present at the start (both are write-protected), and neither fsmonitor nor hooks are
/// let run.
fn gitlinks(git_dir: &Path, work_tree: &Path) -> Result<Vec<PathBuf>, String> {
    use std::os::unix::ffi::OsStrExt;
    let child = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .arg("--work-tree")
        .arg(work_tree)
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(["ls-files", "--stage", "-z"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot run git: {e}")),
    };
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(stdout) = stdout.as_mut() {
            let _ = std::io::Read::read_to_end(stdout, &mut out);
        }
        out
    });
    let deadline = std::time::Instant::now() + GITLINK_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if std::time::Instant::now() <= deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("git ls-files took more than {GITLINK_TIMEOUT:?}"));
            }
            Err(e) => break Err(format!("waiting for git: {e}")),
        }
    };
    let out = reader.join().unwrap_or_default();
    let status = status?;
    if !status.success() {
        // Git cannot read this index (not a repository, a corrupt index): the host's git,
        // the same program, cannot follow its links either.
        return Ok(Vec::new());
    }
    Ok(out
        .split(|byte| *byte == 0)
        .filter_map(|entry| {
            let (head, path) = entry.split_at(entry.iter().position(|b| *b == b'\t')?);
            head.starts_with(b"160000 ")
                .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(&path[1..])))
        })
        .collect())
}

/// Quarantines `path`, recording the outcome.
fn settle(findings: &mut Vec<Finding>, path: &Path, why: &'static str) {
    findings.push(match quarantine(path) {
        Ok(to) => Finding::Quarantined {
            path: path.to_owned(),
            to,
            why,
        },
        Err(e) => Finding::Unchecked(format!("cannot quarantine {} ({why}): {e}", path.display())),
    });
}

/// Renames `path` (the name itself: a link stays a link) to the first free
/// `NAME.airlock-quarantine[-N]` beside it; an existing name is never replaced.
pub fn quarantine(path: &Path) -> Result<PathBuf, String> {
    let name = path.file_name().ok_or("no file name")?;
    for n in 1..=MAX_QUARANTINE_NAMES {
        let mut target = name.to_owned();
        target.push(QUARANTINE_SUFFIX);
        if n > 1 {
            target.push(format!("-{n}"));
        }
        let target = path.with_file_name(target);
        match nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            path,
            nix::fcntl::AT_FDCWD,
            &target,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => return Ok(target),
            Err(nix::errno::Errno::EEXIST) => continue,
            Err(e) => return Err(e.desc().to_owned()),
        }
    }
    Err(format!(
        "{MAX_QUARANTINE_NAMES} quarantine names are taken already"
    ))
}

/// The end of a confined run: checks, tells (one stderr line per finding, one audit line
/// per quarantined name), and returns the status to exit with: the command's own, or 125
/// when the check could not be completed.
pub fn finish<E>(
    end_check: &EndCheck,
    audit: &airlock_audit::AuditLog,
    status: Result<i32, E>,
) -> Result<i32, E> {
    let findings = end_check.check();
    let mut failed = false;
    for finding in &findings {
        match finding {
            Finding::Quarantined { path, to, why } => {
                eprintln!(
                    "airlock: quarantined {} ({why}; it would make a host tool run code) as {}: \
                     review it, then delete it or rename it back",
                    path.display(),
                    to.display()
                );
                audit.record(airlock_audit::AuditEvent {
                    kind: airlock_audit::Kind::Fs,
                    decision: airlock_audit::Decision::Deny,
                    reason: Some("quarantined"),
                    path: Some(path.display().to_string()),
                    message: Some(format!("quarantined as {} ({why})", to.display())),
                    ..airlock_audit::AuditEvent::default()
                });
            }
            Finding::Gone(path) => {
                eprintln!(
                    "airlock: {} was removed during the run, not by the command (it could not \
                     remove it); nothing to quarantine there",
                    path.display()
                );
                audit.record(airlock_audit::AuditEvent {
                    kind: airlock_audit::Kind::Fs,
                    decision: airlock_audit::Decision::Allow,
                    reason: Some("gone"),
                    path: Some(path.display().to_string()),
                    ..airlock_audit::AuditEvent::default()
                });
            }
            Finding::Unchecked(why) => {
                failed = true;
                eprintln!(
                    "airlock: the end-of-run check of the writable directories failed: {why}; \
                     do not run git or other tools there before checking them by hand"
                );
                audit.record(airlock_audit::AuditEvent {
                    kind: airlock_audit::Kind::Fs,
                    decision: airlock_audit::Decision::Deny,
                    reason: Some("unchecked"),
                    message: Some(why.clone()),
                    ..airlock_audit::AuditEvent::default()
                });
            }
        }
    }
    match status {
        Ok(_) if failed => Ok(CHECK_FAILED),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::filesystem::Launcher;

    /// A deadline no test reaches.
    fn far() -> Instant {
        Instant::now() + Duration::from_secs(600)
    }

    /// A project with a repository, the end check of its start, and the project path.
    fn start(setup: impl Fn(&Path)) -> (tempfile::TempDir, EndCheck, PathBuf) {
        let root = tempfile::tempdir().expect("tempdir");
        let project = std::fs::canonicalize(root.path()).expect("canonical");
        setup(&project);
        let rules = FsRules::new(
            &airlock_policy::model::Filesystem::default(),
            Launcher {
                home: Path::new("/nonexistent"),
                cwd: &project,
                uid: 4242,
            },
            Vec::new(),
        );
        let mut found = Found::default();
        walk(&rules, &project, &project, None, far(), &mut found);
        let protected = std::mem::take(&mut found.protected);
        let roots = vec![(project.clone(), project.clone())];
        let check = EndCheck::new(rules, roots, &protected, &found, Vec::new());
        (root, check, project)
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        std::fs::write(path, text).expect("write");
    }

    fn quarantined(findings: &[Finding]) -> Vec<String> {
        let mut names: Vec<String> = findings
            .iter()
            .map(|f| match f {
                Finding::Quarantined { to, .. } => to.display().to_string(),
                Finding::Unchecked(why) => panic!("unchecked: {why}"),
                Finding::Gone(path) => panic!("gone: {}", path.display()),
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn names_created_in_an_existing_repository_are_quarantined_and_the_rest_kept() {
        let (_root, check, p) = start(|p| {
            write(&p.join(".git/config"), "[core]\n\tbare = false\n");
            write(&p.join(".git/hooks/pre-commit.sample"), "");
            write(&p.join(".vscode/settings.json"), "{}");
        });
        write(&p.join(".git/commondir"), "../.evil");
        write(&p.join(".cursor/mcp.json"), "{}");
        write(&p.join("sub/.cargo/config.toml"), "");
        std::os::unix::fs::symlink("/etc/passwd", p.join(".npmrc")).expect("link");
        write(&p.join("src/main.rs"), "fn main() {}");
        write(&p.join(".envrc.airlock-quarantine"), "taken");
        write(&p.join("sub/.envrc"), "");
        let names = quarantined(&check.check());
        let expect = |r: &str| p.join(r).display().to_string();
        assert_eq!(
            names,
            vec![
                expect(".cursor.airlock-quarantine"),
                expect(".git/commondir.airlock-quarantine"),
                expect(".npmrc.airlock-quarantine"),
                expect("sub/.cargo/config.toml.airlock-quarantine"),
                expect("sub/.envrc.airlock-quarantine"),
            ]
        );
        // A link is renamed as a link; what it points at is untouched.
        let link = p.join(".npmrc.airlock-quarantine");
        assert!(std::fs::symlink_metadata(&link).expect("link").is_symlink());
        assert!(p.join("src/main.rs").is_file() && p.join(".vscode/settings.json").is_file());
        assert!(check.check().is_empty(), "a second check finds nothing");
    }

    #[test]
    fn a_new_repository_loses_only_what_runs_code() {
        let (_root, check, p) = start(|_| {});
        write(&p.join(".git/HEAD"), "ref: refs/heads/main\n");
        write(
            &p.join(".git/config"),
            "[core]\n\trepositoryformatversion = 0\n",
        );
        write(&p.join(".git/hooks/pre-commit.sample"), "");
        write(&p.join(".git/info/exclude"), "");
        write(&p.join("sub/.git/config"), "[core]\n\tfsmonitor = ./x\n");
        write(&p.join("sub/.git/hooks/pre-commit"), "#!/bin/sh\n");
        write(&p.join("sub/.git/modules/m/config"), "");
        let names = quarantined(&check.check());
        let expect = |r: &str| p.join(r).display().to_string();
        assert_eq!(
            names,
            vec![
                expect("sub/.git/config.airlock-quarantine"),
                expect("sub/.git/hooks.airlock-quarantine"),
                expect("sub/.git/modules.airlock-quarantine"),
            ]
        );
        assert!(p.join(".git/config").is_file() && p.join(".git/hooks").is_dir());
    }

    #[test]
    fn a_replaced_repository_goes_whole_and_a_git_file_too() {
        let (_root, check, p) = start(|p| {
            write(&p.join(".git/config"), "");
            write(&p.join("wt/keep"), "");
        });
        std::fs::rename(p.join(".git"), p.join(".git-orig")).expect("rename");
        write(&p.join(".git/config"), "[core]\n\tfsmonitor = x\n");
        write(&p.join("wt/.git"), "gitdir: ../.evil\n");
        let findings = check.check();
        let names = quarantined(&findings);
        let expect = |r: &str| p.join(r).display().to_string();
        assert_eq!(
            names,
            vec![
                expect(".git.airlock-quarantine"),
                expect("wt/.git.airlock-quarantine")
            ]
        );
    }

    #[test]
    fn a_directory_shaped_as_a_bare_repository_loses_its_config() {
        let (_root, check, p) = start(|p| write(&p.join("src/lib.rs"), ""));
        write(&p.join("src/HEAD"), "ref: refs/heads/main\n");
        std::fs::create_dir_all(p.join("src/objects")).expect("objects");
        std::fs::create_dir_all(p.join("src/refs")).expect("refs");
        write(
            &p.join("src/config"),
            "[core]\n\tworktree = ..\n\tpager = x\n",
        );
        let names = quarantined(&check.check());
        assert_eq!(
            names,
            vec![
                p.join("src/config.airlock-quarantine")
                    .display()
                    .to_string()
            ]
        );
    }

    #[test]
    fn a_protected_path_removed_from_outside_is_said_not_failed() {
        let (_root, check, p) = start(|p| write(&p.join(".envrc"), ""));
        std::fs::remove_file(p.join(".envrc")).expect("remove");
        let findings = check.check();
        assert!(
            matches!(&findings[..], [Finding::Gone(path)] if path.ends_with(".envrc")),
            "{findings:?}"
        );
    }
}
