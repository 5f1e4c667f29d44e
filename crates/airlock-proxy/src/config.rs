//! What a proxy is built from: the policy (swappable at runtime), the interception CA,
//! the credential store, the audit log, the upstream trust and address pins, and the
//! limits that keep a hostile client from exhausting the proxy.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use airlock_audit::AuditLog;
use airlock_credentials::Credentials;
use airlock_policy::CompiledPolicy;
use airlock_policy::mode::Mode;
use arc_swap::ArcSwap;

use crate::ask::Asks;
use crate::ca::CertificateAuthority;

/// Resource limits of the data plane.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Client connections served at once; further connections are closed at accept.
    pub max_connections: usize,
    /// Request line plus headers, in bytes (HTTP/1 read buffer, HTTP/2 header list).
    pub max_header_bytes: usize,
    /// Header fields per HTTP/1 request.
    pub max_headers: usize,
    /// Time a client has to finish an HTTP/1 request head once its first byte arrived
    /// (slowloris guard: 408, closed; [`crate::head_clock`]). hyper's own header timer is
    /// set to this plus `idle_timeout`, a backstop that the idle timeout and this deadline
    /// come before.
    pub header_read_timeout: Duration,
    /// Time a client has to send its first bytes or finish its TLS handshake in a tunnel.
    pub handshake_timeout: Duration,
    /// Time to wait for a tunnel client's first bytes before a raw-TCP tunnel is treated
    /// as server-speaks-first.
    pub first_bytes_timeout: Duration,
    /// A raw relay (TCP, passthrough, WebSocket) with no byte moving for this long ends.
    pub relay_idle_timeout: Duration,
    /// Concurrent HTTP/2 streams per client connection.
    pub max_concurrent_streams: u32,
    /// On shutdown, how long in-flight connections get to finish.
    pub drain_timeout: Duration,
    /// Time a client has to finish an inspected body (`limits.body_timeout`); over it the
    /// request gets 408 and its connection closes.
    pub body_timeout: Duration,
    /// An HTTP/1.1 keep-alive or HTTP/2 connection with no request in flight for this
    /// long is shut down (`limits.idle_timeout`).
    pub idle_timeout: Duration,
    /// Bytes held for inspection at once, across every request (`limits.buffer_memory`).
    pub buffer_memory: u64,
    /// Concurrent connections from one client address (`limits.connections_per_client`).
    pub connections_per_client: u32,
    /// HTTP/2 flow-control window of one stream: what a client may send before the proxy
    /// reads it.
    pub h2_stream_window: u32,
    /// HTTP/2 flow-control window of one connection (all its streams).
    pub h2_connection_window: u32,
}

impl Limits {
    /// Takes the policy's `limits` section: its timeouts (the head deadline included),
    /// memory budget and per-client cap replace the defaults.
    pub fn apply_policy(&mut self, policy: &airlock_policy::limits::Limits) {
        self.body_timeout = policy.body_timeout();
        self.header_read_timeout = policy.body_timeout();
        self.idle_timeout = policy.idle_timeout();
        self.buffer_memory = policy.buffer_memory();
        self.connections_per_client = policy.connections_per_client();
        self.max_connections = usize::try_from(policy.connections()).unwrap_or(usize::MAX);
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: airlock_policy::limits::DEFAULT_CONNECTIONS as usize,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            first_bytes_timeout: Duration::from_secs(2),
            relay_idle_timeout: Duration::from_secs(600),
            max_concurrent_streams: 100,
            drain_timeout: Duration::from_secs(10),
            body_timeout: airlock_policy::limits::DEFAULT_BODY_TIMEOUT,
            idle_timeout: airlock_policy::limits::DEFAULT_IDLE_TIMEOUT,
            buffer_memory: airlock_policy::limits::DEFAULT_BUFFER_MEMORY,
            connections_per_client: airlock_policy::limits::DEFAULT_CONNECTIONS_PER_CLIENT,
            h2_stream_window: 128 * 1024,
            h2_connection_window: 256 * 1024,
        }
    }
}

/// Where a tunnel that the policy refuses outright is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelRefusal {
    /// On the CONNECT itself (403 + JSON body); `airlock proxy` explicit mode.
    OnConnect,
    /// Inside the intercepted TLS session, per request; what `airlock run` does.
    InsideTls,
}

/// Everything a [`crate::Proxy`] is built from.
pub struct ProxyConfig {
    /// The compiled policy; a later admin API swaps it.
    pub policy: Arc<ArcSwap<CompiledPolicy>>,
    /// The CA that signs interception certificates.
    pub ca: Arc<CertificateAuthority>,
    /// Real values and surrogates of the policy's secrets.
    pub credentials: Arc<Credentials>,
    /// The audit log.
    pub audit: AuditLog,
    /// `--resolve` pins: canonical name → address (exempt from the private-address guard).
    pub resolve: HashMap<String, IpAddr>,
    /// `--upstream-ca` PEM files trusted for upstream TLS besides the system roots.
    pub upstream_cas: Vec<PathBuf>,
    /// Resource limits.
    pub limits: Limits,
    /// Where refused tunnels are answered.
    pub tunnel_refusal: TunnelRefusal,
    /// `enforce`, or `report`: what is refused only for host, method or path passes and is
    /// logged as a would-be refusal.
    pub mode: Mode,
    /// The asks of `--mode ask` (shared with the admin API); unused in other modes.
    pub asks: Arc<Asks>,
    /// The projected logins whose OAuth refreshes the proxy carries out (docs/secrets.md,
    /// "Refreshes"); `None`: none.
    pub refreshes: Option<Arc<crate::refresh::Refreshes>>,
}

impl ProxyConfig {
    /// A configuration with no address pins, no extra upstream CA, default limits,
    /// refused tunnels answered on the CONNECT, in enforce mode.
    pub fn new(
        policy: CompiledPolicy,
        ca: CertificateAuthority,
        credentials: Credentials,
        audit: AuditLog,
    ) -> Self {
        ProxyConfig {
            policy: Arc::new(ArcSwap::from_pointee(policy)),
            ca: Arc::new(ca),
            credentials: Arc::new(credentials),
            audit,
            resolve: HashMap::new(),
            upstream_cas: Vec::new(),
            limits: Limits::default(),
            tunnel_refusal: TunnelRefusal::OnConnect,
            mode: Mode::Enforce,
            asks: Arc::new(Asks::new(
                crate::ask::DEFAULT_ASK_TIMEOUT,
                airlock_policy::ask::DEFAULT_CAPACITY,
            )),
            refreshes: None,
        }
    }
}
