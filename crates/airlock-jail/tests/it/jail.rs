//! Real jails: namespaces, exit statuses, exec failures, the PID-namespace
//! init, handed listeners catching traffic to any address, hidden paths,
//! read-only binds, signals and death with the parent.
//!
//! Every address used lives inside the jail's own network namespace, where
//! all addresses are local: nothing leaves the machine. A test skips (and
//! says why) only when the kernel refuses unprivileged namespaces, and fails
//! then under `AIRLOCK_TEST_REQUIRE` (as in CI).

#![cfg(target_os = "linux")]

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_jail::{ExecFailure, Jail, JailError, JailExit, JailSpec, RunningJail, SetupStep};

use crate::support::{
    ANY_ADDRESS_CLIENT, BOUND, NAMESPACES_REFUSED, expect_any_address_traffic, spawn_or_skip,
};

fn spec(argv: &[&str]) -> JailSpec {
    JailSpec {
        argv: argv.iter().map(OsString::from).collect(),
        env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
        cwd: "/".into(),
        tcp_ports: vec![80, 443],
        hide_paths: Vec::new(),
        hide_if_present: Vec::new(),
        bind_files: Vec::new(),
        private_dirs: Vec::new(),
        filesystem: None,
        stdio: None,
        terminal: None,
    }
}

/// Starts a jail and waits (bounded) for the command's exit.
fn run(spec: JailSpec) -> Option<JailExit> {
    let mut jail = spawn_or_skip(spec)?;
    jail.start().expect("start");
    Some(finish(&mut jail))
}

fn finish(jail: &mut RunningJail) -> JailExit {
    match jail.wait_timeout(BOUND).expect("wait") {
        Some(exit) => exit,
        None => {
            let _ = jail.kill();
            panic!("the jailed command did not end within {BOUND:?}");
        }
    }
}

fn sh(script: &str) -> JailSpec {
    spec(&["sh", "-c", script])
}

#[test]
fn exit_code_and_signal_are_relayed() {
    let Some(exit) = run(sh("exit 7")) else {
        return;
    };
    assert_eq!(exit, JailExit::Exited(7));
    let Some(exit) = run(sh("kill -TERM $$")) else {
        return;
    };
    assert_eq!(exit, JailExit::Signaled(libc::SIGTERM));
    assert_eq!(exit.shell_status(), 128 + libc::SIGTERM);
}

