//! Errors of the jail: which setup step failed, and why the command could not start.

use std::io;

/// One step of building the jail. A failure names the step so the operator
/// knows what the kernel refused; the command is never started after one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupStep {
    /// Asking the kernel to kill the jail when airlock dies (`PR_SET_PDEATHSIG`).
    ParentDeathSignal,
    /// Closing the descriptors the jail must not inherit from airlock.
    CloseInheritedDescriptors,
    /// Creating the user, network, mount, PID, IPC and UTS namespaces.
    Unshare,
    /// Writing `deny` to `/proc/self/setgroups`.
    DenySetgroups,
    /// Writing `/proc/self/uid_map`.
    UidMap,
    /// Writing `/proc/self/gid_map`.
    GidMap,
    /// Making every mount private to the jail's mount namespace.
    MountPrivate,
    /// Covering one of the hidden paths.
    HidePath,
    /// Bind-mounting one of the read-only files.
    BindFile,
    /// Bringing the loopback interface up through netlink.
    LoopbackUp,
    /// Adding `local 0.0.0.0/0 dev lo table local` through netlink.
    LocalRouteIpv4,
    /// Adding `local ::/0 dev lo table local` through netlink.
    LocalRouteIpv6,
    /// Creating one of the listening sockets.
    CreateListener,
    /// Handing a listening socket to airlock.
    SendListener,
    /// Forking the jail's init process (PID 1 of the new PID namespace).
    ForkInit,
    /// Mounting a fresh `/proc` for the new PID namespace.
    MountProc,
    /// Changing into the command's working directory.
    ChangeDirectory,
    /// Forking the command's process.
    ForkCommand,
    /// Dropping every capability before running the command.
    DropCapabilities,
    /// Resetting signal dispositions and the signal mask for the command.
    ResetSignals,
    /// Entering an existing network namespace (`setns`) to capture it.
    EnterNetworkNamespace,
    /// Listing the interfaces of a network namespace being captured.
    ListInterfaces,
    /// Making the whole host tree read-only (`mount_setattr`, Linux 5.12 or later).
    ReadOnlyRoot,
    /// Building the command's `/dev` with only the usual devices.
    MinimalDev,
    /// Mounting the private `/tmp` (and `/var/tmp`).
    PrivateTmp,
    /// Binding a writable directory back read-write.
    WritablePath,
    /// Making a protected path read-only inside a writable directory.
    ProtectPath,
    /// Showing a `readable` exception again inside a hidden directory.
    ReexposePath,
    /// Applying the Landlock rules in the command's process.
    Landlock,
    /// Starting the command's own session (and its pseudo-terminal as the controlling
    /// terminal).
    OwnSession,
    /// Installing the command's system-call filter (`no_new_privs`, seccomp).
    SystemCallFilter,
    /// Showing a run-private directory in place of a host directory.
    PrivateDir,
}

impl SetupStep {
    /// Every step, in the order of their wire codes.
    const ALL: [SetupStep; 32] = [
        SetupStep::ParentDeathSignal,
        SetupStep::CloseInheritedDescriptors,
        SetupStep::Unshare,
        SetupStep::DenySetgroups,
        SetupStep::UidMap,
        SetupStep::GidMap,
        SetupStep::MountPrivate,
        SetupStep::HidePath,
        SetupStep::BindFile,
        SetupStep::LoopbackUp,
        SetupStep::LocalRouteIpv4,
        SetupStep::LocalRouteIpv6,
        SetupStep::CreateListener,
        SetupStep::SendListener,
        SetupStep::ForkInit,
        SetupStep::MountProc,
        SetupStep::ChangeDirectory,
        SetupStep::ForkCommand,
        SetupStep::DropCapabilities,
        SetupStep::ResetSignals,
        SetupStep::EnterNetworkNamespace,
        SetupStep::ListInterfaces,
        SetupStep::ReadOnlyRoot,
        SetupStep::MinimalDev,
        SetupStep::PrivateTmp,
        SetupStep::WritablePath,
        SetupStep::ProtectPath,
        SetupStep::ReexposePath,
        SetupStep::Landlock,
        SetupStep::OwnSession,
        SetupStep::SystemCallFilter,
        SetupStep::PrivateDir,
    ];

    /// The step's one-byte code on the jail's control socket.
    pub(crate) fn code(self) -> u8 {
        // The position in ALL is the code; ALL has fewer than 256 entries.
        Self::ALL.iter().position(|step| *step == self).unwrap_or(0) as u8
    }

