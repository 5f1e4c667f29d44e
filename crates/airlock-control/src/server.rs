//! The admin API server (docs/operations.md, docs/openapi.yaml): HTTP/1 on a Unix socket
//! (mode 0600) or a TCP address, every call on TCP authenticated by a bearer token compared
//! in constant time. Routes: `GET /healthz`, `GET /metrics`, `GET|PUT /v1/policy`,
//! `PUT /v1/network/policy`, `GET /v1/events` (SSE), `GET /v1/denials`, `GET /v1/pending`,
//! `POST /v1/pending/{id}` (the asks of `--mode ask`, [`crate::pending`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_import::{self as import, SeedFormat};
use airlock_policy::load::{self, LoadError};
use airlock_proxy::Gauges as ProxyGauges;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{broadcast, mpsc};

use crate::events::Hub;
use crate::metrics::Gauges;
use crate::pending::AskRoutes;
use crate::store::{self, ApplyError, PolicyStore, Problem, Source};

/// The largest policy body accepted.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The most `GET /v1/denials` returns.
pub const MAX_DENIALS: usize = crate::events::DENIALS_CAPACITY;

/// Every route: (method, path). Anything else is 404 (unknown path) or 405.
pub const ROUTES: [(&str, &str); 9] = [
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/v1/policy"),
    ("PUT", "/v1/policy"),
    ("PUT", "/v1/network/policy"),
    ("GET", "/v1/events"),
    ("GET", "/v1/denials"),
    ("GET", "/v1/pending"),
    ("POST", "/v1/pending/{id}"),
];

/// The prefix of `POST /v1/pending/{id}`.
const PENDING_PREFIX: &str = "/v1/pending/";

/// Where the admin API listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket at this path (`unix:PATH`).
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl std::str::FromStr for Listen {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.strip_prefix("unix:") {
            Some("") => Err("--admin unix: needs a path".to_owned()),
            Some(path) => Ok(Listen::Unix(PathBuf::from(path))),
            None => text.parse().map(Listen::Tcp).map_err(|_| {
                format!("--admin {text:?}: expected unix:PATH or an address like 127.0.0.1:9090")
            }),
        }
    }
}

