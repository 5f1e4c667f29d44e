//! Rules per program (`process:` on `network.allow` / `network.deny` entries,
//! docs/policy.md "Rules per program"): the check of an entry as written, and the
//! question the matcher asks about the program behind a connection.
//!
//! An entry is an absolute executable path (`/usr/bin/ssh`) or a bare name (`git`). What
//! an entry stands for is answered by whoever knows the jail ([`ProgramCheck`]): a name
//! is resolved on the command's `PATH` to every matching executable, a path to the file
//! it names, both canonicalised, and compared with the executable the kernel records for
//! the process (`/proc/PID/exe`), never with the `argv[0]` it chose.
//!
//! Who is asking is a [`Caller`]: `None` when the program is not known (`airlock proxy`,
//! which sees no process; a connection whose process was gone, or not found in time).
//! Unknown programs fail closed both ways: a rule with `process:` never *allows* them
//! and always *denies* them.

/// Answers whether the program behind a connection is one a rule's `process` entry
/// names.
pub trait ProgramCheck: Send + Sync {
    /// Whether the program's executable is one of those `entry` (as written in the
    /// policy: a bare name or an absolute path) stands for.
    fn is(&self, entry: &str) -> bool;
}

/// The program behind a connection, for the matcher; `None` = unknown.
pub type Caller<'a> = Option<&'a dyn ProgramCheck>;

/// Programs whose network access goes through helper programs of their own, which a
/// bare name stands for too: `git` fetches and pushes over HTTP(S) through its remote
/// helpers, found in its exec path ([`HELPER_DIRS`]).
pub const HELPERS: &[(&str, &[&str])] = &[(
    "git",
    &[
        "git-remote-http",
        "git-remote-https",
        "git-remote-ftp",
        "git-remote-ftps",
    ],
)];

/// Where a program's helpers live, relative to the directory above its executable's
/// (`/usr/bin/git` → `/usr/lib/git-core`, `/usr/libexec/git-core`).
pub const HELPER_DIRS: &[&str] = &["lib/git-core", "libexec/git-core"];

/// The helpers a bare name also stands for ([`HELPERS`]).
pub fn helpers(name: &str) -> &'static [&'static str] {
    HELPERS
        .iter()
        .find(|(program, _)| *program == name)
        .map_or(&[], |(_, helpers)| helpers)
}

/// Longest `process` entry accepted, in bytes (`PATH_MAX`).
const MAX_ENTRY: usize = 4096;

/// Checks one `process` entry: an absolute path, or a bare name (no `/`); neither empty,
/// `.` nor `..`, and without NUL or control characters.
pub fn check_program(entry: &str) -> Result<(), &'static str> {
    if entry.is_empty() || entry.len() > MAX_ENTRY {
        return Err(
            "a program is an absolute executable path, as in `/usr/bin/ssh`, or a name looked up on the command's PATH, as in `git`",
        );
    }
    if entry.chars().any(char::is_control) {
        return Err("a program name or path cannot contain control characters");
    }
    if entry.contains('/') {
        if !entry.starts_with('/') {
            return Err(
                "a program path must be absolute (start with `/`), or a bare name looked up on the command's PATH",
            );
        }
        return Ok(());
    }
    if entry == "." || entry == ".." {
        return Err("`.` and `..` name no program");
    }
    Ok(())
}

/// Whether a rule whose `process` list is `programs` applies to `caller`: a rule without
/// the list applies to every caller; with it, an allow rule (`deny` false) to a known
/// caller whose program is listed, a deny rule to such a caller and to every unknown one.
pub fn applies(programs: Option<&[String]>, caller: Caller<'_>, deny: bool) -> bool {
    let Some(programs) = programs else {
        return true;
    };
    match caller {
        None => deny,
        Some(check) => programs.iter().any(|entry| check.is(entry)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Git;

    impl ProgramCheck for Git {
        fn is(&self, entry: &str) -> bool {
            entry == "git" || entry == "/usr/bin/git"
        }
    }

    #[test]
    fn entries_are_names_or_absolute_paths() {
        assert!(check_program("git").is_ok());
        assert!(check_program("/usr/bin/ssh").is_ok());
        assert!(check_program("python3.11").is_ok());
        assert!(check_program("bin/git").is_err());
        assert!(check_program("./git").is_err());
        assert!(check_program("").is_err());
        assert!(check_program("..").is_err());
        assert!(check_program("g\nit").is_err());
    }

    #[test]
    fn unknown_callers_fail_closed_both_ways() {
        let listed = ["git".to_owned()];
        assert!(!applies(Some(&listed), None, false));
        assert!(applies(Some(&listed), None, true));
        assert!(applies(None, None, false));
        assert!(applies(None, None, true));
    }

    #[test]
    fn known_callers_match_their_program_only() {
        let git = ["git".to_owned()];
        let curl = ["curl".to_owned(), "/usr/bin/wget".to_owned()];
        assert!(applies(Some(&git), Some(&Git), false));
        assert!(applies(Some(&git), Some(&Git), true));
        assert!(!applies(Some(&curl), Some(&Git), false));
        assert!(!applies(Some(&curl), Some(&Git), true));
    }
}