#[test]
fn missing_command_is_not_found() {
    let Some(mut jail) = spawn_or_skip(spec(&["airlock-test-no-such-command"])) else {
        return;
    };
    let error = jail.start().expect_err("a missing command cannot start");
    assert!(
        matches!(
            error,
            JailError::Exec {
                kind: ExecFailure::NotFound,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.exit_status(), 127);
    let exit = finish(&mut jail);
    assert_eq!(exit, JailExit::Exited(127));
}

#[test]
fn non_executable_file_cannot_execute() {
    let directory = tempfile::tempdir().expect("tempdir");
    let script = directory.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write");
    let Some(mut jail) = spawn_or_skip(spec(&[script.to_str().expect("utf-8 path")])) else {
        return;
    };
    let error = jail
        .start()
        .expect_err("a non-executable file cannot start");
    assert!(
        matches!(
            error,
            JailError::Exec {
                kind: ExecFailure::CannotExecute,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.exit_status(), 126);
}

#[test]
fn command_runs_under_the_jails_own_init() {
    // The jail's init is PID 1 (forked from the keeper thread, so its name is
    // the thread's), and the command is its first child.
    let Some(exit) = run(sh(
        r#"test "$(cat /proc/1/comm)" = airlock-jail && test "$$" = 2 && test "$PPID" = 1"#,
    )) else {
        return;
    };
    assert_eq!(exit, JailExit::Exited(0));
}

#[test]
fn environment_is_exactly_the_specs() {
    let mut jail_spec = sh(r#"test "$AIRLOCK" = 1 && test -z "${HOME:-}" && test "$(pwd)" = /tmp"#);
    jail_spec.env.push(("AIRLOCK".into(), "1".into()));
    jail_spec.cwd = "/tmp".into();
    let Some(exit) = run(jail_spec) else { return };
    assert_eq!(exit, JailExit::Exited(0));
}

#[test]
fn setup_failure_names_the_step_and_never_runs_the_command() {
    let directory = tempfile::tempdir().expect("tempdir");
    let marker = directory.path().join("ran");
    let mut jail_spec = sh(&format!("touch {}", marker.display()));
    jail_spec.hide_paths = vec![directory.path().join("does-not-exist")];
    match Jail::spawn(jail_spec) {
        Err(JailError::NamespacesUnavailable { why }) => {
            crate::support::skip_or_fail(&format!("{NAMESPACES_REFUSED}: {why}"));
        }
        Err(error) => {
            assert!(
                matches!(
                    error,
                    JailError::Setup {
                        step: SetupStep::HidePath,
                        ..
                    }
                ),
                "{error:?}"
            );
            assert_eq!(error.exit_status(), 125);
            assert!(!marker.exists());
        }
        Ok(_) => panic!("a missing hidden path must fail the setup"),
    }
}

#[test]
fn hidden_directories_are_empty_and_bound_files_read_only() {
    let directory = tempfile::tempdir().expect("tempdir");
    let hidden = directory.path().join("state");
    std::fs::create_dir(&hidden).expect("mkdir");
    std::fs::write(hidden.join("ca.key"), "SECRET-KEY").expect("write");
    // The bundle lives in the hidden directory, as airlock's does.
    let bundle = hidden.join("bundle.pem");
    std::fs::write(&bundle, "JAIL-BUNDLE").expect("write");
    let system_bundle = directory.path().join("system.pem");
    std::fs::write(&system_bundle, "HOST-BUNDLE").expect("write");

    // Without hiding, the key is readable: the check below can fail.
    let check_key = format!("cat {}/ca.key >/dev/null", hidden.display());
    let Some(exit) = run(sh(&check_key)) else {
        return;
    };
    assert_eq!(exit, JailExit::Exited(0));

    let script = format!(
        r#"! cat {hidden}/ca.key 2>/dev/null && test -z "$(ls -A {hidden})" \
           && test "$(cat {system})" = JAIL-BUNDLE \
           && ! sh -c 'echo changed > {system}' 2>/dev/null \
           && ! touch {hidden}/new 2>/dev/null"#,
        hidden = hidden.display(),
        system = system_bundle.display(),
    );
    let mut jail_spec = sh(&script);
    jail_spec.hide_paths = vec![hidden.clone()];
    jail_spec.bind_files = vec![(bundle, system_bundle.clone())];
    let Some(exit) = run(jail_spec) else { return };
    assert_eq!(exit, JailExit::Exited(0));
    // The host's files are untouched.
    assert_eq!(
        std::fs::read_to_string(&system_bundle).expect("read"),
        "HOST-BUNDLE"
    );
    assert!(hidden.join("ca.key").exists());
}

#[test]
fn handed_listeners_catch_traffic_to_any_address() {
    let probe = Jail::spawn(spec(&["true"]));
    let (ipv6, catch) = match &probe {
        Ok(jail) => (
            jail.listeners.iter().any(|l| l.addr.is_ipv6()),
            jail.catch_all().is_ok(),
        ),
        Err(JailError::NamespacesUnavailable { why }) => {
            crate::support::skip_or_fail(&format!("{NAMESPACES_REFUSED}: {why}"));
            return;
        }
        Err(error) => panic!("spawning the jail failed: {error}"),
    };
    drop(probe);

    let family = if ipv6 { "v6" } else { "v4" };
    let catch = if catch { "catch" } else { "nocatch" };
    let client = ["python3", "-c", ANY_ADDRESS_CLIENT, family, catch];
    let Some(mut jail) = spawn_or_skip(spec(&client)) else {
        return;
    };
    let mut listeners = std::mem::take(&mut jail.listeners);
    // TCP 80, 443, 53 (and the catch-all port, with nft on the host) and UDP 53 per family.
    let per_family = if jail.catch_all().is_ok() { 5 } else { 4 };
    assert_eq!(
        listeners.len(),
        if ipv6 { 2 * per_family } else { per_family }
    );
    jail.start().expect("start");
    expect_any_address_traffic(&mut listeners, ipv6);
    assert_eq!(finish(&mut jail), JailExit::Exited(0));
}

#[test]
fn signals_sent_to_the_jail_reach_the_command() {
    let directory = tempfile::tempdir().expect("tempdir");
    let ready = directory.path().join("ready");
    let script = format!(
        r#"trap 'exit 42' TERM; touch {}; while :; do sleep 0.05; done"#,
        ready.display()
    );
    let Some(mut jail) = spawn_or_skip(sh(&script)) else {
        return;
    };
    jail.start().expect("start");
    wait_for(|| ready.exists(), "the command's trap");
    let signaller = jail.signaller();
    std::thread::spawn(move || signaller.signal(libc::SIGTERM))
        .join()
        .expect("signalling thread")
        .expect("signal");
    assert_eq!(finish(&mut jail), JailExit::Exited(42));
}

#[test]
fn kill_ends_the_whole_jail() {
    let Some(mut jail) = spawn_or_skip(spec(&["sleep", "30"])) else {
        return;
    };
    jail.start().expect("start");
    jail.kill().expect("kill");
    assert_eq!(finish(&mut jail), JailExit::Signaled(libc::SIGKILL));
}

fn wait_for(condition: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + BOUND;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "{what} not seen within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a live (not zombie) process has exactly this argument vector tail.
fn process_with_argument(argument: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let path = entry.path();
        let Ok(command_line) = std::fs::read(path.join("cmdline")) else {
            return false;
        };
        let matches = command_line
            .split(|byte| *byte == 0)
            .any(|part| part == argument.as_bytes());
        matches && !is_zombie_or_gone(&path)
    })
}

fn is_zombie_or_gone(process: &Path) -> bool {
    match std::fs::read_to_string(process.join("stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => true,
    }
}

const HELPER_VARIABLE: &str = "AIRLOCK_JAIL_TEST_PARENT_DEATH_MARKER";

/// Runs only as the helper of `jail_dies_with_its_parent`: spawns a jail,
/// prints its PID, and lingers (bounded) until killed.
#[test]
fn parent_death_helper() {
    let Some(marker) = std::env::var_os(HELPER_VARIABLE) else {
        return;
    };
    let marker = marker.to_str().expect("utf-8 marker").to_owned();
    let Some(mut jail) = spawn_or_skip(spec(&["sleep", &marker])) else {
        println!("JAIL_SKIPPED");
        return;
    };
    jail.start().expect("start");
    println!("JAIL_PID={}", jail.pid());
    std::io::stdout().flush().expect("flush");
    std::thread::sleep(BOUND);
}

#[test]
fn jail_dies_with_its_parent() {
    let marker = format!("{}.{}", 600, std::process::id());
    let mut helper = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--exact",
            "jail::parent_death_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_VARIABLE, &marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("helper");
    let stdout = helper.stdout.take().expect("stdout");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints the test's name on the same line first.
            if let Some((_, pid)) = line.split_once("JAIL_PID=") {
                let _ = sender.send(pid.parse::<i32>().ok());
                return;
            }
            if line.ends_with("JAIL_SKIPPED") {
                let _ = sender.send(None);
                return;
            }
        }
    });
    let reported = receiver.recv_timeout(BOUND);
    let Ok(Some(jail_pid)) = reported else {
        let _ = helper.kill();
        let _ = helper.wait();
        assert!(matches!(reported, Ok(None)), "the helper reported no jail");
        crate::support::skip_or_fail(NAMESPACES_REFUSED);
        return;
    };
    let jail_process = std::path::PathBuf::from(format!("/proc/{jail_pid}"));
    wait_for(|| process_with_argument(&marker), "the jailed command");
    assert!(!is_zombie_or_gone(&jail_process));

    helper.kill().expect("kill helper");
    helper.wait().expect("reap helper");
    wait_for(|| is_zombie_or_gone(&jail_process), "the jail's death");
    wait_for(|| !process_with_argument(&marker), "the command's death");
}

#[test]
fn command_has_no_capabilities_and_no_inherited_descriptors() {
    // A descriptor airlock leaked without close-on-exec must not reach the command.
    let file = std::fs::File::open("/dev/null").expect("open");
    // SAFETY: dup of a descriptor we own; the copy is closed below.
    let leaked = unsafe { libc::dup(std::os::fd::AsRawFd::as_raw_fd(&file)) };
    assert!(leaked > 2);
    let script = format!(
        r#"test ! -e /proc/$$/fd/{leaked} \
           && grep -Eq '^CapEff:[[:space:]]*0+$' /proc/self/status \
           && grep -Eq '^CapBnd:[[:space:]]*0+$' /proc/self/status"#
    );
    let exit = run(sh(&script));
    // SAFETY: `leaked` is the descriptor dup'ed above, closed once.
    unsafe { libc::close(leaked) };
    let Some(exit) = exit else { return };
    assert_eq!(exit, JailExit::Exited(0));
}

const HOST_LOOPBACK_CLIENT: &str = r#"
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    sys.exit(3)
except ConnectionRefusedError:
    pass
"#;

#[test]
fn host_loopback_services_are_unreachable() {
    let host_service = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = host_service.local_addr().expect("addr").port().to_string();
    let Some(exit) = run(spec(&["python3", "-c", HOST_LOOPBACK_CLIENT, &port])) else {
        return;
    };
    assert_eq!(exit, JailExit::Exited(0));
}

#[test]
fn dropping_the_handle_kills_the_jail() {
    let Some(mut jail) = spawn_or_skip(spec(&["sleep", "30"])) else {
        return;
    };
    jail.start().expect("start");
    let process = std::path::PathBuf::from(format!("/proc/{}", jail.pid()));
    assert!(!is_zombie_or_gone(&process));
    drop(jail);
    wait_for(|| is_zombie_or_gone(&process), "the jail's death");
}

const UNAVAILABLE_VARIABLE: &str = "AIRLOCK_JAIL_TEST_NAMESPACES_UNAVAILABLE";

/// Runs only as the helper of `refused_namespaces_are_reported_with_advice`,
/// in a user namespace that may not create further user namespaces.
#[test]
fn namespaces_unavailable_helper() {
    if std::env::var_os(UNAVAILABLE_VARIABLE).is_none() {
        return;
    }
    match Jail::spawn(spec(&["true"])) {
        Err(error @ JailError::NamespacesUnavailable { .. }) => {
            let message = error.to_string();
            assert!(message.contains("--jail env"), "{message}");
            assert!(message.contains("unprivileged_userns_clone"), "{message}");
            assert_eq!(error.exit_status(), 125);
            println!("NAMESPACES_UNAVAILABLE_REPORTED");
        }
        Err(error) => panic!("expected NamespacesUnavailable, got {error:?}"),
        Ok(_) => panic!("the jail was built although user namespaces are refused"),
    }
}

/// Writes `contents` to `path` with raw system calls (usable between fork and exec).
fn write_file_raw(path: &std::ffi::CStr, contents: &[u8]) -> std::io::Result<()> {
    // SAFETY: `path` is NUL-terminated; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `contents` is valid for its length; `fd` is open.
    let written = unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) };
    let error = std::io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    if usize::try_from(written).ok() != Some(contents.len()) {
        return Err(error);
    }
    Ok(())
}

