//! Process identity for airlock's audit lines and `process:` rules (docs/policy.md,
//! "Rules per program"; docs/contract.md §5, `process`): which program inside a jail
//! opened a connection.
//!
//! [`Process`] is what an audit line shows: the process's pid *inside the jail* (what the
//! command's own logs and `ps` show), its executable path (read from `/proc/PID/exe`,
//! which the kernel sets at `execve`), its `argv[0]` (which the process chose) and its
//! parents up to the jailed command. [`procfs`] parses the `/proc` text this is read
//! from; the reading itself happens at the edge (`airlock_session::process_lookup`).
//!
//! Everything read from `/proc` of a jailed process is written by the jailed command
//! (names of files it created, its argument strings): [`shown`] bounds it and escapes
//! every control and format character, so that a line or a terminal shows it as text.
//! Only the raw executable path ([`Process::exe_path`], never serialised) is compared
//! with rules.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod procfs;

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

/// Longest `exe` shown, in characters (longer ones end with `…`).
pub const MAX_EXE_CHARS: usize = 512;
/// Longest `argv0` shown, in characters.
pub const MAX_ARGV0_CHARS: usize = 128;
/// Most parents listed (the nearest first).
pub const MAX_PARENTS: usize = 16;

/// The process that opened a connection: what an audit line's `"process"` object holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Process {
    /// Its pid inside the jail's PID namespace (the last `NSpid` entry).
    pub pid: u32,
    /// Its executable, as shown ([`shown`]); `None` when it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Its `argv[0]`, as shown; chosen by the process itself, for display only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv0: Option<String>,
    /// Its parents, the nearest first, up to the jailed command (the jail's init left
    /// out), at most [`MAX_PARENTS`].
    pub parents: Vec<Ancestor>,
    /// Why its executable does not tell what code opened the connection, if it does not
    /// (`"unverified":"shared_socket"` or `"loader_env"`); then `process:` rules treat
    /// the program as unknown (allow rules do not apply, deny rules do).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unverified: Option<Unverified>,
    /// The executable path as the kernel gave it (not shown, never escaped): what
    /// `process:` rules are matched against.
    #[serde(skip)]
    pub exe_path: Option<PathBuf>,
}

/// Why a [`Process`]'s executable is not taken as the program that opened its connection
/// (docs/security.md, "Which program asked").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unverified {
    /// Several processes hold the socket and their executables differ: any of them may
    /// be the one using it (a socket made before a `fork` and an `execve`).
    SharedSocket,
    /// A holder's environment sets `LD_PRELOAD` or `LD_AUDIT`, or an `LD_LIBRARY_PATH`
    /// other than the command started with (or could not be read in full): it may run
    /// code that is not its executable's.
    LoaderEnv,
}

/// The dynamic loader's variables that make a process load code its executable does not
/// name.
pub const LOADER_VARIABLES: [&[u8]; 2] = [b"LD_PRELOAD=", b"LD_AUDIT="];

/// Whether `environ` (the NUL-separated text of `/proc/PID/environ`) sets one of
/// [`LOADER_VARIABLES`] to a non-empty value, or an `LD_LIBRARY_PATH` other than
/// `library_path` (the one the user started the command with, if any: the user's own
/// setting, which the command did not choose).
pub fn sets_loader_env(environ: &[u8], library_path: Option<&[u8]>) -> bool {
    environ.split(|&b| b == 0).any(|entry| {
        let loads = LOADER_VARIABLES.iter().any(|name| {
            entry
                .strip_prefix(*name)
                .is_some_and(|value| !value.is_empty())
        });
        loads
            || entry
                .strip_prefix(b"LD_LIBRARY_PATH=")
                .is_some_and(|value| !value.is_empty() && Some(value) != library_path)
    })
}

