//! The end of a run with writable private parent directories ([`crate::private_parents`];
//! docs/secrets.md, "Private parent directories"): what the command wrote at the top level
//! of one goes back to the host directory. Everything in the private directory was written
//! by the command, an attacker: only new or changed regular files (and new directories of
//! them) go back, opened without following links and checked on the open file (never a
//! link, FIFO or device); never a store file's name nor where a store file that is a link
//! leads; never a write-protected name of the plan; never over a host entry that is not a
//! regular file, nor over a file the host changed (or created, or removed) during the run:
//! then the host's stays, said on stderr and in the audit. One budget bounds the whole
//! copy-back of a run ([`MAX_ENTRIES`] entries, [`MAX_COPY_TOTAL`] bytes, checked before
//! reading), and a host directory never grows past [`MAX_ENTRIES`] entries (one over it
//! cannot be made private to a later run); what is left out for them is said once, counted.
//! Runs before the profile's state copy-back (`~/.claude.json` from its working copy) and
//! before the end check ([`crate::quarantine`]) looks at the host.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};

use crate::private_parents::{
    MAX_COPY_FILE, MAX_COPY_TOTAL, MAX_ENTRIES, Parent, PrivateParents, count_entries, fingerprint,
};
use crate::quarantine::EndCheck;

/// The most entries the copy-back lets a host directory reach: three quarters of
/// [`MAX_ENTRIES`], so that a later run can still make it private when the host adds some.
const GROWTH_CEILING: usize = MAX_ENTRIES / 4 * 3;

/// What happened to one top-level name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyBack {
    /// Written to the host directory.
    Written(PathBuf),
    /// Not copied back: the path and why (the host's file, if any, stays).
    Refused(PathBuf, String),
}

/// The most entries of one directory looked at (the rest is counted as left out).
const MAX_LISTED: usize = 1 << 20;

/// What the copy-back of one run may still do, and what it left out for lack of it.
struct Budget {
    /// Entries that may still be looked at (copied or refused), directories included.
    entries: usize,
    /// Bytes that may still be written.
    bytes: u64,
    /// Entries left out for lack of budget.
    over: usize,
    /// How many more left-out entries may be listed to be counted.
    countable: usize,
}

impl Budget {
    /// Takes one entry for `path` (of the private directory); `false` (it is counted as
    /// left out) when none is left.
    fn take_entry(&mut self, path: &Path) -> bool {
        if self.entries == 0 {
            self.left_out(path, 0);
            return false;
        }
        self.entries -= 1;
        true
    }

    /// Counts `path` as left out, with what it holds when it is a directory (listed, never
    /// read; at most [`MAX_LISTED`] entries in all and [`MAX_DEPTH`] levels).
    fn left_out(&mut self, path: &Path, depth: usize) {
        self.over += 1;
        let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
        if !is_dir || depth >= MAX_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            if self.countable == 0 {
                return;
            }
            self.countable -= 1;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                self.left_out(&entry.path(), depth + 1);
            } else {
                self.over += 1;
            }
        }
    }
}

impl PrivateParents {
    /// Copies back the new and changed top-level files of every writable private
    /// directory; says each refusal on stderr and audits each outcome. Returns them.
    pub fn copy_back(&self, end_check: &EndCheck, audit: &AuditLog) -> Vec<CopyBack> {
        let mut outcomes = Vec::new();
        let mut budget = Budget {
            entries: MAX_ENTRIES,
            bytes: MAX_COPY_TOTAL,
            over: 0,
            countable: MAX_LISTED,
        };
        for parent in self.parents.iter().filter(|parent| parent.writable) {
            let before = budget.over;
            let mut one = One {
                parent,
                end_check,
                budget: &mut budget,
                outcomes: &mut outcomes,
            };
            one.copy_back();
            let over = budget.over - before;
            if over > 0 {
                let more = if budget.countable == 0 {
                    " or more"
                } else {
                    ""
                };
                let why = format!(
                    "{over}{more} entries left out: the copy-back of a run is bounded to \
                     {MAX_ENTRIES} entries and {MAX_COPY_TOTAL} bytes"
                );
                outcomes.push(CopyBack::Refused(parent.host.clone(), why));
            }
        }
        for outcome in &outcomes {
            report(outcome, audit);
        }
        outcomes
    }
}

/// The copy-back of one private directory.
struct One<'a> {
    parent: &'a Parent,
    end_check: &'a EndCheck,
    budget: &'a mut Budget,
    outcomes: &'a mut Vec<CopyBack>,
}

