//! The way out: resolve a canonical host once, run the private-address guard on every
//! address, dial exactly a checked address, and (for `https`) speak TLS to it verified
//! against the system roots plus `--upstream-ca`, with the canonical name as SNI.
//!
//! [`Upstream`] owns the resolver, the `--resolve` pins and the TLS client configurations;
//! [`UpstreamConnector`] plugs it into hyper-util's pooling client so that connections are
//! reused and an upstream that negotiates h2 is spoken to in h2. A connection refused by
//! the guard fails with [`DialError::Denied`], which the forwarder turns into the 403.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use airlock_policy::canonical::{Host, canonical_host};
use airlock_policy::{CompiledPolicy, Decision, Reason};
use arc_swap::ArcSwap;
use hickory_resolver::TokioResolver;
use http::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ClientConfig;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OnceCell;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::body::UploadBody;

/// How long a TCP connect (per address) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the upstream TLS handshake may take.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle pooled upstream connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The HTTP/2 receive window per upstream stream. Several clients' requests share one
/// pooled h2 connection; with the protocol's 64 KiB default (or a window that adapts from
/// loopback's tiny round trip) large downloads stall on WINDOW_UPDATEs.
const H2_STREAM_WINDOW: u32 = 1024 * 1024;
/// The HTTP/2 receive window per upstream connection: at most this much is buffered per
/// pooled connection when clients read slower than the upstream sends.
const H2_CONNECTION_WINDOW: u32 = 4 * 1024 * 1024;

/// Why an upstream connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The policy refuses the address the host resolves to (private address, deny cidr).
    #[error("the destination address is refused by policy")]
    Denied(Decision),
    /// The destination named in the URI is not a host airlock can canonicalise.
    #[error("the upstream host {0:?} is not a valid host")]
    BadHost(String),
    /// Name resolution failed.
    #[error("cannot resolve {host}: {message}")]
    Resolve {
        /// The name.
        host: String,
        /// The resolver's explanation.
        message: String,
    },
    /// The name resolved to no address.
    #[error("{0} resolves to no address")]
    NoAddress(String),
    /// Every address refused the TCP connection or timed out.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The last address tried.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The TLS handshake with the upstream failed (certificate not trusted, protocol error).
    #[error("TLS handshake with {host} failed: {source}")]
    Tls {
        /// The canonical host.
        host: String,
        /// Why.
        source: io::Error,
    },
}

