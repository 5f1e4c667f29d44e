//! The end of a run with writable private parent directories ([`crate::private_parents`];
//! docs/secrets.md, "Private parent directories"): what the command wrote at the top level
//! of one goes back to the host directory. Everything in the private directory was written
//! by the command, an attacker: only new or changed regular files go back (opened without
//! following links and checked on the open file; never a link, FIFO or device), bounded
//! in size and count, never a store file's name, never a write-protected name of the plan,
//! never over a host entry that is not a regular file, and never over a file the host
//! changed (or created, or removed) during the run: then the host's stays, said on stderr
//! and in the audit. Runs before the profile's state copy-back (`~/.claude.json` from its
//! working copy) and before the end check ([`crate::quarantine`]) looks at the host.

use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};

use crate::private_parents::{
    MAX_COPY_FILE, MAX_COPY_TOTAL, MAX_ENTRIES, Parent, PrivateParents, fingerprint,
};
use crate::quarantine::EndCheck;

/// What happened to one top-level name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyBack {
    /// Written to the host directory.
    Written(PathBuf),
    /// Not copied back: the path and why (the host's file, if any, stays).
    Refused(PathBuf, String),
}

impl PrivateParents {
    /// Copies back the new and changed top-level files of every writable private
    /// directory; says each refusal on stderr and audits each outcome. Returns them.
    pub fn copy_back(&self, end_check: &EndCheck, audit: &AuditLog) -> Vec<CopyBack> {
        let mut outcomes = Vec::new();
        let mut budget = MAX_COPY_TOTAL;
        for parent in self.parents.iter().filter(|parent| parent.writable) {
            copy_back_one(parent, end_check, &mut budget, &mut outcomes);
        }
        for outcome in &outcomes {
            report(outcome, audit);
        }
        outcomes
    }
}

fn copy_back_one(
    parent: &Parent,
    end_check: &EndCheck,
    budget: &mut u64,
    outcomes: &mut Vec<CopyBack>,
) {
    let entries = match std::fs::read_dir(&parent.private) {
        Ok(entries) => entries,
        Err(e) => {
            let why = format!("its private copy cannot be listed: {e}");
            outcomes.push(CopyBack::Refused(parent.host.clone(), why));
            return;
        }
    };
    for (count, entry) in entries.enumerate() {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let host = parent.host.join(&name);
        if count >= 2 * MAX_ENTRIES {
            let why = format!(
                "more than {} entries: the rest is not copied",
                2 * MAX_ENTRIES
            );
            outcomes.push(CopyBack::Refused(parent.host.clone(), why));
            return;
        }
        let kept_link = parent
            .links
            .get(&name)
            .is_some_and(|link| std::fs::read_link(entry.path()).is_ok_and(|now| now == *link));
        if parent.live.contains(&name) || parent.stores.contains(&name) || kept_link {
            continue;
        }
        if end_check.protects(&host) {
            // One there at the start was read-only inside: nothing to say.
            if !parent.copied.contains_key(&name) && !parent.links.contains_key(&name) {
                let why = "a write-protected name".to_owned();
                outcomes.push(CopyBack::Refused(host, why));
            }
            continue;
        }
        let private = parent.private.join(&name);
        if std::fs::symlink_metadata(&private).is_ok_and(|m| m.is_dir()) {
            let mut tree = Tree {
                end_check,
                budget,
                entries: 0,
                outcomes,
            };
            tree.new_dir(&private, &host, 0);
            continue;
        }
        match one(parent, &name, budget) {
            Ok(Some(outcome)) => outcomes.push(outcome),
            Ok(None) => {}
            Err(why) => outcomes.push(CopyBack::Refused(host, why)),
        }
    }
}

/// How deep a new directory is copied back.
const MAX_DEPTH: usize = 16;

/// The copy-back of a directory the command created at the top level (Claude Code makes
/// `projects/`, `todos/` on its first run): regular files and directories only, each
/// checked as a top-level file is, bounded by [`MAX_ENTRIES`] entries, [`MAX_DEPTH`]
/// levels and the run's byte budget. Never over anything the host has at that name.
struct Tree<'a> {
    end_check: &'a EndCheck,
    budget: &'a mut u64,
    entries: usize,
    outcomes: &'a mut Vec<CopyBack>,
}

