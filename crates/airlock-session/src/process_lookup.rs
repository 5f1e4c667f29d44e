//! The process behind a connection from a jail (docs/security.md, "Which program
//! asked"), read from the host's `/proc` for [`airlock_proxy::Identify`]:
//!
//! 1. the client end's socket inode, from the jail's own socket tables
//!    (`/proc/NET_PID/net/tcp` and `tcp6` of a process in the jail's network namespace):
//!    the row whose local end is the accepted socket's peer and whose remote end is its
//!    local address;
//! 2. the processes of the jail's PID namespace (each `/proc/PID/ns/pid` compared with the
//!    jail's), every one holding that inode among its `/proc/PID/fd` links; the one
//!    started first is named, and when the holders' executables differ, or one's
//!    environment sets a loader variable (`/proc/PID/environ`), the executable is not
//!    taken as the program (`airlock_process::attribute`: `"unverified"`);
//! 3. its pid inside the jail (the last `NSpid`), executable (`/proc/PID/exe`), `argv[0]`
//!    and parents (`PPid` up to the jail's init, left out).
//!
//! Every read is bounded in size (a socket table is read line by line, up to the match)
//! and the whole lookup stops at its deadline; whatever is not found makes the program
//! unknown. The parsing is `airlock_process::procfs`.
//!
//! `process:` rule entries resolve on the command's `PATH` ([`crate::program_paths`]).

use std::ffi::OsString;
use std::io::{BufRead, Read};
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::program_paths::ProgramPaths;
use airlock_process::{
    Ancestor, Holder, MAX_ARGV0_CHARS, MAX_EXE_CHARS, MAX_PARENTS, Process, Unverified, procfs,
    shown,
};

/// Most bytes read of one socket table, line by line up to the match (a jail with tens
/// of thousands of sockets is cut short: its connections' programs are unknown, which
/// `process:` rules fail closed to). Only one line is held at a time.
const MAX_TABLE: u64 = 4 << 20;
/// Longest line of a socket table (the kernel's are under 200 bytes).
const MAX_ROW: u64 = 512;
/// Most bytes read of a holder's `environ` (one that is longer counts as setting a
/// loader variable: it could hide one past the cut).
const MAX_ENVIRON: u64 = 128 << 10;
/// Most bytes read of a `stat`, `status` or `cmdline` file.
const MAX_SMALL: u64 = 8192;
/// Most descriptors looked at per process.
const MAX_FDS: usize = 65_536;

/// Makes `proxy` look up the process behind each connection from the jail of `airlock
/// run` or `airlock mcp` whose outer process is `outer` (its audit lines carry it;
/// `process:` rules are decided with it); `env` is the command's environment. Every
/// process of such a jail descends from `outer`: no other is looked at. Where `/proc`
/// does not show the jail, connections stay without a process (`process:` rules fail
/// closed).
pub fn identifying(
    proxy: airlock_proxy::Proxy,
    outer: i32,
    env: &[(OsString, OsString)],
) -> airlock_proxy::Proxy {
    install(proxy, JailProcesses::of_jail(outer, env, false))
}

/// [`identifying`] for a local sandbox, whose `exec`s join the jail from outside its
/// process tree: the host's other processes are looked at too (those in the jail's PID
/// namespace), after the tree.
pub fn identifying_joinable(
    proxy: airlock_proxy::Proxy,
    outer: i32,
    env: &[(OsString, OsString)],
) -> airlock_proxy::Proxy {
    install(proxy, JailProcesses::of_jail(outer, env, true))
}

/// Installs `processes` on `proxy` (or says why it cannot).
fn install(
    mut proxy: airlock_proxy::Proxy,
    processes: Option<Arc<JailProcesses>>,
) -> airlock_proxy::Proxy {
    match processes {
        Some(processes) => proxy.identify_callers(processes),
        None => eprintln!(
            "airlock: cannot read the jail's processes in /proc: audit lines will not name programs"
        ),
    }
    proxy
}

/// One jail's processes, as seen from the host.
pub struct JailProcesses {
    /// A host pid in the jail's network namespace (the jail's outer process).
    net_pid: i32,
    /// The jail's PID namespace (`pid:[INODE]`).
    pid_namespace: u64,
    /// Processes may join from outside the outer process's tree (a local sandbox).
    joinable: bool,
    /// What `process` entries stand for, on the command's `PATH`.
    programs: ProgramPaths,
    /// The `LD_LIBRARY_PATH` the command started with (the user's, not a doubt).
    library_path: Option<Vec<u8>>,
}

