//! The jail's side, after `fork`: namespaces, mounts, network, listeners,
//! then the jail's init (PID 1 of the new PID namespace) and the command.
//!
//! Process tree: airlock ─ jail (outer, host PID namespace) ─ init (PID 1
//! inside) ─ command. The outer process builds everything, hands the
//! listeners over, forks the init, and then relays the command's exit status
//! and forwards signals. Every setup failure is reported on the control
//! socket as the step that failed, and the command is never executed.
//!
//! Everything here runs in a freshly forked child of a possibly
//! multi-threaded process: it never touches the environment, never prints,
//! and only uses data prepared by the parent before the fork.
// Calls the kernel directly (namespaces, fork, mounts); each unsafe block says why.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

use crate::capture::{configure_network, create_listener, ipv6_available, listener_kinds};
use crate::confine::{self, Failure};
use crate::error::SetupStep;
use crate::wire::{MESSAGE_LEN, Message};

mod init;

use init::{block_forwarded_signals, relay_until_init_exits, run_init};

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>`.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
/// `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// Highest capability number tried when clearing the bounding set.
const MAX_CAPABILITY: libc::c_ulong = 63;
/// Highest signal number (`_NSIG - 1` on Linux).
const MAX_SIGNAL: libc::c_int = 64;

/// Everything the jail needs, prepared by airlock before `fork` so that the
/// child does no parsing and reads no environment.
pub(crate) struct ChildPlan {
    /// airlock's PID, to detect that it died before the death signal was set.
    pub(crate) parent_pid: libc::pid_t,
    /// `(start, end)` addresses of airlock's argument and environment strings, blanked
    /// in the jail so that `/proc/1/cmdline` and `/proc/1/environ` show nothing of them.
    pub(crate) inherited_areas: [(usize, usize); 2],
    /// Contents for `/proc/self/uid_map`.
    pub(crate) uid_map: Vec<u8>,
    /// Contents for `/proc/self/gid_map`.
    pub(crate) gid_map: Vec<u8>,
    /// Paths covered by an empty read-only file system (or `/dev/null`).
    pub(crate) hide_paths: Vec<CString>,
    /// Paths hidden the same way only if they still exist.
    pub(crate) hide_if_present: Vec<CString>,
    /// `(source, destination)` pairs bind-mounted read-only.
    pub(crate) bind_files: Vec<(CString, CString)>,
    /// Filesystem confinement, when asked for.
    pub(crate) fs: Option<confine::FsPlan>,
    /// Run-private directories shown over host directories.
    pub(crate) private_dirs: Vec<crate::private_dir::PrivatePlan>,
    /// TCP ports to listen on, deduplicated, DNS included.
    pub(crate) tcp_ports: Vec<u16>,
    /// Working directory of the command.
    pub(crate) cwd: CString,
    /// Paths to try with `execve`, in order (the `PATH` search, done ahead).
    pub(crate) program_candidates: Vec<CString>,
    /// The command's argument vector.
    pub(crate) argv: Vec<CString>,
    /// The command's complete environment, as `NAME=VALUE`.
    pub(crate) env: Vec<CString>,
    /// `(stdin, stdout)` descriptors that become 0 and 1 (`JailSpec::stdio`); they stay
    /// open in airlock (its `JailSpec` holds them) until the fork is done.
    pub(crate) stdio: Option<(RawFd, RawFd)>,
    /// The pseudo-terminal's far end and the standard streams it replaces
    /// (`JailSpec::terminal`); open in airlock until the fork is done.
    pub(crate) terminal: Option<(RawFd, [bool; 3])>,
    /// The command's system-call filters, compiled before the fork.
    pub(crate) seccomp: crate::seccomp::Programs,
}

/// Runs the jail in the freshly forked child. Never returns.
pub(crate) fn run_jail(plan: &ChildPlan, control: OwnedFd) -> ! {
    let control_fd = control.as_raw_fd();
    // The descriptor stays open for the rest of this process's life; the
    // raw number is what the helpers below use.
    std::mem::forget(control);
    match build_jail(plan, control_fd) {
        Ok(never) => match never {},
        Err((step, item, error)) => fail(control_fd, step, item, &error),
    }
}