    /// The step for a wire code, if the code is known.
    pub(crate) fn from_code(code: u8) -> Option<SetupStep> {
        Self::ALL.get(usize::from(code)).copied()
    }

    /// A short human description of the step.
    pub fn describe(self) -> &'static str {
        match self {
            SetupStep::ParentDeathSignal => "setting the parent-death signal",
            SetupStep::CloseInheritedDescriptors => "closing inherited file descriptors",
            SetupStep::Unshare => "creating the namespaces (unshare)",
            SetupStep::DenySetgroups => "writing /proc/self/setgroups",
            SetupStep::UidMap => "writing /proc/self/uid_map",
            SetupStep::GidMap => "writing /proc/self/gid_map",
            SetupStep::MountPrivate => "making mounts private",
            SetupStep::HidePath => "hiding a path",
            SetupStep::BindFile => "bind-mounting a file read-only",
            SetupStep::LoopbackUp => "bringing up the loopback interface",
            SetupStep::LocalRouteIpv4 => "adding the IPv4 local route",
            SetupStep::LocalRouteIpv6 => "adding the IPv6 local route",
            SetupStep::CreateListener => "creating a listening socket",
            SetupStep::SendListener => "handing a listening socket to airlock",
            SetupStep::ForkInit => "forking the jail's init",
            SetupStep::MountProc => "mounting /proc",
            SetupStep::ChangeDirectory => "changing to the working directory",
            SetupStep::ForkCommand => "forking the command",
            SetupStep::DropCapabilities => "dropping capabilities",
            SetupStep::ResetSignals => "resetting signal handling",
            SetupStep::EnterNetworkNamespace => "entering the network namespace",
            SetupStep::ListInterfaces => "listing the network namespace's interfaces",
            SetupStep::ReadOnlyRoot => "making the host's files read-only",
            SetupStep::MinimalDev => "building /dev",
            SetupStep::PrivateTmp => "mounting the private /tmp",
            SetupStep::WritablePath => "making a writable directory writable",
            SetupStep::ProtectPath => "write-protecting a path",
            SetupStep::ReexposePath => "showing a readable exception",
            SetupStep::Landlock => "applying the Landlock rules",
            SetupStep::OwnSession => "starting the command's own session",
            SetupStep::SystemCallFilter => "installing the system-call filter",
            SetupStep::PrivateDir => "showing a run-private directory",
        }
    }
}

impl std::fmt::Display for SetupStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// Why the command could not be executed inside the jail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecFailure {
    /// No such file (`ENOENT`/`ENOTDIR`): a shell exits 127 for this.
    NotFound,
    /// The file exists but cannot be run (permissions, format, ...): a shell exits 126.
    CannotExecute,
}

impl ExecFailure {
    /// The exit status a shell uses for this failure (127 or 126).
    pub fn shell_status(self) -> i32 {
        match self {
            ExecFailure::NotFound => 127,
            ExecFailure::CannotExecute => 126,
        }
    }

    /// Classifies the errno of a failed `execve`.
    pub(crate) fn from_errno(errno: i32) -> ExecFailure {
        if errno == libc::ENOENT || errno == libc::ENOTDIR {
            ExecFailure::NotFound
        } else {
            ExecFailure::CannotExecute
        }
    }
}

