//! airlock's side of the jail: preparing the plan, forking from a dedicated
//! keeper thread, collecting the handed listeners, the go-ahead, signals and
//! the exit status.
//!
//! The fork happens on a thread that lives exactly as long as the jail
//! (it then waits for it): the kernel's parent-death signal fires when the
//! forking *thread* ends, so forking from a short-lived thread (a tokio
//! blocking-pool thread, say) would kill the jail at a random moment.
// Calls the kernel directly (namespaces, fork, mounts); each unsafe block says why.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString};
use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr, recvmsg, socketpair,
};

use crate::capture::listening_ports;
use crate::catch_all;
use crate::child::{ChildPlan, run_jail, send_message};
use crate::confine::FsPlan;
use crate::error::{ExecFailure, JailError, SetupStep};
use crate::wire::{MESSAGE_LEN, Message};
use crate::{HandedListener, JailSpec};

/// How long the jail may take to build itself and report ready.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `execve` of the command may take to succeed or fail.
const EXEC_TIMEOUT: Duration = Duration::from_secs(30);
/// `PATH` used when the command's environment has none.
const DEFAULT_PATH: &[u8] = b"/usr/local/bin:/usr/bin:/bin";

/// Entry point: builds jails.
#[derive(Debug, Clone, Copy)]
pub struct Jail;

impl Jail {
    /// Builds a jail for `spec`: forks, creates the namespaces, hides paths,
    /// bind-mounts files, makes every address local, creates the listeners
    /// and hands them over. The command is not started until
    /// [`RunningJail::start`]. Blocks for at most about 30 seconds.
    ///
    /// Any failure kills what was built and is returned; the command never
    /// ran. [`JailError::NamespacesUnavailable`] means the kernel refuses
    /// unprivileged namespaces here.
    pub fn spawn(spec: JailSpec) -> Result<RunningJail, JailError> {
        let mut plan = build_plan(&spec)?;
        let nft = catch_all::nft_program();
        let catch = nft.as_ref().map(|_| catch_all::catch_port(&plan.tcp_ports));
        if let Some(port) = catch {
            plan.tcp_ports.push(port);
            plan.tcp_ports.sort_unstable();
        }
        let ruleset = catch.map(|port| catch_all::ruleset(&plan.tcp_ports, port));
        let paths = FailurePaths::of(&spec);
        let expected_listeners = 2 * (plan.tcp_ports.len() + 1);
        let (control, child_control) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|errno| launcher("creating the control socket pair", errno.into()))?;

        let (started_sender, started_receiver) = mpsc::channel();
        let (status_sender, status_receiver) = mpsc::channel();
        std::thread::Builder::new()
            .name("airlock-jail".into())
            .spawn(move || keep_jail(plan, child_control, started_sender, status_sender))
            .map_err(|error| launcher("starting the jail's keeper thread", error))?;
        let (pid, pidfd) = started_receiver
            .recv()
            .map_err(|_| launcher("forking the jail", io::Error::other("keeper thread ended")))?
            .map_err(|error| launcher("forking the jail", error))?;

        let mut jail = RunningJail {
            listeners: Vec::new(),
            pid,
            signaller: JailSignaller {
                pidfd: Arc::new(pidfd),
            },
            control: Some(control),
            status_receiver,
            exit: None,
            started: false,
            paths,
            landlock_abi: None,
            catch_all: Err("nftables (`nft`) is not installed on the host".into()),
        };
        // On error `jail` is dropped, which kills whatever was built.
        jail.listeners = jail.receive_listeners(expected_listeners)?;
        if let (Some(nft), Some(port), Some(ruleset)) = (nft, catch, ruleset) {
            jail.catch_all = catch_all::install(&nft, pid, &ruleset).map(|()| port);
        }
        Ok(jail)
    }
}

/// How the jailed command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JailExit {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
}

impl JailExit {
    /// The status a shell reports: the code, or 128 + the signal number.
    pub fn shell_status(self) -> i32 {
        match self {
            JailExit::Exited(code) => code,
            JailExit::Signaled(signal) => 128 + signal,
        }
    }

    /// Decodes a `waitpid` status.
    fn from_wait_status(status: libc::c_int) -> JailExit {
        if libc::WIFSIGNALED(status) {
            JailExit::Signaled(libc::WTERMSIG(status))
        } else {
            JailExit::Exited(libc::WEXITSTATUS(status))
        }
    }
}