#[test]
fn refused_namespaces_are_reported_with_advice() {
    use std::os::unix::process::CommandExt;
    // SAFETY: these getters have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let uid_map = format!("0 {uid} 1\n").into_bytes();
    let gid_map = format!("0 {gid} 1\n").into_bytes();
    let mut command = Command::new(std::env::current_exe().expect("current exe"));
    command
        .args([
            "--exact",
            "jail::namespaces_unavailable_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UNAVAILABLE_VARIABLE, "1")
        .stdout(Stdio::piped());
    // SAFETY: the closure runs between fork and exec and only makes system
    // calls on data prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            write_file_raw(c"/proc/self/setgroups", b"deny")?;
            write_file_raw(c"/proc/self/uid_map", &uid_map)?;
            write_file_raw(c"/proc/self/gid_map", &gid_map)?;
            write_file_raw(c"/proc/sys/user/max_user_namespaces", b"0")
        });
    }
    let mut helper = match command.spawn() {
        Ok(helper) => helper,
        Err(error) if matches!(error.raw_os_error(), Some(libc::EPERM | libc::EINVAL)) => {
            crate::support::skip_or_fail(&format!("{NAMESPACES_REFUSED}: {error}"));
            return;
        }
        Err(error) => panic!("starting the helper: {error}"),
    };
    let mut stdout = helper.stdout.take().expect("stdout");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut output = String::new();
        let _ = stdout.read_to_string(&mut output);
        let _ = sender.send(output);
    });
    let output = receiver.recv_timeout(BOUND);
    let _ = helper.kill();
    let status = helper.wait().expect("reap helper");
    let output = output.expect("the helper did not finish in time");
    assert!(status.success(), "helper failed: {output}");
    assert!(
        output.contains("NAMESPACES_UNAVAILABLE_REPORTED"),
        "{output}"
    );
}

