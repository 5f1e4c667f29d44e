//! Every TCP port answered (docs/architecture.md, "`airlock run`: how every byte reaches
//! the proxy"): the jail listens on 80, 443, the policy's rule ports and 53; a connection
//! to any other port would be refused by the kernel with no word to anyone. So one more
//! listener, the *catch-all port*, takes them: an nftables rule in the jail's network
//! namespace REDIRECTs every TCP connection to a port without a listener there, and the
//! proxy reads where it was going from the NAT table (`SO_ORIGINAL_DST`), decides it by
//! the policy like any other, and audits it. Loopback destinations are not redirected: a
//! port on `127.0.0.0/8` or `::1` that no rule names stays the command's own (its test
//! servers keep working; with nothing listening the kernel refuses, unaudited).
//!
//! The rule is installed by running `nft` in the jail's user and network namespaces
//! (the same user owns them, so it has `CAP_NET_ADMIN` there and nowhere else) before the
//! command starts; the command has no capability left to change it. Without `nft` on the
//! host nothing changes but the audit: such connections stay refused by the kernel, and
//! the launcher says so once (`airlock doctor` too).

#![allow(unsafe_code)]

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where `nft` is looked for (never on the caller's `PATH`).
const NFT_PATHS: [&str; 3] = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"];
/// How long `nft` may take to install the rule.
const NFT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `nft` program, if the host has one.
pub fn nft_program() -> Option<PathBuf> {
    NFT_PATHS
        .iter()
        .map(Path::new)
        .find(|path| path.is_file())
        .map(Path::to_path_buf)
}

/// The catch-all port: the lowest port no listener of the jail uses.
pub(crate) fn catch_port(listening: &[u16]) -> u16 {
    (1..=u16::MAX)
        .find(|port| !listening.contains(port))
        .unwrap_or(u16::MAX)
}

/// The ruleset: TCP to any port outside `listening` (which holds `catch`) goes to `catch`
/// on the loopback address of its family, loopback destinations apart: a port on
/// `127.0.0.0/8` or `::1` that no rule names belongs to the command's own servers (a test
/// suite's `localhost:3000`), as it always did.
pub(crate) fn ruleset(listening: &[u16], catch: u16) -> String {
    let ports: Vec<String> = listening.iter().map(u16::to_string).collect();
    format!(
        "table inet airlock {{\n  chain output {{\n    type nat hook output priority -100; \
         policy accept;\n    ip daddr 127.0.0.0/8 accept\n    ip6 daddr ::1 accept\n    \
         tcp dport != {{ {} }} redirect to :{catch}\n  }}\n}}\n",
        ports.join(", ")
    )
}

/// Installs `ruleset` in the network namespace of the jail whose outer process is `pid`,
/// with `nft`, joined to its user namespace first.
pub(crate) fn install(nft: &Path, pid: libc::pid_t, ruleset: &str) -> Result<(), String> {
    let open = |kind: &str| {
        std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))
            .map_err(|e| format!("cannot open the jail's {kind} namespace: {e}"))
    };
    let (user, net) = (open("user")?, open("net")?);
    let (user_fd, net_fd) = (user.as_raw_fd(), net.as_raw_fd());
    let mut command = Command::new(nft);
    command
        .args(["-f", "-"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and only makes system calls
    // (setns, capset, prctl: async-signal-safe), on descriptors that stay open in the
    // parent until the child has been waited for.
    unsafe {
        command.pre_exec(move || {
            for (fd, kind) in [(user_fd, libc::CLONE_NEWUSER), (net_fd, libc::CLONE_NEWNET)] {
                if libc::setns(fd, kind) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            keep_only_net_admin()
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", nft.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(ruleset.as_bytes());
    }
    let status = wait_bounded(&mut child)?;
    drop((user, net));
    if status.success() {
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ =
            std::io::Read::read_to_string(&mut std::io::Read::take(&mut pipe, 4096), &mut stderr);
    }
    Err(format!(
        "{} failed ({status}): {}",
        nft.display(),
        stderr.trim()
    ))
}

/// `CAP_NET_ADMIN`, and no other capability, kept across `execve`: joining the jail's user
/// namespace gave every capability in it, but the jail maps the user to itself (not to
/// root), so an exec would drop them all; an ambient capability survives it. Called
/// between fork and exec: system calls only.
fn keep_only_net_admin() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    /// `CAP_NET_ADMIN` (linux/capability.h).
    const CAP_NET_ADMIN: u32 = 12;
    let bit = 1u32 << CAP_NET_ADMIN;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let none = Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let data = [
        Data {
            effective: bit,
            permitted: bit,
            inheritable: bit,
        },
        none,
    ];
    // SAFETY: header and data match the kernel's v3 capset layout (one header, two data
    // words) and outlive the call.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let raise = libc::c_ulong::try_from(libc::PR_CAP_AMBIENT_RAISE).unwrap_or(0);
    let capability = libc::c_ulong::from(CAP_NET_ADMIN);
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, raise, capability, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Waits for `child` at most [`NFT_TIMEOUT`], killing it past that.
fn wait_bounded(child: &mut std::process::Child) -> Result<std::process::ExitStatus, String> {
    let deadline = Instant::now() + NFT_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("nft did not finish within {NFT_TIMEOUT:?}"));
            }
            Err(e) => return Err(format!("cannot wait for nft: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catch_port_is_the_lowest_free_one() {
        assert_eq!(catch_port(&[53, 80, 443]), 1);
        assert_eq!(catch_port(&[1, 2, 53]), 3);
    }

    #[test]
    fn the_ruleset_spares_every_listening_port() {
        let text = ruleset(&[1, 53, 80, 443], 1);
        assert!(
            text.contains("tcp dport != { 1, 53, 80, 443 } redirect to :1"),
            "{text}"
        );
        assert!(text.contains("type nat hook output"), "{text}");
        let loopback = text
            .find("ip daddr 127.0.0.0/8 accept")
            .expect("loopback exempt");
        assert!(
            loopback < text.find("redirect").expect("redirect"),
            "{text}"
        );
    }
}