/// Why the upstream side could not be set up at start.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamSetupError {
    /// An `--upstream-ca` file could not be read or holds no certificate.
    #[error("--upstream-ca {path}: {message}")]
    UpstreamCa {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The TLS client configuration could not be built.
    #[error("cannot build the upstream TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Name resolution: the system's resolver configuration through hickory, or the platform
/// resolver (`getaddrinfo`) when no system configuration could be read.
enum Resolver {
    Hickory(Box<TokioResolver>),
    Platform,
}

/// Resolver, address guard, dialer and TLS client configuration for upstream connections.
pub struct Upstream {
    resolver: Resolver,
    pins: HashMap<String, IpAddr>,
    policy: Arc<ArcSwap<CompiledPolicy>>,
    tls: Arc<OnceCell<TlsClients>>,
    extra_roots: Arc<Vec<CertificateDer<'static>>>,
}

/// The upstream TLS client configurations, built once (off the startup path: reading the
/// system roots is most of a cold start).
struct TlsClients {
    /// Offers h2 and http/1.1.
    any: Arc<ClientConfig>,
    /// Offers http/1.1 only (WebSocket upgrades).
    http1: Arc<ClientConfig>,
}

impl Upstream {
    /// Builds the upstream side: `pins` are the `--resolve` overrides ([`parse_pin`]:
    /// canonical name, or `name:PORT` for one port only → address), `extra_cas` the
    /// `--upstream-ca` PEM files.
    pub fn new(
        policy: Arc<ArcSwap<CompiledPolicy>>,
        pins: HashMap<String, IpAddr>,
        extra_cas: &[impl AsRef<Path>],
    ) -> Result<Self, UpstreamSetupError> {
        let extra_roots = Arc::new(read_extra_roots(extra_cas)?);
        let tls = Arc::new(OnceCell::new());
        // Warm up in the background so that the first request does not wait for the roots.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (tls, extra_roots) = (tls.clone(), extra_roots.clone());
            runtime.spawn(async move {
                if let Err(e) = tls.get_or_try_init(|| build_tls(extra_roots)).await {
                    tracing::warn!("upstream TLS setup: {e}");
                }
            });
        }
        let resolver = match TokioResolver::builder_tokio() {
            Ok(builder) => Resolver::Hickory(Box::new(builder.build())),
            Err(e) => {
                tracing::warn!(
                    "cannot read the system resolver configuration ({e}); using the platform resolver"
                );
                Resolver::Platform
            }
        };
        Ok(Upstream {
            resolver,
            pins,
            policy,
            tls,
            extra_roots,
        })
    }

    /// Resolves `host` (or takes its pin), checks every address against the policy and
    /// returns the addresses that may be dialled, in resolver order. Fails closed: if any
    /// address the name resolves to is refused, the destination is refused.
    pub async fn resolve_checked(
        &self,
        host: &Host,
        port: u16,
    ) -> Result<Vec<SocketAddr>, DialError> {
        let policy = self.policy.load();
        match host {
            Host::Ip(ip) => {
                policy.check_address(host, *ip).map_err(DialError::Denied)?;
                Ok(vec![SocketAddr::new(*ip, port)])
            }
            Host::Name(name) => {
                // Named by the operator (a pin, or a rule naming `localhost` exactly):
                // exempt from the private-address guard, but a deny rule still applies.
                let pin = self.pins.get(&format!("{name}:{port}"));
                let named: Option<Vec<IpAddr>> = match pin.or_else(|| self.pins.get(name)) {
                    Some(ip) => Some(vec![*ip]),
                    None => policy.loopback_named(host, port).map(Vec::from),
                };
                if let Some(named) = named {
                    for ip in &named {
                        match policy.check_address(host, *ip) {
                            Err(decision) if decision.reason != Some(Reason::PrivateAddress) => {
                                return Err(DialError::Denied(decision));
                            }
                            _ => {}
                        }
                    }
                    return Ok(named
                        .into_iter()
                        .map(|ip| SocketAddr::new(ip, port))
                        .collect());
                }
                let addresses = self.lookup(name).await?;
                if addresses.is_empty() {
                    return Err(DialError::NoAddress(name.clone()));
                }
                for ip in &addresses {
                    policy.check_address(host, *ip).map_err(DialError::Denied)?;
                }
                Ok(addresses
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, port))
                    .collect())
            }
        }
    }

    async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, DialError> {
        let failed = |message: String| DialError::Resolve {
            host: name.to_owned(),
            message,
        };
        match &self.resolver {
            Resolver::Hickory(resolver) => resolver
                .lookup_ip(name)
                .await
                .map(|lookup| lookup.iter().collect())
                .map_err(|e| failed(plain_resolve_error(&e))),
            Resolver::Platform => tokio::net::lookup_host((name, 0))
                .await
                .map(|addrs| addrs.map(|a| a.ip()).collect())
                .map_err(|e| failed(e.to_string())),
        }
    }

    /// Resolves, guards and dials `host:port` over TCP (`TCP_NODELAY` set): the first
    /// checked address that accepts.
    pub async fn connect_tcp(&self, host: &Host, port: u16) -> Result<TcpStream, DialError> {
        let addresses = self.resolve_checked(host, port).await?;
        let mut last_error = None;
        for addr in addresses {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    // Latency matters more than packet count for proxied requests.
                    let _ = stream.set_nodelay(true);
                    return Ok(stream);
                }
                Ok(Err(source)) => last_error = Some(DialError::Connect { addr, source }),
                Err(_) => {
                    last_error = Some(DialError::Connect {
                        addr,
                        source: io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
                    })
                }
            }
        }
        Err(last_error.unwrap_or_else(|| DialError::NoAddress(host.to_string())))
    }

    async fn connect(
        &self,
        uri: &Uri,
        tls: Option<&Arc<ClientConfig>>,
    ) -> Result<UpstreamConn, DialError> {
        let raw_host = uri.host().unwrap_or_default();
        let host = canonical_host(raw_host).map_err(|_| DialError::BadHost(raw_host.to_owned()))?;
        let https = tls.is_some();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = self.connect_tcp(&host, port).await?;
        let Some(tls) = tls else {
            return Ok(UpstreamConn {
                io: TokioIo::new(UpstreamStream::Plain(tcp)),
                h2: false,
            });
        };
        let server_name = match &host {
            Host::Name(name) => {
                ServerName::try_from(name.clone()).map_err(|_| DialError::BadHost(name.clone()))?
            }
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        };
        let tls_failed = |source: io::Error| DialError::Tls {
            host: host.to_string(),
            source,
        };
        let stream = tokio::time::timeout(
            TLS_HANDSHAKE_TIMEOUT,
            TlsConnector::from(tls.clone()).connect(server_name, tcp),
        )
        .await
        .map_err(|_| {
            tls_failed(io::Error::new(
                io::ErrorKind::TimedOut,
                "handshake timed out",
            ))
        })?
        .map_err(tls_failed)?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok(UpstreamConn {
            io: TokioIo::new(UpstreamStream::Tls(Box::new(stream))),
            h2,
        })
    }

    /// The pooling HTTP client over this upstream: offers h2 and http/1.1 to TLS upstreams.
    pub fn client(self: &Arc<Self>) -> UpstreamClient {
        build_client(UpstreamConnector {
            upstream: self.clone(),
            http1_only: false,
        })
    }

    /// Dials `uri`'s destination as [`Upstream::http1_client`] does (resolved, guarded,
    /// pinned; TLS offering http/1.1 only): a client connection's own leg (`crate::leg`).
    pub(crate) async fn dial_http1(self: &Arc<Self>, uri: Uri) -> Result<UpstreamConn, DialError> {
        use tower_service::Service;
        let mut connector = UpstreamConnector {
            upstream: self.clone(),
            http1_only: true,
        };
        connector.call(uri).await
    }

    /// A pooling client that offers only http/1.1 (for WebSocket upgrades).
    pub fn http1_client(self: &Arc<Self>) -> UpstreamClient {
        build_client(UpstreamConnector {
            upstream: self.clone(),
            http1_only: true,
        })
    }
}

