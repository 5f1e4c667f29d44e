//! `airlock doctor`: checks, before the first `airlock run`, what the jail and the other
//! commands need from this machine, one line each with what a missing piece costs and the
//! remedy (docs/operations.md, "Preflight: airlock doctor").
//!
//! The namespace check is real: a child process (`airlock doctor --probe`, hidden) unshares
//! the user, network, mount, PID, IPC and UTS namespaces as the jail does, writes its uid
//! and gid maps and makes its mounts private; where AppArmor withholds the new namespace's
//! privileges (Ubuntu 23.10 and later), these steps fail as they would in `airlock run`.
//! The same child then reads the kernel's Landlock ABI by restricting itself.
//!
//! Exit statuses (docs/contract.md §2): 0 every check passed or only warns; 1 something
//! `airlock run` needs is missing; 2 usage errors.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::out::outln;

/// How long the namespace probe and `docker info` may take.
const CHILD_TIMEOUT: Duration = Duration::from_secs(10);
/// The AppArmor switch that restricts unprivileged user namespaces (Ubuntu 23.10+).
const APPARMOR_RESTRICT: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";
/// Where the CA is warned about before it expires.
const CA_EXPIRY_WARNING: Duration = Duration::from_secs(30 * 86_400);

/// `airlock doctor` flags.
#[derive(clap::Args, Debug)]
pub(crate) struct DoctorArgs {
    /// Print one JSON object (`ready` and every check) instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Print an AppArmor profile that lets this airlock binary create user namespaces,
    /// with the commands that install it (for `kernel.apparmor_restrict_unprivileged_userns=1`).
    #[arg(long, conflicts_with = "json")]
    pub apparmor_profile: bool,
    /// The namespace and Landlock probe, run by `airlock doctor` in a child process.
    #[arg(long, hide = true, conflicts_with_all = ["json", "apparmor_profile"])]
    pub probe: bool,
}

/// A check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    /// Present and usable.
    Ok,
    /// Missing, but `airlock run` works without it (a layer, a provider, a limit less).
    Warn,
    /// Missing, and `airlock run` needs it.
    Fail,
}

/// One line of the report.
#[derive(Debug, serde::Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    /// What was found.
    detail: String,
    /// What its absence costs (warnings and failures).
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<String>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    remedy: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Ok,
            detail: detail.into(),
            cost: None,
            remedy: None,
        }
    }

    fn missing(name: &'static str, status: Status, detail: String, cost: &str) -> Check {
        Check {
            name,
            status,
            detail,
            cost: Some(cost.to_owned()),
            remedy: None,
        }
    }

    fn remedy(mut self, remedy: impl Into<String>) -> Check {
        self.remedy = Some(remedy.into());
        self
    }

    fn line(&self) -> String {
        let status = match self.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        let mut line = format!("{status} {}: {}", self.name, self.detail);
        if let Some(cost) = &self.cost {
            line.push_str(&format!(" ({cost})"));
        }
        if let Some(remedy) = &self.remedy {
            line.push_str(&format!("; fix: {remedy}"));
        }
        line
    }
}

/// Runs `airlock doctor`.
pub(crate) fn run(args: &DoctorArgs) -> ExitCode {
    if args.probe {
        probe();
        return ExitCode::SUCCESS;
    }
    if args.apparmor_profile {
        outln!("{}", apparmor_profile(&this_binary()));
        return ExitCode::SUCCESS;
    }
    let checks = checks();
    let ready = checks.iter().all(|check| check.status != Status::Fail);
    if args.json {
        outln!("{}", serde_json::json!({"ready": ready, "checks": checks}));
    } else {
        for check in &checks {
            outln!("{}", check.line());
        }
    }
    if ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Every check, in the order printed.
fn checks() -> Vec<Check> {
    let probe = run_probe();
    let mut checks = namespace_checks(&probe);
    checks.push(landlock_check(&probe));
    checks.push(mount_setattr_check());
    checks.push(seccomp_check());
    checks.push(nft_check());
    checks.push(cgroup_check());
    checks.push(ca_check());
    checks.push(docker_check());
    checks
}

/// What the probe child reported, one `KEY VALUE...` line per finding.
#[derive(Debug)]
struct ProbeReport {
    /// `None` when the namespaces and their privileges were granted, else why not.
    userns: Option<String>,
    /// The Landlock ABI, or why there is none.
    landlock: Result<i32, String>,
}

/// Runs `airlock doctor --probe` and reads its report; a child that cannot run or does not
/// answer in time is a failed namespace check.
fn run_probe() -> ProbeReport {
    let mut report = ProbeReport {
        userns: Some("the probe did not report".into()),
        landlock: Err("the probe did not report".into()),
    };
    let output = bounded_output(
        Command::new(this_binary()).args(["doctor", "--probe"]),
        "the namespace probe",
    );
    let text = match output {
        Ok((_, stdout, _)) => stdout,
        Err(why) => {
            report.userns = Some(why);
            return report;
        }
    };
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("userns", "ok")) => report.userns = None,
            Some(("userns", why)) => report.userns = Some(why.to_owned()),
            Some(("landlock", value)) => {
                report.landlock = value.parse().map_err(|_| value.to_owned());
            }
            _ => {}
        }
    }
    report
}