/// A built jail: its handed listeners, and the handle to start, signal,
/// kill and wait for it. Dropping it before the command ended kills it.
#[derive(Debug)]
pub struct RunningJail {
    /// The sockets created inside the jail, for airlock to serve. Take them
    /// (`std::mem::take`) before or after [`RunningJail::start`].
    pub listeners: Vec<HandedListener>,
    pid: libc::pid_t,
    signaller: JailSignaller,
    control: Option<OwnedFd>,
    status_receiver: mpsc::Receiver<libc::c_int>,
    exit: Option<JailExit>,
    started: bool,
    paths: FailurePaths,
    landlock_abi: Option<u8>,
    catch_all: Result<u16, String>,
}

/// The spec's paths, to name the one a failed setup step was working on.
#[derive(Debug, Default)]
struct FailurePaths {
    hidden: Vec<std::path::PathBuf>,
    bound: Vec<std::path::PathBuf>,
    writable: Vec<std::path::PathBuf>,
    protected: Vec<std::path::PathBuf>,
    reexposed: Vec<std::path::PathBuf>,
    private: Vec<std::path::PathBuf>,
}

impl FailurePaths {
    fn of(spec: &JailSpec) -> FailurePaths {
        let fs = spec.filesystem.clone().unwrap_or_default();
        FailurePaths {
            hidden: spec.hide_paths.clone(),
            bound: spec
                .bind_files
                .iter()
                .map(|(source, _)| source.clone())
                .collect(),
            writable: fs.writable,
            protected: fs.protected,
            reexposed: fs.readable_exceptions,
            private: spec.private_dirs.iter().map(|d| d.target.clone()).collect(),
        }
    }

    /// The error for a failed step, with the path it names.
    fn error(&self, step: SetupStep, item: Option<u32>, errno: i32) -> JailError {
        let list = match step {
            SetupStep::HidePath => &self.hidden,
            SetupStep::BindFile => &self.bound,
            SetupStep::WritablePath => &self.writable,
            SetupStep::ProtectPath => &self.protected,
            SetupStep::ReexposePath => &self.reexposed,
            SetupStep::PrivateDir => &self.private,
            _ => return JailError::from_setup(step, None, errno),
        };
        let path = item.and_then(|index| list.get(index as usize)).cloned();
        JailError::from_setup(step, path, errno)
    }
}

impl RunningJail {
    /// Host PID of the jail's outer process (the command's grandparent).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The catch-all port that answers every other TCP port inside the jail
    /// (docs/architecture.md), or why there is none: then a connection to a port without
    /// a listener is refused by the jail's kernel, unaudited.
    pub fn catch_all(&self) -> Result<u16, &str> {
        self.catch_all
            .as_ref()
            .map(|port| *port)
            .map_err(String::as_str)
    }

    /// After [`RunningJail::start`] with filesystem confinement: the Landlock ABI version
    /// enforced in the command's process (0: the kernel has no Landlock, or it was not
    /// asked for). `None` without confinement or before the start.
    pub fn landlock_abi(&self) -> Option<u8> {
        self.landlock_abi
    }

    /// Starts the command, and waits (at most about 30 seconds) until its
    /// `execve` succeeded. A command that cannot be executed gives
    /// [`JailError::Exec`] (not found → 127, cannot execute → 126).
    pub fn start(&mut self) -> Result<(), JailError> {
        if self.started {
            return Err(JailError::WrongState("the jail was already started"));
        }
        self.started = true;
        let control = self
            .control
            .take()
            .ok_or(JailError::WrongState("the jail has no control socket"))?;
        let outcome = start_command(&control, &self.paths).map(|abi| {
            self.landlock_abi = abi;
        });
        drop(control);
        if let Err(error) = &outcome
            && !matches!(error, JailError::Exec { .. } | JailError::Setup { .. })
        {
            // After a reported failure the jail exits by itself (with 127,
            // 126 or 125); after anything else, make sure it is gone.
            let _ = self.kill();
        }
        outcome
    }

