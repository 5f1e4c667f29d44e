//! Serving a prepared session: the sockets handed over by a jail or a container's network
//! namespace (DNS and the transparent proxy), the signals that stop or are forwarded,
//! and the confinement report of a started jail.

use std::time::Duration;

use airlock_audit::AuditLog;
#[cfg(target_os = "linux")]
use airlock_proxy::Proxy;
use tokio::sync::watch;

/// How long in-flight connections get once the command has ended.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Completes when the proxy and DNS must stop.
pub async fn stop_signal(mut receiver: watch::Receiver<bool>) {
    // An error means the sender is gone: stopping as well.
    let _ = receiver.wait_for(|stop| *stop).await;
}

/// `SIGINT`, `SIGTERM` and `SIGHUP`, caught from the moment they are installed (a signal
/// arriving before anyone waits is kept). `airlock run` ignores `SIGINT` and forwards the
/// other two to its command; the sandbox daemon stops on any of them.
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the three handlers.
    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Completes when any of the three arrives.
    pub async fn any(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
            _ = self.hangup.recv() => {}
        }
    }

    /// Awaits `done`, forwarding `SIGTERM`/`SIGHUP` (and `SIGINT` when `interrupt`: a
    /// command in a session of its own gets no signal from airlock's terminal) with
    /// `forward` meanwhile. A command that ignores them is not waited for without end: a
    /// second such signal, or [`KILL_GRACE`] after the first, forwards `SIGKILL`, so that
    /// airlock itself lives on to finish the run (flush the audit log, check the writable
    /// directories) rather than being killed in its turn.
    pub async fn forward_until<T>(
        mut self,
        done: impl std::future::Future<Output = T>,
        interrupt: bool,
        forward: impl Fn(i32),
    ) -> T {
        tokio::pin!(done);
        let mut asked = 0u32;
        let grace = tokio::time::sleep_until(far_future());
        tokio::pin!(grace);
        loop {
            let signal = tokio::select! {
                result = &mut done => return result,
                _ = self.interrupt.recv() => if interrupt { libc::SIGINT } else { continue },
                _ = self.terminate.recv() => libc::SIGTERM,
                _ = self.hangup.recv() => libc::SIGHUP,
                () = &mut grace, if asked > 0 => libc::SIGKILL,
            };
            asked += 1;
            if signal == libc::SIGKILL || asked > 1 {
                forward(libc::SIGKILL);
                grace.as_mut().reset(far_future());
                continue;
            }
            forward(signal);
            grace
                .as_mut()
                .reset(tokio::time::Instant::now() + KILL_GRACE);
        }
    }
}

/// A deadline that never comes in practice (a day away).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(86_400)
}

/// How long a command may take to end after the first `SIGTERM`, `SIGHUP` or `SIGINT`
/// airlock passed on, before it is killed ([`Signals::forward_until`]).
pub const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// How a started jail is confined: said on stderr with `--verbose`, and in the audit's
/// start line (`kind: policy`, message `start ...`).
pub struct Confinement {
    /// The audit log of the run.
    pub audit: AuditLog,
    /// Whether to say it on stderr.
    pub verbose: bool,
    /// The filesystem plan in one line.
    pub summary: String,
}

impl Confinement {
    /// Records the layers once the command started (`landlock_abi` from the jail).
    pub fn started(&self, landlock_abi: Option<u8>) {
        let landlock = match landlock_abi {
            Some(0) | None => "landlock unavailable".to_owned(),
            Some(abi) => format!("landlock v{abi}"),
        };
        let layers = format!(
            "jail: user, network, mount, pid, ipc and uts namespaces; filesystem: \
             read-only mounts + {landlock}; {}",
            self.summary
        );
        if self.verbose {
            eprintln!("airlock: {layers}");
        }
        self.audit.record(airlock_audit::AuditEvent {
            kind: airlock_audit::Kind::Policy,
            decision: airlock_audit::Decision::Allow,
            message: Some(format!("start {layers}")),
            ..airlock_audit::AuditEvent::default()
        });
    }
}

/// The tasks serving a jail's handed listeners.
#[cfg(target_os = "linux")]
pub struct Served {
    proxy: tokio::task::JoinHandle<()>,
    services: tokio::task::JoinSet<()>,
}

#[cfg(target_os = "linux")]
impl Served {
    /// Waits for the proxy's drain (after the stop signal was sent), then ends DNS.
    pub async fn finish(mut self) {
        let _ = tokio::time::timeout(DRAIN_TIMEOUT * 2, self.proxy).await;
        self.services.abort_all();
        while self.services.join_next().await.is_some() {}
    }
}

/// Serves sockets handed over from a jail (or a container's network namespace): port 53
/// (UDP and TCP) by `airlock-dns` with one name map, every other TCP port by the proxy in
/// transparent mode, until `stopped` turns true.
#[cfg(target_os = "linux")]
pub fn serve_handed(
    listeners: Vec<airlock_jail::HandedListener>,
    proxy: Proxy,
    audit: &AuditLog,
    stopped: &watch::Receiver<bool>,
) -> Result<Served, String> {
    use airlock_jail::Protocol;
    let names = airlock_dns::NameMap::new(airlock_dns::default_pool());
    let mut proxy_listeners = Vec::new();
    let mut services = tokio::task::JoinSet::new();
    for handed in listeners {
        let port = handed.addr.port();
        match handed.proto {
            Protocol::Udp => {
                let Ok(socket) = handed.into_udp_socket() else {
                    continue;
                };
                let serving = airlock_dns::serve_handed_udp(socket, names.clone(), audit.clone());
                services.spawn(crate::gateway::until_stopped(
                    serving,
                    stop_signal(stopped.clone()),
                ));
            }
            Protocol::Tcp => {
                let listener = handed
                    .into_tcp_listener()
                    .map_err(|_| std::io::Error::other("not a TCP socket"))
                    .and_then(|listener| {
                        listener.set_nonblocking(true)?;
                        tokio::net::TcpListener::from_std(listener)
                    })
                    .map_err(|e| format!("cannot serve the sandbox's port {port}: {e}"))?;
                if port == 53 {
                    let serving = airlock_dns::serve_tcp(listener, names.clone(), audit.clone());
                    services.spawn(crate::gateway::until_stopped(
                        serving,
                        stop_signal(stopped.clone()),
                    ));
                } else {
                    proxy_listeners.push(listener);
                }
            }
        }
    }
    let proxy = tokio::spawn(proxy.serve_transparent(
        proxy_listeners,
        crate::gateway::pool_lookup(&names),
        airlock_proxy::Capture::Jail,
        stop_signal(stopped.clone()),
    ));
    Ok(Served { proxy, services })
}
