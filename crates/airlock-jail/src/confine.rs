//! Filesystem confinement inside the jail's mount namespace (docs/security.md, "What the
//! command can read and write"): the whole host tree read-only, a fresh `/tmp` and
//! `/var/tmp`, a `/dev` holding only the usual devices, the writable directories (and
//! files) bound back read-write, protected names inside them read-only again, and `/proc/sys` and the
//! kernel's dangerous `/proc` files out of reach. Landlock is the second layer, applied in
//! the command's own process right before `execve`.
//!
//! Everything here runs in the jail's forked processes: it uses only data prepared by
//! the parent ([`FsPlan`]) and reports a failure as the step and the index of the path.
// Calls the kernel directly (namespaces, fork, mounts); each unsafe block says why.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::fcntl::{OFlag, open};
use nix::mount::{MsFlags, mount};
use nix::sys::stat::Mode;

use crate::error::SetupStep;

/// `MOUNT_ATTR_RDONLY` from `<linux/mount.h>`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `MOUNT_ATTR_NOSUID` from `<linux/mount.h>`.
const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `AT_RECURSIVE` from `<linux/fcntl.h>`.
const AT_RECURSIVE: libc::c_uint = 0x8000;
/// Devices the command's `/dev` offers, bound from the host's.
const DEVICES: [&CStr; 6] = [c"null", c"zero", c"full", c"random", c"urandom", c"tty"];
/// Links in the command's `/dev` (`ptmx` opens the jail's own pseudo-terminals).
const DEV_LINKS: [(&CStr, &CStr); 5] = [
    (c"pts/ptmx", c"/dev/ptmx"),
    (c"/proc/self/fd", c"/dev/fd"),
    (c"/proc/self/fd/0", c"/dev/stdin"),
    (c"/proc/self/fd/1", c"/dev/stdout"),
    (c"/proc/self/fd/2", c"/dev/stderr"),
];
/// `/proc` files that reach the kernel itself: covered by `/dev/null`.
const PROC_MASKED: [&CStr; 5] = [
    c"/proc/sysrq-trigger",
    c"/proc/kcore",
    c"/proc/timer_list",
    c"/proc/sched_debug",
    c"/proc/kallsyms",
];
/// `/proc` directories made read-only (sysctls, buses, file system and IRQ settings).
const PROC_READ_ONLY: [&CStr; 4] = [c"/proc/sys", c"/proc/bus", c"/proc/fs", c"/proc/irq"];
/// Private temporary directories (a fresh tmpfs each; `/var/tmp` only where it exists).
const PRIVATE_TMP: [&CStr; 2] = [c"/tmp", c"/var/tmp"];

/// The filesystem part of the jail, prepared before the fork.
#[derive(Debug)]
pub(crate) struct FsPlan {
    /// Directories bound back read-write, canonical.
    pub(crate) writable: Vec<CString>,
    /// Paths inside writable directories made read-only again.
    pub(crate) protected: Vec<CString>,
    /// Paths inside hidden directories shown again, read-only.
    pub(crate) reexposed: Vec<CString>,
    /// Whether Landlock is applied as a second layer (where the kernel has it).
    pub(crate) landlock: bool,
}

/// A failure: the step, the index of the path in its list (if any), and the error.
pub(crate) type Failure = (SetupStep, Option<u32>, io::Error);

/// Descriptors opened before anything is covered, so that binds still find their sources.
pub(crate) struct Sources {
    writable: Vec<OwnedFd>,
    reexposed: Vec<OwnedFd>,
    devices: Vec<Option<OwnedFd>>,
}

/// Opens every bind source while the host tree is still visible.
pub(crate) fn open_sources(plan: &FsPlan) -> Result<Sources, Failure> {
    let writable = open_all(&plan.writable, SetupStep::WritablePath)?;
    let reexposed = open_all(&plan.reexposed, SetupStep::ReexposePath)?;
    let devices = DEVICES
        .iter()
        .map(|name| open_path(&dev_path(name)).ok())
        .collect();
    Ok(Sources {
        writable,
        reexposed,
        devices,
    })
}

fn open_all(paths: &[CString], step: SetupStep) -> Result<Vec<OwnedFd>, Failure> {
    let mut fds = Vec::with_capacity(paths.len());
    for (index, path) in paths.iter().enumerate() {
        fds.push(open_path(path).map_err(|e| (step, Some(index as u32), e))?);
    }
    Ok(fds)
}

/// An `O_PATH` descriptor, following symbolic links (`/dev/ptmx` may be one).
fn open_path(path: &CStr) -> io::Result<OwnedFd> {
    Ok(open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())?)
}

