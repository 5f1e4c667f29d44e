//! `airlock run` on a terminal, driven through tmux: a python3 REPL answers and survives
//! Ctrl-C (SIGINT reaches the command, not airlock), bash job control works (Ctrl-Z,
//! `jobs`, `fg`), and the window size is the terminal's.

use std::time::Duration;

use crate::support::run::{RunHome, namespaces_available};
use crate::support::tmux::Tmux;

/// `airlock run -- COMMAND` in a 100×30 tmux terminal of its own.
fn start(home: &RunHome, name: &str, command: &str) -> Tmux {
    let airlock = env!("CARGO_BIN_EXE_airlock");
    let line = format!(
        "AIRLOCK_HOME={} {airlock} run -- {command}",
        home.airlock_home().display()
    );
    Tmux::start(name, &home.scratch(), (100, 30), &line)
}

#[test]
fn a_python_repl_answers_and_survives_ctrl_c() {
    if !namespaces_available("a_python_repl_answers_and_survives_ctrl_c") {
        return;
    }
    crate::support::need_all(&["tmux", "python3"]);
    let home = RunHome::new();
    let tmux = start(&home, "repl", "python3 -q");
    tmux.expect(">>>");
    tmux.keys(&["import os; print(os.get_terminal_size())", "Enter"]);
    tmux.expect("columns=100, lines=30");
    tmux.keys(&["import time; time.sleep(30)", "Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys(&["C-c"]);
    tmux.expect("KeyboardInterrupt");
    tmux.keys(&["print(6 * 7)", "Enter"]);
    tmux.expect("42");
    tmux.keys(&["exit()", "Enter"]);
}

#[test]
fn bash_job_control_works() {
    if !namespaces_available("bash_job_control_works") {
        return;
    }
    crate::support::need_all(&["tmux"]);
    let home = RunHome::new();
    let tmux = start(&home, "jobs", "bash --norc --noprofile -i");
    tmux.keys(&["PS1='READY$ '", "Enter"]);
    tmux.expect("READY$");
    tmux.keys(&["sleep 100", "Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys(&["C-z"]);
    tmux.keys(&["jobs", "Enter"]);
    tmux.expect("Stopped");
    tmux.keys(&["fg", "Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys(&["C-c"]);
    tmux.keys(&["echo status-$?", "Enter"]);
    tmux.expect("status-130");
    tmux.keys(&["exit", "Enter"]);
}

/// Pushes `touch pwned` (and Enter) into every terminal the command can reach, with
/// `TIOCSTI` on descriptors 0, 1 and 2 and on `/dev/tty`, and prints each result.
const PUSH_INTO_TERMINAL: &str = r#"
import errno, fcntl, os, termios
def push(fd):
    try:
        for byte in b"touch pwned\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        return "pushed"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
results = [push(fd) for fd in (0, 1, 2)]
try:
    results.append(push(os.open("/dev/tty", os.O_RDWR)))
except OSError as e:
    results.append("no-tty-" + errno.errorcode.get(e.errno, str(e.errno)))
print("RESULTS", *results)
"#;

/// A host shell in tmux, in `scratch` (as the test user with `scratch/../user-home` as its
/// home, when one is asked for), with the prompt `HOST$ `.
fn host_shell(name: &str, scratch: &std::path::Path) -> Tmux {
    crate::support::need_all(&["tmux", "python3"]);
    std::fs::write(scratch.join("push.py"), PUSH_INTO_TERMINAL).expect("script");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(scratch, uid);
    }
    let shell = match crate::support::test_user::uid() {
        Some(uid) => format!(
            "setpriv --reuid {uid} --regid {uid} --clear-groups env HOME={} \
             PATH=/usr/local/bin:/usr/bin:/bin bash --norc --noprofile -i",
            scratch
                .parent()
                .expect("parent")
                .join("user-home")
                .display()
        ),
        None => "bash --norc --noprofile -i".to_owned(),
    };
    let tmux = Tmux::start(name, scratch, (100, 30), &shell);
    tmux.keys(&["PS1='HOST$ '", "Enter"]);
    tmux.expect("HOST$");
    tmux
}

/// Types `line` (which runs `push.py` inside) followed by `echo RUN-DONE` into the host
/// shell; then proves that nothing the command pushed reached the shell, which still reads
/// what the user types.
fn nothing_pushed(tmux: &Tmux, scratch: &std::path::Path, line: &str) {
    tmux.keys(&[&format!("{line}; echo RUN-DONE"), "Enter"]);
    tmux.expect_that("RUN-DONE after the run", |screen| {
        screen.lines().any(|l| l.starts_with("RUN-DONE"))
    });
    // Give the host shell time to read anything pushed into its input.
    std::thread::sleep(Duration::from_millis(500));
    tmux.keys(&["echo AFTER-$((6*7))", "Enter"]);
    tmux.expect("AFTER-42");
    let screen = tmux.screen();
    assert!(screen.contains("RESULTS"), "{screen}");
    assert!(
        !screen.contains("pushed"),
        "a TIOCSTI went through:\n{screen}"
    );
    assert!(
        !scratch.join("pwned").exists(),
        "the host shell ran what the command pushed:\n{screen}"
    );
    let after_run = screen.split("RUN-DONE").last().unwrap_or_default();
    assert!(!after_run.contains("touch"), "{screen}");
}

/// `airlock run -- python3 push.py REDIRECT` from a host shell.
fn push_from_inside(name: &str, redirect: &str) {
    if !namespaces_available(name) {
        return;
    }
    let home = RunHome::new();
    let scratch = home.scratch();
    let tmux = host_shell(name, &scratch);
    let line = format!(
        "AIRLOCK_HOME={} {} run -- python3 push.py {redirect}",
        home.airlock_home().display(),
        env!("CARGO_BIN_EXE_airlock"),
    );
    nothing_pushed(&tmux, &scratch, &line);
}

#[test]
fn an_interactive_command_cannot_push_keystrokes_into_the_users_shell() {
    push_from_inside("push-interactive", "");
}

#[test]
fn a_command_on_the_users_terminal_without_input_cannot_push_keystrokes() {
    push_from_inside("push-redirected", "< /dev/null");
}

#[test]
fn the_command_has_a_terminal_of_its_own() {
    if !namespaces_available("the_command_has_a_terminal_of_its_own") {
        return;
    }
    crate::support::need_all(&["tmux", "python3"]);
    let home = RunHome::new();
    let script = "import os; print('TTY', os.isatty(0), os.getsid(0) == os.getpid(), \
                  os.tcgetpgrp(0) == os.getpgrp())";
    let tmux = start(
        &home,
        "own-tty",
        &format!("python3 -c \"{script}\"; sleep 5"),
    );
    tmux.expect("TTY True True True");
}

#[test]
fn a_sandbox_exec_command_cannot_push_keystrokes_into_the_users_shell() {
    let name = "a_sandbox_exec_command_cannot_push_keystrokes_into_the_users_shell";
    if !namespaces_available(name) {
        return;
    }
    let home = crate::support::sandbox::SandboxHome::new();
    let created = home.run(&["create", "tty"]);
    assert_eq!(
        crate::support::sandbox::status(&created),
        0,
        "{}",
        created.stderr
    );
    let scratch = home.scratch();
    let tmux = host_shell("push-sandbox", &scratch);
    // The script reaches the sandbox through its argument (the sandbox sees its own
    // workspace, not this directory); its streams are redirected away from the terminal,
    // which leaves only /dev/tty.
    let line = format!(
        "AIRLOCK_SANDBOX_DIR={} AIRLOCK_HOME={} {} sandbox exec tty -- python3 -c \"$(cat push.py)\" \
         < /dev/null > exec.out 2>&1; cat exec.out",
        home.root().display(),
        home.airlock_home().display(),
        env!("CARGO_BIN_EXE_airlock"),
    );
    nothing_pushed(&tmux, &scratch, &line);
}

#[test]
fn a_command_flooding_terminal_queries_it_never_reads_cannot_hold_airlock() {
    let name = "a_command_flooding_terminal_queries_it_never_reads_cannot_hold_airlock";
    if !namespaces_available(name) {
        return;
    }
    let home = RunHome::new();
    let scratch = home.scratch();
    std::fs::write(
        scratch.join("flood.py"),
        "import os, time, tty\ntty.setraw(0)\nos.write(1, b'\\x1b[6n' * 3000)\ntime.sleep(2)\n",
    )
    .expect("script");
    let tmux = host_shell("flood", &scratch);
    // Each query makes the terminal answer into airlock's input; the command reads none.
    let line = format!(
        "AIRLOCK_HOME={} {} run -- python3 flood.py; echo RUN-DONE",
        home.airlock_home().display(),
        env!("CARGO_BIN_EXE_airlock"),
    );
    tmux.keys(&[&line, "Enter"]);
    tmux.expect_that("RUN-DONE after the run", |screen| {
        screen.lines().any(|l| l.starts_with("RUN-DONE"))
    });
    tmux.keys(&["echo AFTER-$((6*7))", "Enter"]);
    tmux.expect("AFTER-42");
    // The terminal's answers were read and dropped: none reached the host shell.
    let screen = tmux.screen();
    let after = screen.split("RUN-DONE").last().unwrap_or_default();
    assert!(!after.contains("R1"), "{screen}");
}

#[test]
fn a_command_started_in_the_background_cannot_read_what_the_user_types() {
    let name = "a_command_started_in_the_background_cannot_read_what_the_user_types";
    if !namespaces_available(name) {
        return;
    }
    let home = RunHome::new();
    let scratch = home.scratch();
    let tmux = host_shell("background", &scratch);
    let line = format!(
        "AIRLOCK_HOME={} {} run -- sh -c 'sleep 2; read x; echo \"GOT[$x]\"' &",
        home.airlock_home().display(),
        env!("CARGO_BIN_EXE_airlock"),
    );
    tmux.keys(&[&line, "Enter"]);
    std::thread::sleep(Duration::from_millis(500));
    // What the user types next is for the shell, not for the command in the background.
    tmux.keys(&["echo TYPED-$((6*7))", "Enter"]);
    tmux.expect("TYPED-42");
    // The command read the end of its input, not the line the user typed.
    tmux.expect("GOT[]");
    let screen = tmux.screen();
    assert!(!screen.contains("GOT[echo"), "{screen}");
    assert!(screen.contains("standard input is /dev/null"), "{screen}");
}
