//! What every request of one client connection shares: the proxy-wide [`Shared`] state
//! and the per-connection [`ConnContext`], built once by the server and passed down to
//! every step of the request path. Modules below the server import this, never the server.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use airlock_audit::AuditLog;
use airlock_credentials::Credentials;
use airlock_policy::CompiledPolicy;
use airlock_policy::mode::Mode;
use arc_swap::ArcSwap;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use tokio::sync::{OwnedSemaphorePermit, watch};

use crate::ask::Asks;
use crate::body::ProxyBody;
use crate::budget::{Budget, ClientSlot};
use crate::ca::CertificateAuthority;
use crate::caller::ConnCaller;
use crate::config::{Limits, TunnelRefusal};
use crate::head_tap::HeadTap;
use crate::identity::Origin;
use crate::leg::{LegSlot, Legs};
use crate::record::{Line, LineKind};
use crate::upstream::{Upstream, UpstreamClient};

/// The ALPN protocols offered to intercepted clients.
pub(crate) fn client_alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), b"http/1.1".to_vec()]
}

/// State shared by every connection of one proxy.
pub(crate) struct Shared {
    pub(crate) policy: Arc<ArcSwap<CompiledPolicy>>,
    pub(crate) ca: Arc<CertificateAuthority>,
    /// Swapped whole when a `file:` secret is rotated ([`Proxy::credentials`]).
    pub(crate) credentials: Arc<ArcSwap<Credentials>>,
    pub(crate) audit: AuditLog,
    pub(crate) upstream: Arc<Upstream>,
    /// Offers h2 and http/1.1 upstream: one pooled h2 connection per host serves every
    /// client (docs/benchmarks.md: separate HTTP/1.1 legs measured slower).
    pub(crate) client: UpstreamClient,
    /// For WebSocket upgrades: offers http/1.1 only.
    pub(crate) http1_client: UpstreamClient,
    /// The HTTP/1.1 client connections' own upstream legs: counts and spares.
    pub(crate) legs: Arc<Legs>,
    /// Mints a leaf per SNI; offers h2 and http/1.1.
    pub(crate) intercept_tls: Arc<ServerConfig>,
    pub(crate) http1: http1::Builder,
    pub(crate) http_any: auto::Builder<TokioExecutor>,
    pub(crate) limits: Limits,
    /// The bytes that may be held for inspection at once (`limits.buffer_memory`).
    pub(crate) budget: Budget,
    pub(crate) tunnel_refusal: TunnelRefusal,
    /// Enforce, or report (decisions relaxed by [`Mode::apply`]).
    pub(crate) mode: Mode,
    /// The pending asks of ask mode.
    pub(crate) asks: Arc<Asks>,
    /// The projected logins whose refreshes are carried out (`forward::refresh`).
    pub(crate) refreshes: Option<Arc<crate::refresh::Refreshes>>,
    pub(crate) next_conn: AtomicU64,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// The HTTP service of every intercepted connection and tunnel (`forward::serve`,
    /// set by the server), so that tunnels run it without importing it.
    pub(crate) serve_http: ServeHttp,
}

/// A boxed answer of [`Shared::serve_http`].
pub(crate) type HttpAnswer =
    Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

/// The HTTP service a connection or tunnel runs for each request.
pub(crate) type ServeHttp = fn(Arc<ConnContext>, Request<Incoming>) -> HttpAnswer;

impl Shared {
    /// Whether requests may be served: false while the audit log is unavailable (the
    /// audit log tells stderr so, and counts the refusal; docs/reliability.md).
    pub(crate) fn audit_ok(&self) -> bool {
        self.audit.admit()
    }
}

/// One client connection: what every request on it shares.
pub(crate) struct ConnContext {
    pub(crate) shared: Arc<Shared>,
    pub(crate) origin: Origin,
    pub(crate) id: u64,
    /// The recent bytes of an HTTP/1 connection, for the CL+TE check (`None` for h2).
    pub(crate) head_tap: Option<HeadTap>,
    /// The upstream leg of an HTTP/1.1 connection, driven on its task (`None` for h2).
    pub(crate) leg: Option<Arc<LegSlot>>,
    /// The program behind a connection from a jail (`None` elsewhere: `airlock proxy`).
    pub(crate) caller: Option<Arc<ConnCaller>>,
    /// Held while anything serves this connection (tunnels included), so that the caps and
    /// the drain on shutdown count it.
    pub(crate) _permit: Arc<Admitted>,
}

/// What an admitted connection holds: its place under the connection cap and under its
/// client's cap.
pub(crate) struct Admitted {
    pub(crate) _connection: OwnedSemaphorePermit,
    pub(crate) _client: Option<ClientSlot>,
}

impl ConnContext {
    /// The same connection, now known to be a tunnel to `origin` (whose HTTP layer, if
    /// any, sets its own head tap).
    pub(crate) fn with_origin(&self, origin: Origin) -> ConnContext {
        ConnContext {
            shared: self.shared.clone(),
            origin,
            id: self.id,
            head_tap: None,
            leg: None,
            caller: self.caller.clone(),
            _permit: self._permit.clone(),
        }
    }

    /// A new audit line of this connection (its id, and the process behind it when the
    /// connection came from a jail).
    pub(crate) fn line(&self, kind: LineKind, host: String, port: u16) -> Line {
        self.stamp(Line::new(kind, host, port, self.id))
    }

    /// `line` with the process behind this connection (from a jail).
    pub(crate) fn stamp(&self, mut line: Line) -> Line {
        line.process = self.caller.as_ref().map(|caller| caller.process.clone());
        line
    }

    /// [`Line::tcp_refused`] for this connection ([`ConnContext::line`]).
    pub(crate) fn tcp_refused(
        &self,
        host: String,
        port: u16,
        reason: airlock_policy::Reason,
    ) -> Line {
        let mut line = self.line(LineKind::Tcp, host, port);
        line.reason = Some(reason);
        line
    }

    /// The program behind the connection, as `process:` rules see it (`None`: unknown,
    /// or not from a jail).
    pub(crate) fn program(&self) -> airlock_policy::programs::Caller<'_> {
        self.caller.as_deref().and_then(ConnCaller::program)
    }
}

/// Completes once the proxy is shutting down.
pub(crate) async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    // An error means the proxy is gone: stopping as well.
    let _ = shutdown.wait_for(|stop| *stop).await;
}
