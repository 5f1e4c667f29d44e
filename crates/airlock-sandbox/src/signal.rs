//! Signals to the processes a sandbox owns, through nix's safe wrapper.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Sends `signal` to the process `pid`. A process already gone is not an error worth
/// reporting. A pid of 0 or below (a process group, or every process) is never signalled:
/// such a value can only come from a corrupt record.
pub(crate) fn send(pid: i32, signal: Signal) {
    if let Some(pid) = one_process(pid) {
        let _ = kill(pid, signal);
    }
}

/// `pid` when it names one process.
fn one_process(pid: i32) -> Option<Pid> {
    (pid > 0).then(|| Pid::from_raw(pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_killed_and_group_pids_are_ignored() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        send(0, Signal::SIGKILL);
        send(-1, Signal::SIGKILL);
        assert!(
            child.try_wait().unwrap().is_none(),
            "no group was signalled"
        );
        send(i32::try_from(child.id()).unwrap(), Signal::SIGKILL);
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }
}