impl One<'_> {
    fn refuse(&mut self, host: &Path, why: impl Into<String>) {
        self.outcomes
            .push(CopyBack::Refused(host.to_path_buf(), why.into()));
    }

    /// Copies back every top-level name of the private directory worth it.
    fn copy_back(&mut self) {
        let parent = self.parent;
        let entries = match std::fs::read_dir(&parent.private) {
            Ok(entries) => entries,
            Err(e) => {
                return self.refuse(
                    &parent.host,
                    format!("its private copy cannot be listed: {e}"),
                );
            }
        };
        // New names never take the host directory past three quarters of the bound: one
        // over it cannot be made private to a later run, and the host's own programs keep
        // room to add theirs (review 16).
        let mut room =
            GROWTH_CEILING.saturating_sub(count_entries(&parent.host).unwrap_or(MAX_ENTRIES));
        let mut crowded = 0usize;
        let live: HashSet<&OsString> = parent.live.iter().collect();
        let mut looked_at = 0usize;
        for entry in entries.take(MAX_LISTED).flatten() {
            let name = entry.file_name();
            if live.contains(&name) || self.left_alone(&name) {
                continue;
            }
            looked_at += 1;
            if looked_at > 2 * MAX_ENTRIES {
                // Only counted: the budget is spent long before.
                self.budget.left_out(&entry.path(), 0);
                continue;
            }
            let host = parent.host.join(&name);
            if std::fs::symlink_metadata(&host).is_err() {
                if room == 0 {
                    crowded += 1;
                    continue;
                }
                room -= 1;
            }
            self.top_level(&name, &host);
        }
        if crowded > 0 {
            let why = format!(
                "{crowded} new names left out: the directory would hold more than \
                 {GROWTH_CEILING} entries, close to the {MAX_ENTRIES} above which a later run \
                 cannot make it private"
            );
            self.refuse(&parent.host, why);
        }
    }

    /// Whether a top-level name (not one bound live) is not the copy-back's at all: a
    /// store file, a link kept as it was, or a write-protected name that was there at the start.
    fn left_alone(&self, name: &OsString) -> bool {
        let parent = self.parent;
        let kept_link = parent.links.get(name).is_some_and(|link| {
            std::fs::read_link(parent.private.join(name)).is_ok_and(|now| now == *link)
        });
        let was_there = parent.copied.contains_key(name) || parent.links.contains_key(name);
        parent.stores.contains(name)
            || kept_link
            || (was_there && self.end_check.protects(&parent.host.join(name)))
    }

    /// One top-level name: a directory (new), or a file (new or changed).
    fn top_level(&mut self, name: &OsString, host: &Path) {
        let private = self.parent.private.join(name);
        if let Some(why) = self.forbidden(host) {
            return self.refuse(host, why);
        }
        if std::fs::symlink_metadata(&private).is_ok_and(|m| m.is_dir()) {
            if self.budget.take_entry(&private) {
                self.new_dir(&private, host, 0);
            }
            return;
        }
        match changed_file(self.parent, name, &mut *self.budget) {
            Ok(Some(outcome)) => self.outcomes.push(outcome),
            Ok(None) => {}
            Err(why) => self.refuse(host, why),
        }
    }

    /// Why nothing may be written at `host`, if so.
    fn forbidden(&self, host: &Path) -> Option<&'static str> {
        if self
            .parent
            .store_targets
            .iter()
            .any(|target| target == host)
        {
            return Some("where a credential store file that is a link leads");
        }
        self.end_check
            .protects(host)
            .then_some("a write-protected name")
    }

    /// Copies the directory `private` (the command's, new) to the new host directory
    /// `host`: regular files and directories only, each checked as a top-level file is,
    /// bounded by [`MAX_DEPTH`] levels and the run's budget. Never over anything the host
    /// has at that name.
    fn new_dir(&mut self, private: &Path, host: &Path, depth: usize) {
        if depth > MAX_DEPTH {
            return self.refuse(host, format!("deeper than {MAX_DEPTH} levels"));
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
        for entry in entries.take(MAX_LISTED).flatten() {
            // Once the budget is spent, the rest is only counted (never descended into).
            if !self.budget.take_entry(&entry.path()) {
                continue;
            }
            let (from, to) = (entry.path(), host.join(entry.file_name()));
            if let Some(why) = self.forbidden(&to) {
                self.refuse(&to, why);
            } else if std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_dir()) {
                self.new_dir(&from, &to, depth + 1);
            } else {
                self.new_file(&from, &to);
            }
        }
    }

    /// Copies one file of a new directory (a regular file, within the budget).
    fn new_file(&mut self, private: &Path, host: &Path) {
        let (bytes, mode) = match read_private(private, self.budget) {
            Ok(Some(read)) => read,
            Ok(None) => return,
            Err(why) => return self.refuse(host, why),
        };
        match write_host(host, &bytes, mode, false) {
            Ok(()) => {
                self.budget.bytes -= bytes.len() as u64;
                self.outcomes.push(CopyBack::Written(host.to_path_buf()));
            }
            Err(why) => self.refuse(host, why),
        }
    }
}

