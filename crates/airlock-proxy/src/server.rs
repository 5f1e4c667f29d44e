//! The accept loop and the life of a client connection: the connection cap, `TCP_NODELAY`,
//! serving HTTP/1 (absolute-form requests and CONNECT) on each accepted socket, and the
//! graceful shutdown (stop accepting, let in-flight connections finish within the drain
//! timeout, flush the audit log).

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use airlock_credentials::Credentials;
use airlock_policy::CompiledPolicy;
use airlock_policy::Reason;
use arc_swap::ArcSwap;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::budget::{BACKPRESSURE_WAIT, Budget, PerClient};
use crate::ca::CertificateAuthority;
use crate::caller::{ConnCaller, Identify};
use crate::config::ProxyConfig;
use crate::context::{Admitted, ConnContext, Shared, client_alpn};
use crate::forward;
use crate::head_tap::HeadTap;
use crate::identity::Origin;
use crate::record::Line;
use crate::transparent::{self, Capture, NameLookup};
use crate::tunnel;
use crate::upstream::{Upstream, UpstreamSetupError};

/// Why a proxy could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The upstream side (trust roots, `--upstream-ca`) could not be set up.
    #[error(transparent)]
    Upstream(#[from] UpstreamSetupError),
}

/// Live figures of a running proxy, for the admin API's metrics; cheap to clone.
#[derive(Clone)]
pub struct Gauges {
    connections: Arc<Semaphore>,
    max_connections: usize,
    ca: Arc<CertificateAuthority>,
}

impl Gauges {
    /// Client connections being served now (tunnels included).
    pub fn open_connections(&self) -> usize {
        self.max_connections
            .saturating_sub(self.connections.available_permits())
    }

    /// Interception certificates in the cache.
    pub fn cached_certificates(&self) -> usize {
        self.ca.cached_leaves()
    }
}

/// A built proxy, ready to serve a listener.
pub struct Proxy {
    shared: Arc<Shared>,
    connections: Arc<Semaphore>,
    per_client: Arc<PerClient>,
    shutdown: watch::Sender<bool>,
    /// Finds the process behind each connection of [`Proxy::serve_transparent`].
    identify: Option<Arc<dyn Identify>>,
}

