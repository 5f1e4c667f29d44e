//! Entering a running jail: a command started later joins the namespaces of a jail that
//! is already there (a long-lived sandbox), with the same confinement as the jail's own
//! command.
//!
//! [`JailEntry::open`] opens the jail's namespace files from airlock's side;
//! [`JailEntry::install`] arranges, through `pre_exec`, that the spawned child joins the
//! user, IPC, UTS, network, PID and mount namespaces (in that order), forks once more so
//! that the command is *inside* the PID namespace (`setns` on a PID namespace only moves
//! the caller's future children), and then the command's process drops every capability,
//! resets signals, changes into its directory and execs. The process between the two
//! (host-visible PID of the spawned child) waits for the command, forwards `SIGTERM`,
//! `SIGINT`, `SIGHUP` and `SIGQUIT` to it and exits with its status (128 + signal when it
//! was killed); the command is killed if that process dies.
// Calls the kernel directly (namespaces, fork, mounts); each unsafe block says why.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::child::{drop_capabilities, own_session, reset_signals};

/// `CLOSE_RANGE_CLOEXEC` from `<linux/close_range.h>`.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Signals the waiting process passes on to the command.
const FORWARDED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

/// The command's PID, for the forwarding handler of the waiting process (one per process:
/// it is only ever set in a freshly forked child).
static COMMAND_PID: AtomicI32 = AtomicI32::new(0);

/// The namespaces of a running jail, opened and ready to be joined by new commands.
#[derive(Debug)]
pub struct JailEntry {
    /// `(namespace file, CLONE_NEW* flag)` in joining order.
    namespaces: Vec<(File, libc::c_int)>,
    /// The Landlock layer the command applies before exec, if asked for.
    landlock: Option<crate::confine::FsPlan>,
    /// `cgroup.procs` files the command joins before it enters the namespaces.
    cgroups: Vec<File>,
}

impl JailEntry {
    /// Opens the namespaces of the jail whose outer process is `jail_pid` (what
    /// [`crate::RunningJail::pid`] returned): the user namespace it created and the ones
    /// owned by it, and the PID namespace its children live in.
    pub fn open(jail_pid: i32) -> io::Result<JailEntry> {
        let base = Path::new("/proc").join(jail_pid.to_string()).join("ns");
        let wanted = [
            ("user", libc::CLONE_NEWUSER),
            ("ipc", libc::CLONE_NEWIPC),
            ("uts", libc::CLONE_NEWUTS),
            ("net", libc::CLONE_NEWNET),
            ("pid_for_children", libc::CLONE_NEWPID),
            ("mnt", libc::CLONE_NEWNS),
        ];
        let mut namespaces = Vec::with_capacity(wanted.len());
        for (name, flag) in wanted {
            let path = base.join(name);
            let file = File::open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            namespaces.push((file, flag));
        }
        Ok(JailEntry {
            namespaces,
            landlock: None,
            cgroups: Vec::new(),
        })
    }

    /// Control groups (their directories) the command joins before it enters the
    /// namespaces, so that it and everything it starts share the jail's resource limits.
    pub fn join_cgroups(&mut self, groups: &[std::path::PathBuf]) -> io::Result<()> {
        for group in groups {
            let procs = group.join("cgroup.procs");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&procs)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", procs.display())))?;
            self.cgroups.push(file);
        }
        Ok(())
    }

    /// Applies the jail's Landlock layer to the command too: writes only in `writable`
    /// (paths as the jail sees them), the private temporary directories and `/dev`. The
    /// mounts the command joins already confine it; this is the second layer.
    pub fn confine_writes(&mut self, writable: &[std::path::PathBuf]) -> io::Result<()> {
        let writable = writable
            .iter()
            .map(|path| {
                CString::new(path.as_os_str().as_bytes())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a path"))
            })
            .collect::<io::Result<Vec<_>>>()?;
        self.landlock = Some(crate::confine::FsPlan {
            writable,
            protected: Vec::new(),
            reexposed: Vec::new(),
            landlock: true,
        });
        Ok(())
    }

    /// Makes `command` run inside the jail, in `cwd` (a path as the jail sees it). Set the
    /// command's environment and standard streams as usual, but not its working directory
    /// (the mount namespace is joined after `Command` would change it). Exec failures are
    /// reported by `spawn` as usual.
    pub fn install(self, command: &mut Command, cwd: &Path) -> io::Result<()> {
        let cwd = CString::new(cwd.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the directory"))?;
        let filters = crate::seccomp::programs()?;
        // SAFETY: the closure runs in the forked child before exec and makes system calls
        // (write, setns, fork, waitpid, kill, sigaction, prctl, chdir, close_range, _exit)
        // on data prepared before the fork; the Landlock layer also allocates, which
        // glibc's fork keeps usable in the child.
        unsafe {
            command.pre_exec(move || {
                join_cgroups(&self.cgroups)?;
                enter_in_child(&self.namespaces, self.landlock.as_ref(), &cwd, &filters)
            });
        }
        Ok(())
    }
}