/// The child's side: try what the jail does first, print one line per finding. Never
/// returns an error: each finding is a line.
fn probe() {
    match probe_namespaces() {
        Ok(()) => outln!("userns ok"),
        Err(why) => outln!("userns {why}"),
    }
    // Last: a Landlock domain forbids mounting, and this process is about to exit anyway.
    match probe_landlock() {
        Ok(abi) => outln!("landlock {abi}"),
        Err(why) => outln!("landlock {why}"),
    }
}

/// The namespace steps of `airlock-jail`'s setup, in this throw-away process.
fn probe_namespaces() -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    unshare(flags).map_err(|e| format!("creating the namespaces (unshare): {e}"))?;
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("writing {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making mounts private: {e}"))
}

/// The kernel's Landlock ABI, read by restricting this process (which then exits).
fn probe_landlock() -> Result<i32, String> {
    use landlock::{
        ABI, Access, AccessFs, CompatLevel, Compatible, LandlockStatus, Ruleset, RulesetAttr,
    };
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|ruleset| ruleset.create())
        .and_then(|ruleset| ruleset.restrict_self())
        .map_err(|e| e.to_string())?;
    match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => Ok(kernel_abi.unwrap_or(effective_abi as i32)),
        LandlockStatus::NotEnabled => Err("built into the kernel but not enabled".into()),
        LandlockStatus::NotImplemented => Err("not built into this kernel".into()),
    }
}

/// The user-namespace line, and the AppArmor line (with the profile as the remedy).
fn namespace_checks(probe: &ProbeReport) -> Vec<Check> {
    let restricted = read_trimmed(APPARMOR_RESTRICT);
    let apparmor = match (restricted.as_deref(), &probe.userns) {
        (None, _) => Check::ok("apparmor", "no user-namespace restriction on this kernel"),
        (Some("0"), _) => Check::ok("apparmor", "user-namespace restriction off"),
        (Some(_), None) => Check::ok(
            "apparmor",
            "unprivileged user namespaces restricted, but allowed for this binary",
        ),
        (Some(_), Some(_)) => Check::missing(
            "apparmor",
            Status::Fail,
            format!("{APPARMOR_RESTRICT} = 1 withholds user namespaces from this binary"),
            "the jail cannot start",
        )
        .remedy(apparmor_remedy()),
    };
    let userns = match &probe.userns {
        None => Check::ok(
            "user namespaces",
            "unprivileged user, network, mount and PID namespaces work",
        ),
        Some(why) => Check::missing(
            "user namespaces",
            Status::Fail,
            format!("refused: {why}"),
            "`airlock run`, `airlock mcp` and local sandboxes cannot start the jail; only \
             `--jail env` (advisory) remains",
        )
        .remedy(userns_remedy(restricted.as_deref())),
    };
    vec![userns, apparmor]
}

