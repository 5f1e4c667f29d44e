//! Resource limits of a local sandbox: one control group per sandbox, on the unified
//! hierarchy (cgroup v2) where the machine has one, else one group in each of the v1
//! `memory`, `pids` and `cpu` hierarchies. Creating groups needs write access to the
//! cgroup file system (root, or a delegated subtree); without it, asking for limits is an
//! error, never silently ignored.
//!
//! The jail's processes are moved in before the sandbox's command starts; every command
//! run later joins the groups itself before it enters the namespaces
//! ([`airlock_jail::JailEntry::join_cgroups`]), so nothing in the sandbox escapes them.

use std::path::{Path, PathBuf};

use crate::{Limits, SandboxError, SandboxName};

/// Where cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The CPU period the quota is expressed in, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;
/// How long removal waits for the groups' processes to die.
const REMOVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One limit file and the value written to it.
type Setting = (&'static str, String);

/// Creates the groups of sandbox `tag` with `limits`; `None` when no limit is asked for.
/// A failure removes what was made.
pub fn create(tag: &str, limits: &Limits) -> Result<Option<Vec<PathBuf>>, SandboxError> {
    if limits == &Limits::default() {
        return Ok(None);
    }
    let root = Path::new(CGROUP_ROOT);
    let plan: Vec<(PathBuf, Vec<Setting>)> = if root.join("cgroup.controllers").exists() {
        vec![(root.join(tag), unified_settings(limits))]
    } else {
        legacy_settings(limits)
            .into_iter()
            .map(|(controller, settings)| (root.join(controller).join(tag), settings))
            .collect()
    };
    let mut made = Vec::new();
    for (dir, settings) in plan {
        if let Err(error) = make_group(&dir, &settings) {
            let _ = std::fs::remove_dir(&dir);
            remove(&made);
            return Err(SandboxError::Unsupported(format!(
                "resource limits need a writable cgroup file system (root, or a delegated \
                 subtree): {}: {error}",
                dir.display()
            )));
        }
        made.push(dir);
    }
    Ok(Some(made))
}

/// `memory.max`, `pids.max` and `cpu.max` of the unified hierarchy.
fn unified_settings(limits: &Limits) -> Vec<Setting> {
    let mut settings = Vec::new();
    if let Some(mib) = limits.memory_mib {
        settings.push(("memory.max", (mib * 1024 * 1024).to_string()));
        settings.push(("memory.swap.max", "0".to_owned()));
    }
    if let Some(pids) = limits.pids {
        settings.push(("pids.max", pids.to_string()));
    }
    if let Some(milli) = limits.millicpus {
        settings.push(("cpu.max", format!("{} {CPU_PERIOD_US}", quota_us(milli))));
    }
    settings
}

/// The v1 controllers needed and their files.
fn legacy_settings(limits: &Limits) -> Vec<(&'static str, Vec<Setting>)> {
    let mut plan = Vec::new();
    if let Some(mib) = limits.memory_mib {
        plan.push((
            "memory",
            vec![("memory.limit_in_bytes", (mib * 1024 * 1024).to_string())],
        ));
    }
    if let Some(pids) = limits.pids {
        plan.push(("pids", vec![("pids.max", pids.to_string())]));
    }
    if let Some(milli) = limits.millicpus {
        plan.push((
            "cpu",
            vec![
                ("cpu.cfs_period_us", CPU_PERIOD_US.to_string()),
                ("cpu.cfs_quota_us", quota_us(milli).to_string()),
            ],
        ));
    }
    plan
}

/// The CPU quota per period for `milli` thousandths of a CPU (at least 1 ms).
fn quota_us(milli: u64) -> u64 {
    (milli * CPU_PERIOD_US / 1000).max(1000)
}

fn make_group(dir: &Path, settings: &[Setting]) -> std::io::Result<()> {
    std::fs::create_dir(dir)?;
    for (file, value) in settings {
        // memory.swap.max is absent where swap accounting is off: not a limit we need.
        let path = dir.join(file);
        if *file == "memory.swap.max" && !path.exists() {
            continue;
        }
        std::fs::write(&path, value)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// The group name of sandbox `name` made by the daemon with PID `pid`.
pub fn tag(name: &SandboxName, pid: u32) -> String {
    format!("airlock-{name}-{pid}")
}

/// Whether `path` is a group [`create`] makes for sandbox `name`: `airlock-NAME-PID`
/// directly under the unified root or under one of the v1 controllers used.
pub fn is_sandbox_group(path: &Path, name: &SandboxName) -> bool {
    let Some(leaf) = path.file_name().and_then(|l| l.to_str()) else {
        return false;
    };
    let prefix = format!("airlock-{name}-");
    let tagged = leaf
        .strip_prefix(&prefix)
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
    let root = Path::new(CGROUP_ROOT);
    let parent_ok = path.parent().is_some_and(|parent| {
        parent == root
            || ["memory", "pids", "cpu"]
                .iter()
                .any(|controller| parent == root.join(controller))
    });
    tagged && parent_ok
}

/// Moves process `pid` (not its existing children) into every group.
pub fn add_process(groups: &[PathBuf], pid: i32) -> Result<(), SandboxError> {
    for dir in groups {
        let procs = dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|e| SandboxError::state(&procs, e))?;
    }
    Ok(())
}

/// Kills whatever is left in the groups and removes them (best effort, bounded in time).
pub fn remove(groups: &[PathBuf]) {
    let deadline = std::time::Instant::now() + REMOVE_TIMEOUT;
    for dir in groups {
        while std::fs::remove_dir(dir).is_err() && dir.exists() {
            if std::time::Instant::now() >= deadline {
                break;
            }
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs
                .lines()
                .filter_map(|line| line.trim().parse::<i32>().ok())
            {
                crate::signal::send(pid, nix::sys::signal::Signal::SIGKILL);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_groups_airlock_names_are_accepted() {
        let name = SandboxName::parse("task-1").expect("name");
        let ok = [
            "/sys/fs/cgroup/airlock-task-1-42",
            "/sys/fs/cgroup/pids/airlock-task-1-42",
        ];
        for path in ok {
            assert!(is_sandbox_group(Path::new(path), &name), "{path}");
        }
        let bad = [
            "/sys/fs/cgroup",
            "/sys/fs/cgroup/user.slice",
            "/sys/fs/cgroup/airlock-other-42",
            "/sys/fs/cgroup/airlock-task-1-",
            "/sys/fs/cgroup/x/airlock-task-1-42",
            "/sys/fs/cgroup/../cgroup/airlock-task-1-42/..",
            "/tmp/airlock-task-1-42",
        ];
        for path in bad {
            assert!(!is_sandbox_group(Path::new(path), &name), "{path}");
        }
    }

    #[test]
    fn limits_become_the_files_of_each_hierarchy() {
        let limits = Limits {
            memory_mib: Some(64),
            millicpus: Some(1500),
            pids: Some(32),
        };
        assert_eq!(
            unified_settings(&limits),
            vec![
                ("memory.max", "67108864".to_owned()),
                ("memory.swap.max", "0".to_owned()),
                ("pids.max", "32".to_owned()),
                ("cpu.max", "150000 100000".to_owned()),
            ]
        );
        let legacy = legacy_settings(&limits);
        let controllers: Vec<&str> = legacy.iter().map(|(c, _)| *c).collect();
        assert_eq!(controllers, ["memory", "pids", "cpu"]);
        assert_eq!(legacy[2].1[1], ("cpu.cfs_quota_us", "150000".to_owned()));
        assert_eq!(quota_us(1), 1000, "a quota below 1 ms is raised to 1 ms");
        assert!(
            create("unused", &Limits::default())
                .expect("no limits")
                .is_none()
        );
    }
}
