//! The command's own terminal (docs/security.md, "The jail"): the command never shares a
//! terminal with the user.
//!
//! The command always starts in a session of its own, so the user's terminal is never its
//! controlling terminal (`TIOCSTI` on it needs a privilege the command lacks, and the
//! system-call filter refuses it besides). When airlock runs interactively (its standard
//! input is a terminal and airlock is in that terminal's foreground), [`Terminal::open`]
//! makes a pseudo-terminal with the user's settings and window size; the command gets its
//! far end as every standard stream that was the user's terminal, and as its controlling
//! terminal (job control, Ctrl-C and Ctrl-Z work inside it). [`Terminal::relay`] puts the
//! user's terminal in raw mode and copies bytes both ways until the command's side closes;
//! [`Resizer::resize`] passes window size changes on; the user's settings come back
//! when the relay ends or is dropped.
// Terminal ioctls have no safe wrapper for the window size; each unsafe block says why.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::termios::{self, SetArg, Termios};

use crate::JailTerminal;

/// Bytes copied per read in either direction.
const CHUNK: usize = 16 * 1024;

/// A pseudo-terminal made for the command, not yet relayed.
#[derive(Debug)]
pub struct Terminal {
    master: OwnedFd,
    far_end: Arc<OwnedFd>,
    streams: [bool; 3],
    output: i32,
    saved: Termios,
}