/// The pooling client the forwarder sends requests with.
pub type UpstreamClient = Client<UpstreamConnector, UploadBody>;

fn build_client(connector: UpstreamConnector) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .http2_initial_stream_window_size(H2_STREAM_WINDOW)
        .http2_initial_connection_window_size(H2_CONNECTION_WINDOW)
        .build(connector)
}

/// Reads every `--upstream-ca` file now, so that a bad one stops the proxy from starting.
fn read_extra_roots(
    extra_cas: &[impl AsRef<Path>],
) -> Result<Vec<CertificateDer<'static>>, UpstreamSetupError> {
    let mut all = Vec::new();
    for path in extra_cas {
        let path = path.as_ref();
        let failed = |message: String| UpstreamSetupError::UpstreamCa {
            path: path.display().to_string(),
            message,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| failed(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| failed(e.to_string()))?;
        if certs.is_empty() {
            return Err(failed("holds no PEM certificate".to_owned()));
        }
        let mut check = RootCertStore::empty();
        for cert in &certs {
            check.add(cert.clone()).map_err(|e| failed(e.to_string()))?;
        }
        all.extend(certs);
    }
    Ok(all)
}

/// Loads the system roots (blocking file reads, on the blocking pool), adds the extra
/// roots and builds both client configurations.
async fn build_tls(
    extra_roots: Arc<Vec<CertificateDer<'static>>>,
) -> Result<TlsClients, UpstreamSetupError> {
    let build = move || {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for error in &native.errors {
            tracing::debug!("system root certificates: {error}");
        }
        roots.add_parsable_certificates(native.certs);
        // Checked to be valid trust anchors when they were read.
        roots.add_parsable_certificates(extra_roots.iter().cloned());
        let roots = Arc::new(roots);
        Ok(TlsClients {
            any: client_tls(roots.clone(), &[b"h2", b"http/1.1"])?,
            http1: client_tls(roots, &[b"http/1.1"])?,
        })
    };
    tokio::task::spawn_blocking(build)
        .await
        .map_err(|e| UpstreamSetupError::Tls(rustls::Error::General(e.to_string())))?
}

fn client_tls(
    roots: Arc<RootCertStore>,
    alpn: &[&[u8]],
) -> Result<Arc<ClientConfig>, UpstreamSetupError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// hyper-util connector: `http://` and `https://` URIs whose host is canonical; resolves,
/// guards, dials and (for `https`) handshakes through [`Upstream`].
#[derive(Clone)]
pub struct UpstreamConnector {
    upstream: Arc<Upstream>,
    http1_only: bool,
}

impl tower_service::Service<Uri> for UpstreamConnector {
    type Response = UpstreamConn;
    type Error = DialError;
    type Future = Pin<Box<dyn Future<Output = Result<UpstreamConn, DialError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), DialError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let upstream = self.upstream.clone();
        let http1_only = self.http1_only;
        Box::pin(async move {
            if uri.scheme_str() != Some("https") {
                return upstream.connect(&uri, None).await;
            }
            let clients = upstream
                .tls
                .get_or_try_init(|| build_tls(upstream.extra_roots.clone()))
                .await
                .map_err(|e| DialError::Tls {
                    host: uri.host().unwrap_or_default().to_owned(),
                    source: io::Error::other(e.to_string()),
                })?;
            let tls = if http1_only {
                &clients.http1
            } else {
                &clients.any
            };
            upstream.connect(&uri, Some(tls)).await
        })
    }
}

