//! `airlock run` on a terminal, driven through tmux: a python3 REPL answers and survives
//! Ctrl-C (SIGINT reaches the command, not airlock), bash job control works (Ctrl-Z,
//! `jobs`, `fg`), and the window size is the terminal's.

#[path = "support/run.rs"]
mod run;
mod support;

use std::time::{Duration, Instant};

use run::{RunHome, namespaces_available};

/// A tmux server of its own (`-L`), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(home: &RunHome, name: &str, command: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!("airlock-test-{name}-{}", std::process::id()),
        };
        let airlock = env!("CARGO_BIN_EXE_airlock");
        let status = crate::support::tool("tmux")
            .args(["-L", &tmux.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "100", "-y", "30", "-c"])
            .arg(home.scratch())
            .arg(format!(
                "AIRLOCK_HOME={} {airlock} run -- {command}",
                home.airlock_home().display()
            ))
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    fn keys(&self, keys: &[&str]) {
        let status = crate::support::tool("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "0"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    fn screen(&self) -> String {
        let output = crate::support::tool("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "0"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits (bounded) until the screen contains `text`.
    fn expect(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.screen().contains(text) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{text:?} never appeared; screen:\n{}", self.screen());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = crate::support::tool("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

#[test]
fn a_python_repl_answers_and_survives_ctrl_c() {
    if !namespaces_available("a_python_repl_answers_and_survives_ctrl_c") {
        return;
    }
    crate::support::need_all(&["tmux", "python3"]);
    let home = RunHome::new();
    let tmux = Tmux::start(&home, "repl", "python3 -q");
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
    let tmux = Tmux::start(&home, "jobs", "bash --norc --noprofile -i");
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
