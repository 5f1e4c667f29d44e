//! The system tools the end-to-end tests drive, and a clear failure when one is missing.
//!
//! A fresh Debian machine with only rustup lacks most of them; a test that needs one fails
//! at its start with the tool's name and the command that installs it, instead of a bare
//! "No such file or directory" from a spawn or a confusing answer from a jailed shell.
//! README.md's test paragraph lists the same tools.

use std::path::PathBuf;
use std::process::Command;

/// Each tool with the Debian package that provides it.
pub const TOOLS: &[(&str, &str)] = &[
    ("curl", "curl"),
    ("git", "git"),
    ("python3", "python3"),
    ("node", "nodejs"),
    ("tmux", "tmux"),
    ("ip", "iproute2"),
    ("iptables", "iptables"),
    ("openssl", "openssl"),
    ("busybox", "busybox-static"),
    ("kill", "procps"),
    ("unshare", "util-linux"),
];

/// Where `name` is on PATH, if it is there and executable.
pub fn find(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Fails the test, saying how to install `name`, when it is not on PATH.
pub fn need(name: &str) {
    if find(name).is_some() {
        return;
    }
    let package = TOOLS
        .iter()
        .find(|(tool, _)| *tool == name)
        .map_or(name, |(_, package)| package);
    panic!(
        "this test needs `{name}` on PATH; on Debian install it with \
         `sudo apt-get install {package}` (README.md lists every tool the tests use)"
    );
}

/// [`need`] for several tools.
pub fn need_all(names: &[&str]) {
    for name in names {
        need(name);
    }
}

/// Fails the test, saying how to install the pip module for `python3`, when it is missing.
pub fn need_pip() {
    need("python3");
    let works = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        works,
        "this test needs pip for python3 (`python3 -m pip`); on Debian install it with \
         `sudo apt-get install python3-pip`"
    );
}

/// A `Command` for the system tool `name`, after [`need`].
pub fn tool(name: &str) -> Command {
    need(name);
    Command::new(name)
}