/// Whether the executables of every process holding one socket (`None`: unreadable)
/// are one and the same file, so that the socket's program is known: `false` for an
/// empty list or any unreadable one.
pub fn one_program<'a>(exes: impl IntoIterator<Item = Option<&'a std::path::Path>>) -> bool {
    let mut first = None;
    for exe in exes {
        let Some(exe) = exe else { return false };
        if *first.get_or_insert(exe) != exe {
            return false;
        }
    }
    first.is_some()
}

/// One process found holding a connection's socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its pid (the reader's).
    pub pid: u32,
    /// When it started (clock ticks after boot; `u64::MAX` when unknown).
    pub start: u64,
    /// Its executable (`None`: unreadable).
    pub exe: Option<PathBuf>,
    /// Whether its environment sets a loader variable, or could not be read in full.
    pub loader_env: bool,
}

/// Which of a socket's `holders` a connection is attributed to (the earliest started:
/// the one that most likely made it), and why its executable is not the program's, if it
/// is not: the holders' executables differ, or one of them runs with a loader variable.
/// `None` when there is no holder.
pub fn attribute(holders: &[Holder]) -> Option<(u32, Option<Unverified>)> {
    let named = holders.iter().min_by_key(|holder| holder.start)?;
    let unverified = if !one_program(holders.iter().map(|holder| holder.exe.as_deref())) {
        Some(Unverified::SharedSocket)
    } else if holders.iter().any(|holder| holder.loader_env) {
        Some(Unverified::LoaderEnv)
    } else {
        None
    };
    Some((named.pid, unverified))
}

/// One parent of a [`Process`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Ancestor {
    /// Its pid inside the jail.
    pub pid: u32,
    /// Its executable, as shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Its `argv[0]`, as shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv0: Option<String>,
}

/// Who opened a connection from inside a jail: the process, or `None` when it could not
/// be told (gone before it was looked up, or the lookup ran out of time). Written as the
/// audit line's `"process"` (an object, or `null`).
pub type Caller = Option<Arc<Process>>;

