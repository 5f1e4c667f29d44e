//! The local provider on the daemon's side: a jail (`airlock-jail`) around a holder
//! process that only waits (`airlock sandbox hold`), in the sandbox's control groups, its
//! filesystem hiding the whole of airlock's state but its own workspace; served by the
//! listeners the jail hands back, and killed whole at the end. The credential files the
//! policy turns on are projected as in `airlock run` (private parent directories, binds,
//! the replace watch that kills the jail, the copy-back and the end check once the jail's
//! processes are confirmed gone: docs/secrets.md); commands run with `airlock sandbox
//! exec` enter the holder's namespaces and so see the same mounts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use airlock_proxy::Proxy;
use airlock_sandbox::ProviderKind;
use airlock_sandbox::state::{Confinement, ProcessId};
use airlock_session::private_parents::PrivateParents;
use airlock_session::replace_watch::{ReplaceWatch, bound_alone};
use airlock_session::serve::Signals;
use tokio::sync::watch;

use crate::plan::Plan;
use crate::{DaemonProvider, Serving};

/// How long the daemon waits for a killed jail to be reaped.
const JAIL_END: std::time::Duration = std::time::Duration::from_secs(5);

/// Linux namespaces kept alive by a holder process.
pub(crate) struct Local;

impl DaemonProvider for Local {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Local
    }

    fn workspace_inside(&self, host_workspace: &Path) -> PathBuf {
        host_workspace.to_owned()
    }

    fn keeps_creator_variables(&self) -> bool {
        true
    }

    fn base_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    fn bundle_inside(&self, bundle: &Path) -> String {
        bundle.display().to_string()
    }

    fn serve<'a>(
        &'a self,
        plan: &'a Plan,
        proxy: Proxy,
        stop: &'a watch::Sender<bool>,
        termination: &'a mut Signals,
    ) -> Serving<'a> {
        Box::pin(serve_local(self, plan, proxy, stop, termination))
    }
}

/// The local provider: a jail around a process that only waits.
async fn serve_local(
    provider: &Local,
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    termination: &mut Signals,
) -> Result<(), String> {
    use airlock_jail::{Jail, JailSpec};
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the airlock binary: {e}"))?;
    let (workspace, mut fs) = sandbox_filesystem(plan)?;
    let writable = fs.confinement.writable.clone();
    // The credential files as `airlock run` shows them: private parent directories, the
    // binds they do not cover, the replace watch over those binds (docs/secrets.md).
    let files = &plan.session.credential_files;
    let private = PrivateParents::for_run(files, &mut fs)?;
    let credential_binds = private.binds(files);
    let hidden: Vec<PathBuf> = files.hidden.iter().map(|(_, p, _)| p.clone()).collect();
    let watched = private.watched(&credential_binds, bound_alone(&hidden, &fs.hidden));
    let replaced = ReplaceWatch::start(&watched, &plan.session.audit)?;
    // The holder is this binary, executed inside the jail: bound in at its own path, since
    // it may lie where the jail shows something else (a virtual environment under /tmp).
    let mut bind_files = airlock_session::env::bundle_binds(&plan.session.bundle);
    bind_files.push((exe.clone(), exe.clone()));
    bind_files.extend(credential_binds);
    let mut hide_if_present = airlock_session::host_sockets::scan();
    hide_if_present.extend(private.root().map(PathBuf::from));
    let mut argv = vec![exe.into_os_string()];
    argv.extend(crate::HOLD_ARGS.map(OsString::from));
    let spec = JailSpec {
        argv,
        env: Vec::new(),
        cwd: workspace,
        tcp_ports: plan.session.tcp_ports(),
        hide_paths: fs.hidden,
        hide_if_present,
        bind_files,
        private_dirs: private.jail_dirs(),
        filesystem: Some(fs.confinement),
        stdio: None,
        terminal: None,
    };
    let jail = tokio::task::spawn_blocking(move || Jail::spawn(spec))
        .await
        .map_err(|e| format!("the jail launcher failed: {e}"))?
        .map_err(|e| e.to_string())?;
    if let Some(watch) = &replaced {
        let killer = jail.signaller();
        watch.on_replaced(move || {
            let _ = killer.signal(nix::libc::SIGKILL);
        });
    }
    let init = JailInit::of(jail.pid());
    let result = serve_in_cgroups(provider, plan, proxy, stop, jail, &writable, termination).await;
    files.audit_changes(&plan.session.audit);
    end_jail(plan, &private, &fs.end_check, init).await;
    result
}

/// The end of a sandbox's jail: once its processes are confirmed gone (nothing inside
/// can race this), what its commands wrote in a writable private parent directory goes
/// back to the host, then the end check quarantines what they created that host tools
/// would run, as `airlock run` does (docs/security.md, "What the command can read and
/// write"). Unconfirmed: nothing is copied back, said on stderr.
async fn end_jail(
    plan: &Plan,
    private: &PrivateParents,
    end_check: &airlock_session::quarantine::EndCheck,
    init: Option<JailInit>,
) {
    let audit = &plan.session.audit;
    let gone = match init {
        Some(init) => init.gone_within(JAIL_END).await,
        None => false,
    };
    if gone {
        private.copy_back(end_check, audit);
    } else {
        eprintln!(
            "airlock: sandbox {}: its processes could not be confirmed gone: nothing it wrote \
             in its private credential directories is copied back",
            plan.name
        );
    }
    let checked = airlock_session::quarantine::finish(end_check, audit, Ok::<i32, String>(0));
    if checked != Ok(0) {
        eprintln!(
            "airlock: sandbox {}: the end check of its writable directories failed",
            plan.name
        );
    }
}

