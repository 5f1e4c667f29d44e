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