/// Moves the calling process into each group (`0` names the writer itself).
fn join_cgroups(groups: &[File]) -> io::Result<()> {
    for group in groups {
        // SAFETY: write of two bytes from a static buffer to an open descriptor.
        if unsafe { libc::write(group.as_raw_fd(), b"0\n".as_ptr().cast(), 2) } != 2 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In the spawned child: joins the namespaces, forks the command (which returns here to
/// exec) and turns this process into the command's waiter.
fn enter_in_child(
    namespaces: &[(File, libc::c_int)],
    landlock: Option<&crate::confine::FsPlan>,
    cwd: &CString,
    filters: &crate::seccomp::Programs,
) -> io::Result<()> {
    for (file, flag) in namespaces {
        // SAFETY: setns on an open namespace descriptor; this process is single-threaded.
        if unsafe { libc::setns(file.as_raw_fd(), *flag) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: single-threaded forked child; both sides only make async-signal-safe calls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        prepare_command(cwd)?;
        if let Some(plan) = landlock {
            crate::confine::apply_landlock(plan)?;
        }
        return crate::seccomp::install(filters);
    }
    wait_and_exit(pid)
}

/// The command's own process, inside every namespace: dies with its waiter, loses every
/// capability, gets default signals, a session of its own (the caller's terminal is not
/// its controlling terminal) and none of the caller's descriptors above 2, and changes
/// directory. Returning lets the system-call filter be installed and `exec` run.
fn prepare_command(cwd: &CString) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    drop_capabilities()?;
    reset_signals()?;
    own_session(None)?;
    // Whatever the caller left open (a directory of the host, another sandbox's files)
    // closes at exec; `Command`'s own exec-report pipe is close-on-exec already.
    // SAFETY: close_range on this process's own descriptor table.
    if unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `cwd` is a valid NUL-terminated path.
    if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The waiting process: lets go of every inherited descriptor (so the spawner's exec
/// report pipe and the output pipes are the command's alone), forwards signals, and exits
/// with the command's status.
fn wait_and_exit(command: libc::pid_t) -> ! {
    COMMAND_PID.store(command, Ordering::SeqCst);
    for signal in FORWARDED {
        // SAFETY: an all-zero sigaction is valid; the handler only calls kill.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = forward_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: `action` is fully initialised; the old action is not needed.
        unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
    }
    // SAFETY: closing every descriptor of this process; nothing here uses one again.
    unsafe {
        libc::syscall(libc::SYS_close_range, 0u32, libc::c_uint::MAX, 0u32);
    }
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid output.
        let waited = unsafe { libc::waitpid(command, &mut status, 0) };
        if waited == command {
            let code = if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            };
            // SAFETY: _exit never returns and runs no destructors.
            unsafe { libc::_exit(code) };
        }
        if waited < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: as above.
            unsafe { libc::_exit(125) };
        }
    }
}

/// Passes a signal on to the command.
extern "C" fn forward_signal(signal: libc::c_int) {
    let command = COMMAND_PID.load(Ordering::SeqCst);
    if command > 0 {
        // SAFETY: kill is async-signal-safe; the PID is this process's unreaped child.
        unsafe { libc::kill(command, signal) };
    }
}