/// The byte stream to an upstream: plain TCP or TLS over TCP.
pub enum UpstreamStream {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamStream::Plain(s) => s.is_write_vectored(),
            UpstreamStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_flush(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One upstream connection as the pooling client sees it: the stream and whether ALPN
/// chose h2.
pub struct UpstreamConn {
    io: TokioIo<UpstreamStream>,
    h2: bool,
}

impl Connection for UpstreamConn {
    fn connected(&self) -> Connected {
        if self.h2 {
            Connected::new().negotiated_h2()
        } else {
            Connected::new()
        }
    }
}

impl hyper::rt::Read for UpstreamConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for UpstreamConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The resolver's failure in plain words for the refusal body and the audit line: hickory's
/// own text carries the query and SOA records in debug form (`Query { name: Name(..) }`).
fn plain_resolve_error(error: &hickory_resolver::ResolveError) -> String {
    use hickory_resolver::proto::ProtoErrorKind;
    use hickory_resolver::proto::op::ResponseCode;
    tracing::debug!("resolver: {error}");
    let Some(proto) = error.proto() else {
        return "the lookup failed".to_owned();
    };
    match proto.kind() {
        ProtoErrorKind::NoRecordsFound { response_code, .. } => match *response_code {
            ResponseCode::NXDomain => "no such domain (NXDOMAIN)".to_owned(),
            ResponseCode::NoError => "the name has no address records".to_owned(),
            code => format!("the DNS server answered {}", code.to_str()),
        },
        ProtoErrorKind::Timeout => "the DNS servers did not answer in time".to_owned(),
        ProtoErrorKind::NoConnections => "no DNS server could be reached".to_owned(),
        ProtoErrorKind::Io(e) => format!("the DNS servers could not be reached: {e}"),
        _ => "the lookup failed".to_owned(),
    }
}

/// Parses one `--resolve HOST:ADDR` or curl's `--resolve HOST:PORT:ADDR` (ADDR an IPv4 or
/// IPv6 address, brackets optional; after a PORT an IPv6 address is best bracketed) into
/// the pin's key and the address. The key is the canonical name, or `name:PORT` for a pin
/// that applies to that port only (looked up before the name's own pin).
pub fn parse_pin(spec: &str) -> Result<(String, IpAddr), String> {
    let (host, rest) = spec
        .split_once(':')
        .ok_or_else(|| format!("--resolve {spec:?}: expected HOST:ADDR or HOST:PORT:ADDR"))?;
    let name = match canonical_host(host) {
        Ok(Host::Name(name)) => name,
        Ok(Host::Ip(_)) => {
            return Err(format!(
                "--resolve {spec:?}: HOST must be a name, not an address"
            ));
        }
        Err(e) => return Err(format!("--resolve {spec:?}: {e}")),
    };
    let ip_of = |text: &str| {
        text.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
    };
    // HOST:ADDR first (an IPv6 ADDR holds colons too), then HOST:PORT:ADDR.
    if let Ok(ip) = ip_of(rest) {
        return Ok((name, ip));
    }
    let Some((port, addr)) = rest.split_once(':') else {
        return Err(format!("--resolve {spec:?}: {rest:?} is not an IP address"));
    };
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| format!("--resolve {spec:?}: {port:?} is not a port (1-65535)"))?;
    let ip =
        ip_of(addr).map_err(|_| format!("--resolve {spec:?}: {addr:?} is not an IP address"))?;
    Ok((format!("{name}:{port}"), ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_parse_names_and_addresses() {
        assert_eq!(
            parse_pin("LocalHost.:127.0.0.1"),
            Ok((
                "localhost".to_owned(),
                "127.0.0.1".parse().unwrap_or(IpAddr::from([0; 4]))
            ))
        );
        assert_eq!(
            parse_pin("v6.example:[::1]").map(|p| p.1),
            Ok("::1".parse().unwrap_or(IpAddr::from([0; 4])))
        );
        assert!(parse_pin("nohost").is_err());
        assert!(parse_pin("a.example:notanip").is_err());
        assert!(parse_pin("127.0.0.1:127.0.0.1").is_err());
    }

    #[test]
    fn pins_take_curl_s_port_form() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap_or(IpAddr::from([0; 4]));
        assert_eq!(
            parse_pin("API.example:8443:127.0.0.2"),
            Ok(("api.example:8443".to_owned(), ip("127.0.0.2")))
        );
        assert_eq!(
            parse_pin("v6.example:443:[::1]"),
            Ok(("v6.example:443".to_owned(), ip("::1")))
        );
        assert_eq!(
            parse_pin("v6.example:443:::1"),
            Ok(("v6.example:443".to_owned(), ip("::1")))
        );
        // A bare IPv6 address stays HOST:ADDR.
        assert_eq!(
            parse_pin("v6.example:2001:db8::1"),
            Ok(("v6.example".to_owned(), ip("2001:db8::1")))
        );
        assert!(parse_pin("a.example:0:127.0.0.1").is_err());
        assert!(parse_pin("a.example:70000:127.0.0.1").is_err());
        assert!(parse_pin("a.example:443:notanip").is_err());
    }
}