fn dev_path(name: &CStr) -> CString {
    let mut bytes = b"/dev/".to_vec();
    bytes.extend_from_slice(name.to_bytes());
    // A constant name without NUL bytes.
    CString::new(bytes).unwrap_or_default()
}

/// `/proc/self/fd/N` for a descriptor: a bind source that needs no path.
pub(crate) fn fd_path(fd: &OwnedFd) -> CString {
    CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default()
}

/// Makes the whole host tree read-only; the hidden paths are covered next.
pub(crate) fn read_only_host() -> Result<(), Failure> {
    set_read_only(c"/", true, true).map_err(|e| (SetupStep::ReadOnlyRoot, None, e))
}

/// After the hidden paths are covered: the private `/dev`, `/tmp` and `/var/tmp`, the
/// writable binds (recursive, so hidden paths below them stay covered), the directories
/// leading to each protected path made mount points ([`anchors_of`]) and the protected
/// binds inside them. A writable path with a source in `rebound` (in the order of
/// `plan.writable`: a private directory's target or a path inside one,
/// [`crate::private_dir::writable_sources`]) is bound from it instead of the host's.
pub(crate) fn confine(
    plan: &FsPlan,
    sources: &Sources,
    rebound: &[Option<OwnedFd>],
    hidden: &[&CStr],
) -> Result<(), Failure> {
    build_dev(sources).map_err(|e| (SetupStep::MinimalDev, None, e))?;
    for dir in PRIVATE_TMP {
        // A writable directory that is this very directory (`cd /tmp && airlock run`)
        // shows the host's: a tmpfs mounted on it would be copied by that directory's
        // recursive bind below (the bind's source is the tmpfs's mount point) and cover it.
        if plan.writable.iter().any(|path| path.as_c_str() == dir) {
            continue;
        }
        match private_tmpfs(dir) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && dir != c"/tmp" => {}
            result => result.map_err(|e| (SetupStep::PrivateTmp, None, e))?,
        }
    }
    for (index, (path, fd)) in plan.writable.iter().zip(&sources.writable).enumerate() {
        let fd = rebound.get(index).and_then(Option::as_ref).unwrap_or(fd);
        bind_writable(path, fd).map_err(|e| (SetupStep::WritablePath, Some(index as u32), e))?;
    }
    for (index, path) in plan.writable.iter().enumerate() {
        for anchor in anchors_of(plan, path) {
            anchor_dir(&anchor).map_err(|e| (SetupStep::WritablePath, Some(index as u32), e))?;
        }
    }
    anchor_hidden(plan, hidden)?;
    for (index, path) in plan.protected.iter().enumerate() {
        // A protected path removed (by the host) since the plan was made has nothing left
        // to protect; the end-of-run check finds it if the command creates it again.
        let vanished = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
        let at = |e: io::Error| (SetupStep::ProtectPath, Some(index as u32), e);
        for anchor in anchors_of(plan, path) {
            match anchor_dir(&anchor) {
                Err(e) if !vanished(&e) => return Err(at(e)),
                _ => {}
            }
        }
        match protect(path) {
            Err(e) if std::fs::symlink_metadata(path_of(path)).is_err() && vanished(&e) => {}
            Err(e) => return Err(at(e)),
            Ok(()) => {}
        }
    }
    Ok(())
}