    /// Waits for the command to end and returns how it ended.
    pub fn wait(&mut self) -> Result<JailExit, JailError> {
        if let Some(exit) = self.exit {
            return Ok(exit);
        }
        if !self.started {
            return Err(JailError::WrongState("wait before start"));
        }
        let status = self.status_receiver.recv().map_err(|_| {
            launcher(
                "waiting for the jail",
                io::Error::other("keeper thread ended without a status"),
            )
        })?;
        let exit = JailExit::from_wait_status(status);
        self.exit = Some(exit);
        Ok(exit)
    }

    /// Like [`RunningJail::wait`], giving up after `timeout` (`Ok(None)`).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<JailExit>, JailError> {
        if let Some(exit) = self.exit {
            return Ok(Some(exit));
        }
        if !self.started {
            return Err(JailError::WrongState("wait before start"));
        }
        match self.status_receiver.recv_timeout(timeout) {
            Ok(status) => {
                let exit = JailExit::from_wait_status(status);
                self.exit = Some(exit);
                Ok(Some(exit))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(launcher(
                "waiting for the jail",
                io::Error::other("keeper thread ended without a status"),
            )),
        }
    }

    /// Sends `signal` to the jail, which forwards it to the command
    /// (`SIGINT`, `SIGTERM`, `SIGHUP`, `SIGQUIT`, `SIGWINCH`, `SIGUSR1`,
    /// `SIGUSR2`, `SIGCONT`); `SIGKILL` ends the whole jail at once.
    /// Signalling a jail that already ended is not an error.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        if self.exit.is_some() {
            return Ok(());
        }
        self.signaller.signal(signal)
    }

    /// A cloneable handle that signals this jail from other threads or
    /// tasks (for example a signal handler) while one of them waits.
    pub fn signaller(&self) -> JailSignaller {
        self.signaller.clone()
    }

    /// Kills the jail and everything in it (`SIGKILL`).
    pub fn kill(&self) -> io::Result<()> {
        self.signal(libc::SIGKILL)
    }

    /// Reads the setup messages until the jail is ready.
    fn receive_listeners(&self, expected: usize) -> Result<Vec<HandedListener>, JailError> {
        let control = self
            .control
            .as_ref()
            .ok_or(JailError::WrongState("the jail has no control socket"))?;
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let mut listeners = Vec::with_capacity(expected);
        // Every listener is one message; then Ready or a failure.
        for _ in 0..=expected {
            if !wait_readable(control, deadline)? {
                return Err(JailError::TimedOut { what: "its setup" });
            }
            let Some((message, fd)) = receive_message(control)? else {
                return Err(JailError::ExitedDuringSetup);
            };
            match (message, fd) {
                (
                    Message::Listener {
                        proto,
                        family,
                        port,
                    },
                    Some(fd),
                ) => {
                    listeners.push(HandedListener {
                        proto,
                        addr: family.wildcard(port),
                        fd,
                    });
                }
                (Message::Ready, None) => return Ok(listeners),
                (Message::SetupFailed { step, item, errno }, None) => {
                    return Err(self.paths.error(step, item, errno));
                }
                (other, _) => {
                    return Err(JailError::Protocol(format!("{other:?} during setup")));
                }
            }
        }
        Err(JailError::Protocol("more listeners than requested".into()))
    }
}

/// Sends signals to a jail; cheap to clone. It refers to the jail's process
/// itself (a pidfd), never to a recycled PID.
#[derive(Debug, Clone)]
pub struct JailSignaller {
    pidfd: Arc<OwnedFd>,
}

impl JailSignaller {
    /// Sends `signal` to the jail (see [`RunningJail::signal`]). A jail that
    /// already ended is not an error.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        // SAFETY: pidfd_send_signal with a pidfd this handle owns, a null
        // siginfo (the kernel fills in SI_USER) and no flags.
        let result = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if result == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::ESRCH) {
            return Ok(());
        }
        Err(error)
    }
}

impl Drop for RunningJail {
    fn drop(&mut self) {
        if self.exit.is_none() && self.status_receiver.try_recv().is_err() {
            // Fail closed: nothing may keep running unsupervised. The keeper
            // thread reaps it.
            let _ = self.kill();
        }
    }
}

