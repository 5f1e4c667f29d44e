//! The command's own session and system-call filter (docs/security.md, "The jail"): no
//! keystrokes pushed into any terminal (`TIOCSTI`, `TIOCLINUX`, whatever high bits the
//! request carries), no set-user-ID or set-group-ID file made by any call of the chmod
//! and create families, `openat2` and `io_uring` absent; a session of its own; a command
//! entering a running jail leaves its caller's session and descriptors behind.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use airlock_jail::{FsConfinement, JailEntry, JailExit, JailSpec};

use crate::support::BOUND;

/// Runs a python3 script in a jail whose working directory `dir` is writable; returns the
/// exit and what the script printed (its standard output goes to a file in `dir`).
fn python_in_jail(dir: &std::path::Path, script: &str) -> Option<(JailExit, String)> {
    assert!(
        Command::new("python3").arg("-V").output().is_ok(),
        "this test needs python3 on PATH (Debian package python3)"
    );
    let out = dir.join("out.txt");
    let wrapped = format!("exec python3 -c \"$1\" > {} 2>&1", out.display());
    let spec = JailSpec {
        argv: ["sh", "-c", &wrapped, "sh", script]
            .iter()
            .map(OsString::from)
            .collect(),
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        cwd: dir.to_owned(),
        filesystem: Some(FsConfinement {
            writable: vec![dir.to_owned()],
            ..FsConfinement::default()
        }),
        ..JailSpec::default()
    };
    let mut jail = crate::support::spawn_or_skip(spec)?;
    jail.start().expect("start");
    let exit = jail.wait_timeout(BOUND).expect("wait").unwrap_or_else(|| {
        let _ = jail.kill();
        panic!("the jailed command did not end within {BOUND:?}")
    });
    Some((exit, std::fs::read_to_string(out).unwrap_or_default()))
}

/// A scratch directory every user can reach (the jail tests also run as an ordinary user).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("airlock-session-")
        .tempdir()
        .expect("tempdir")
}

/// Pushes a byte with `TIOCSTI` into a terminal that IS the caller's controlling terminal
/// (a fresh pseudo-terminal opened by a session leader), which kernels before 6.2 and any
/// with `dev.tty.legacy_tiocsti=1` allow without privilege; also with the request's high
/// bits set, and `TIOCLINUX`.
const PUSH_KEYSTROKES: &str = r#"
import errno, fcntl, os, termios
print("session-leader", os.getsid(0) == os.getpid())
master, slave = os.openpty()
name = os.ttyname(slave)
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(name, os.O_RDWR)  # becomes the controlling terminal of the new session
    results = []
    for request in (termios.TIOCSTI, termios.TIOCSTI | (1 << 32), 0x541C):
        try:
            fcntl.ioctl(fd, request, b"x" if request != 0x541C else b"\x06")
            results.append("allowed")
        except OSError as e:
            results.append(errno.errorcode.get(e.errno, str(e.errno)))
    os.write(1, (" ".join(results) + "\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
"#;

#[test]
fn keystrokes_cannot_be_pushed_into_any_terminal() {
    let dir = scratch();
    let Some((exit, out)) = python_in_jail(dir.path(), PUSH_KEYSTROKES) else {
        return;
    };
    assert_eq!(exit, JailExit::Exited(0), "{out}");
    assert!(out.contains("session-leader True"), "{out}");
    assert!(out.contains("EPERM EPERM EPERM"), "{out}");
}

/// Every way to make a set-user-ID or set-group-ID file, each printing its result.
const PRIVILEGED_FILES: &str = r#"
import errno, os, shutil, stat
def attempt(what, call):
    try:
        call()
        mode = os.lstat(what).st_mode
        print(what, "suid" if mode & (stat.S_ISUID | stat.S_ISGID) else "plain")
    except OSError as e:
        print(what, errno.errorcode.get(e.errno, str(e.errno)))
shutil.copy("/bin/sh", "sh-copy")
attempt("sh-copy", lambda: os.chmod("sh-copy", 0o4755))
attempt("sh-copy", lambda: os.chmod("sh-copy", 0o2755))
fd = os.open("sh-copy", os.O_RDONLY)
attempt("sh-copy", lambda: os.fchmod(fd, 0o6755))
attempt("created", lambda: os.close(os.open("created", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("created2", lambda: os.close(os.open("created2", os.O_CREAT | os.O_WRONLY, 0o2755)))
attempt("node", lambda: os.mknod("node", 0o4755 | stat.S_IFREG))
attempt("plain", lambda: os.close(os.open("plain", os.O_CREAT | os.O_WRONLY, 0o755)))
attempt("plain", lambda: os.chmod("plain", 0o700))
cwd = os.getcwd()
options = [line.split()[5] for line in open("/proc/self/mountinfo") if line.split()[4] == cwd]
print("writable-mount", "nosuid" if options and "nosuid" in options[-1].split(",") else options)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, number in (("openat2", 437), ("io_uring_setup", 425)):
    result = libc.syscall(number, 0, 0, 0, 0)
    print(name, errno.errorcode.get(ctypes.get_errno(), "ok") if result < 0 else "ok")
"#;

#[test]
fn no_set_user_id_or_set_group_id_file_can_be_made() {
    let dir = scratch();
    let Some((exit, out)) = python_in_jail(dir.path(), PRIVILEGED_FILES) else {
        return;
    };
    assert_eq!(exit, JailExit::Exited(0), "{out}");
    for line in [
        "sh-copy EPERM",
        "created EPERM",
        "created2 EPERM",
        "node EPERM",
        "openat2 ENOSYS",
        "io_uring_setup ENOSYS",
        "writable-mount nosuid",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(!out.lines().any(|line| line.ends_with(" suid")), "{out}");
    // Control: ordinary files and modes still work.
    assert_eq!(out.matches("plain plain").count(), 2, "{out}");
    for entry in std::fs::read_dir(dir.path()).expect("list").flatten() {
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&entry.metadata().expect("stat").permissions());
        assert_eq!(
            mode & 0o6000,
            0,
            "{} has mode {mode:o}",
            entry.path().display()
        );
    }
}

#[test]
fn a_command_entering_a_jail_leaves_the_callers_session_and_descriptors() {
    let dir = scratch();
    let spec = JailSpec {
        argv: ["sleep", "30"].iter().map(OsString::from).collect(),
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        cwd: "/".into(),
        ..JailSpec::default()
    };
    let Some(mut jail) = crate::support::spawn_or_skip(spec) else {
        return;
    };
    jail.start().expect("start");
    // A directory descriptor the caller left open without close-on-exec.
    let leaked = std::fs::File::open(dir.path()).expect("open dir");
    // SAFETY: dup of a descriptor we own, closed below; the copy has no close-on-exec.
    let raw = unsafe { libc::dup(leaked.as_raw_fd()) };
    assert!(raw > 2);
    let entry = JailEntry::open(jail.pid()).expect("open namespaces");
    let mut command = Command::new("sh");
    let script = format!(
        "test ! -e /proc/self/fd/{raw} && echo no-descriptor; \
         set -- $(cat /proc/$$/stat); test \"$6\" = \"$$\" && echo own-session; \
         echo done"
    );
    command
        .args(["-c", &script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    entry
        .install(&mut command, std::path::Path::new("/"))
        .expect("install");
    let output = command.output().expect("run inside");
    // SAFETY: `raw` is the descriptor dup'ed above, closed once.
    unsafe { libc::close(raw) };
    let _ = jail.kill();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("done"),
        "{text} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("no-descriptor"), "{text}");
    assert!(text.contains("own-session"), "{text}");
}