/// How deep a new directory is copied back.
const MAX_DEPTH: usize = 16;

/// One top-level file: `None` when there is nothing to copy (unchanged, or left out for
/// the budget).
fn changed_file(
    parent: &Parent,
    name: &OsString,
    budget: &mut Budget,
) -> Result<Option<CopyBack>, String> {
    let host = parent.host.join(name);
    let on_host = std::fs::symlink_metadata(&host);
    let replace = match (parent.copied.get(name), &on_host) {
        (Some(_), Err(_)) => return Err("removed on the host during the run".to_owned()),
        (Some(start), Ok(now)) if fingerprint(now) != *start || !now.is_file() => {
            return Err("changed on the host during the run: the host's is kept".to_owned());
        }
        (Some(_), Ok(_)) => true,
        (None, Ok(_)) => {
            return Err("created on the host during the run: the host's is kept".to_owned());
        }
        (None, Err(_)) => false,
    };
    let private = parent.private.join(name);
    if !budget.take_entry(&private) {
        return Ok(None);
    }
    let Some((bytes, mode)) = read_private(&private, budget)? else {
        return Ok(None);
    };
    if replace && read_host(&host).is_ok_and(|now| now == bytes) {
        // Unchanged: costs nothing of the budget.
        budget.entries += 1;
        return Ok(None);
    }
    write_host(&host, &bytes, mode, replace)?;
    budget.bytes -= bytes.len() as u64;
    Ok(Some(CopyBack::Written(host)))
}

/// A regular file of the private directory, opened without following a link (nor
/// blocking on a FIFO) and checked on the open file: its bytes and permission bits. Its
/// size is checked against the budget's bytes left before reading; `None` (counted as left
/// out) when the budget has no room for it.
fn read_private(path: &Path, budget: &mut Budget) -> Result<Option<(Vec<u8>, u32)>, String> {
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
    let limit = budget.bytes.min(MAX_COPY_FILE);
    if metadata.len() > limit {
        budget.over += 1;
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        // Grown while read.
        budget.over += 1;
        return Ok(None);
    }
    Ok(Some((bytes, metadata.mode() & 0o777)))
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

/// Writes `bytes` through a new temporary file beside `host`, renamed to it: over the
/// host's file when `replace` (synced first), else only while the name stays absent (a
/// file the host creates meanwhile is kept).
fn write_host(host: &Path, bytes: &[u8], mode: u32, replace: bool) -> Result<(), String> {
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
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
            if replace { out.sync_all() } else { Ok(()) }
        })
        .map_err(|e| format!("cannot be written: {e}"))
        .and_then(|()| {
            let flags = if replace {
                RenameFlags::empty()
            } else {
                RenameFlags::RENAME_NOREPLACE
            };
            renameat2(AT_FDCWD, &temporary, AT_FDCWD, host, flags).map_err(|e| match e {
                nix::errno::Errno::EEXIST => {
                    "created on the host during the run: the host's is kept".to_owned()
                }
                e => format!("cannot be written: {e}"),
            })
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_host_created_before_the_rename_keeps_the_host_s_file() {
        let dir = tempfile::tempdir().expect("dir");
        let host = dir.path().join("new.txt");
        std::fs::write(&host, "host").expect("host");
        let kept = write_host(&host, b"command", 0o600, false);
        let said = "created on the host during the run: the host's is kept";
        assert_eq!(kept, Err(said.to_owned()));
        assert_eq!(std::fs::read_to_string(&host).expect("host"), "host");
        let left = std::fs::read_dir(dir.path()).expect("list").count();
        assert_eq!(left, 1, "the temporary file stays behind");
        write_host(&dir.path().join("absent"), b"x", 0o600, false).expect("an absent name");
        write_host(&host, b"replaced", 0o600, true).expect("a replaced name");
        assert_eq!(std::fs::read_to_string(&host).expect("host"), "replaced");
    }

    #[test]
    fn a_file_over_the_bytes_left_is_left_out_unread() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("big");
        std::fs::write(&path, [0u8; 100]).expect("big");
        let mut budget = Budget {
            entries: 1,
            bytes: 99,
            over: 0,
            countable: 1,
        };
        assert_eq!(read_private(&path, &mut budget), Ok(None));
        assert_eq!((budget.over, budget.bytes), (1, 99));
        budget.bytes = 100;
        let read = read_private(&path, &mut budget)
            .expect("read")
            .expect("within");
        assert_eq!(read.0.len(), 100);
    }
}