#[test]
fn confinement_reports_landlock_and_names_a_path_it_cannot_confine() {
    // Under the host's /tmp: the jail's private /tmp gets it bound back in.
    let dir = tempfile::tempdir().expect("tempdir");
    let writable = std::fs::canonicalize(dir.path()).expect("canonical");
    let mut confined = sh("echo ok > made && ! touch /usr/planted 2>/dev/null");
    confined.cwd = writable.clone();
    confined.filesystem = Some(airlock_jail::FsConfinement {
        writable: vec![writable.clone()],
        landlock: true,
        ..Default::default()
    });
    let Some(mut jail) = spawn_or_skip(confined) else {
        return;
    };
    jail.start().expect("start");
    assert!(
        jail.landlock_abi().is_some(),
        "a confined start reports Landlock"
    );
    assert_eq!(jail.wait().expect("wait"), JailExit::Exited(0));
    assert!(writable.join("made").exists());

    let missing = writable.join("missing");
    let mut broken = sh("true");
    broken.filesystem = Some(airlock_jail::FsConfinement {
        writable: vec![missing.clone()],
        ..Default::default()
    });
    match Jail::spawn(broken) {
        Err(JailError::Setup {
            step: SetupStep::WritablePath,
            path,
            ..
        }) => assert_eq!(path, Some(missing)),
        other => panic!("expected a failure naming the path: {other:?}"),
    }
}