/// `bytes` (from `/proc`, chosen by a jailed process) made safe to show: invalid UTF-8
/// replaced, backslashes doubled, control and format characters (C0, C1, bidirectional
/// overrides, zero-width) written as `\u{XX}`, and cut to `max` characters (then ending
/// with `…`).
pub fn shown(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len().min(max * 2));
    for (count, c) in text.chars().enumerate() {
        if count == max {
            out.push('…');
            break;
        }
        if c == '\\' {
            out.push_str("\\\\");
        } else if needs_escape(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters and the format characters that change how text around them reads.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_shown_as_they_are() {
        assert_eq!(shown(b"/usr/bin/git", MAX_EXE_CHARS), "/usr/bin/git");
    }

    #[test]
    fn control_and_format_characters_are_escaped() {
        assert_eq!(shown(b"a\x1b[31mb\n", 64), "a\\u{1b}[31mb\\u{a}");
        assert_eq!(shown("x\u{202e}y".as_bytes(), 64), "x\\u{202e}y");
        assert_eq!(shown(b"a\\u{1b}", 64), "a\\\\u{1b}");
        assert_eq!(shown(b"\xff", 64), "\u{fffd}");
    }

    #[test]
    fn long_text_is_cut() {
        assert_eq!(shown(b"abcdef", 3), "abc…");
        assert_eq!(shown(b"abc", 3), "abc");
    }

    #[test]
    fn a_process_serialises_without_its_raw_path() {
        let process = Process {
            pid: 7,
            exe: Some("/usr/bin/git".into()),
            argv0: Some("git".into()),
            parents: vec![Ancestor {
                pid: 2,
                exe: Some("/usr/bin/bash".into()),
                argv0: None,
            }],
            exe_path: Some("/usr/bin/git".into()),
            unverified: None,
        };
        let json = serde_json::to_string(&process).unwrap();
        assert_eq!(
            json,
            r#"{"pid":7,"exe":"/usr/bin/git","argv0":"git","parents":[{"pid":2,"exe":"/usr/bin/bash"}]}"#
        );
        let shared = Process {
            unverified: Some(Unverified::SharedSocket),
            parents: Vec::new(),
            ..process
        };
        assert_eq!(
            serde_json::to_string(&shared).unwrap(),
            r#"{"pid":7,"exe":"/usr/bin/git","argv0":"git","parents":[],"unverified":"shared_socket"}"#
        );
        let unknown: Option<Caller> = Some(None);
        assert_eq!(serde_json::to_string(&unknown).unwrap(), "null");
    }

    #[test]
    fn loader_variables_are_found_anywhere_in_the_environment() {
        let none = None;
        assert!(sets_loader_env(
            b"PATH=/usr/bin\0LD_PRELOAD=/tmp/x.so\0",
            none
        ));
        assert!(sets_loader_env(b"LD_AUDIT=a.so", none));
        assert!(sets_loader_env(b"HOME=/h\0LD_LIBRARY_PATH=/w", none));
        assert!(!sets_loader_env(b"LD_PRELOAD=\0HOME=/h\0", none));
        assert!(!sets_loader_env(
            b"XLD_PRELOAD=/x.so\0MY_LD_AUDIT=1\0",
            none
        ));
        assert!(!sets_loader_env(b"HOME=/h\0LD_BIND_NOW=1\0", none));
        assert!(!sets_loader_env(b"", none));
        // The user's own LD_LIBRARY_PATH is theirs; another one is the command's.
        let users = Some(&b"/opt/cuda/lib"[..]);
        assert!(!sets_loader_env(b"LD_LIBRARY_PATH=/opt/cuda/lib\0", users));
        assert!(sets_loader_env(b"LD_LIBRARY_PATH=/work/evil\0", users));
        assert!(sets_loader_env(
            b"LD_LIBRARY_PATH=/opt/cuda/lib\0LD_PRELOAD=x\0",
            users
        ));
    }

    #[test]
    fn holders_are_one_program_only_when_every_exe_is_the_same() {
        use std::path::Path;
        let (git, sh) = (Some(Path::new("/usr/bin/git")), Some(Path::new("/bin/sh")));
        assert!(one_program([git]));
        assert!(one_program([git, git, git]));
        assert!(!one_program([git, sh]));
        assert!(!one_program([sh, git, git]));
        assert!(!one_program([git, None]));
        assert!(!one_program(std::iter::empty()));
    }

    #[test]
    fn the_earliest_holder_is_named_and_doubts_are_said() {
        let holder = |pid, start, exe: &str, loader_env| Holder {
            pid,
            start,
            exe: Some(exe.into()),
            loader_env,
        };
        let git = holder(5, 100, "/usr/bin/git", false);
        assert_eq!(attribute(&[]), None);
        assert_eq!(attribute(std::slice::from_ref(&git)), Some((5, None)));
        // fork then exec: the forked child uses the socket; the parent is now git.
        let child = holder(6, 101, "/usr/bin/python3", false);
        assert_eq!(
            attribute(&[child.clone(), git.clone()]),
            Some((5, Some(Unverified::SharedSocket)))
        );
        // Two git processes share it: still git.
        let twin = holder(7, 102, "/usr/bin/git", false);
        assert_eq!(attribute(&[twin.clone(), git.clone()]), Some((5, None)));
        let preloaded = holder(7, 102, "/usr/bin/git", true);
        assert_eq!(
            attribute(&[git.clone(), preloaded]),
            Some((5, Some(Unverified::LoaderEnv)))
        );
        let unreadable = Holder { exe: None, ..twin };
        assert_eq!(
            attribute(&[git, unreadable]),
            Some((5, Some(Unverified::SharedSocket)))
        );
    }

    proptest::proptest! {
        #[test]
        fn shown_text_has_no_control_characters(bytes: Vec<u8>, max in 1usize..64) {
            let text = shown(&bytes, max);
            proptest::prop_assert!(!text.chars().any(needs_escape));
            proptest::prop_assert!(text.chars().count() <= max * 8 + 1);
        }
    }
}
