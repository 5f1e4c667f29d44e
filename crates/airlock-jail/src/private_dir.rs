//! Run-private directories ([`crate::PrivateDir`]; docs/secrets.md, "Private parent
//! directories"): a directory the launcher prepared on the host is shown in place of a host
//! directory, with the host's entries bound live into it by name. A host program that
//! renames, creates or removes a name of the host directory then changes nothing inside
//! the jail for the names the private directory holds itself (a projected credential file):
//! the jail never shares that name with the host.
//!
//! Runs in the jail's forked process, like [`crate::confine`]: every source is opened before
//! anything is covered; the mounts are made after the host tree is read-only and before the
//! hidden paths are covered, so that a hidden path below a live entry is covered on top of
//! it and the live entry's own writability can be set on the entry itself.
use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, SFlag, fstat};

use crate::confine::{Failure, bind_tree, fd_path, set_read_only};
use crate::error::{JailError, SetupStep};

/// One private directory, as C strings.
#[derive(Debug)]
pub(crate) struct PrivatePlan {
    /// The host directory it is shown over (absolute, canonical).
    pub(crate) target: CString,
    /// The prepared directory.
    pub(crate) source: CString,
    /// Names bound live from `target` over the placeholders of the same name.
    pub(crate) live: Vec<CString>,
    /// Names in `source` made read-only mount points of themselves.
    pub(crate) read_only: Vec<CString>,
    /// Whether the command may write in it.
    pub(crate) writable: bool,
}

/// The descriptors of one private directory, opened while the host tree is visible.
pub(crate) struct PrivateSources {
    source: OwnedFd,
    /// Per live name: the host entry, or `None` when it is gone or is a link now.
    live: Vec<Option<OwnedFd>>,
}