/// What to change when the namespaces are refused, by the switch that refuses them.
fn userns_remedy(apparmor: Option<&str>) -> String {
    if apparmor.is_some_and(|value| value != "0") {
        return apparmor_remedy();
    }
    if read_trimmed("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return "`sudo sysctl kernel.unprivileged_userns_clone=1`".into();
    }
    if read_trimmed("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return "`sudo sysctl user.max_user_namespaces=15000` (0 forbids every new user \
                namespace here; inside a container, the container's runtime sets it)"
            .into();
    }
    "allow unprivileged user namespaces (inside a container: run it with user namespaces \
     allowed, e.g. without a seccomp profile that refuses unshare)"
        .into()
}

fn apparmor_remedy() -> String {
    "install a profile for this binary: `airlock doctor --apparmor-profile | sudo tee \
     /etc/apparmor.d/airlock && sudo apparmor_parser -r /etc/apparmor.d/airlock` (or, for \
     every program, `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0`)"
        .into()
}

/// An AppArmor profile, unconfined apart from granting `userns`, attached to `binary`.
fn apparmor_profile(binary: &Path) -> String {
    let path = binary.display().to_string().replace('"', "\\\"");
    format!(
        "# AppArmor profile for airlock: lets {path} create unprivileged user namespaces,\n\
         # which kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu 23.10 and later)\n\
         # refuses by default. Install it with:\n\
         #   airlock doctor --apparmor-profile | sudo tee /etc/apparmor.d/airlock\n\
         #   sudo apparmor_parser -r /etc/apparmor.d/airlock\n\
         # A binary at another path (the wheel's, a new install) needs its own profile.\n\
         abi <abi/4.0>,\n\
         include <tunables/global>\n\
         \n\
         profile airlock \"{path}\" flags=(unconfined) {{\n  userns,\n\n  \
         include if exists <local/airlock>\n}}"
    )
}

fn landlock_check(probe: &ProbeReport) -> Check {
    match &probe.landlock {
        Ok(abi) => Check::ok("landlock", format!("ABI {abi}")),
        Err(why) => Check::missing(
            "landlock",
            Status::Warn,
            format!("unavailable: {why}"),
            "no Landlock: the mount namespace alone confines writes",
        ),
    }
}

/// `mount_setattr` (Linux 5.12) makes the host tree read-only in the jail.
fn mount_setattr_check() -> Check {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if version >= (5, 12) {
        Check::ok("mount_setattr", format!("Linux {release}"))
    } else {
        Check::missing(
            "mount_setattr",
            Status::Fail,
            format!("Linux {release} is older than 5.12"),
            "the jail cannot make the host's files read-only and refuses to start",
        )
        .remedy("a kernel 5.12 or later")
    }
}

/// Seccomp filters (the jail's system-call filter).
fn seccomp_check() -> Check {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let actions = read_trimmed("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    let mode = status
        .lines()
        .find_map(|line| line.strip_prefix("Seccomp:"))
        .map(str::trim);
    match mode {
        Some(mode) if actions.split_whitespace().any(|a| a == "errno") => Check::ok(
            "seccomp",
            format!("filters available (this process: mode {mode})"),
        ),
        _ => Check::missing(
            "seccomp",
            Status::Fail,
            "no seccomp filters in this kernel".into(),
            "the jail cannot install its system-call filter and refuses to start",
        )
        .remedy("a kernel built with CONFIG_SECCOMP_FILTER"),
    }
}

/// `nft`: what answers every port inside the jail (docs/architecture.md).
fn nft_check() -> Check {
    match airlock_jail::nft_program() {
        Some(nft) => Check::ok(
            "nftables",
            format!(
                "{}: every port inside `run` is answered and audited",
                nft.display()
            ),
        ),
        None => Check::missing(
            "nftables",
            Status::Warn,
            "no nft program in /usr/sbin, /sbin or /usr/bin".into(),
            "inside `run`, a connection to a port no rule names is refused by the kernel, \
             with no audit line (report mode and `policy suggest` cannot learn it)",
        )
        .remedy("install nftables (apt install nftables, dnf install nftables)"),
    }
}

/// Writable cgroups: what `sandbox create --memory/--pids/--cpus` needs.
fn cgroup_check() -> Check {
    let root = Path::new("/sys/fs/cgroup");
    let unified = root.join("cgroup.controllers").exists();
    let dirs: Vec<PathBuf> = if unified {
        vec![root.to_path_buf()]
    } else {
        ["memory", "pids", "cpu"]
            .iter()
            .map(|c| root.join(c))
            .collect()
    };
    let kind = if unified { "v2" } else { "v1" };
    let unwritable: Vec<String> = dirs
        .iter()
        .filter(|dir| nix::unistd::access(dir.as_path(), nix::unistd::AccessFlags::W_OK).is_err())
        .map(|dir| dir.display().to_string())
        .collect();
    if unwritable.is_empty() {
        Check::ok("cgroups", format!("{kind}, writable"))
    } else {
        Check::missing(
            "cgroups",
            Status::Warn,
            format!("{kind}, not writable: {}", unwritable.join(", ")),
            "local sandboxes refuse --memory, --pids and --cpus limits; `run` and sandboxes \
             without limits are unaffected",
        )
        .remedy("run the sandbox daemon as root, or in a delegated cgroup subtree")
    }
}

/// The CA: present (else `run` creates it), its key private, not expired.
fn ca_check() -> Check {
    use airlock_proxy::ca;
    let dir = match ca::default_dir() {
        Ok(dir) => dir,
        Err(e) => {
            return Check::missing("ca", Status::Fail, e.to_string(), "no interception")
                .remedy("set HOME or AIRLOCK_HOME");
        }
    };
    let cert = dir.join(ca::CERT_FILE);
    if !cert.is_file() || !dir.join(ca::KEY_FILE).is_file() {
        return Check::ok(
            "ca",
            format!(
                "none yet in {}: the first `airlock run` creates it (or `airlock ca init`)",
                dir.display()
            ),
        );
    }
    if let Err(e) = ca::CertificateAuthority::load_dir(&dir) {
        return Check::missing(
            "ca",
            Status::Fail,
            e.to_string(),
            "`run`, `mcp` and `proxy` refuse to start with this CA",
        )
        .remedy("fix the file as the message says, or `airlock ca init --force`");
    }
    ca_expiry(&cert)
}

fn ca_expiry(cert: &Path) -> Check {
    let pem = std::fs::read(cert).unwrap_or_default();
    let expires = x509_parser::pem::parse_x509_pem(&pem)
        .ok()
        .and_then(|(_, pem)| {
            let parsed = pem.parse_x509().ok()?;
            Some(parsed.validity().not_after.timestamp())
        });
    let Some(expires) = expires else {
        return Check::ok("ca", format!("{} (expiry unreadable)", cert.display()));
    };
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
    .unwrap_or(i64::MAX);
    let days = (expires - now).div_euclid(86_400);
    let where_ = format!("{}, key 0600", cert.display());
    if expires <= now {
        Check::missing(
            "ca",
            Status::Fail,
            format!("{where_}, expired {} days ago", -days),
            "every intercepted connection fails its TLS handshake",
        )
        .remedy("`airlock ca init --force`, then trust the new certificate where the old one was trusted")
    } else if Duration::from_secs(u64::try_from(expires - now).unwrap_or(0)) < CA_EXPIRY_WARNING {
        Check::missing(
            "ca",
            Status::Warn,
            format!("{where_}, expires in {days} days"),
            "interception stops when it expires",
        )
        .remedy("`airlock ca init --force`")
    } else {
        Check::ok("ca", format!("{where_}, expires in {days} days"))
    }
}

/// The docker engine, for `sandbox create --provider docker`.
fn docker_check() -> Check {
    let cost = "`sandbox create --provider docker` is unavailable; `run` and local sandboxes \
                are unaffected";
    let output = bounded_output(
        Command::new("docker").args(["info", "--format", "{{.ServerVersion}}"]),
        "`docker info`",
    );
    match output {
        Ok((true, stdout, _)) => Check::ok("docker", format!("engine {}", stdout.trim())),
        Ok((false, _, stderr)) => {
            let why = stderr.lines().next().unwrap_or("no answer").to_owned();
            Check::missing(
                "docker",
                Status::Warn,
                format!("engine unreachable: {why}"),
                cost,
            )
        }
        Err(why) => Check::missing("docker", Status::Warn, why, cost),
    }
}

/// Runs `command` with its output captured, for at most [`CHILD_TIMEOUT`] (then killed):
/// (success, stdout, stderr), or why it could not run.
fn bounded_output(command: &mut Command, what: &str) -> Result<(bool, String, String), String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what} cannot start: {e}"))?;
    let deadline = Instant::now() + CHILD_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not answer within {CHILD_TIMEOUT:?}"));
            }
            Err(e) => return Err(format!("{what}: {e}")),
        }
    };
    let read = |stream: Option<&mut dyn Read>| {
        let mut text = String::new();
        if let Some(stream) = stream {
            let _ = stream.take(64 * 1024).read_to_string(&mut text);
        }
        text
    };
    let stdout = read(child.stdout.as_mut().map(|s| s as &mut dyn Read));
    let stderr = read(child.stderr.as_mut().map(|s| s as &mut dyn Read));
    Ok((status.success(), stdout, stderr))
}

/// This binary's canonical path (what an AppArmor profile attaches to).
fn this_binary() -> PathBuf {
    std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|text| text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_the_cost_and_the_remedy() {
        let check = Check::missing("landlock", Status::Warn, "unavailable".into(), "less")
            .remedy("upgrade");
        assert_eq!(
            check.line(),
            "warn landlock: unavailable (less); fix: upgrade"
        );
        assert_eq!(Check::ok("ca", "fine").line(), "ok   ca: fine");
    }

    #[test]
    fn the_profile_grants_userns_to_the_binary() {
        let profile = apparmor_profile(Path::new("/opt/air lock/airlock"));
        assert!(profile.contains("profile airlock \"/opt/air lock/airlock\" flags=(unconfined) {"));
        assert!(profile.contains("  userns,"));
        assert!(profile.ends_with('}'));
    }
}
