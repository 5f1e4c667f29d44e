//! airlock's Linux jail: runs a command in fresh user, network, mount, PID,
//! IPC and UTS namespaces whose only network is a set of listening sockets
//! handed to airlock.
//!
//! Inside the jail's network namespace `lo` is up and the routes
//! `local 0.0.0.0/0 dev lo table local` and `local ::/0 dev lo table local`
//! make *every* address local. Wildcard listeners created there (TCP 80, 443,
//! the rule ports and 53; UDP 53) therefore accept every connection the
//! command makes, whatever its destination, and never reach any real network.
//! The sockets are passed to airlock (which stays in the host's network
//! namespace) over `SCM_RIGHTS`; airlock accepts on them and decides. For an
//! accepted TCP connection, [`original_destination`] gives the address the
//! command dialled; for UDP, [`recv_datagram`] gives it per datagram.
//!
//! Life cycle: [`Jail::spawn`] builds the jail and returns a [`RunningJail`]
//! holding the listeners, with the command not yet started;
//! [`RunningJail::start`] runs it; [`RunningJail::wait`] gives its exit
//! status. Every setup failure is an error naming the step and the command
//! is never executed (fail closed). If airlock dies, the jail dies with it.
//!
//! [`capture_network_namespace`] does the network part alone for a namespace
//! that already exists (a `docker run --network none` container's): the same
//! routes and listeners, made from a dedicated thread that enters it.
//!
//! Terminal and signals: the command runs in a session of its own, never on the
//! user's terminal as its controlling terminal, under a system-call filter that
//! refuses `TIOCSTI`/`TIOCLINUX` and set-user-ID or set-group-ID files (see
//! the `seccomp` and `terminal` modules). An interactive launcher gives it a
//! [`Terminal`] and relays it; terminal-generated signals then arise inside
//! that pseudo-terminal. Without one, a launcher forwards the signals it gets
//! (`SIGINT` included) with [`RunningJail::signal`] (or a [`JailSignaller`]
//! from another thread).
//!
//! ```no_run
//! use airlock_jail::{Jail, JailError, JailSpec, Protocol, original_destination};
//!
//! fn run() -> Result<i32, JailError> {
//!     let spec = JailSpec {
//!         argv: vec!["curl".into(), "https://example.com".into()],
//!         env: vec![("PATH".into(), "/usr/bin:/bin".into())],
//!         cwd: "/".into(),
//!         tcp_ports: vec![80, 443],
//!         hide_paths: vec!["/home/me/.config/airlock".into()],
//!         hide_if_present: Vec::new(),
//!         bind_files: Vec::new(),
//!         private_dirs: Vec::new(),
//!         filesystem: None,
//!         stdio: None,
//!         terminal: None,
//!     };
//!     let mut jail = Jail::spawn(spec)?; // JailError::exit_status() == 125
//!     for listener in std::mem::take(&mut jail.listeners) {
//!         if listener.proto == Protocol::Tcp {
//!             let Ok(listener) = listener.into_tcp_listener() else { continue };
//!             std::thread::spawn(move || {
//!                 for stream in listener.incoming().flatten() {
//!                     // Where the command wanted to go: decide, then dial out.
//!                     let _destination = original_destination(&stream);
//!                 }
//!             });
//!         }
//!     }
//!     jail.start()?; // JailError::Exec → exit_status() 127 or 126
//!     Ok(jail.wait()?.shell_status())
//! }
//! ```

#![cfg(target_os = "linux")]
#![warn(unreachable_pub, missing_docs)]

mod addr;
mod capture;
mod catch_all;
mod child;
mod confine;
mod enter;
mod error;
mod netlink;
mod parent;
mod private_dir;
mod seccomp;
mod terminal;
mod wire;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

pub use addr::{Datagram, original_destination, recv_datagram, send_datagram_from};
pub use capture::capture_network_namespace;
pub use catch_all::nft_program;
pub use enter::JailEntry;
pub use error::{ExecFailure, JailError, SetupStep};
pub use parent::{Jail, JailExit, JailSignaller, RunningJail};
pub use terminal::{Resizer, Terminal, TerminalRelay};

/// What to run in the jail and how to build it.
#[derive(Debug, Clone, Default)]
pub struct JailSpec {
    /// The command and its arguments; `argv[0]` is searched in the `PATH` of
    /// [`JailSpec::env`] unless it contains a `/`.
    pub argv: Vec<OsString>,
    /// The command's complete environment (nothing else is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// The command's working directory.
    pub cwd: PathBuf,
    /// TCP ports to listen on (80, 443 and the ports rules name); 53 is
    /// always added, for TCP and UDP.
    pub tcp_ports: Vec<u16>,
    /// Existing paths the command must not see: a directory is covered by an
    /// empty read-only tmpfs, a file by `/dev/null`. A missing path is an error.
    pub hide_paths: Vec<PathBuf>,
    /// Paths hidden the same way if they still exist when the jail is built (host UNIX
    /// sockets found by a scan, which may vanish in between); a missing one is skipped, as
    /// is one the jail cannot reach (permission denied: another user's private directory).
    pub hide_if_present: Vec<PathBuf>,
    /// `(source, destination)` files bind-mounted read-only, for example a CA
    /// bundle over the system bundle; both must exist (a missing one is an
    /// error). Binds are made before hiding, so a source may lie inside a
    /// hidden directory; a destination inside one stays hidden.
    pub bind_files: Vec<(PathBuf, PathBuf)>,
    /// Run-private directories shown in place of host directories (docs/secrets.md,
    /// "Private parent directories"), made after the host tree is read-only and before the
    /// hidden paths are covered; a writable directory that is one's target is not bound
    /// again. A failure fails the jail (exit 125).
    pub private_dirs: Vec<PrivateDir>,
    /// Filesystem confinement (docs/security.md): `None` keeps the host's files as the
    /// user sees them (only `hide_paths` covered).
    pub filesystem: Option<FsConfinement>,
    /// Descriptors that become the command's standard input and output instead of
    /// airlock's own (`airlock mcp` relays them); `None` inherits airlock's.
    pub stdio: Option<JailStdio>,
    /// A pseudo-terminal for an interactive command ([`Terminal::for_jail`]): its far end
    /// replaces the standard streams that were airlock's terminal and becomes the
    /// command's controlling terminal. Without one the command keeps airlock's streams.
    /// Either way it runs in a session of its own.
    pub terminal: Option<JailTerminal>,
}

