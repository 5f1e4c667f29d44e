//! Gateway mode (`airlock proxy --transparent ADDR --dns ADDR`) and the capture wiring it
//! shares with `airlock run`: one [`NameMap`] handed out by the sandbox's DNS and read back
//! by the transparent proxy, DNS served by `airlock-dns` (every query answered locally and
//! logged, nothing forwarded), captured TCP served by [`Proxy::serve_transparent`].
//!
//! The gateway does not set up the capture itself: the container runtime, a Kubernetes
//! init container or the host's firewall REDIRECTs the sandbox's TCP to a `--transparent`
//! address and its DNS to a `--dns` address, or routes the sandbox to the gateway's own
//! address (see docs/operations.md, "Gateway mode and deployment").

use std::future::Future;
use std::net::SocketAddr;

use airlock_audit::AuditLog;
use airlock_dns::NameMap;
use airlock_proxy::{Capture, NameLookup, Proxy};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinSet;

/// The transparent proxy's view of the sandbox DNS's map: pool addresses back to names.
pub fn pool_lookup(names: &NameMap) -> NameLookup {
    let names = names.clone();
    std::sync::Arc::new(move |address| match address {
        std::net::IpAddr::V4(v4) => names.name_for(v4),
        std::net::IpAddr::V6(_) => None,
    })
}

/// Runs a DNS server until it fails or `stop` completes; a failure is reported.
pub async fn until_stopped(
    serving: impl Future<Output = std::io::Result<()>>,
    stop: impl Future<Output = ()>,
) {
    tokio::select! {
        result = serving => {
            if let Err(e) = result {
                eprintln!("airlock: the sandbox's DNS server stopped: {e}");
            }
        }
        () = stop => {}
    }
}

/// The sockets of a gateway, bound before anything is served.
pub struct GatewaySockets {
    transparent: Vec<TcpListener>,
    dns_udp: Vec<UdpSocket>,
    dns_tcp: Vec<TcpListener>,
}

impl GatewaySockets {
    /// Binds every `--transparent` (TCP) and `--dns` (UDP and TCP) address; the first
    /// failure is returned naming the flag and address.
    pub async fn bind(
        transparent: &[SocketAddr],
        dns: &[SocketAddr],
    ) -> Result<GatewaySockets, String> {
        let mut sockets = GatewaySockets {
            transparent: Vec::new(),
            dns_udp: Vec::new(),
            dns_tcp: Vec::new(),
        };
        for address in transparent {
            let listener = TcpListener::bind(address)
                .await
                .map_err(|e| format!("--transparent {address}: cannot listen: {e}"))?;
            sockets.transparent.push(listener);
        }
        for address in dns {
            let udp = UdpSocket::bind(address)
                .await
                .map_err(|e| format!("--dns {address}: cannot bind UDP: {e}"))?;
            let tcp = TcpListener::bind(address)
                .await
                .map_err(|e| format!("--dns {address}: cannot listen on TCP: {e}"))?;
            sockets.dns_udp.push(udp);
            sockets.dns_tcp.push(tcp);
        }
        Ok(sockets)
    }

    /// One stderr line per bound address (`transparent` or `dns`), for operators and tests.
    pub fn announce(&self) {
        for listener in &self.transparent {
            if let Ok(address) = listener.local_addr() {
                eprintln!("airlock: transparent proxy listening on {address}");
            }
        }
        for socket in &self.dns_udp {
            if let Ok(address) = socket.local_addr() {
                eprintln!("airlock: dns listening on {address}");
            }
        }
    }

    /// Serves DNS and the transparent proxy until `shutdown` completes, then drains.
    pub async fn serve(
        self,
        proxy: Proxy,
        audit: AuditLog,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let names = NameMap::new(airlock_dns::default_pool());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let stop_signal = move || {
            let mut stopped = stopped.clone();
            async move {
                // An error means the sender is gone: stopping as well.
                let _ = stopped.wait_for(|stop| *stop).await;
            }
        };
        let mut services = JoinSet::new();
        for socket in self.dns_udp {
            let serving = airlock_dns::serve_udp(socket, names.clone(), audit.clone());
            services.spawn(until_stopped(serving, stop_signal()));
        }
        for listener in self.dns_tcp {
            let serving = airlock_dns::serve_tcp(listener, names.clone(), audit.clone());
            services.spawn(until_stopped(serving, stop_signal()));
        }
        let serving = proxy.serve_transparent(
            self.transparent,
            pool_lookup(&names),
            Capture::Gateway,
            stop_signal(),
        );
        let serving = tokio::spawn(serving);
        shutdown.await;
        let _ = stop.send(true);
        let _ = serving.await;
        services.abort_all();
        while services.join_next().await.is_some() {}
    }
}
