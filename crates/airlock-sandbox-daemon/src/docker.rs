//! The docker provider on the daemon's side: a container with no network but airlock's
//! capture (its network namespace entered once to make the listeners), the CA bundle
//! copied in, watched until it stops, removed at the end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_proxy::Proxy;
use airlock_sandbox::ProviderKind;
use airlock_sandbox::docker::{ContainerId, Docker, RunSpec};
use airlock_sandbox::state::Confinement;
use airlock_session::serve::Signals;
use tokio::sync::watch;

use crate::plan::Plan;
use crate::{DaemonProvider, Serving};

/// Where the CA bundle is copied inside a container.
const CONTAINER_BUNDLE: &str = "/etc/airlock-ca-bundle.pem";
/// The default `PATH` inside a container.
pub(crate) const CONTAINER_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The workspace's mount point inside a container.
const CONTAINER_WORKSPACE: &str = "/workspace";
/// How often a container is checked for being alive.
const CONTAINER_POLL: Duration = Duration::from_secs(2);

/// A Docker (or Podman) container.
pub(crate) struct Container;

impl DaemonProvider for Container {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Docker
    }

    fn workspace_inside(&self, _host_workspace: &Path) -> PathBuf {
        PathBuf::from(CONTAINER_WORKSPACE)
    }

    fn keeps_creator_variables(&self) -> bool {
        false
    }

    fn base_env(&self) -> Vec<(String, String)> {
        vec![
            ("PATH".into(), CONTAINER_PATH.into()),
            ("HOME".into(), "/root".into()),
        ]
    }

    fn bundle_inside(&self, _bundle: &Path) -> String {
        CONTAINER_BUNDLE.to_owned()
    }

    fn serve<'a>(
        &'a self,
        plan: &'a Plan,
        proxy: Proxy,
        stop: &'a watch::Sender<bool>,
        termination: &'a mut Signals,
    ) -> Serving<'a> {
        Box::pin(serve_docker(self, plan, proxy, stop, termination))
    }
}

/// The docker provider: a container with no network but airlock's capture.
async fn serve_docker(
    provider: &Container,
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    termination: &mut Signals,
) -> Result<(), String> {
    let limits = &plan.options.limits;
    let image = plan
        .options
        .image
        .clone()
        .ok_or("the docker provider needs --image")?;
    let docker = blocking(|| Docker::detect().map_err(|e| e.to_string())).await?;
    let spec = RunSpec {
        name: format!("airlock-{}", plan.name),
        image,
        labels: vec![
            (airlock_sandbox::SANDBOX_LABEL.into(), plan.name.to_string()),
            (
                airlock_sandbox::ROOT_LABEL.into(),
                plan.sandboxes.root().display().to_string(),
            ),
        ],
        memory_bytes: limits.memory_mib.map(|mib| mib.saturating_mul(1024 * 1024)),
        cpus: limits.millicpus.map(|milli| milli as f64 / 1000.0),
        pids_limit: limits
            .pids
            .map(|pids| u32::try_from(pids).unwrap_or(u32::MAX)),
        workspace: Some(plan.sandboxes.workspace_dir(&plan.name)),
    };
    let starting = docker.clone();
    let id = blocking(move || starting.run_detached(&spec).map_err(|e| e.to_string())).await?;
    let result = serve_container(provider, plan, proxy, stop, (&docker, &id), termination).await;
    let remover = docker.clone();
    let removed = blocking(move || remover.remove(&id).map_err(|e| e.to_string())).await;
    result.and(removed)
}

/// Captures the container's network, serves it, records the sandbox and waits for the end.
async fn serve_container(
    provider: &Container,
    plan: &Plan,
    proxy: Proxy,
    stop: &watch::Sender<bool>,
    (docker, id): (&Docker, &ContainerId),
    termination: &mut Signals,
) -> Result<(), String> {
    let (inspecting, container) = (docker.clone(), id.clone());
    let pid = blocking(move || inspecting.init_pid(&container).map_err(|e| e.to_string())).await?;
    let tcp_ports = plan.session.tcp_ports();
    let listeners = blocking(move || {
        let netns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
            .map_err(|e| format!("cannot open the container's network namespace: {e}"))?;
        airlock_jail::capture_network_namespace(&netns, &tcp_ports).map_err(|e| e.to_string())
    })
    .await?;
    let served = airlock_session::serve::serve_handed(
        listeners,
        proxy,
        &plan.session.audit,
        &stop.subscribe(),
    )?;
    let (copying, container, bundle) = (docker.clone(), id.clone(), plan.session.bundle.clone());
    blocking(move || {
        copying
            .copy_into(&container, &bundle, CONTAINER_BUNDLE)
            .map_err(|e| e.to_string())?;
        // Tools that ignore the CA variables read the system bundle: where the image has
        // one, it becomes airlock's (system roots plus the airlock CA).
        for system in airlock_session::env::SYSTEM_BUNDLES {
            let _ = copying.copy_into(&container, &bundle, system);
        }
        Ok::<(), String>(())
    })
    .await?;
    let confinement = Confinement::Docker {
        container: id.to_string(),
        engine: docker.program().to_owned(),
    };
    plan.announce(provider, confinement)?;
    tokio::select! {
        () = termination.any() => {}
        () = stopped(docker.clone(), id.clone()) => {
            eprintln!("airlock: sandbox {}: its container stopped", plan.name);
        }
    }
    // The proxy drains (in-flight exchanges finish) and DNS ends.
    stop.send_replace(true);
    served.finish().await;
    Ok(())
}

/// Returns once the container is no longer running (or the engine cannot say).
async fn stopped(docker: Docker, container: ContainerId) {
    loop {
        tokio::time::sleep(CONTAINER_POLL).await;
        let (checking, id) = (docker.clone(), container.clone());
        let running =
            blocking(move || Ok::<bool, String>(checking.is_running(&id).unwrap_or(false))).await;
        if running != Ok(true) {
            return;
        }
    }
}

/// Runs blocking work (the container engine's CLI) off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("a blocking task failed: {e}"))?
}