impl Terminal {
    /// A pseudo-terminal for the command when airlock's standard input is a terminal,
    /// airlock is in its foreground process group, and standard output or error is a
    /// terminal too (where the command's output is shown); `None` otherwise (the command
    /// then keeps airlock's streams, in its own session all the same).
    pub fn open() -> io::Result<Option<Terminal>> {
        let stdin = io::stdin();
        let input = stdin.as_fd();
        if !nix::unistd::isatty(input).unwrap_or(false) || !in_foreground(input) {
            return Ok(None);
        }
        let streams = [0, 1, 2].map(|fd| {
            // SAFETY: descriptors 0 to 2 stay open for the life of the process.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            nix::unistd::isatty(fd).unwrap_or(false)
        });
        let Some(output) = [1, 2].into_iter().find(|fd| streams[*fd as usize]) else {
            return Ok(None);
        };
        let saved = termios::tcgetattr(input)?;
        let size = window_size(input.as_raw_fd())?;
        let pair = nix::pty::openpty(Some(&size), Some(&saved))?;
        for fd in [&pair.master, &pair.slave] {
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            )?;
        }
        Ok(Some(Terminal {
            master: pair.master,
            far_end: Arc::new(pair.slave),
            streams,
            output,
            saved,
        }))
    }

    /// When airlock's standard input is a terminal whose foreground airlock is not (it was
    /// started in the background), replaces airlock's standard input with `/dev/null`
    /// before the command inherits it: a command in a session of its own is not stopped
    /// for reading a terminal that is not its own, and would read what the user types at
    /// the shell. Returns whether it did.
    pub fn detach_background_input() -> io::Result<bool> {
        let stdin = io::stdin();
        let input = stdin.as_fd();
        if !nix::unistd::isatty(input).unwrap_or(false) || in_foreground(input) {
            return Ok(false);
        }
        let null = std::fs::File::open("/dev/null")?;
        nix::unistd::dup2_stdin(&null)?;
        Ok(true)
    }

    /// What the jail needs: the far end, and which standard streams it replaces.
    pub fn for_jail(&self) -> JailTerminal {
        JailTerminal {
            far_end: Arc::clone(&self.far_end),
            streams: self.streams,
        }
    }

    /// Puts the user's terminal in raw mode and starts copying. Call it once the jail
    /// holds its copy of the far end (after [`crate::Jail::spawn`]): airlock's own copy is
    /// closed here, so that the relay sees the command's side close when it ends.
    pub fn relay(self) -> io::Result<TerminalRelay> {
        let Terminal {
            master,
            far_end,
            output,
            saved,
            ..
        } = self;
        drop(far_end);
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(io::stdin().as_fd(), SetArg::TCSANOW, &raw)?;
        let restore = Restore { saved };
        nix::fcntl::fcntl(
            &master,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        let master = Arc::new(master);
        let (stop_read, stop_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let input = {
            let master = Arc::clone(&master);
            std::thread::Builder::new()
                .name("airlock-tty-in".into())
                .spawn(move || copy_input(&master, &stop_read))?
        };
        let shown = {
            let master = Arc::clone(&master);
            std::thread::Builder::new()
                .name("airlock-tty-out".into())
                .spawn(move || copy_output(&master, output))?
        };
        Ok(TerminalRelay {
            master,
            stop: Some(stop_write),
            input: Some(input),
            output: Some(shown),
            restore: Some(restore),
        })
    }
}

/// A running relay between the user's terminal and the command's.
#[derive(Debug)]
pub struct TerminalRelay {
    master: Arc<OwnedFd>,
    stop: Option<OwnedFd>,
    input: Option<JoinHandle<()>>,
    output: Option<JoinHandle<()>>,
    restore: Option<Restore>,
}

/// Passes window size changes on to the command's terminal; cheap to clone and send.
#[derive(Debug, Clone)]
pub struct Resizer {
    master: Arc<OwnedFd>,
}

impl Resizer {
    /// Gives the command's terminal the user's current window size (on `SIGWINCH`); the
    /// kernel then signals the command's foreground process group.
    pub fn resize(&self) {
        if let Ok(size) = window_size(0) {
            // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
            unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        }
    }
}

impl TerminalRelay {
    /// A handle that passes window size changes on ([`Resizer::resize`]).
    pub fn resizer(&self) -> Resizer {
        Resizer {
            master: Arc::clone(&self.master),
        }
    }

    /// After the command ended: shows what it wrote last (waiting at most `timeout` for
    /// its side to close), stops reading the user's input and restores the terminal.
    pub fn finish(mut self, timeout: Duration) {
        if let Some(output) = self.output.take() {
            let deadline = Instant::now() + timeout;
            while !output.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if output.is_finished() {
                let _ = output.join();
            }
        }
        self.stop_input_thread();
        drain_answers();
        drop(self.restore.take());
    }

    fn stop_input_thread(&mut self) {
        // Closing the pipe's write end wakes the input thread's poll.
        drop(self.stop.take());
        if let Some(input) = self.input.take() {
            let _ = input.join();
        }
    }

    fn stop_input(&mut self) {
        self.stop_input_thread();
        drop(self.restore.take());
    }
}

impl Drop for TerminalRelay {
    fn drop(&mut self) {
        self.stop_input();
    }
}

/// How long the user's terminal must stay quiet before its settings are put back.
const QUIET: Duration = Duration::from_millis(200);
/// The longest airlock reads and drops what the terminal sends after the command ended.
const DRAIN_LIMIT: Duration = Duration::from_secs(3);

/// Reads and drops what arrives on the user's terminal until it has been quiet for
/// [`QUIET`] (at most [`DRAIN_LIMIT`]): the terminal's answers to queries the command
/// wrote (`ESC [ 6 n` and the like) must not reach the user's shell as typed input.
fn drain_answers() {
    let stdin = io::stdin();
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut buffer = [0u8; CHUNK];
    while Instant::now() < deadline {
        let mut ready = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        let quiet = PollTimeout::try_from(QUIET).unwrap_or(PollTimeout::ZERO);
        match poll(&mut ready, quiet) {
            Ok(0) => return,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        match nix::unistd::read(stdin.as_fd(), &mut buffer) {
            Ok(0) => return,
            Ok(_) | Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => {}
            Err(_) => return,
        }
    }
}

/// The user's terminal settings, put back when dropped.
#[derive(Debug)]
struct Restore {
    saved: Termios,
}

impl Drop for Restore {
    fn drop(&mut self) {
        // TCSAFLUSH: whatever waits unread in the user's input (such as the terminal's
        // answers to queries the command sent) is dropped, never read by the user's shell.
        let _ = termios::tcsetattr(io::stdin().as_fd(), SetArg::TCSAFLUSH, &self.saved);
    }
}

/// Whether this process's group is the terminal's foreground group.
fn in_foreground(terminal: BorrowedFd<'_>) -> bool {
    nix::unistd::tcgetpgrp(terminal).is_ok_and(|group| group == nix::unistd::getpgrp())
}

/// The window size of terminal `fd`.
fn window_size(fd: i32) -> io::Result<libc::winsize> {
    // SAFETY: an all-zero winsize is a valid value.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize to a valid pointer.
    if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// The user's keystrokes to the command, until the user's input ends or `stop` closes.
/// `master` is non-blocking: a command that never reads its terminal cannot hold this
/// thread (and with it the end of the run) once `stop` closes.
fn copy_input(master: &OwnedFd, stop: &OwnedFd) {
    let stdin = io::stdin();
    let mut buffer = [0u8; CHUNK];
    loop {
        if !wait_for(stdin.as_fd(), PollFlags::POLLIN, stop) {
            return;
        }
        let read = match nix::unistd::read(stdin.as_fd(), &mut buffer) {
            Ok(0) => return,
            Ok(read) => read,
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            Err(_) => return,
        };
        if write_all(master.as_fd(), &buffer[..read], Some(stop)).is_err() {
            return;
        }
    }
}

/// Waits until `fd` is ready for `events` (`true`), or `stop` closes or polling fails
/// (`false`).
fn wait_for(fd: BorrowedFd<'_>, events: PollFlags, stop: &OwnedFd) -> bool {
    loop {
        let mut ready = [
            PollFd::new(fd, events),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut ready, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
        if ready[1].revents().is_some_and(|events| !events.is_empty()) {
            return false;
        }
        if ready[0].revents().is_some_and(|events| !events.is_empty()) {
            return true;
        }
    }
}

/// The command's output to the user's terminal (`output`: airlock's descriptor 1 or 2),
/// until the command's side is closed by everything in the jail (`EIO`).
fn copy_output(master: &OwnedFd, output: i32) {
    // SAFETY: descriptors 1 and 2 stay open for the life of the process.
    let output = unsafe { BorrowedFd::borrow_raw(output) };
    let mut buffer = [0u8; CHUNK];
    loop {
        let read = match nix::unistd::read(master.as_fd(), &mut buffer) {
            Ok(0) => return,
            Ok(read) => read,
            Err(nix::errno::Errno::EINTR) => continue,
            // Non-blocking: wait until there is something (or the far end closes).
            Err(nix::errno::Errno::EAGAIN) => {
                let mut ready = [PollFd::new(master.as_fd(), PollFlags::POLLIN)];
                if poll(&mut ready, PollTimeout::NONE).is_err_and(|e| e != nix::errno::Errno::EINTR)
                {
                    return;
                }
                continue;
            }
            Err(_) => return,
        };
        if write_all(output, &buffer[..read], None).is_err() {
            return;
        }
    }
}

/// Writes all of `bytes`, waiting for room when `fd` is non-blocking; gives up when
/// `stop` (if any) closes meanwhile.
fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8], stop: Option<&OwnedFd>) -> nix::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(written) => bytes = &bytes[written..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                let room = match stop {
                    Some(stop) => wait_for(fd, PollFlags::POLLOUT, stop),
                    None => {
                        let mut ready = [PollFd::new(fd, PollFlags::POLLOUT)];
                        poll(&mut ready, PollTimeout::NONE).is_ok()
                    }
                };
                if !room {
                    return Err(nix::errno::Errno::EAGAIN);
                }
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
