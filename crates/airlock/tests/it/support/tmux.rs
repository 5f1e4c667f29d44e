//! A tmux server of a test's own (`tmux -L NAME`), for driving full-screen programs:
//! keys in with `send-keys`, the screen out with `capture-pane`; killed on drop.

use std::path::Path;
use std::time::{Duration, Instant};

/// One tmux server with one session running one command.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` (a shell command line) in `dir` on a `width`×`height` terminal.
    pub fn start(name: &str, dir: &Path, size: (u16, u16), command: &str) -> Tmux {
        let tmux = Tmux {
            socket: format!("airlock-test-{name}-{}", std::process::id()),
        };
        let status = crate::support::tool("tmux")
            .args(["-L", &tmux.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &size.0.to_string(), "-y", &size.1.to_string(), "-c"])
            .arg(dir)
            .arg(command)
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        tmux
    }

    /// Sends keys (tmux key names: `Enter`, `C-c`, or text).
    pub fn keys(&self, keys: &[&str]) {
        let status = crate::support::tool("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "0"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// The screen's text now.
    pub fn screen(&self) -> String {
        let output = crate::support::tool("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "0"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits (bounded) until the screen contains `text`.
    pub fn expect(&self, text: &str) {
        self.expect_that(text, |screen| screen.contains(text));
    }

    /// Waits (15 s at most) until `check` holds for the screen; `what` names it on failure.
    pub fn expect_that(&self, what: &str, check: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if check(&self.screen()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what:?} never appeared; screen:\n{}", self.screen());
    }

    /// Whether the session (its command) is still running.
    pub fn running(&self) -> bool {
        crate::support::tool("tmux")
            .args(["-L", &self.socket, "has-session"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = crate::support::tool("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stderr(std::process::Stdio::null())
            .status();
    }
}