impl JailProcesses {
    /// The jail whose outer process (in the host's PID namespace, in the jail's network
    /// namespace, parent of its PID namespace) is `outer`; `env` is the command's
    /// environment (its `PATH` resolves rule names); `joinable`: processes may join from
    /// outside `outer`'s tree. `None` when `/proc` does not show it.
    pub fn of_jail(
        outer: i32,
        env: &[(OsString, OsString)],
        joinable: bool,
    ) -> Option<Arc<JailProcesses>> {
        let link = std::fs::read_link(format!("/proc/{outer}/ns/pid_for_children")).ok()?;
        let pid_namespace = procfs::pid_namespace(link.as_os_str().as_bytes())?;
        Some(Arc::new(JailProcesses {
            net_pid: outer,
            pid_namespace,
            joinable,
            programs: ProgramPaths::for_env(env),
            library_path: env
                .iter()
                .find(|(key, _)| key == "LD_LIBRARY_PATH")
                .map(|(_, value)| value.as_bytes().to_vec()),
        }))
    }

    /// The inode of the client end of the connection from `peer` to `local`, looking
    /// until `deadline`.
    fn client_socket(&self, peer: SocketAddr, local: SocketAddr, deadline: Instant) -> Option<u64> {
        ["tcp", "tcp6"].iter().find_map(|table| {
            let path = format!("/proc/{}/net/{table}", self.net_pid);
            find_in_table(&path, peer, local, deadline)
        })
    }

    /// Whether host pid `pid` is in the jail's PID namespace.
    fn in_jail(&self, pid: u32) -> bool {
        std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .and_then(|link| procfs::pid_namespace(link.as_os_str().as_bytes()))
            == Some(self.pid_namespace)
    }

    /// Every jail process holding socket `inode`, looking until `deadline` (`None` when
    /// the deadline passes first): among the jail's outer process's descendants (every
    /// process of `run` and `mcp`), or, for a joinable jail, among every process of the
    /// host (a local sandbox's `exec` joins the jail from outside its tree).
    fn holders(&self, inode: u64, deadline: Instant) -> Option<Vec<Holder>> {
        let outer = u32::try_from(self.net_pid).ok()?;
        let pids = if self.joinable {
            host_pids()
        } else {
            descendants(outer, deadline)
        };
        let mut found = Vec::new();
        for pid in pids {
            if Instant::now() > deadline {
                return None;
            }
            if !self.in_jail(pid) || !holds(pid, inode) {
                continue;
            }
            found.push(Holder {
                pid,
                start: stat_of(pid).map_or(u64::MAX, |stat| stat.start),
                exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
                loader_env: loader_env(pid, self.library_path.as_deref()),
            });
        }
        (Instant::now() <= deadline).then_some(found)
    }

    /// What the audit line shows of host pid `pid` and its parents.
    fn describe(&self, pid: u32, unverified: Option<Unverified>) -> Option<Process> {
        let own = ancestor(pid)?;
        let exe_path = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        let mut parents = Vec::new();
        let mut next = stat_of(pid).map(|stat| stat.ppid);
        while let Some(parent) = next {
            if parents.len() == MAX_PARENTS || !self.in_jail(parent) {
                break;
            }
            let Some(shown) = ancestor(parent) else { break };
            // The jail's init (pid 1 inside) is airlock's, not the command's.
            if shown.pid <= 1 {
                break;
            }
            parents.push(shown);
            next = stat_of(parent).map(|stat| stat.ppid);
        }
        Some(Process {
            pid: own.pid,
            exe: own.exe,
            argv0: own.argv0,
            parents,
            unverified,
            exe_path,
        })
    }
}

impl airlock_proxy::Identify for JailProcesses {
    fn identify(&self, peer: SocketAddr, local: SocketAddr, deadline: Instant) -> Option<Process> {
        let inode = self.client_socket(peer, local, deadline)?;
        let holders = self.holders(inode, deadline)?;
        let (pid, unverified) = airlock_process::attribute(&holders)?;
        self.describe(pid, unverified)
    }

    fn programs(&self, entry: &str) -> Arc<[PathBuf]> {
        self.programs.resolve(entry)
    }
}

/// Most processes walked in one jail's tree.
const MAX_TREE: usize = 65_536;

/// The descendants of host pid `root` (from `/proc/PID/task/TID/children`), until
/// `deadline`.
fn descendants(root: u32, deadline: Instant) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = std::collections::VecDeque::from([root]);
    while let Some(pid) = queue.pop_front() {
        if found.len() >= MAX_TREE || Instant::now() > deadline {
            break;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in text.split_ascii_whitespace().filter_map(|p| p.parse().ok()) {
                found.push(child);
                queue.push_back(child);
            }
        }
    }
    found
}

/// Every pid `/proc` lists.
fn host_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether host pid `pid` holds socket `inode` among its descriptors.
fn holds(pid: u32, inode: u64) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().take(MAX_FDS).any(|fd| {
        std::fs::read_link(fd.path())
            .ok()
            .and_then(|link| procfs::socket_inode(link.as_os_str().as_bytes()))
            == Some(inode)
    })
}