/// A directory prepared by the launcher (`source`) shown over a host directory (`target`)
/// inside the jail. Each name in `live` must exist in both: the host's entry is bound over
/// the placeholder of the same name (with what lies below it; never through a link: an
/// entry that became a link, vanished or changed kind since leaves its placeholder empty).
/// Every other name of `source` is its own: a host program renaming, creating or removing
/// that name in `target` changes nothing inside. Names in `read_only` are bound read-only
/// over themselves (writes fail with `EROFS`, renames and removals with `EBUSY`).
#[derive(Debug, Clone, Default)]
pub struct PrivateDir {
    /// The host directory it is shown over (absolute, canonical, an existing directory).
    pub target: PathBuf,
    /// The prepared directory (absolute, not reachable by the command).
    pub source: PathBuf,
    /// Names of `target`'s entries bound live over `source`'s placeholders.
    pub live: Vec<OsString>,
    /// Names in `source` made read-only.
    pub read_only: Vec<OsString>,
    /// Whether the command may write in it and in its live entries.
    pub writable: bool,
}

/// The far end of the command's pseudo-terminal ([`Terminal`]), and which of the
/// standard streams (0, 1, 2) it replaces.
#[derive(Debug, Clone)]
pub struct JailTerminal {
    /// The pseudo-terminal's far (slave) end.
    pub far_end: std::sync::Arc<OwnedFd>,
    /// For descriptors 0, 1 and 2: whether the far end replaces it.
    pub streams: [bool; 3],
}

/// The command's standard input and output, when not airlock's own: typically the
/// jail's ends of two pipes. airlock should drop its copies once [`Jail::spawn`]
/// returned, so that the command sees the end of its input when airlock closes its end.
#[derive(Debug, Clone)]
pub struct JailStdio {
    /// Becomes the command's descriptor 0.
    pub stdin: std::sync::Arc<OwnedFd>,
    /// Becomes the command's descriptor 1.
    pub stdout: std::sync::Arc<OwnedFd>,
}

/// Filesystem confinement: the host read-only except `writable`, a private `/tmp` and
/// `/var/tmp`, a `/dev` with the usual devices only, `/proc/sys` read-only. Hidden
/// directories ([`JailSpec::hide_paths`]) show only the `readable_exceptions` below them.
/// Any path that cannot be confined as asked fails the jail (exit 125), naming it.
#[derive(Debug, Clone, Default)]
pub struct FsConfinement {
    /// Existing directories and regular files (absolute, canonical) the command may write.
    pub writable: Vec<PathBuf>,
    /// Existing paths inside writable directories that stay read-only (hooks, rc files).
    pub protected: Vec<PathBuf>,
    /// Existing paths inside hidden directories shown again, read-only.
    pub readable_exceptions: Vec<PathBuf>,
    /// Whether Landlock is applied as a second layer where the kernel has it.
    pub landlock: bool,
}

/// Transport protocol of a handed socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A listening TCP socket: accept connections on it.
    Tcp,
    /// A bound UDP socket (DNS): receive datagrams with [`recv_datagram`].
    Udp,
}

/// A socket created inside the jail's network namespace and handed to airlock.
#[derive(Debug)]
pub struct HandedListener {
    /// TCP (listening) or UDP (bound).
    pub proto: Protocol,
    /// The wildcard address and port it is bound to (`0.0.0.0:443`, `[::]:53`).
    pub addr: SocketAddr,
    /// The socket (blocking, close-on-exec). Call `set_nonblocking(true)`
    /// after converting it before handing it to tokio's `from_std`.
    pub fd: OwnedFd,
}

impl HandedListener {
    /// The socket as a standard TCP listener; `Err(self)` for UDP sockets.
    pub fn into_tcp_listener(self) -> Result<std::net::TcpListener, HandedListener> {
        match self.proto {
            Protocol::Tcp => Ok(std::net::TcpListener::from(self.fd)),
            Protocol::Udp => Err(self),
        }
    }

    /// The socket as a standard UDP socket; `Err(self)` for TCP listeners.
    pub fn into_udp_socket(self) -> Result<std::net::UdpSocket, HandedListener> {
        match self.proto {
            Protocol::Udp => Ok(std::net::UdpSocket::from(self.fd)),
            Protocol::Tcp => Err(self),
        }
    }
}
