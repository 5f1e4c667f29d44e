//! Smoke tests of the data plane: a real proxy in-process on 127.0.0.1:0 in front of real
//! rustls + hyper upstreams on loopback (TLS with its own CA, trusted via `upstream_cas`,
//! and plain HTTP). Clients are hyper clients speaking CONNECT, TLS (trusting the
//! interception CA) and HTTP/1.1 or h2 — nothing is mocked. This file is the harness; the
//! tests are in its modules.

mod malformed;
mod requests;
mod tunnels;

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use airlock_audit::AuditLog;
use airlock_credentials::Credentials;
use airlock_policy::canonical::Host;
use airlock_policy::{CompiledPolicy, Policy};
use airlock_proxy::ca::CertificateAuthority;
use airlock_proxy::{Proxy, ProxyConfig, TunnelRefusal};
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const LIMIT: Duration = Duration::from_secs(20);

/// Answers `upstream <version> <path> host=<host or :authority>`; an upgrade request gets
/// 101 and its upgraded connection echoes every byte back.
async fn upstream_service(
    mut request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.headers().contains_key(header::UPGRADE) {
        let on_upgrade = hyper::upgrade::on(&mut request);
        tokio::spawn(async move {
            if let Ok(upgraded) = on_upgrade.await {
                let (mut read, mut write) = tokio::io::split(TokioIo::new(upgraded));
                let _ = tokio::io::copy(&mut read, &mut write).await;
            }
        });
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        response
            .headers_mut()
            .insert(header::UPGRADE, http::HeaderValue::from_static("websocket"));
        response.headers_mut().insert(
            header::CONNECTION,
            http::HeaderValue::from_static("upgrade"),
        );
        return Ok(response);
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let auth = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("-");
    let text = format!(
        "upstream {:?} {} auth={auth} host={host}",
        request.version(),
        request.uri().path()
    );
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// A TLS upstream for `localhost` (h2 and http/1.1), signed by its own CA; returns its
/// port and the CA certificate (PEM).
async fn start_tls_upstream() -> TestResult<(u16, String)> {
    let (ca, files) = CertificateAuthority::generate()?;
    let ca = Arc::new(ca);
    let config = ca.server_config_for_host(
        &Host::Name("localhost".to_owned()),
        vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    )?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(
                            TokioIo::new(tls),
                            service_fn(upstream_service),
                        )
                        .await;
                }
            });
        }
    });
    Ok((port, files.cert_pem))
}

/// A plain-HTTP upstream; returns its port.
async fn start_plain_upstream() -> TestResult<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service_fn(upstream_service))
                    .await;
            });
        }
    });
    Ok(port)
}

struct RunningProxy {
    addr: SocketAddr,
    /// Trusts the interception CA.
    client_tls: ClientConfig,
    _upstream_ca: tempfile::NamedTempFile,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// What a test proxy is started with; everything but `allows` may be left out.
#[derive(Default)]
struct Setup<'a> {
    /// `--allow` rules.
    allows: &'a [String],
    /// Hosts whose TLS is passed through, not intercepted.
    passthrough: &'a [&'a str],
    /// `--secret NAME=SURROGATE=VALUE@HOSTS` specs with their real values.
    secrets: &'a [(&'a str, &'a str)],
    /// `dlp: {credentials: off}` (with no secrets: no outbound guard at all).
    unguarded: bool,
    /// Refuse a whole tunnel inside TLS (as `airlock run`), not on the CONNECT.
    refuse_inside_tls: bool,
    /// Where the audit log goes (nowhere when `None`).
    audit: Option<AuditLog>,
}

/// Starts a proxy on 127.0.0.1 with `setup`, trusting `upstream_ca_pem` for upstreams.
async fn start_proxy(setup: Setup<'_>, upstream_ca_pem: &str) -> TestResult<RunningProxy> {
    let mut config = proxy_config(&setup)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(config.ca.cert_der().clone())?;
    let client_tls = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();

    let mut upstream_ca = tempfile::NamedTempFile::new()?;
    upstream_ca.write_all(upstream_ca_pem.as_bytes())?;
    config.upstream_cas = vec![upstream_ca.path().to_owned()];
    let proxy = Proxy::new(config)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(proxy.serve(listener, async move {
        let _ = stopped.await;
    }));
    Ok(RunningProxy {
        addr,
        client_tls,
        _upstream_ca: upstream_ca,
        _stop: stop,
    })
}