/// Everything that can go wrong building or running a jail. Any of these
/// means the command was not started (or, for [`JailError::Exec`], could not
/// start): the CLI maps them to exit status 125, except `Exec` (126/127).
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    /// The kernel refuses unprivileged namespaces here.
    #[error(
        "Linux namespaces are unavailable: {why}. Enable unprivileged user namespaces \
         (`sysctl kernel.unprivileged_userns_clone=1`, or on Ubuntu \
         `sysctl kernel.apparmor_restrict_unprivileged_userns=0`), or choose `--jail env`"
    )]
    NamespacesUnavailable {
        /// What the kernel said, and at which step.
        why: String,
    },
    /// The jail specification cannot be used as given.
    #[error("invalid jail specification: {0}")]
    InvalidSpec(String),
    /// A setup step failed inside the jail; the command was not started.
    #[error(
        "jail setup failed while {step}{}: {source}",
        path.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default()
    )]
    Setup {
        /// The step that failed.
        step: SetupStep,
        /// The path the step was working on, when it names one.
        path: Option<std::path::PathBuf>,
        /// The error the kernel returned.
        #[source]
        source: io::Error,
    },
    /// A step of [`crate::capture_network_namespace`] failed; no listener
    /// was returned.
    #[error("capturing the network namespace failed while {step}: {source}")]
    Capture {
        /// The step that failed.
        step: SetupStep,
        /// The error the kernel returned.
        #[source]
        source: io::Error,
    },
    /// The network namespace to capture has interfaces besides `lo`, which
    /// could carry traffic past airlock; it was left as it was.
    #[error(
        "the network namespace has interfaces besides lo ({}): refusing to capture it, \
         as they could carry traffic past airlock (start the container with `--network none`)",
        names.join(", ")
    )]
    UnexpectedInterfaces {
        /// The names of the other interfaces.
        names: Vec<String>,
    },
    /// A step of the launcher itself (in airlock's own process) failed.
    #[error("jail launcher failed while {what}: {source}")]
    Launcher {
        /// What airlock was doing.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The jail did not report within the allowed time; it was killed.
    #[error("the jail did not finish {what} in time and was killed")]
    TimedOut {
        /// What the jail was doing.
        what: &'static str,
    },
    /// The jail's control channel carried something unexpected; it was killed.
    #[error("the jail sent an unexpected control message: {0}")]
    Protocol(String),
    /// The jail's processes ended before setup finished.
    #[error("the jail exited during setup")]
    ExitedDuringSetup,
    /// `execve` of the command failed.
    #[error("cannot run the command ({kind:?}): {source}")]
    Exec {
        /// Not found (127) or cannot execute (126).
        kind: ExecFailure,
        /// The errno of the failed `execve`.
        #[source]
        source: io::Error,
    },
    /// `start` was called twice, or `wait` before `start`.
    #[error("the jail is not in a state that allows this: {0}")]
    WrongState(&'static str),
}

impl JailError {
    /// The exit status `airlock run` should use for this error:
    /// 127/126 for exec failures, 125 for everything else.
    pub fn exit_status(&self) -> i32 {
        match self {
            JailError::Exec { kind, .. } => kind.shell_status(),
            _ => 125,
        }
    }

    /// Builds the error for a failed setup step, recognising the errors that
    /// mean "namespaces are not available to this user on this kernel".
    pub(crate) fn from_setup(
        step: SetupStep,
        path: Option<std::path::PathBuf>,
        errno: i32,
    ) -> JailError {
        let source = io::Error::from_raw_os_error(errno);
        let namespaces_refused = match step {
            SetupStep::Unshare => matches!(
                errno,
                libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS | libc::ENOSYS
            ),
            // The first privileged steps inside the new namespaces: EPERM
            // here means a security module (AppArmor's userns restriction)
            // withholds the namespace's privileges.
            SetupStep::DenySetgroups
            | SetupStep::UidMap
            | SetupStep::GidMap
            | SetupStep::MountPrivate
            | SetupStep::LoopbackUp => errno == libc::EPERM || errno == libc::EACCES,
            _ => false,
        };
        if namespaces_refused {
            JailError::NamespacesUnavailable {
                why: format!("{step}: {source}"),
            }
        } else {
            JailError::Setup { step, path, source }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_round_trips_through_its_code() {
        for step in SetupStep::ALL {
            assert_eq!(SetupStep::from_code(step.code()), Some(step));
        }
        assert_eq!(SetupStep::from_code(200), None);
    }

    #[test]
    fn unshare_eperm_means_namespaces_unavailable() {
        let error = JailError::from_setup(SetupStep::Unshare, None, libc::EPERM);
        assert!(matches!(error, JailError::NamespacesUnavailable { .. }));
        assert!(error.to_string().contains("--jail env"));
        assert_eq!(error.exit_status(), 125);
        let error = JailError::from_setup(SetupStep::UidMap, None, libc::EPERM);
        assert!(matches!(error, JailError::NamespacesUnavailable { .. }));
        let error = JailError::from_setup(SetupStep::HidePath, None, libc::ENOENT);
        assert!(matches!(
            error,
            JailError::Setup {
                step: SetupStep::HidePath,
                ..
            }
        ));
    }

    #[test]
    fn exec_errors_map_to_shell_statuses() {
        assert_eq!(ExecFailure::from_errno(libc::ENOENT).shell_status(), 127);
        assert_eq!(ExecFailure::from_errno(libc::EACCES).shell_status(), 126);
        assert_eq!(ExecFailure::from_errno(libc::ENOEXEC).shell_status(), 126);
    }
}