/// Makes the directories between a writable directory and each hidden path below it mount
/// points ([`anchors_of`]), so that the command cannot rename one of them and carry the
/// hidden path's cover away with it: the host would see the hidden file at a new name that
/// the next run does not hide, and a path airlock itself uses (its state directory) at a
/// place the command made (review 16). A hidden path or directory already gone is skipped.
fn anchor_hidden(plan: &FsPlan, hidden: &[&CStr]) -> Result<(), Failure> {
    for (index, path) in hidden.iter().enumerate() {
        for anchor in anchors_of(plan, path) {
            match anchor_dir(&anchor) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err((SetupStep::HidePath, Some(index as u32), e));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The directories strictly between the innermost writable directory holding `path` and
/// `path` itself (`proj/.git` for `proj/.git/hooks`), outermost first, that are not
/// already mount points. Each becomes a mount point (bound onto itself, still writable):
/// the kernel refuses to rename or remove a mount point (`EBUSY`), so `mv .git x` cannot
/// carry the read-only binds away and leave a fresh `.git` in their place. Nested
/// writable directories count as protected paths here: they cannot be moved either.
fn anchors_of(plan: &FsPlan, path: &CStr) -> Vec<CString> {
    let bytes = path.to_bytes();
    let inside =
        |dir: &[u8]| bytes.len() > dir.len() && bytes.starts_with(dir) && bytes[dir.len()] == b'/';
    let Some(root) = plan
        .writable
        .iter()
        .map(|w| w.to_bytes())
        .filter(|w| inside(w))
        .max_by_key(|w| w.len())
    else {
        return Vec::new();
    };
    let mut anchors = Vec::new();
    for (position, byte) in bytes.iter().enumerate().skip(root.len() + 1) {
        if *byte == b'/' {
            let dir = &bytes[..position];
            let known = plan.protected.iter().chain(&plan.writable);
            if !known.into_iter().any(|p| p.to_bytes() == dir) {
                // A prefix of a C string holds no NUL byte.
                anchors.push(CString::new(dir).unwrap_or_default());
            }
        }
    }
    anchors
}

/// Makes `dir` a mount point of itself (with what lies below), unless it already is one.
fn anchor_dir(dir: &CStr) -> io::Result<()> {
    let metadata = std::fs::symlink_metadata(path_of(dir))?;
    // Not a directory (a link planted meanwhile): nothing to bind, the protected path
    // bind below then fails or holds on its own.
    if !metadata.is_dir() || is_mount_point(dir)? {
        return Ok(());
    }
    bind_tree(dir, dir)?;
    Ok(())
}

/// Whether `dir` is a mount point: its parent lies on another mount (`statx`'s mount id).
fn is_mount_point(dir: &CStr) -> io::Result<bool> {
    let id = |path: &std::path::Path| -> io::Result<u64> {
        let path = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
            .map_err(io::Error::other)?;
        // SAFETY: `statx` is plain data; zeroed is a valid value for it.
        let mut buffer: libc::statx = unsafe { std::mem::zeroed() };
        // SAFETY: `path` is a valid C string and `buffer` a writable `struct statx`.
        let result = unsafe {
            libc::statx(
                libc::AT_FDCWD,
                path.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
                libc::STATX_MNT_ID,
                &mut buffer,
            )
        };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(buffer.stx_mnt_id)
    };
    let path = path_of(dir);
    let parent = path.parent().unwrap_or(path);
    Ok(id(path)? != id(parent)?)
}

/// `mount_setattr(2)`: sets or clears `MOUNT_ATTR_RDONLY` on the mount at `path` (and
/// every mount below it when `recursive`).
pub(crate) fn set_read_only(path: &CStr, recursive: bool, read_only: bool) -> io::Result<()> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr {
        // What the command can write never honours a set-user-ID bit (the system-call
        // filter also refuses to make one).
        attr_set: if read_only {
            MOUNT_ATTR_RDONLY
        } else {
            MOUNT_ATTR_NOSUID
        },
        attr_clr: if read_only { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `path` is a valid C string and `attr` a fully initialised `struct
    // mount_attr` whose size is passed; both outlive the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A fresh tmpfs over `dir` (sticky and world-writable, like the host's).
fn private_tmpfs(dir: &CStr) -> io::Result<()> {
    std::fs::metadata(path_of(dir))?;
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777"),
    )?;
    Ok(())
}

/// A tmpfs `/dev` with the usual devices bound from the host's, a `/dev/pts` of its own, a
/// private
/// `/dev/shm` and the `fd`/`stdin`/`stdout`/`stderr` links; then read-only.
fn build_dev(sources: &Sources) -> io::Result<()> {
    mount(
        Some("tmpfs"),
        "/dev",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("size=64k,mode=0755"),
    )?;
    for (name, fd) in DEVICES.iter().zip(&sources.devices) {
        let Some(fd) = fd else { continue };
        let target = dev_path(name);
        std::fs::File::create(path_of(&target))?;
        mount(
            Some(fd_path(fd).as_c_str()),
            target.as_c_str(),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )?;
    }
    // A devpts instance of the jail's own: the host's pseudo-terminals (the user's other
    // terminals among them) are not there to be opened, read or written. Where the
    // kernel refuses one, the command has no pseudo-terminals at all.
    std::fs::create_dir(path_of(c"/dev/pts"))?;
    let _ = mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    );
    std::fs::create_dir(path_of(c"/dev/shm"))?;
    private_tmpfs(c"/dev/shm")?;
    for (target, link) in DEV_LINKS {
        std::os::unix::fs::symlink(path_of(target), path_of(link))?;
    }
    set_read_only(c"/dev", false, true)
}

/// Binds a writable directory or file back over itself (from the descriptor opened before
/// `/tmp` was replaced), read-write; mounts below a directory keep their own state. A
/// file's siblings are not touched: it is a mount point of its own, which the command can
/// write but not rename or remove.
fn bind_writable(path: &CString, fd: &OwnedFd) -> io::Result<()> {
    let source = fd_path(fd);
    let target = path_of(path);
    if std::fs::metadata(path_of(&source))?.is_dir() {
        std::fs::create_dir_all(target)?;
    } else if std::fs::symlink_metadata(target).is_err() {
        // Under a fresh tmpfs (`/tmp`): the bind needs a file to cover.
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::File::create(target)?;
    }
    bind_tree(source.as_c_str(), path.as_c_str())?;
    set_read_only(path, false, false)
}

/// Binds `source` (with the mounts below it) over `target`.
pub(crate) fn bind_tree(source: &CStr, target: &CStr) -> nix::Result<()> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
}

/// Makes an existing path inside a writable directory read-only (with what lies below).
fn protect(path: &CString) -> io::Result<()> {
    bind_tree(path.as_c_str(), path.as_c_str())?;
    set_read_only(path, true, true)
}

/// Covers a hidden directory with an empty tmpfs in which the `readable` exceptions below
/// it are bound back read-only; then the tmpfs itself is made read-only.
pub(crate) fn hide_directory(
    dir: &CStr,
    plan: &FsPlan,
    sources: &Sources,
) -> Result<(), (SetupStep, Option<u32>, io::Error)> {
    let at = |e| (SetupStep::HidePath, None, e);
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("size=64k,mode=0755"),
    )
    .map_err(|e| at(e.into()))?;
    let inside = |path: &CString| {
        let (bytes, prefix) = (path.to_bytes(), dir.to_bytes());
        bytes.len() > prefix.len() && bytes.starts_with(prefix) && bytes[prefix.len()] == b'/'
    };
    for (index, (path, fd)) in plan.reexposed.iter().zip(&sources.reexposed).enumerate() {
        if inside(path) {
            reexpose(path, fd).map_err(|e| (SetupStep::ReexposePath, Some(index as u32), e))?;
        }
    }
    // Writable directories below (a sandbox's own workspace in airlock's hidden state
    // directory) need a mount point; they are bound there later.
    for (index, path) in plan.writable.iter().enumerate() {
        if inside(path) {
            std::fs::create_dir_all(path_of(path))
                .map_err(|e| (SetupStep::WritablePath, Some(index as u32), e))?;
        }
    }
    set_read_only(dir, false, true).map_err(at)
}

/// Binds one `readable` exception (a file or directory) back inside a hidden directory.
fn reexpose(path: &CString, fd: &OwnedFd) -> io::Result<()> {
    let target = path_of(path);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let source = fd_path(fd);
    if std::fs::metadata(path_of(&source))?.is_dir() {
        std::fs::create_dir_all(target)?;
    } else {
        std::fs::File::create(target)?;
    }
    bind_tree(source.as_c_str(), path.as_c_str())?;
    set_read_only(path, true, true)
}

/// After the fresh `/proc` is mounted: the kernel's own files covered, `/proc/sys` and
/// its kin read-only.
pub(crate) fn confine_proc() -> io::Result<()> {
    for path in PROC_MASKED {
        match mount(
            Some(c"/dev/null"),
            path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        ) {
            Err(nix::errno::Errno::ENOENT) => continue,
            result => result?,
        }
        set_read_only(path, false, true)?;
    }
    for path in PROC_READ_ONLY {
        match bind_tree(path, path) {
            Err(nix::errno::Errno::ENOENT) => continue,
            result => result?,
        }
        set_read_only(path, true, true)?;
    }
    Ok(())
}

/// The path of a C string.
fn path_of(path: &CStr) -> &std::path::Path {
    use std::os::unix::ffi::OsStrExt;
    std::path::Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()))
}