impl Proxy {
    /// Builds the proxy: TLS configurations, the resolver and the upstream pools are made
    /// once here.
    pub fn new(config: ProxyConfig) -> Result<Proxy, SetupError> {
        let ProxyConfig {
            policy,
            ca,
            credentials,
            audit,
            resolve,
            upstream_cas,
            mut limits,
            tunnel_refusal,
            mode,
            asks,
            refreshes,
        } = config;
        // The policy's `limits` section in force at start (a reload does not change them).
        limits.apply_policy(&policy.load().policy().limits);
        // Defence in depth: no event should hold a real value, and if one ever does, the
        // line is written with `[REDACTED:NAME]` in its place.
        let credentials = Arc::new(ArcSwap::new(credentials));
        let current = credentials.clone();
        audit.redact_with(Arc::new(move |line| {
            match current.load().redactor().redact(line) {
                Cow::Borrowed(_) => Cow::Borrowed(line),
                Cow::Owned(redacted) => Cow::Owned(redacted),
            }
        }));
        let upstream = Arc::new(Upstream::new(policy.clone(), resolve, &upstream_cas)?);
        let client = upstream.client();
        let http1_client = upstream.http1_client();
        // Seeds aws-lc and makes the run's leaf key off the request path, unless the
        // session's preparation already started it (ca::prepare_leaf_key).
        crate::ca::prepare_leaf_key();
        // And the leaves of the hosts the policy names, off the first handshake's path.
        let _detached = ca.premint(policy.load().named_hosts(crate::ca::PREMINT_LEAVES));
        let intercept_tls = ca.server_config(client_alpn());

        // The head deadline is the clock's (head_clock.rs); hyper's timer is a backstop.
        let head_backstop = limits.header_read_timeout + limits.idle_timeout;
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(head_backstop)
            .max_buf_size(limits.max_header_bytes)
            .max_headers(limits.max_headers)
            .half_close(false);

        let mut http_any = auto::Builder::new(TokioExecutor::new());
        http_any
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(head_backstop)
            .max_buf_size(limits.max_header_bytes)
            .max_headers(limits.max_headers)
            .half_close(false);
        http_any
            .http2()
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .max_concurrent_streams(limits.max_concurrent_streams)
            .keep_alive_interval(Some(limits.header_read_timeout))
            // Fixed windows: what a client may send unread is bounded per connection.
            .adaptive_window(false)
            .initial_stream_window_size(limits.h2_stream_window)
            .initial_connection_window_size(limits.h2_connection_window)
            .max_send_buf_size(limits.h2_stream_window as usize);

        let (shutdown, shutdown_rx) = watch::channel(false);
        let connections = Arc::new(Semaphore::new(limits.max_connections));
        // One client never holds more than a quarter of all connections, however the
        // limits were set (docs/reliability.md, "The client-connection cap is shared").
        let total = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
        let share = airlock_policy::limits::client_share(total);
        let per_client = PerClient::new(limits.connections_per_client.min(share));
        let budget = Budget::new(limits.buffer_memory, BACKPRESSURE_WAIT);
        let shared = Arc::new(Shared {
            policy,
            ca,
            credentials,
            audit,
            upstream,
            client,
            http1_client,
            legs: Arc::default(),
            intercept_tls,
            http1,
            http_any,
            limits,
            budget,
            tunnel_refusal,
            mode,
            asks,
            refreshes,
            next_conn: AtomicU64::new(1),
            shutdown: shutdown_rx,
            serve_http: |context, request| Box::pin(forward::serve(context, request)),
        });
        Ok(Proxy {
            shared,
            connections,
            per_client,
            shutdown,
            identify: None,
        })
    }

    /// Looks up the process behind every connection [`Proxy::serve_transparent`] accepts
    /// (a jail's handed listeners): its audit lines carry it, and `process:` rules are
    /// decided with it ([`crate::caller`]).
    pub fn identify_callers(&mut self, identify: Arc<dyn Identify>) {
        self.identify = Some(identify);
    }

    /// The secrets in force; store a [`Credentials::rotated`] store to change a real value
    /// at runtime (surrogates must stay the same).
    pub fn credentials(&self) -> &Arc<ArcSwap<Credentials>> {
        &self.shared.credentials
    }

    /// The asks of `--mode ask`, for the admin API.
    pub fn asks(&self) -> &Arc<crate::ask::Asks> {
        &self.shared.asks
    }

    /// Live figures (open connections, certificate cache size) that outlive `serve`.
    pub fn gauges(&self) -> Gauges {
        Gauges {
            connections: self.connections.clone(),
            max_connections: self.shared.limits.max_connections,
            ca: self.shared.ca.clone(),
        }
    }

    /// The policy in force; store a new `Arc<CompiledPolicy>` to change it at runtime.
    pub fn policy(&self) -> &Arc<ArcSwap<CompiledPolicy>> {
        &self.shared.policy
    }

