//! The jail's init (PID 1 of the new PID namespace) and the outer process's relay: the
//! forwarded signals blocked and taken with `sigwaitinfo`, the command forked and reaped
//! with every orphan, and the command's exit status relayed as the jail's own.
// Calls the kernel directly (signals, fork, waitpid); each unsafe block says why.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use nix::mount::{MsFlags, mount};

use super::{AtStep, ChildPlan, Never, StepResult, exec_command, exit_now, send_message};
use crate::confine;
use crate::error::SetupStep;
use crate::wire::{MESSAGE_LEN, Message};

/// Signals the outer process and the init forward to the command.
const FORWARDED_SIGNALS: [libc::c_int; 8] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGWINCH,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
];

/// Blocks the forwarded signals and `SIGCHLD` (taken with `sigwaitinfo`),
/// after installing a no-op handler so the kernel queues them even for a
/// PID-namespace init. Returns the blocked set.
pub(super) fn block_forwarded_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: an all-zero sigset_t is a valid value to initialise with sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    for signal in FORWARDED_SIGNALS.iter().chain(&[libc::SIGCHLD]) {
        // SAFETY: `set` is a valid sigset_t and `signal` a valid signal number.
        unsafe { libc::sigaddset(&mut set, *signal) };
        // SAFETY: an all-zero sigaction is valid; the handler is a plain
        // extern "C" function that does nothing.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: `action` is fully initialised; the old action is not needed.
        if unsafe { libc::sigaction(*signal, &action, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: `set` is a valid sigset_t; the old mask is not needed.
    if unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(set)
}

/// The handler installed for blocked signals; they are taken with `sigwaitinfo`.
extern "C" fn ignore_signal(_signal: libc::c_int) {}

/// Waits for the next blocked signal; returns its number and whether a
/// process sent it (`kill`, `sigqueue`) rather than the kernel (terminal).
fn next_signal(set: &libc::sigset_t) -> (libc::c_int, bool) {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid output buffer.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` and `info` are valid for the duration of the call.
        let signal = unsafe { libc::sigwaitinfo(set, &mut info) };
        if signal > 0 {
            // si_code <= 0 (SI_USER, SI_QUEUE, SI_TKILL, ...) means another
            // process sent it; SI_KERNEL means e.g. the terminal, which has
            // already signalled the command's process group itself.
            return (signal, info.si_code <= 0);
        }
    }
}

/// The outer process after forking the init: forwards signals that airlock
/// sends to the init, and exits the way the command ended.
pub(super) fn relay_until_init_exits(
    init_pid: libc::pid_t,
    signals: &libc::sigset_t,
    status_read: &OwnedFd,
) -> ! {
    loop {
        let (signal, from_process) = next_signal(signals);
        if signal != libc::SIGCHLD {
            if from_process {
                // SAFETY: init_pid is this process's unreaped child.
                unsafe { libc::kill(init_pid, signal) };
            }
            continue;
        }
        let mut init_status = 0;
        // SAFETY: `init_status` is a valid output; WNOHANG never blocks.
        let reaped = unsafe { libc::waitpid(init_pid, &mut init_status, libc::WNOHANG) };
        if reaped == init_pid {
            let mut command_status = [0u8; 4];
            let status = match nix::unistd::read(status_read, &mut command_status) {
                Ok(4) => i32::from_ne_bytes(command_status),
                _ => init_status,
            };
            exit_like(status);
        }
        if reaped < 0 {
            exit_now(125);
        }
    }
}

/// Exits with the same status as a process that ended with `status`
/// (a `waitpid` status): the same exit code, or death by the same signal.
fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFEXITED(status) {
        exit_now(libc::WEXITSTATUS(status));
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain syscalls on this process: no core file, default
        // action, unblocked, then the signal itself.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            let mut only: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut only);
            libc::sigaddset(&mut only, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
        exit_now(128 + signal);
    }
    exit_now(125)
}

/// The init (PID 1 of the new PID namespace): mounts `/proc`, reports ready,
/// waits for the go-ahead, forks the command, reaps every orphan, forwards
/// signals, and exits with the command's status.
pub(super) fn run_init(
    plan: &ChildPlan,
    control: RawFd,
    signals: &libc::sigset_t,
    status_write: OwnedFd,
) -> StepResult<Never> {
    // The init holds a copy of airlock's memory (real secret values, its environment)
    // and is PID 1 of the command's namespace: not dumpable, so that the command can read
    // neither /proc/1/environ nor /proc/1/mem nor ptrace it, whatever fs.suid_dumpable
    // says. The command becomes dumpable again at exec.
    nix::sys::prctl::set_dumpable(false).at(SetupStep::ForkInit)?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .at(SetupStep::ParentDeathSignal)?;
    // The outer process lives in the parent PID namespace (getppid() is 0
    // here), so its death shows as the status pipe losing its reader.
    let mut lifeline = [nix::poll::PollFd::new(
        status_write.as_fd(),
        nix::poll::PollFlags::POLLOUT,
    )];
    let outer_alive = nix::poll::poll(&mut lifeline, nix::poll::PollTimeout::ZERO)
        .ok()
        .and_then(|_| lifeline[0].revents())
        .is_some_and(|events| !events.contains(nix::poll::PollFlags::POLLERR));
    if !outer_alive {
        exit_now(125);
    }
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .at(SetupStep::MountProc)?;
    if plan.fs.is_some() {
        confine::confine_proc().at(SetupStep::MountProc)?;
    }
    nix::unistd::chdir(plan.cwd.as_c_str()).at(SetupStep::ChangeDirectory)?;

    send_message(control, Message::Ready, None).at(SetupStep::SendListener)?;
    let mut go = [0u8; MESSAGE_LEN];
    // SAFETY: `control` is open for the life of this process.
    let control_borrowed = unsafe { BorrowedFd::borrow_raw(control) };
    match nix::unistd::read(control_borrowed, &mut go) {
        Ok(length) if Message::decode(&go[..length]) == Some(Message::Go) => {}
        // airlock went away or sent something else: do not run the command.
        _ => exit_now(125),
    }

    // SAFETY: single-threaded process; the command child only runs
    // `exec_command`, which execs or exits.
    let command_pid = unsafe { libc::fork() };
    if command_pid < 0 {
        return Err((SetupStep::ForkCommand, None, io::Error::last_os_error()));
    }
    if command_pid == 0 {
        drop(status_write);
        exec_command(plan, control);
    }
    // SAFETY: `control` is this process's own descriptor, not used again.
    unsafe { libc::close(control) };
    reap_until_command_exits(command_pid, signals, &status_write)
}

/// The init's main loop.
fn reap_until_command_exits(
    command_pid: libc::pid_t,
    signals: &libc::sigset_t,
    status_write: &OwnedFd,
) -> ! {
    loop {
        let (signal, from_process) = next_signal(signals);
        if signal != libc::SIGCHLD {
            if from_process {
                // SAFETY: command_pid is this process's child (unreaped, or
                // else the loop has already exited).
                unsafe { libc::kill(command_pid, signal) };
            }
            continue;
        }
        // Reap every exited child: orphans are re-parented to this init.
        loop {
            let mut status = 0;
            // SAFETY: `status` is a valid output; WNOHANG never blocks.
            let reaped = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if reaped == command_pid {
                // The outer process falls back to this init's own status if
                // the write fails.
                let _ = nix::unistd::write(status_write, &status.to_ne_bytes());
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                };
                exit_now(code);
            }
            if reaped <= 0 {
                break;
            }
        }
    }
}