/// Sends the go-ahead and waits until the command's `execve` succeeded
/// (every copy of the control socket is closed) or a failure is reported. Returns the
/// Landlock ABI the command reported, when it runs confined.
fn start_command(control: &OwnedFd, paths: &FailurePaths) -> Result<Option<u8>, JailError> {
    send_message(control.as_raw_fd(), Message::Go, None)
        .map_err(|errno| launcher("sending the go-ahead", errno.into()))?;
    let deadline = Instant::now() + EXEC_TIMEOUT;
    let mut landlock_abi = None;
    // At most one Confined report, then the end of the socket or a failure.
    for _ in 0..2 {
        if !wait_readable(control, deadline)? {
            return Err(JailError::TimedOut {
                what: "starting the command",
            });
        }
        match receive_message(control)? {
            None => return Ok(landlock_abi),
            Some((Message::Confined { landlock_abi: abi }, None)) if landlock_abi.is_none() => {
                landlock_abi = Some(abi);
            }
            Some((Message::ExecFailed { errno }, None)) => {
                return Err(JailError::Exec {
                    kind: ExecFailure::from_errno(errno),
                    source: io::Error::from_raw_os_error(errno),
                });
            }
            Some((Message::SetupFailed { step, item, errno }, None)) => {
                return Err(paths.error(step, item, errno));
            }
            Some((other, _)) => {
                return Err(JailError::Protocol(format!(
                    "{other:?} while starting the command"
                )));
            }
        }
    }
    Err(JailError::Protocol(
        "more than one confinement report".into(),
    ))
}

/// Waits until `control` is readable (or closed); `false` at the deadline.
fn wait_readable(control: &OwnedFd, deadline: Instant) -> Result<bool, JailError> {
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok(false);
        }
        let milliseconds = u16::try_from(remaining.as_millis()).unwrap_or(u16::MAX);
        let mut descriptors = [PollFd::new(control.as_fd(), PollFlags::POLLIN)];
        match poll(&mut descriptors, PollTimeout::from(milliseconds)) {
            Ok(0) => {}
            Ok(_) => return Ok(true),
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(launcher("waiting for the jail", errno.into())),
        }
    }
}