    /// Serves `listener` (explicit proxy: absolute-form requests and CONNECT) until
    /// `shutdown` completes; then stops accepting, gives in-flight connections the drain
    /// timeout to finish and flushes the audit log.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        if let Some(context) = self.admit(&stream, peer, Some(HeadTap::default())) {
                            let context = Arc::new(context);
                            tokio::spawn(tunnel::serve_http1(context, stream, "client connection"));
                        }
                    }
                    Err(e) => accept_failed(e).await,
                },
            }
        }
        drop(listener);
        self.drain().await;
    }

    /// Serves captured connections on `listeners` (transparent mode, see
    /// [`crate::transparent`]) until `shutdown` completes, then drains as [`Proxy::serve`]
    /// does. `names` maps the sandbox DNS's addresses back to names; `capture` says how
    /// each connection's original destination is found.
    pub async fn serve_transparent(
        self,
        listeners: Vec<TcpListener>,
        names: NameLookup,
        capture: Capture,
        shutdown: impl Future<Output = ()>,
    ) {
        let proxy = Arc::new(self);
        let mut accepting = tokio::task::JoinSet::new();
        for listener in listeners {
            let proxy = proxy.clone();
            let names = names.clone();
            accepting.spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((stream, peer)) => {
                            if let Some(mut context) = proxy.admit(&stream, peer, None) {
                                let identify = proxy.identify.clone();
                                let names = names.clone();
                                tokio::spawn(async move {
                                    if let Some(identify) = identify {
                                        context.caller = Some(Arc::new(
                                            identified(identify, &stream, peer).await,
                                        ));
                                    }
                                    transparent::serve(Arc::new(context), stream, names, capture)
                                        .await;
                                });
                            }
                        }
                        Err(e) => accept_failed(e).await,
                    }
                }
            });
        }
        shutdown.await;
        accepting.abort_all();
        while accepting.join_next().await.is_some() {}
        match Arc::try_unwrap(proxy) {
            Ok(proxy) => proxy.drain().await,
            Err(_) => tracing::warn!("transparent listeners still held at shutdown"),
        }
    }

    /// Tells every connection to finish, waits up to the drain timeout for them and
    /// flushes the audit log.
    async fn drain(self) {
        let _ = self.shutdown.send(true);
        let all = u32::try_from(self.shared.limits.max_connections).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(
            self.shared.limits.drain_timeout,
            self.connections.acquire_many(all),
        )
        .await;
        if drained.is_err() {
            tracing::warn!("drain timeout reached; closing the remaining connections");
        }
        self.shared.audit.flush();
    }

    /// Admits an accepted connection under the connection cap and its client's cap
    /// (`None`: over a cap, the connection is dropped and audited, identical lines
    /// folding).
    fn admit(
        &self,
        stream: &TcpStream,
        peer: SocketAddr,
        head_tap: Option<HeadTap>,
    ) -> Option<ConnContext> {
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            tracing::warn!("limits.connections reached: closing a connection from {peer}");
            let line = Line::tcp_refused(peer.ip().to_string(), 0, 0, Reason::Overloaded);
            line.write(&self.shared.audit);
            return None;
        };
        let Some(client) = self.per_client.admit(peer.ip()) else {
            tracing::warn!("connections_per_client reached: closing a connection from {peer}");
            let line = Line::tcp_refused(peer.ip().to_string(), 0, 0, Reason::Overloaded);
            line.write(&self.shared.audit);
            return None;
        };
        let _ = stream.set_nodelay(true);
        let shared = self.shared.clone();
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        Some(ConnContext {
            shared,
            origin: Origin::Direct,
            id,
            head_tap,
            leg: Some(Arc::default()),
            caller: None,
            _permit: Arc::new(Admitted {
                _connection: permit,
                _client: Some(client),
            }),
        })
    }
}

/// The process behind an accepted connection from a jail (bounded in time).
async fn identified(
    identify: Arc<dyn Identify>,
    stream: &TcpStream,
    peer: SocketAddr,
) -> ConnCaller {
    // The client's own socket names the address it dialled: the original destination
    // of a connection the jail REDIRECTed to its catch-all port, else the local address.
    let dialled = transparent::original_destination(stream).or_else(|| stream.local_addr().ok());
    match dialled {
        Some(dialled) => ConnCaller::look_up(identify, peer, dialled).await,
        None => ConnCaller::unknown(identify),
    }
}

/// Backs off briefly after a failed accept (usually EMFILE) instead of spinning.
async fn accept_failed(error: std::io::Error) {
    tracing::warn!("accept failed: {error}");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}