/// The inode of the client end of the connection from `peer` to `local` in socket table
/// `path`, read line by line up to the match, [`MAX_TABLE`] or `deadline`.
fn find_in_table(
    path: &str,
    peer: SocketAddr,
    local: SocketAddr,
    deadline: Instant,
) -> Option<u64> {
    let file = std::fs::File::open(path).ok()?;
    let mut table = std::io::BufReader::new(file.take(MAX_TABLE));
    let mut line = Vec::with_capacity(MAX_ROW as usize);
    loop {
        line.clear();
        let read = (&mut table)
            .take(MAX_ROW)
            .read_until(b'\n', &mut line)
            .ok()?;
        if read == 0 || Instant::now() > deadline {
            return None;
        }
        let text = std::str::from_utf8(&line).ok();
        if let Some(inode) = text.and_then(|text| procfs::socket_of(text, peer, local)) {
            return Some(inode);
        }
    }
}

/// Whether host pid `pid`'s environment sets a loader variable (`library_path`: the
/// command's starting `LD_LIBRARY_PATH`, not one), or cannot be read in full (fail
/// closed).
fn loader_env(pid: u32, library_path: Option<&[u8]>) -> bool {
    read_bounded(&format!("/proc/{pid}/environ"), MAX_ENVIRON + 1).is_none_or(|environ| {
        environ.len() as u64 > MAX_ENVIRON
            || airlock_process::sets_loader_env(&environ, library_path)
    })
}

/// Host pid `pid` as an audit line shows it: its pid inside the jail, executable and
/// `argv[0]`.
fn ancestor(pid: u32) -> Option<Ancestor> {
    let status = read_bounded(&format!("/proc/{pid}/status"), MAX_SMALL)?;
    let inner = *procfs::nspid(&String::from_utf8_lossy(&status))?.last()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|path| shown(path.as_os_str().as_bytes(), MAX_EXE_CHARS));
    let cmdline = read_bounded(&format!("/proc/{pid}/cmdline"), MAX_SMALL).unwrap_or_default();
    let argv0 = procfs::argv0(&cmdline).map(|arg| shown(arg, MAX_ARGV0_CHARS));
    Some(Ancestor {
        pid: inner,
        exe,
        argv0,
    })
}

/// `/proc/PID/stat`, parsed.
fn stat_of(pid: u32) -> Option<procfs::Stat> {
    let text = read_bounded(&format!("/proc/{pid}/stat"), MAX_SMALL)?;
    procfs::stat(&String::from_utf8_lossy(&text))
}

/// At most `limit` bytes of `path`.
fn read_bounded(path: &str, limit: u64) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(Path::new(path))
        .ok()?
        .take(limit)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_proxy::Identify as _;

    fn jail_with_path(path: &str) -> JailProcesses {
        JailProcesses {
            net_pid: 1,
            pid_namespace: 0,
            joinable: true,
            programs: ProgramPaths::for_path(std::ffi::OsStr::new(path)),
            library_path: std::env::var_os("LD_LIBRARY_PATH").map(|v| v.as_bytes().to_vec()),
        }
    }

    #[test]
    fn a_connection_of_this_process_is_found_and_timed() {
        // This test's own PID namespace stands for a jail's: every process of it is looked
        // at (as root, all of the host's), so the figure is a worst case.
        let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let jail = JailProcesses {
            net_pid: i32::try_from(std::process::id()).unwrap(),
            pid_namespace: procfs::pid_namespace(link.as_os_str().as_bytes()).unwrap(),
            ..jail_with_path("/usr/bin")
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let local = accepted.local_addr().unwrap();
        let rounds = 20u32;
        let started = Instant::now();
        for _ in 0..rounds {
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            let found = jail.identify(peer, local, deadline).expect("found");
            assert_eq!(found.exe_path, std::env::current_exe().ok());
            assert_eq!(found.unverified, None, "one holder, no loader variable");
        }
        let each = started.elapsed() / rounds;
        let processes = std::fs::read_dir("/proc").unwrap().count();
        eprintln!("lookup: {each:?} per connection, {processes} /proc entries");
        // A stopped deadline gives up rather than scan.
        let past = Instant::now()
            .checked_sub(std::time::Duration::from_millis(1))
            .unwrap_or_else(Instant::now);
        assert_eq!(jail.identify(peer, local, past), None);
    }

    #[test]
    fn this_process_is_described() {
        // Outside any jail namespace of its own, the test process is its own PID namespace's
        // member: describe it as a jail would be described.
        let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let namespace = procfs::pid_namespace(link.as_os_str().as_bytes()).unwrap();
        let jail = JailProcesses {
            pid_namespace: namespace,
            ..jail_with_path("/usr/bin")
        };
        let pid = std::process::id();
        let process = jail.describe(pid, None).unwrap();
        assert_eq!(process.exe_path, std::env::current_exe().ok());
        assert!(process.argv0.is_some());
    }
}