/// The init of a jail's PID namespace, known by its PID and start time (so a recycled PID
/// is not mistaken for it): once it has exited, every process of the namespace has (the
/// kernel kills and reaps them before the init becomes a zombie).
struct JailInit {
    pid: i32,
    start: u64,
}

impl JailInit {
    /// The init of the jail whose outer process is `outer` (its only child).
    fn of(outer: i32) -> Option<JailInit> {
        let pid = *children_of(outer).first()?;
        let start = start_time(pid)?.1;
        Some(JailInit { pid, start })
    }

    /// Waits (at most `bound`) for the init to have exited; whether it has.
    async fn gone_within(&self, bound: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let gone = match start_time(self.pid) {
                None => true,
                Some((state, start)) => state == 'Z' || state == 'X' || start != self.start,
            };
            if gone {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The state letter and start time (clock ticks since boot) of process `pid`, from
/// `/proc/PID/stat`; `None` when there is no such process.
fn start_time(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (in parentheses, which it may itself hold): the state is
    // field 3, the start time field 22.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Puts the built jail in the sandbox's control groups and serves it; the groups are
/// removed at the end.
async fn serve_in_cgroups(
    provider: &Local,
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    jail: airlock_jail::RunningJail,
    writable: &[PathBuf],
    termination: &mut Signals,
) -> Result<(), String> {
    let tag = airlock_sandbox::cgroup::tag(&plan.name, std::process::id());
    let cgroups = airlock_sandbox::cgroup::create(&tag, &plan.options.limits)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    // The jail's outer process and its init (forked already) join before the holder
    // starts; everything forked later inherits.
    let mut members = vec![jail.pid()];
    members.extend(children_of(jail.pid()));
    for pid in members {
        if let Err(e) = airlock_sandbox::cgroup::add_process(&cgroups, pid) {
            airlock_sandbox::cgroup::remove(&cgroups);
            return Err(e.to_string());
        }
    }
    let recorded = (&cgroups[..], writable);
    let result = serve_jail(provider, plan, proxy, stop, jail, recorded, termination).await;
    airlock_sandbox::cgroup::remove(&cgroups);
    result
}

/// A local sandbox's filesystem: the whole of airlock's state hidden (every sandbox,
/// this one's control directory included), its own workspace the one writable directory
/// besides any the policy names, and the policy's other `filesystem` rules.
fn sandbox_filesystem(
    plan: &Plan,
) -> Result<(PathBuf, airlock_session::fs_confine::FsPlan), String> {
    let workspace = plan.sandboxes.workspace_dir(&plan.name);
    let mut place = airlock_session::fs_confine::Place::current()?;
    place.cwd = workspace.clone();
    place.workspace = std::fs::canonicalize(&workspace).ok();
    let mut fs = plan.session.policy.filesystem.clone();
    let mut writable = vec![workspace.display().to_string()];
    writable.extend(fs.writable.take().unwrap_or_default());
    fs.writable = Some(writable);
    let mut hidden = plan.session.airlock_hidden.clone();
    hidden.push(airlock_policy::filesystem::Entry {
        path: plan.sandboxes.root().to_owned(),
        why: "airlock's sandbox state (every sandbox)".into(),
    });
    let plan = airlock_session::fs_confine::plan(&fs, &place, hidden)?;
    Ok((workspace, plan))
}

/// The PIDs of the children of `pid` (from `/proc/PID/task/*/children`).
fn children_of(pid: i32) -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        children.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    children
}

/// Serves a built jail: starts its holder, records the sandbox, waits for the end.
async fn serve_jail(
    provider: &Local,
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    mut jail: airlock_jail::RunningJail,
    (cgroups, writable): (&[PathBuf], &[PathBuf]),
    termination: &mut Signals,
) -> Result<(), String> {
    let env = &plan.session.env;
    let served = airlock_session::serve::serve_handed(
        std::mem::take(&mut jail.listeners),
        airlock_session::process_lookup::identifying_joinable(proxy, jail.pid(), env),
        &plan.session.audit,
        &stop.subscribe(),
    )?;
    let jail_id = ProcessId::of(jail.pid()).ok_or("the jail vanished while starting")?;
    let signaller = jail.signaller();
    let (started_sender, started) = tokio::sync::oneshot::channel();
    let mut running = tokio::task::spawn_blocking(move || {
        let start = jail.start();
        let failed = start.is_err();
        let _ = started_sender.send(start.map_err(|e| e.to_string()));
        if failed {
            return;
        }
        let _ = jail.wait();
    });
    started
        .await
        .map_err(|_| "the jail ended while starting".to_owned())??;
    let confinement = Confinement::Local {
        jail: jail_id,
        cgroups: cgroups.to_vec(),
        writable: writable.to_vec(),
    };
    if let Err(e) = plan.announce(provider, confinement) {
        let _ = signaller.signal(nix::libc::SIGKILL);
        return Err(e);
    }
    let ended = tokio::select! {
        () = termination.any() => false,
        _ = &mut running => {
            eprintln!("airlock: sandbox {}: its namespaces ended", plan.name);
            true
        }
    };
    // The holder ignores nothing: SIGKILL ends the jail's init and every process in it.
    let _ = signaller.signal(nix::libc::SIGKILL);
    if !ended {
        // Reaped before the caller copies back what the jail's commands wrote (bounded).
        let _ = tokio::time::timeout(JAIL_END, running).await;
    }
    // The proxy drains (in-flight exchanges finish) and DNS ends.
    stop.send_replace(true);
    served.finish().await;
    Ok(())
}