/// Reports a failed setup step on the control socket and exits.
fn fail(control: RawFd, step: SetupStep, item: Option<u32>, error: &io::Error) -> ! {
    let errno = error.raw_os_error().unwrap_or(libc::EIO);
    // Nothing more can be done if the report cannot be sent: airlock then
    // sees the jail exit during setup.
    let _ = send_message(control, Message::SetupFailed { step, item, errno }, None);
    exit_now(125)
}

/// Ends the process without running any destructor or atexit handler.
fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` is async-signal-safe and never returns.
    unsafe { libc::_exit(code) }
}

/// Attaches a setup step to an error.
trait AtStep<T> {
    fn at(self, step: SetupStep) -> StepResult<T>;
}

impl<T> AtStep<T> for io::Result<T> {
    fn at(self, step: SetupStep) -> StepResult<T> {
        self.map_err(|error| (step, None, error))
    }
}

impl<T> AtStep<T> for nix::Result<T> {
    fn at(self, step: SetupStep) -> StepResult<T> {
        self.map_err(|errno| (step, None, io::Error::from(errno)))
    }
}

/// Result of a step sequence that only ends by failing (success execs or exits).
type StepResult<T> = Result<T, Failure>;

/// Uninhabited: the success value of functions that never return on success.
enum Never {}

/// The outer jail process: everything up to forking the init.
fn build_jail(plan: &ChildPlan, control: RawFd) -> StepResult<Never> {
    // First of all: die with airlock, and notice if it already died.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .at(SetupStep::ParentDeathSignal)?;
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != plan.parent_pid {
        exit_now(125);
    }
    if let Some((stdin, stdout)) = plan.stdio {
        redirect_stdio(stdin, stdout).at(SetupStep::CloseInheritedDescriptors)?;
    }
    if let Some((far_end, streams)) = plan.terminal {
        redirect_to_terminal(far_end, streams).at(SetupStep::CloseInheritedDescriptors)?;
    }
    close_descriptors_except(control).at(SetupStep::CloseInheritedDescriptors)?;
    for (start, end) in plan.inherited_areas {
        // SAFETY: the range is this process's copy (after fork) of the argument and
        // environment strings on the initial stack: mapped, writable, and never read here.
        unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
    }

    unshare(
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNET
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWIPC
            | CloneFlags::CLONE_NEWUTS,
    )
    .at(SetupStep::Unshare)?;
    // The maps are written while this process is still dumpable: a non-dumpable process's
    // /proc files belong to the global root until a uid is mapped, so an ordinary user
    // could not write them (EACCES on setgroups).
    std::fs::write("/proc/self/setgroups", b"deny").at(SetupStep::DenySetgroups)?;
    std::fs::write("/proc/self/uid_map", &plan.uid_map).at(SetupStep::UidMap)?;
    std::fs::write("/proc/self/gid_map", &plan.gid_map).at(SetupStep::GidMap)?;
    // This outer process stays in the host's PID namespace, out of the command's sight,
    // and dumpable (gaining capabilities in the new user namespace cleared the flag): so
    // that the same user can open its /proc/PID/ns files to join the jail later (a local
    // sandbox's commands). The init it forks is made non-dumpable first thing.
    nix::sys::prctl::set_dumpable(true).at(SetupStep::Unshare)?;

    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .at(SetupStep::MountPrivate)?;
    build_mounts(plan)?;

    let ipv6 = ipv6_available().at(SetupStep::CreateListener)?;
    configure_network(ipv6).map_err(|(step, error)| (step, None, error))?;
    create_and_send_listeners(plan, control, ipv6)?;

    let signals = block_forwarded_signals().at(SetupStep::ForkInit)?;
    let (status_read, status_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).at(SetupStep::ForkInit)?;
    // SAFETY: this process is single-threaded (a forked child); the init
    // child only runs code of this module before exec or _exit.
    let init_pid = unsafe { libc::fork() };
    if init_pid < 0 {
        return Err((SetupStep::ForkInit, None, io::Error::last_os_error()));
    }
    if init_pid == 0 {
        drop(status_read);
        match run_init(plan, control, &signals, status_write) {
            Ok(never) => match never {},
            Err((step, item, error)) => fail(control, step, item, &error),
        }
    }
    drop(status_write);
    // The init and the command report on the control socket from now on.
    // SAFETY: `control` is this process's own descriptor, not used again.
    unsafe { libc::close(control) };
    relay_until_init_exits(init_pid, &signals, &status_read)
}

/// Makes the pseudo-terminal's far end each standard stream `streams` names.
fn redirect_to_terminal(far_end: RawFd, streams: [bool; 3]) -> io::Result<()> {
    for (target, replace) in (0..).zip(streams) {
        // SAFETY: dup2 replaces descriptor 0, 1 or 2 of this (forked, single-threaded)
        // process with a descriptor it inherited open.
        if replace && unsafe { libc::dup2(far_end, target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Makes `stdin` and `stdout` descriptors 0 and 1. Both are first copied above 2, so a
/// source that is itself 0 or 1 is not overwritten before it is read; the copies are
/// closed with the other inherited descriptors.
fn redirect_stdio(stdin: RawFd, stdout: RawFd) -> io::Result<()> {
    let mut high = [0; 2];
    for (slot, fd) in high.iter_mut().zip([stdin, stdout]) {
        // SAFETY: fcntl(F_DUPFD) only adds a descriptor to this process's table.
        *slot = unsafe { libc::fcntl(fd, libc::F_DUPFD, 3) };
        if *slot < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for (target, fd) in [0, 1].into_iter().zip(high) {
        // SAFETY: dup2 replaces descriptor 0 or 1 of this (forked, single-threaded)
        // process; nothing here uses the old ones.
        if unsafe { libc::dup2(fd, target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Closes every descriptor above 2 except `keep`.
fn close_descriptors_except(keep: RawFd) -> io::Result<()> {
    let keep =
        libc::c_uint::try_from(keep).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    if keep > 3 {
        close_range(3, keep - 1, 0)?;
    }
    close_range(keep + 1, libc::c_uint::MAX, 0)
}

/// `close_range(2)`, with a slow fallback for kernels without it.
fn close_range(first: libc::c_uint, last: libc::c_uint, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: close_range only affects this process's descriptor table; the
    // caller chose the range so that no descriptor still in use is closed.
    let result = unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) };
    if result == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::ENOSYS) {
        return Err(error);
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let end = limit
        .rlim_cur
        .min(1 << 20)
        .min(libc::rlim_t::from(last).saturating_add(1));
    for fd in libc::rlim_t::from(first)..end {
        let Ok(fd) = libc::c_int::try_from(fd) else {
            break;
        };
        if flags & CLOSE_RANGE_CLOEXEC != 0 {
            // SAFETY: setting FD_CLOEXEC on a possibly unused descriptor is harmless.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        } else {
            // SAFETY: the caller asked for this range to be closed.
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

/// Covers a directory with an empty read-only tmpfs, or a file with `/dev/null`.
fn hide_path(path: &CString, is_dir: bool) -> io::Result<()> {
    if is_dir {
        mount(
            Some("tmpfs"),
            path.as_c_str(),
            Some("tmpfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("size=4k,mode=0755"),
        )?;
    } else {
        bind_read_only(c"/dev/null", path)?;
    }
    Ok(())
}

/// Bind-mounts `source` over `destination` and makes the bind read-only,
/// keeping the flags the kernel locks for mounts inherited from the host.
fn bind_read_only(source: &std::ffi::CStr, destination: &std::ffi::CStr) -> io::Result<()> {
    mount(
        Some(source),
        destination,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )?;
    let current = nix::sys::statvfs::statvfs(destination)?;
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    let locked = [
        (nix::sys::statvfs::FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (nix::sys::statvfs::FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (nix::sys::statvfs::FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (nix::sys::statvfs::FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (
            nix::sys::statvfs::FsFlags::ST_NODIRATIME,
            MsFlags::MS_NODIRATIME,
        ),
        (
            nix::sys::statvfs::FsFlags::ST_RELATIME,
            MsFlags::MS_RELATIME,
        ),
    ];
    for (present, mount_flag) in locked {
        if current.flags().contains(present) {
            flags |= mount_flag;
        }
    }
    mount(None::<&str>, destination, None::<&str>, flags, None::<&str>)?;
    Ok(())
}

/// The path of a C string (paths from the spec are valid OS strings).
fn path_of(path: &CString) -> &std::path::Path {
    use std::os::unix::ffi::OsStrExt;
    std::path::Path::new(std::ffi::OsStr::from_bytes(path.as_bytes()))
}

/// The jail's mount namespace: with a filesystem plan, the host read-only, the run-private
/// directories shown ([`crate::private_dir`]), the hidden paths covered, then the private `/dev` and `/tmp` and the writable and protected binds
/// (docs/security.md); last the files bound read-only (the CA bundle). Sources are opened
/// first, so a bind still finds what lies in a directory covered later; writable binds are
/// recursive, so a hidden path inside a writable directory stays covered.
fn build_mounts(plan: &ChildPlan) -> Result<(), Failure> {
    let sources = match &plan.fs {
        Some(fs) => Some(confine::open_sources(fs)?),
        None => None,
    };
    let mut bind_sources = Vec::with_capacity(plan.bind_files.len());
    for (index, (source, _)) in plan.bind_files.iter().enumerate() {
        let fd = nix::fcntl::open(
            source.as_c_str(),
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| (SetupStep::BindFile, Some(index as u32), e.into()))?;
        bind_sources.push(fd);
    }
    let private_sources = crate::private_dir::open_sources(&plan.private_dirs)?;
    if plan.fs.is_some() {
        confine::read_only_host()?;
    }
    let mounted = crate::private_dir::mount_all(&plan.private_dirs, &private_sources)?;
    let rebound = match &plan.fs {
        Some(fs) => {
            crate::private_dir::writable_sources(&plan.private_dirs, mounted, &fs.writable)?
        }
        None => Vec::new(),
    };
    for (index, path) in plan.hide_paths.iter().enumerate() {
        match hide(plan, sources.as_ref(), path) {
            Err((SetupStep::HidePath, _, e)) => {
                return Err((SetupStep::HidePath, Some(index as u32), e));
            }
            result => result?,
        }
    }
    for path in &plan.hide_if_present {
        match hide(plan, sources.as_ref(), path) {
            // Gone, or (another user's socket in a private directory, such as another
            // user's `airlock run` admin socket) out of this namespace's reach: the
            // command, no more privileged than this setup, cannot reach it either.
            Err((_, _, e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) => {}
            result => result?,
        }
    }
    if let (Some(fs), Some(sources)) = (&plan.fs, &sources) {
        let hidden: Vec<&CStr> = plan
            .hide_paths
            .iter()
            .chain(&plan.hide_if_present)
            .map(CString::as_c_str)
            .collect();
        confine::confine(fs, sources, &rebound, &hidden)?;
    }
    for (index, ((_, destination), fd)) in plan.bind_files.iter().zip(&bind_sources).enumerate() {
        bind_file(fd, destination, plan.fs.is_some())
            .map_err(|e| (SetupStep::BindFile, Some(index as u32), e))?;
    }
    Ok(())
}

/// Covers one hidden path: a directory by an empty read-only tmpfs (with the `readable`
/// exceptions below it shown again), anything else by `/dev/null`.
fn hide(
    plan: &ChildPlan,
    sources: Option<&confine::Sources>,
    path: &CString,
) -> Result<(), Failure> {
    let at = |e: io::Error| (SetupStep::HidePath, None, e);
    let metadata = std::fs::metadata(path_of(path)).map_err(at)?;
    match (&plan.fs, sources) {
        (Some(fs), Some(sources)) if metadata.is_dir() => {
            confine::hide_directory(path, fs, sources)
        }
        _ => hide_path(path, metadata.is_dir()).map_err(at),
    }
}

/// Binds a prepared source over `destination`, read-only. Under confinement a missing
/// destination is created first (it can only be in the private /tmp).
fn bind_file(source: &OwnedFd, destination: &CString, confined: bool) -> io::Result<()> {
    let target = path_of(destination);
    if confined && std::fs::symlink_metadata(target).is_err() {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::File::create(target)?;
    }
    let source = CString::new(format!("/proc/self/fd/{}", source.as_raw_fd()))
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    bind_read_only(&source, destination)
}

/// Creates every listening socket and hands each one to airlock.
fn create_and_send_listeners(plan: &ChildPlan, control: RawFd, ipv6: bool) -> StepResult<()> {
    for (proto, family, port) in listener_kinds(&plan.tcp_ports, ipv6) {
        let socket = create_listener(proto, family, port).at(SetupStep::CreateListener)?;
        send_message(
            control,
            Message::Listener {
                proto,
                family,
                port,
            },
            Some(socket.as_raw_fd()),
        )
        .at(SetupStep::SendListener)?;
    }
    Ok(())
}

/// Sends one control message, with at most one descriptor attached.
pub(crate) fn send_message(control: RawFd, message: Message, fd: Option<RawFd>) -> nix::Result<()> {
    let bytes: [u8; MESSAGE_LEN] = message.encode();
    let iov = [IoSlice::new(&bytes)];
    let fds: Vec<RawFd> = fd.into_iter().collect();
    let rights = [ControlMessage::ScmRights(&fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    sendmsg::<()>(control, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// The command's process: drops every capability, resets signals, marks
/// inherited descriptors close-on-exec, and execs. Never returns.
fn exec_command(plan: &ChildPlan, control: RawFd) -> ! {
    if let Err(error) = drop_capabilities() {
        fail(control, SetupStep::DropCapabilities, None, &error);
    }
    if let Err(error) = close_range(3, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) {
        fail(control, SetupStep::CloseInheritedDescriptors, None, &error);
    }
    if let Err(error) = reset_signals() {
        fail(control, SetupStep::ResetSignals, None, &error);
    }
    if let Err(error) = own_session(plan.terminal.map(|(_, streams)| streams)) {
        fail(control, SetupStep::OwnSession, None, &error);
    }
    // No privilege gain through setuid or file capabilities, whatever the confinement.
    if let Err(errno) = nix::sys::prctl::set_no_new_privs() {
        fail(control, SetupStep::SystemCallFilter, None, &errno.into());
    }
    if let Some(fs) = &plan.fs {
        let abi = if fs.landlock {
            match confine::apply_landlock(fs) {
                Ok(abi) => abi,
                Err(error) => fail(control, SetupStep::Landlock, None, &error),
            }
        } else {
            0
        };
        // airlock learns which layers hold; if it cannot be told, the command does not run.
        if let Err(errno) = send_message(control, Message::Confined { landlock_abi: abi }, None) {
            fail(control, SetupStep::Landlock, None, &errno.into());
        }
    }
    if let Err(error) = crate::seccomp::install(&plan.seccomp) {
        fail(control, SetupStep::SystemCallFilter, None, &error);
    }
    let mut saw_permission_denied = false;
    let mut last_errno = libc::ENOENT;
    for candidate in &plan.program_candidates {
        let Err(errno) = nix::unistd::execve(candidate, &plan.argv, &plan.env);
        last_errno = errno as i32;
        match errno {
            nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR => {}
            nix::errno::Errno::EACCES => saw_permission_denied = true,
            _ => break,
        }
    }
    let errno =
        if saw_permission_denied && (last_errno == libc::ENOENT || last_errno == libc::ENOTDIR) {
            libc::EACCES
        } else {
            last_errno
        };
    // If the report cannot be sent airlock still sees the exit status.
    let _ = send_message(control, Message::ExecFailed { errno }, None);
    exit_now(crate::error::ExecFailure::from_errno(errno).shell_status())
}

/// Leaves the launcher's session (so that its terminal is no controlling terminal of the
/// command's) and, with a pseudo-terminal on the standard streams `streams` names, makes
/// that the controlling terminal of the new session.
pub(crate) fn own_session(terminal: Option<[bool; 3]>) -> io::Result<()> {
    nix::unistd::setsid()?;
    if let Some(streams) = terminal
        && let Some(fd) = (0..).zip(streams).find_map(|(fd, on)| on.then_some(fd))
    {
        // SAFETY: TIOCSCTTY with argument 0 on an open descriptor of this session leader.
        if unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Empties the bounding, ambient, inheritable, permitted and effective
/// capability sets, so that even a command running as uid 0 in the jail
/// cannot undo the jail's mounts or network setup.
pub(crate) fn drop_capabilities() -> io::Result<()> {
    for capability in 0..=MAX_CAPABILITY {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability.
        let result = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) };
        if result != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(error);
        }
    }
    // SAFETY: prctl with integer arguments.
    let result = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    #[repr(C)]
    struct CapabilityHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapabilityData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = CapabilityHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapabilityData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data match the kernel's v3 capset layout
    // (one header, two data words) and outlive the call.
    let result = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Default disposition for every signal and an empty signal mask, whatever
/// airlock itself ignores or blocks (for example `SIGPIPE`, `SIGINT`).
pub(crate) fn reset_signals() -> io::Result<()> {
    for signal in 1..=MAX_SIGNAL {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: restoring the default action; numbers the C library
        // reserves for itself fail with EINVAL, which is ignored.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
    // SAFETY: an all-zero sigset_t is valid to initialise with sigemptyset.
    let mut empty: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `empty` is a valid sigset_t; the old mask is not needed.
    let result = unsafe {
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