/// Landlock, the second layer, in the command's process: reading and executing anywhere
/// the mounts allow, writing only in the writable directories, the private temporary
/// directories and `/dev`. Returns the kernel's Landlock ABI version when the rules are
/// enforced, 0 when the kernel has no Landlock.
pub(crate) fn apply_landlock(plan: &FsPlan) -> io::Result<u8> {
    use landlock::{
        ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, Scope, path_beneath_rules,
    };
    let abi = ABI::V6;
    let to_io = |e: landlock::RulesetError| io::Error::other(e.to_string());
    let writable: Vec<&std::path::Path> = plan
        .writable
        .iter()
        .map(|path| path_of(path))
        .chain([c"/tmp", c"/var/tmp", c"/dev"].map(path_of))
        .filter(|path| path.exists())
        .collect();
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(to_io)?
        .scope(Scope::from_all(abi))
        .map_err(to_io)?
        .create()
        .map_err(to_io)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(to_io)?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))
        .map_err(to_io)?
        .restrict_self()
        .map_err(to_io)?;
    Ok(match (status.ruleset, status.landlock) {
        (RulesetStatus::NotEnforced, _) => 0,
        (_, landlock::LandlockStatus::Available { effective_abi, .. }) => effective_abi as u8,
        _ => 0,
    })
}