/// The proxy's configuration for `setup`: its policy, a fresh interception CA,
/// `localhost` resolved to 127.0.0.1 (upstream trust is added by [`start_proxy`]).
fn proxy_config(setup: &Setup<'_>) -> TestResult<ProxyConfig> {
    let mut policy = Policy::default();
    if setup.unguarded {
        policy.dlp.credentials = Some(airlock_policy::model::DlpMode::Off);
    }
    let mut values = Vec::new();
    for (spec, value) in setup.secrets {
        let secret = airlock_policy::rule::parse_secret(spec)?;
        values.push((secret.clone(), (*value).to_owned()));
        policy.secrets.push(secret);
    }
    for host in setup.passthrough {
        policy
            .network
            .tls_passthrough
            .push(airlock_policy::model::HostPattern::Exact(
                (*host).to_owned(),
            ));
    }
    for (index, text) in setup.allows.iter().enumerate() {
        policy
            .network
            .allow
            .push(airlock_policy::rule::parse_allow(text, index)?);
    }
    let compiled = CompiledPolicy::compile(&policy)?;
    let (ca, _) = CertificateAuthority::generate()?;
    let audit = setup.audit.clone().unwrap_or_else(AuditLog::disabled);
    let mut config = ProxyConfig::new(compiled, ca, Credentials::new(values)?, audit);
    config
        .resolve
        .insert("localhost".to_owned(), "127.0.0.1".parse()?);
    config.tunnel_refusal = if setup.refuse_inside_tls {
        TunnelRefusal::InsideTls
    } else {
        TunnelRefusal::OnConnect
    };
    Ok(config)
}

/// The setup most tests share: an upstream on localhost and a proxy whose only rule is
/// `localhost:PORT`.
struct Allowed {
    proxy: RunningProxy,
    port: u16,
    /// `localhost:PORT`.
    target: String,
}

impl Allowed {
    /// A TLS upstream (h2 and http/1.1) behind a proxy refusing other tunnels on CONNECT.
    async fn tls() -> TestResult<Allowed> {
        let (port, ca_pem) = start_tls_upstream().await?;
        Allowed::start(port, &ca_pem, false).await
    }

    /// [`Allowed::tls`], refusing other tunnels inside TLS (as `airlock run`).
    async fn tls_refusing_inside_tls() -> TestResult<Allowed> {
        let (port, ca_pem) = start_tls_upstream().await?;
        Allowed::start(port, &ca_pem, true).await
    }

    /// A plain-HTTP upstream behind the proxy (which trusts the CA of a TLS upstream it
    /// never reaches).
    async fn plain() -> TestResult<Allowed> {
        let port = start_plain_upstream().await?;
        let (_, ca_pem) = start_tls_upstream().await?;
        Allowed::start(port, &ca_pem, false).await
    }

    async fn start(port: u16, ca_pem: &str, refuse_inside_tls: bool) -> TestResult<Allowed> {
        let target = format!("localhost:{port}");
        let setup = Setup {
            allows: std::slice::from_ref(&target),
            refuse_inside_tls,
            ..Setup::default()
        };
        let proxy = start_proxy(setup, ca_pem).await?;
        Ok(Allowed {
            proxy,
            port,
            target,
        })
    }
}

/// Runs a test's body within [`LIMIT`].
async fn bounded(body: impl std::future::Future<Output = TestResult>) -> TestResult {
    tokio::time::timeout(LIMIT, body).await?
}

/// Sends `CONNECT target`; returns the status, and the tunnel when it is 200, or the body.
async fn connect(
    proxy: SocketAddr,
    target: &str,
) -> TestResult<(StatusCode, Result<hyper::upgrade::Upgraded, Bytes>)> {
    let stream = TcpStream::connect(proxy).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection.with_upgrades());
    let request = Request::connect(target)
        .header(header::HOST, target)
        .body(Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    if status != StatusCode::OK {
        let body = response.into_body().collect().await?.to_bytes();
        return Ok((status, Err(body)));
    }
    Ok((status, Ok(hyper::upgrade::on(response).await?)))
}

/// Opens a CONNECT tunnel and a TLS session with SNI `sni` offering `alpn`.
async fn tls_tunnel(
    proxy: &RunningProxy,
    target: &str,
    sni: &str,
    alpn: &[&[u8]],
) -> TestResult<tokio_rustls::client::TlsStream<TokioIo<hyper::upgrade::Upgraded>>> {
    let (status, tunnel) = connect(proxy.addr, target).await?;
    assert_eq!(status, StatusCode::OK);
    let tunnel = tunnel.map_err(|_| "no tunnel")?;
    let mut config = proxy.client_tls.clone();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(sni.to_owned())?, TokioIo::new(tunnel))
        .await?;
    Ok(tls)
}

async fn h1_get(
    io: impl hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    uri: &str,
    host: &str,
) -> TestResult<(StatusCode, http::HeaderMap, Bytes)> {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(connection);
    let request = Request::get(uri)
        .header(header::HOST, host)
        .body(Empty::<Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let (parts, body) = response.into_parts();
    Ok((
        parts.status,
        parts.headers,
        body.collect().await?.to_bytes(),
    ))
}

fn json(body: &Bytes) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_default()
}