/// Why the admin API could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A TCP address without a token.
    #[error(
        "--admin {0}: a TCP admin address needs --admin-token-file (use unix:PATH for local use)"
    )]
    TcpWithoutToken(SocketAddr),
    /// The socket could not be bound or its mode set.
    #[error("--admin {what}: {source}")]
    Bind {
        /// The address as given.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Everything the routes need.
pub struct Admin {
    /// The policy in force.
    pub store: Arc<PolicyStore>,
    /// Audit-line fan-out and counters.
    pub hub: Arc<Hub>,
    /// The proxy's live figures.
    pub gauges: ProxyGauges,
    /// SHA-256 of the bearer token, if one is required.
    token_digest: Option<[u8; 32]>,
    /// The asks of `--mode ask` (none: `GET /v1/pending` is empty).
    asks: Option<AskRoutes>,
}

/// A bound admin listener, ready to serve.
pub enum Bound {
    /// A Unix socket.
    Unix(UnixListener),
    /// A TCP socket.
    Tcp(TcpListener),
}

type Body = BoxBody<Bytes, Infallible>;

impl Admin {
    /// The routes' state; with `token`, every call needs `Authorization: Bearer TOKEN`.
    pub fn new(
        store: Arc<PolicyStore>,
        hub: Arc<Hub>,
        gauges: ProxyGauges,
        token: Option<&str>,
    ) -> Admin {
        Admin {
            store,
            hub,
            gauges,
            token_digest: token.map(|t| Sha256::digest(t.as_bytes()).into()),
            asks: None,
        }
    }

    /// Serves `GET /v1/pending` and `POST /v1/pending/{id}` from `routes`.
    pub fn with_asks(mut self, routes: AskRoutes) -> Admin {
        self.asks = Some(routes);
        self
    }

    /// Binds `listen`: a Unix socket gets mode 0600 (a stale socket file is replaced); a TCP
    /// address is refused unless a token is set.
    pub async fn bind(&self, listen: &Listen) -> Result<Bound, AdminError> {
        match listen {
            Listen::Tcp(addr) => {
                if self.token_digest.is_none() {
                    return Err(AdminError::TcpWithoutToken(*addr));
                }
                TcpListener::bind(addr)
                    .await
                    .map(Bound::Tcp)
                    .map_err(|source| AdminError::Bind {
                        what: addr.to_string(),
                        source,
                    })
            }
            Listen::Unix(path) => {
                bind_unix(path)
                    .map(Bound::Unix)
                    .map_err(|source| AdminError::Bind {
                        what: format!("unix:{}", path.display()),
                        source,
                    })
            }
        }
    }

    /// Serves `bound` until the runtime stops.
    pub async fn serve(self: Arc<Self>, bound: Bound) {
        loop {
            match &bound {
                Bound::Unix(listener) => match listener.accept().await {
                    Ok((stream, _)) => drop(tokio::spawn(self.clone().connection(stream))),
                    Err(_) => accept_backoff().await,
                },
                Bound::Tcp(listener) => match listener.accept().await {
                    Ok((stream, _)) => drop(tokio::spawn(self.clone().connection(stream))),
                    Err(_) => accept_backoff().await,
                },
            }
        }
    }

    async fn connection(
        self: Arc<Self>,
        stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    ) {
        let service = service_fn(move |request| {
            let admin = self.clone();
            async move { Ok::<_, Infallible>(admin.handle(request).await) }
        });
        // A client that goes away mid-request is nothing to report.
        let _ = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        if !self.authorized(request.headers()) {
            let mut response = json(
                StatusCode::UNAUTHORIZED,
                &serde_json::json!({"error": "missing or wrong bearer token"}),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
        let path = request.uri().path().to_owned();
        let method = request.method().clone();
        match (method, path.as_str()) {
            (Method::GET, "/healthz") => self.health(),
            (Method::GET, "/metrics") => self.metrics(),
            (Method::GET, "/v1/policy") => {
                let (stamp, policy) = self.store.current();
                json(
                    StatusCode::OK,
                    &serde_json::json!({"version": stamp.version, "etag": stamp.etag,
                        "policy": store::to_json(policy.policy())}),
                )
            }
            (Method::PUT, "/v1/policy") => self.put(request, Kind::Native).await,
            (Method::PUT, "/v1/network/policy") => self.put(request, Kind::Trustyclaw).await,
            (Method::GET, "/v1/events") => self.events(request.uri().query()),
            (Method::GET, "/v1/denials") => self.denials(request.uri().query()),
            (Method::GET, "/v1/pending") => match &self.asks {
                Some(asks) => reply(asks.list()),
                None => json(StatusCode::OK, &serde_json::json!([])),
            },
            (Method::POST, path) if path.starts_with(PENDING_PREFIX) => {
                self.decide(&path[PENDING_PREFIX.len()..], request).await
            }
            (_, path) if path.starts_with(PENDING_PREFIX) => json(
                StatusCode::METHOD_NOT_ALLOWED,
                &serde_json::json!({"error": "method not allowed"}),
            ),
            (_, path) if ROUTES.iter().any(|(_, known)| *known == path) => json(
                StatusCode::METHOD_NOT_ALLOWED,
                &serde_json::json!({"error": "method not allowed"}),
            ),
            _ => json(
                StatusCode::NOT_FOUND,
                &serde_json::json!({"error": "no such route"}),
            ),
        }
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.token_digest else {
            return true;
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        // Comparing digests hides the token's length; the fold has no early exit.
        let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        expected
            .iter()
            .zip(given.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// `{"status":"ok",...}`, or 503 `audit_log_unavailable` while the audit log cannot
    /// be written (requests are refused; docs/reliability.md).
    fn health(&self) -> Response<Body> {
        let (stamp, _) = self.store.current();
        let audit = self.store.audit().status();
        let (code, status) = if audit.healthy {
            (StatusCode::OK, "ok")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "audit_log_unavailable")
        };
        json(
            code,
            &serde_json::json!({"status": status, "policy_version": stamp.version,
                "audit": {"available": audit.healthy, "unavailable_since": audit.unavailable_since,
                    "refused": audit.refused, "refused_total": audit.refused_total,
                    "outages": audit.outages}}),
        )
    }

    fn metrics(&self) -> Response<Body> {
        let (stamp, _) = self.store.current();
        let text = self.hub.metrics.render(&Gauges {
            open_connections: self.gauges.open_connections(),
            cached_certificates: self.gauges.cached_certificates(),
            policy_version: stamp.version,
            events_lagged: self.hub.lagged(),
            audit: self.store.audit().status(),
        });
        let mut response = Response::new(full(text));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        response
    }

    async fn put(&self, request: Request<Incoming>, kind: Kind) -> Response<Body> {
        let if_match = request
            .headers()
            .get(header::IF_MATCH)
            .map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        let json_type = matches!(content_type.as_deref(), Some("application/json"));
        let yaml_type = matches!(
            content_type.as_deref(),
            Some("application/yaml" | "application/x-yaml" | "text/yaml")
        );
        if !(json_type || (yaml_type && kind == Kind::Native)) {
            return invalid(vec![Problem {
                location: "Content-Type".to_owned(),
                message: match kind {
                    Kind::Native => "use application/yaml or application/json",
                    Kind::Trustyclaw => "use application/json",
                }
                .to_owned(),
            }]);
        }
        let body = match Limited::new(request.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(body) => body.to_bytes(),
            Err(e) => {
                return invalid(vec![Problem {
                    location: "body".to_owned(),
                    message: format!("cannot read the body (at most {MAX_BODY_BYTES} bytes): {e}"),
                }]);
            }
        };
        let Ok(text) = std::str::from_utf8(&body) else {
            return invalid(vec![Problem {
                location: "body".to_owned(),
                message: "not UTF-8".to_owned(),
            }]);
        };
        let candidate = match kind {
            Kind::Native => load::load_str("body", text),
            Kind::Trustyclaw => {
                import::import(SeedFormat::Trustyclaw, "body", text).map(|network| {
                    // Only the network rules are replaced; secrets and the rest stay.
                    let mut policy = self.store.current().1.policy().clone();
                    policy.network = network.network;
                    policy
                })
            }
        };
        let candidate = match candidate {
            Ok(candidate) => candidate,
            Err(error) => {
                let problems = located(&error);
                self.store.refused(Source::Api, &error.to_string());
                return invalid(problems);
            }
        };
        match self
            .store
            .replace(candidate, Source::Api, if_match.as_deref())
        {
            Ok(stamp) => json(
                StatusCode::OK,
                &serde_json::json!({"version": stamp.version, "etag": stamp.etag}),
            ),
            Err(ApplyError::Invalid(problems)) => invalid(problems),
            Err(ApplyError::Stale { current, .. }) => json(
                StatusCode::PRECONDITION_FAILED,
                &serde_json::json!({"error": "the policy changed since that etag", "etag": current}),
            ),
        }
    }

    async fn decide(&self, id: &str, request: Request<Incoming>) -> Response<Body> {
        let Some(asks) = &self.asks else {
            return json(
                StatusCode::NOT_FOUND,
                &serde_json::json!({"error": "no pending ask has this id"}),
            );
        };
        match Limited::new(request.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(body) => reply(asks.decide(id, &body.to_bytes())),
            Err(e) => json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({"error": format!("cannot read the body: {e}")}),
            ),
        }
    }

    fn denials(&self, query: Option<&str>) -> Response<Body> {
        let limit = match param(query, "limit") {
            None => 100,
            Some(text) => match text.parse::<usize>() {
                Ok(limit) => limit.min(MAX_DENIALS),
                Err(_) => {
                    return invalid(vec![Problem {
                        location: "limit".to_owned(),
                        message: "expected a non-negative integer".to_owned(),
                    }]);
                }
            },
        };
        let lines = self.hub.denials(limit);
        let items: Vec<serde_json::Value> = lines
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        json(StatusCode::OK, &serde_json::json!({"denials": items}))
    }

    /// `GET /v1/events[?decision=D][&kind=K][&backlog=N]`: with `backlog`, the last N
    /// events kept (at most the backlog's length) come first, then the live ones.
    fn events(&self, query: Option<&str>) -> Response<Body> {
        let decision = param(query, "decision").map(str::to_owned);
        let kind = param(query, "kind").map(str::to_owned);
        let backlog = match param(query, "backlog").map(str::parse::<usize>) {
            None => 0,
            Some(Ok(limit)) => limit,
            Some(Err(_)) => {
                return invalid(vec![Problem {
                    location: "backlog".to_owned(),
                    message: "expected a non-negative integer".to_owned(),
                }]);
            }
        };
        let (recent, mut receiver) = self.hub.subscribe_with_backlog(backlog);
        let (sender, frames) = mpsc::channel::<Bytes>(64);
        let hub = self.hub.clone();
        let wanted = move |event: &crate::events::Event| {
            decision.as_deref().is_none_or(|d| *d == *event.decision)
                && kind.as_deref().is_none_or(|k| *k == *event.kind)
        };
        tokio::spawn(async move {
            // A comment first, so that the client sees the stream is open.
            if sender
                .send(Bytes::from_static(b": airlock events\n\n"))
                .await
                .is_err()
            {
                return;
            }
            for event in recent.iter().filter(|event| wanted(event)) {
                let frame = Bytes::from(format!("data: {}\n\n", event.line));
                if sender.send(frame).await.is_err() {
                    return;
                }
            }
            loop {
                let event = match receiver.recv().await {
                    Ok(event) => event,
                    Err(broadcast::error::RecvError::Lagged(lost)) => {
                        hub.lost(lost);
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if !wanted(&event) {
                    continue;
                }
                let frame = Bytes::from(format!("data: {}\n\n", event.line));
                if sender.send(frame).await.is_err() {
                    return;
                }
            }
        });
        let mut response = Response::new(SseBody(frames).boxed());
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        response
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Native,
    Trustyclaw,
}

/// An SSE body: the frames the subscription task sends, until it stops.
struct SseBody(mpsc::Receiver<Bytes>);

impl http_body::Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|frame| frame.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// After a failed accept (out of descriptors, say), wait a little instead of spinning.
async fn accept_backoff() {
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}

/// Binds the admin socket at `path`, mode 0600, with no moment at which another user could
/// connect: the socket is made in a fresh directory of mode 0700 beside `path`, restricted
/// there, then renamed into place. A stale socket at `path` is replaced; anything else
/// there is an error.
fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, PermissionsExt as _};
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && !meta.file_type().is_socket()
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let staging = parent.join(format!(".airlock-admin-{}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let staged = staging.join("admin.sock");
    let bound = UnixListener::bind(&staged).and_then(|listener| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    });
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    bound
}

/// The value of `name` in a query string (no percent-decoding: the values are plain words).
fn param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn located(error: &LoadError) -> Vec<Problem> {
    error
        .errors
        .iter()
        .map(|e| Problem {
            location: format!("{}:{}:{}", e.file, e.line, e.column),
            message: e.message.clone(),
        })
        .collect()
}

fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into()).boxed()
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn reply((status, value): (StatusCode, serde_json::Value)) -> Response<Body> {
    json(status, &value)
}

fn invalid(errors: Vec<Problem>) -> Response<Body> {
    json(
        StatusCode::BAD_REQUEST,
        &serde_json::json!({ "errors": errors }),
    )
}