/// Receives one control message and the descriptor attached to it, if any.
/// `None` when the jail's side is closed.
fn receive_message(control: &OwnedFd) -> Result<Option<(Message, Option<OwnedFd>)>, JailError> {
    let mut bytes = [0u8; MESSAGE_LEN + 1];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let mut iov = [IoSliceMut::new(&mut bytes)];
    let received = recvmsg::<UnixAddr>(
        control.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|errno| launcher("reading the jail's control socket", errno.into()))?;
    let length = received.bytes;
    let truncated = received
        .flags
        .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
    let mut descriptors = Vec::new();
    if let Ok(control_messages) = received.cmsgs() {
        for control_message in control_messages {
            if let ControlMessageOwned::ScmRights(fds) = control_message {
                for fd in fds {
                    // SAFETY: the kernel just installed this descriptor in
                    // this process for us; nothing else owns it.
                    descriptors.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
    }
    if length == 0 && descriptors.is_empty() && !truncated {
        return Ok(None);
    }
    let message = iov_message(&bytes, length, truncated)?;
    if descriptors.len() > 1 {
        return Err(JailError::Protocol(
            "several descriptors in one message".into(),
        ));
    }
    Ok(Some((message, descriptors.pop())))
}

/// Decodes the received bytes of one control message.
fn iov_message(bytes: &[u8], length: usize, truncated: bool) -> Result<Message, JailError> {
    if truncated {
        return Err(JailError::Protocol("truncated control message".into()));
    }
    bytes
        .get(..length)
        .and_then(Message::decode)
        .ok_or_else(|| JailError::Protocol("malformed control message".into()))
}

/// The keeper thread: forks the jail, reports its PID, then reaps it.
fn keep_jail(
    plan: ChildPlan,
    child_control: OwnedFd,
    started: mpsc::Sender<io::Result<(libc::pid_t, OwnedFd)>>,
    status: mpsc::Sender<libc::c_int>,
) {
    // SAFETY: the child only runs `run_jail`, which uses data prepared
    // before the fork, takes no lock another thread could hold (it does not
    // touch the environment or standard streams; glibc's fork makes malloc
    // usable in the child), and ends in exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        run_jail(&plan, child_control);
    }
    drop(child_control);
    drop(plan);
    if pid < 0 {
        let _ = started.send(Err(io::Error::last_os_error()));
        return;
    }
    // SAFETY: pidfd_open on our own unreaped child, no flags.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let pidfd = match RawFd::try_from(pidfd) {
        Ok(fd) if fd >= 0 => {
            // SAFETY: pidfd_open returned a new descriptor that we own.
            unsafe { OwnedFd::from_raw_fd(fd) }
        }
        _ => {
            let error = io::Error::last_os_error();
            // SAFETY: `pid` is our unreaped child; kill it and reap it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            let _ = started.send(Err(error));
            return;
        }
    };
    if started.send(Ok((pid, pidfd))).is_err() {
        // SAFETY: `pid` is our unreaped child, nobody will supervise it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    loop {
        let mut wait_status = 0;
        // SAFETY: `wait_status` is a valid output; `pid` is our child.
        let reaped = unsafe { libc::waitpid(pid, &mut wait_status, 0) };
        if reaped == pid {
            let _ = status.send(wait_status);
            return;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// A launcher error.
fn launcher(what: &'static str, source: io::Error) -> JailError {
    JailError::Launcher { what, source }
}

/// Converts a spec value to a C string, refusing interior NUL bytes.
fn c_string(value: &OsStr, what: &str) -> Result<CString, JailError> {
    CString::new(value.as_bytes())
        .map_err(|_| JailError::InvalidSpec(format!("{what} contains a NUL byte")))
}

/// Prepares everything the jail needs, so the forked child only executes.
fn build_plan(spec: &JailSpec) -> Result<ChildPlan, JailError> {
    let Some(program) = spec.argv.first() else {
        return Err(JailError::InvalidSpec("the command is empty".into()));
    };
    if program.is_empty() {
        return Err(JailError::InvalidSpec("the command name is empty".into()));
    }
    if spec.cwd.as_os_str().is_empty() {
        return Err(JailError::InvalidSpec(
            "the working directory is empty".into(),
        ));
    }
    let argv = spec
        .argv
        .iter()
        .map(|argument| c_string(argument, "an argument"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut env = Vec::with_capacity(spec.env.len());
    for (name, value) in &spec.env {
        if name.is_empty() || name.as_bytes().contains(&b'=') {
            return Err(JailError::InvalidSpec(format!(
                "invalid environment variable name {name:?}"
            )));
        }
        let mut entry = OsString::from(name);
        entry.push("=");
        entry.push(value);
        env.push(c_string(&entry, "an environment variable")?);
    }
    let path = spec
        .env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_bytes())
        .unwrap_or(DEFAULT_PATH);
    let program_candidates = program_candidates(program.as_bytes(), path)?;

    let tcp_ports = listening_ports(&spec.tcp_ports)?;

    let hide_paths = spec
        .hide_paths
        .iter()
        .map(|path| c_string(path.as_os_str(), "a hidden path"))
        .collect::<Result<Vec<_>, _>>()?;
    let hide_if_present = spec
        .hide_if_present
        .iter()
        .map(|path| c_string(path.as_os_str(), "a hidden path"))
        .collect::<Result<Vec<_>, _>>()?;
    let bind_files = spec
        .bind_files
        .iter()
        .map(|(source, destination)| {
            Ok((
                c_string(source.as_os_str(), "a bind source")?,
                c_string(destination.as_os_str(), "a bind destination")?,
            ))
        })
        .collect::<Result<Vec<_>, JailError>>()?;

    let private_dirs = spec
        .private_dirs
        .iter()
        .map(crate::private_dir::plan)
        .collect::<Result<Vec<_>, _>>()?;

    // SAFETY: these getters have no preconditions.
    let (uid, gid, parent_pid) = unsafe { (libc::geteuid(), libc::getegid(), libc::getpid()) };
    Ok(ChildPlan {
        parent_pid,
        inherited_areas: inherited_areas()?,
        uid_map: format!("{uid} {uid} 1\n").into_bytes(),
        gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        hide_paths,
        hide_if_present,
        bind_files,
        fs: spec.filesystem.as_ref().map(fs_plan).transpose()?,
        private_dirs,
        tcp_ports,
        cwd: c_string(spec.cwd.as_os_str(), "the working directory")?,
        program_candidates,
        argv,
        env,
        stdio: spec.stdio.as_ref().map(|stdio| {
            use std::os::fd::AsRawFd;
            (stdio.stdin.as_raw_fd(), stdio.stdout.as_raw_fd())
        }),
        terminal: spec
            .terminal
            .as_ref()
            .map(|terminal| (terminal.far_end.as_raw_fd(), terminal.streams)),
        seccomp: crate::seccomp::programs()
            .map_err(|error| launcher("compiling the system-call filter", error))?,
    })
}

/// The filesystem part of the plan: every path absolute, as C strings.
fn fs_plan(fs: &crate::FsConfinement) -> Result<FsPlan, JailError> {
    let convert = |paths: &[std::path::PathBuf], what: &str| {
        paths
            .iter()
            .map(|path| {
                if !path.is_absolute() {
                    return Err(JailError::InvalidSpec(format!(
                        "{what} {} is not absolute",
                        path.display()
                    )));
                }
                c_string(path.as_os_str(), what)
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(FsPlan {
        writable: convert(&fs.writable, "a writable path")?,
        protected: convert(&fs.protected, "a protected path")?,
        reexposed: convert(&fs.readable_exceptions, "a readable exception")?,
        landlock: fs.landlock,
    })
}

/// airlock's own argument and environment strings (`/proc/self/stat` fields 48 to 51):
/// the jail's processes are forked, not executed, so without blanking them the command
/// could read airlock's command line (a `--secret NAME=SURROGATE=VALUE@HOST` included) in
/// `/proc/1/cmdline`.
fn inherited_areas() -> Result<[(usize, usize); 2], JailError> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|error| launcher("reading /proc/self/stat", error))?;
    let unreadable = || {
        launcher(
            "reading /proc/self/stat",
            io::Error::other("no argument and environment addresses"),
        )
    };
    // Fields after the command name (field 2, which may hold spaces) start at field 3.
    let after_name = &stat[stat.rfind(')').ok_or_else(unreadable)? + 1..];
    let fields: Vec<usize> = after_name
        .split_whitespace()
        .skip(45)
        .take(4)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| unreadable())?;
    match fields[..] {
        [arg_start, arg_end, env_start, env_end]
            if arg_start <= arg_end && env_start <= env_end =>
        {
            Ok([(arg_start, arg_end), (env_start, env_end)])
        }
        _ => Err(unreadable()),
    }
}

/// The paths `execve` tries for `program`, as `execvp` would search `path`.
fn program_candidates(program: &[u8], path: &[u8]) -> Result<Vec<CString>, JailError> {
    let as_c = |bytes: Vec<u8>| {
        CString::new(bytes).map_err(|_| JailError::InvalidSpec("PATH contains a NUL byte".into()))
    };
    if program.contains(&b'/') {
        return Ok(vec![as_c(program.to_vec())?]);
    }
    path.split(|byte| *byte == b':')
        .map(|directory| {
            let directory: &[u8] = if directory.is_empty() {
                b"."
            } else {
                directory
            };
            let mut candidate = directory.to_vec();
            candidate.push(b'/');
            candidate.extend_from_slice(program);
            as_c(candidate)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_search_candidates_follow_execvp() {
        let candidates = program_candidates(b"sh", b"/usr/bin::/bin").unwrap_or_default();
        let candidates: Vec<&[u8]> = candidates.iter().map(|c| c.as_bytes()).collect();
        assert_eq!(candidates, [&b"/usr/bin/sh"[..], b"./sh", b"/bin/sh"]);
        let direct = program_candidates(b"./run", b"/bin").unwrap_or_default();
        assert_eq!(direct.len(), 1);
    }

    #[test]
    fn plans_refuse_bad_specs() {
        let empty = JailSpec::default();
        assert!(matches!(build_plan(&empty), Err(JailError::InvalidSpec(_))));
        let spec = JailSpec {
            argv: vec!["true".into()],
            cwd: "/".into(),
            env: vec![("A=B".into(), "c".into())],
            ..JailSpec::default()
        };
        assert!(matches!(build_plan(&spec), Err(JailError::InvalidSpec(_))));
        let spec = JailSpec {
            argv: vec!["true".into()],
            cwd: "/".into(),
            tcp_ports: vec![443, 80, 443],
            ..JailSpec::default()
        };
        let plan = build_plan(&spec);
        assert!(matches!(&plan, Ok(plan) if plan.tcp_ports == [53, 80, 443]));
    }
}