/// Opens every private directory and its live entries (never following a link).
pub(crate) fn open_sources(plans: &[PrivatePlan]) -> Result<Vec<PrivateSources>, Failure> {
    let mut all = Vec::with_capacity(plans.len());
    for (index, plan) in plans.iter().enumerate() {
        let at = |e: nix::Error| {
            (
                SetupStep::PrivateDir,
                Some(index as u32),
                io::Error::from(e),
            )
        };
        let flags = OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
        let source = open(
            plan.source.as_c_str(),
            flags | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .map_err(at)?;
        let target = open(
            plan.target.as_c_str(),
            flags | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .map_err(at)?;
        let live = plan
            .live
            .iter()
            .map(|name| live_source(&target, name))
            .collect();
        all.push(PrivateSources { source, live });
    }
    Ok(all)
}

/// The host entry `name` of `dir`: `None` when it vanished or became a link since the
/// launcher looked (its placeholder then stays empty).
fn live_source(dir: &OwnedFd, name: &CStr) -> Option<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let fd = nix::fcntl::openat(dir, name, flags, Mode::empty()).ok()?;
    let kind = SFlag::from_bits_truncate(fstat(&fd).ok()?.st_mode) & SFlag::S_IFMT;
    (kind != SFlag::S_IFLNK).then_some(fd)
}

/// Shows every private directory over its target: the live entries bound into it
/// (recursively, writable when the directory is), its own read-only names made mount
/// points, then the whole bound over the target, and the binds made in the prepared
/// directory detached there (review 15, F0: only the target shows them). Returns a
/// descriptor of each mounted directory: a writable one is bound again from it where the
/// writable directories are bound ([`crate::confine::confine`]), which brings it back when
/// the target lies in a private temporary directory mounted since.
pub(crate) fn mount_all(
    plans: &[PrivatePlan],
    sources: &[PrivateSources],
) -> Result<Vec<OwnedFd>, Failure> {
    let mut mounted = Vec::with_capacity(plans.len());
    for (index, (plan, fds)) in plans.iter().zip(sources).enumerate() {
        let at = |e| (SetupStep::PrivateDir, Some(index as u32), e);
        mount_one(plan, fds).map_err(at)?;
        let flags = OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
        mounted.push(open(plan.target.as_c_str(), flags, Mode::empty()).map_err(|e| at(e.into()))?);
    }
    Ok(mounted)
}

fn mount_one(plan: &PrivatePlan, fds: &PrivateSources) -> io::Result<()> {
    let base = fd_path(&fds.source);
    let inside = |name: &CStr| -> io::Result<CString> {
        let mut bytes = base.as_bytes().to_vec();
        bytes.push(b'/');
        bytes.extend_from_slice(name.to_bytes());
        CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
    };
    let mut bound = Vec::with_capacity(plan.live.len() + plan.read_only.len());
    for (name, fd) in plan.live.iter().zip(&fds.live) {
        let Some(fd) = fd else { continue };
        let placeholder = inside(name)?;
        if !same_kind(fd, &placeholder)? {
            // Replaced on the host by another kind of entry: left empty.
            continue;
        }
        bind_tree(fd_path(fd).as_c_str(), placeholder.as_c_str())?;
        set_read_only(&placeholder, false, !plan.writable)?;
        bound.push(placeholder);
    }
    for name in &plan.read_only {
        let path = inside(name)?;
        bind_tree(path.as_c_str(), path.as_c_str())?;
        set_read_only(&path, true, true)?;
        bound.push(path);
    }
    bind_tree(base.as_c_str(), plan.target.as_c_str())?;
    set_read_only(&plan.target, false, !plan.writable)?;
    // The recursive bind carried the binds to the target; where the prepared directory
    // itself may still be reached (a writable directory holding it, bound again later
    // from the host), it shows only its placeholders.
    for path in &bound {
        detach(path)?;
    }
    Ok(())
}

/// Detaches the mount at `path` (with what lies below it), never through a link.
fn detach(path: &CStr) -> io::Result<()> {
    nix::mount::umount2(
        path,
        nix::mount::MntFlags::MNT_DETACH | nix::mount::MntFlags::UMOUNT_NOFOLLOW,
    )?;
    Ok(())
}

/// The sources of the writable binds ([`crate::confine::confine`]), one per writable path:
/// a private directory's target is bound from its mount (`mounted`, in the order of
/// `plans`); a path inside a target is opened now, through the private directory and its
/// live binds, so that the hidden paths covered below it next are covered in what is bound
/// (review 15, F0: the host's descriptor opened earlier lies beside those covers); `None`
/// for any other path (bound from the host's descriptor).
pub(crate) fn writable_sources(
    plans: &[PrivatePlan],
    mounted: Vec<OwnedFd>,
    writable: &[CString],
) -> Result<Vec<Option<OwnedFd>>, Failure> {
    let mut mounted: Vec<Option<OwnedFd>> = mounted.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(writable.len());
    for (index, path) in writable.iter().enumerate() {
        if let Some(at) = plans.iter().position(|plan| plan.target == *path) {
            out.push(mounted.get_mut(at).and_then(Option::take));
            continue;
        }
        let below = plans
            .iter()
            .any(|plan| strictly_inside(path.to_bytes(), plan.target.to_bytes()));
        if !below {
            out.push(None);
            continue;
        }
        let flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
        let fd = open(path.as_c_str(), flags, Mode::empty())
            .map_err(|e| (SetupStep::WritablePath, Some(index as u32), e.into()))?;
        out.push(Some(fd));
    }
    Ok(out)
}

/// Whether `path` lies strictly below the directory `dir`.
fn strictly_inside(path: &[u8], dir: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

/// Whether the host entry and its placeholder are both directories or both not.
fn same_kind(fd: &OwnedFd, placeholder: &CStr) -> io::Result<bool> {
    let is_dir = |mode: libc::mode_t| (mode & libc::S_IFMT) == libc::S_IFDIR;
    let entry = fstat(fd)?.st_mode;
    let place = nix::sys::stat::lstat(placeholder)?.st_mode;
    Ok(is_dir(entry) == is_dir(place))
}

/// One private directory as C strings: both paths absolute, every name one component.
pub(crate) fn plan(dir: &crate::PrivateDir) -> Result<PrivatePlan, JailError> {
    for path in [&dir.target, &dir.source] {
        if !path.is_absolute() {
            return Err(JailError::InvalidSpec(format!(
                "the private directory path {} is not absolute",
                path.display()
            )));
        }
    }
    let names = |names: &[OsString]| {
        names
            .iter()
            .map(|name| {
                let bytes = name.as_bytes();
                if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
                    return Err(JailError::InvalidSpec(format!(
                        "{name:?} is not a name in a private directory"
                    )));
                }
                c_string(name, "a private directory entry")
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(PrivatePlan {
        target: c_string(dir.target.as_os_str(), "a private directory's target")?,
        source: c_string(dir.source.as_os_str(), "a private directory")?,
        live: names(&dir.live)?,
        read_only: names(&dir.read_only)?,
        writable: dir.writable,
    })
}

/// A C string of a path or name from the spec.
fn c_string(value: &std::ffi::OsStr, what: &str) -> Result<CString, JailError> {
    CString::new(value.as_bytes())
        .map_err(|_| JailError::InvalidSpec(format!("{what} contains a NUL byte")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_single_components_and_paths_absolute() {
        let good = crate::PrivateDir {
            target: "/home/u/.claude".into(),
            source: "/tmp/q/0".into(),
            live: vec!["projects".into()],
            read_only: vec![".credentials.json".into()],
            writable: true,
        };
        assert!(plan(&good).is_ok());
        for bad in ["", ".", "..", "a/b"] {
            let dir = crate::PrivateDir {
                live: vec![bad.into()],
                ..good.clone()
            };
            assert!(
                matches!(plan(&dir), Err(JailError::InvalidSpec(_))),
                "{bad}"
            );
        }
        let relative = crate::PrivateDir {
            target: "home/u/.claude".into(),
            ..good.clone()
        };
        assert!(matches!(plan(&relative), Err(JailError::InvalidSpec(_))));
    }
}
