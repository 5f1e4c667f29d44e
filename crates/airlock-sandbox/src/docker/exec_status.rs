//! How a `docker exec` that the container runtime could not start is told from the
//! command's own exit status: the shell's 127 (not found) and 126 (cannot run).

/// The shell status for a `docker exec` of `program` that ended with `status` after
/// writing `first_line` (the first line of its standard output or error), when the
/// container runtime could not start the command: 127 when it was not found (the
/// runtime's `executable file not found in $PATH`, or `no such file or directory` / `not a
/// directory` for a path or a script's interpreter), 126 when it exists but cannot be run
/// (`permission denied`, `exec format error`, ...), as a shell, the local sandbox and
/// `airlock run` say. `None` (keep the status) for anything else: the command's own
/// statuses, or a runtime failure that is not about the program, such as a missing
/// working directory.
///
/// Docker (runc) reports a program it cannot find or open as status 126 with one line,
/// `OCI runtime exec failed: exec failed: unable to start container process: exec:
/// "PROGRAM": REASON: unknown` (on standard output with Docker 20.10, CR-terminated), and
/// an `execve` that fails once started (a script whose interpreter is missing, a binary
/// for another machine) as status 1 with exactly `exec PROGRAM: REASON`; Podman (crun)
/// answers 127 or 126 itself with `executable file `PROGRAM` not found`.
pub fn exec_failure_status(status: i32, program: &str, first_line: &str) -> Option<i32> {
    let line = first_line.trim();
    let reason = match status {
        126 | 127 => {
            if let Some(at) = line.find("unable to start container process: exec: \"") {
                &line[at..]
            } else if line.contains("executable file `") {
                line
            } else {
                return None;
            }
        }
        1 => {
            let (path, reason) = line.strip_prefix("exec ")?.split_once(": ")?;
            let same = path == program
                || (!program.contains('/') && path.ends_with(&format!("/{program}")));
            if !same || !is_exec_error(reason) {
                return None;
            }
            reason
        }
        _ => return None,
    };
    let reason = reason.to_ascii_lowercase();
    let not_found = [
        "executable file not found",
        "not found in $path",
        "no such file or directory",
        "not a directory",
    ]
    .iter()
    .any(|needle| reason.contains(needle));
    Some(if not_found { 127 } else { 126 })
}

/// Whether `reason` is how Go spells an `execve` error (what runc prints).
fn is_exec_error(reason: &str) -> bool {
    [
        "no such file or directory",
        "not a directory",
        "permission denied",
        "exec format error",
        "text file busy",
        "too many levels of symbolic links",
    ]
    .contains(&reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_failures_get_a_shells_status() {
        let runc = |reason: &str| {
            format!(
                "OCI runtime exec failed: exec failed: unable to start container process: exec: \"x\": {reason}: unknown"
            )
        };
        assert_eq!(
            exec_failure_status(126, "x", &runc("executable file not found in $PATH")),
            Some(127)
        );
        let with_cr = format!("{}\r", runc("permission denied"));
        assert_eq!(exec_failure_status(126, "x", &with_cr), Some(126));
        assert_eq!(
            exec_failure_status(126, "x", &runc("stat /nope: no such file or directory")),
            Some(127)
        );
        assert_eq!(
            exec_failure_status(126, "x", &runc("stat /a/b: not a directory")),
            Some(127)
        );
        assert_eq!(
            exec_failure_status(126, "x", &runc("permission denied")),
            Some(126)
        );
        assert_eq!(
            exec_failure_status(126, "x", &runc("exec format error")),
            Some(126)
        );
        assert_eq!(
            exec_failure_status(
                127,
                "nope",
                "Error: crun: executable file `nope` not found in $PATH: No such file or directory: OCI runtime attempted to invoke a command that was not found"
            ),
            Some(127)
        );
        // The command's own 126, a missing working directory, other statuses: kept.
        assert_eq!(exec_failure_status(126, "x", "sh: cannot run it"), None);
        assert_eq!(
            exec_failure_status(
                126,
                "x",
                "OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd (\"/x\") set in config.json failed: no such file or directory: unknown"
            ),
            None
        );
        assert_eq!(
            exec_failure_status(1, "x", &runc("permission denied")),
            None
        );
        assert_eq!(exec_failure_status(126, "x", ""), None);
        // Started, then the execve failed: status 1 and exactly `exec PROGRAM: REASON`.
        let started = |program: &str, line: &str| exec_failure_status(1, program, line);
        assert_eq!(
            started("/tmp/s", "exec /tmp/s: no such file or directory"),
            Some(127)
        );
        assert_eq!(
            started("tool", "exec /usr/bin/tool: exec format error"),
            Some(126)
        );
        assert_eq!(
            started("/tmp/s", "exec /tmp/s: permission denied"),
            Some(126)
        );
        assert_eq!(
            started("/tmp/s", "exec /tmp/t: no such file or directory"),
            None
        );
        assert_eq!(started("/tmp/s", "exec /tmp/s: something else"), None);
        assert_eq!(started("/tmp/s", "error: no such file or directory"), None);
        assert_eq!(
            exec_failure_status(2, "/tmp/s", "exec /tmp/s: no such file or directory"),
            None
        );
    }
}