impl Tree<'_> {
    fn refuse(&mut self, host: &Path, why: impl Into<String>) {
        self.outcomes
            .push(CopyBack::Refused(host.to_path_buf(), why.into()));
    }

    /// Copies the directory `private` to the new host directory `host`.
    fn new_dir(&mut self, private: &Path, host: &Path, depth: usize) {
        if depth > MAX_DEPTH {
            return self.refuse(host, format!("deeper than {MAX_DEPTH} levels"));
        }
        if self.end_check.protects(host) {
            return self.refuse(host, "a write-protected name");
        }
        let mode = std::fs::symlink_metadata(private).map_or(0o700, |m| m.mode() & 0o777);
        let made = std::fs::DirBuilder::new().mode(mode | 0o700).create(host);
        match made {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return self.refuse(
                    host,
                    "created on the host during the run: the host's is kept",
                );
            }
            Err(e) => return self.refuse(host, format!("cannot be made: {e}")),
            Ok(()) => self.outcomes.push(CopyBack::Written(host.to_path_buf())),
        }
        let Ok(entries) = std::fs::read_dir(private) else {
            return self.refuse(host, "its private copy cannot be listed");
        };
        for entry in entries.flatten() {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return self.refuse(host, format!("more than {MAX_ENTRIES} entries"));
            }
            let (from, to) = (entry.path(), host.join(entry.file_name()));
            if self.end_check.protects(&to) {
                self.refuse(&to, "a write-protected name");
            } else if std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_dir()) {
                self.new_dir(&from, &to, depth + 1);
            } else {
                self.new_file(&from, &to);
            }
        }
    }

    /// Copies one file of a new directory (a regular file, bounded).
    fn new_file(&mut self, private: &Path, host: &Path) {
        let (bytes, mode) = match read_private(private) {
            Ok(read) => read,
            Err(why) => return self.refuse(host, why),
        };
        if bytes.len() as u64 > *self.budget {
            return self.refuse(
                host,
                format!("the copy-back is bounded to {MAX_COPY_TOTAL} bytes"),
            );
        }
        match write_host(host, &bytes, mode) {
            Ok(()) => {
                *self.budget -= bytes.len() as u64;
                self.outcomes.push(CopyBack::Written(host.to_path_buf()));
            }
            Err(e) => self.refuse(host, format!("cannot be written: {e}")),
        }
    }
}

/// One name: `None` when there is nothing to copy (unchanged).
fn one(parent: &Parent, name: &OsString, budget: &mut u64) -> Result<Option<CopyBack>, String> {
    let host = parent.host.join(name);
    let (bytes, mode) = read_private(&parent.private.join(name))?;
    if bytes.len() as u64 > *budget {
        return Err(format!(
            "the run's copy-back is bounded to {MAX_COPY_TOTAL} bytes"
        ));
    }
    let on_host = std::fs::symlink_metadata(&host);
    match (parent.copied.get(name), &on_host) {
        (Some(_), Err(_)) => return Err("removed on the host during the run".to_owned()),
        (Some(start), Ok(now)) if fingerprint(now) != *start || !now.is_file() => {
            return Err("changed on the host during the run: the host's is kept".to_owned());
        }
        (Some(_), Ok(_)) => {
            if read_host(&host).is_ok_and(|now| now == bytes) {
                return Ok(None);
            }
        }
        (None, Ok(_)) => {
            return Err("created on the host during the run: the host's is kept".to_owned());
        }
        (None, Err(_)) => {}
    }
    write_host(&host, &bytes, mode).map_err(|e| format!("cannot be written: {e}"))?;
    *budget -= bytes.len() as u64;
    Ok(Some(CopyBack::Written(host)))
}

/// A regular file of the private directory, opened without following a link (nor
/// blocking on a FIFO) and checked on the open file: its bytes and permission bits.
fn read_private(path: &Path) -> Result<(Vec<u8>, u32), String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a symbolic link".to_owned(),
            _ => format!("cannot be opened: {e}"),
        })?;
    let metadata = file.metadata().map_err(|e| e.to_string())?;
    if !metadata.is_file() {
        return Err("not a regular file".to_owned());
    }
    if metadata.len() > MAX_COPY_FILE {
        return Err(format!("larger than {MAX_COPY_FILE} bytes"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_COPY_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_COPY_FILE {
        return Err(format!("larger than {MAX_COPY_FILE} bytes"));
    }
    Ok((bytes, metadata.mode() & 0o777))
}

/// The host file's bytes (a regular file, not through a link), bounded.
fn read_host(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_COPY_FILE + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes `bytes` through a new temporary file beside `host`, renamed over it.
fn write_host(host: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let name = host.file_name().unwrap_or_default().to_string_lossy();
    let temporary = host.with_file_name(format!(".{name}.airlock-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temporary)
        .and_then(|mut out| {
            std::io::Write::write_all(&mut out, bytes)?;
            out.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, host));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Says one outcome: a refusal on stderr, every outcome in the audit (paths, never
/// contents).
fn report(outcome: &CopyBack, audit: &AuditLog) {
    let (path, decision, reason, message) = match outcome {
        CopyBack::Written(path) => (path, Decision::Allow, "copied back", None),
        CopyBack::Refused(path, why) => {
            eprintln!(
                "airlock: {}: the command's version was not copied back from the run's private \
                 directory ({why})",
                path.display()
            );
            (path, Decision::Deny, "not copied back", Some(why.clone()))
        }
    };
    audit.record(AuditEvent {
        kind: Kind::Fs,
        decision,
        reason: Some(reason),
        path: Some(path.display().to_string()),
        message,
        ..AuditEvent::default()
    });
}
