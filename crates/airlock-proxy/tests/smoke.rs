//! Smoke tests of the data plane: a real proxy in-process on 127.0.0.1:0 in front of real
//! rustls + hyper upstreams on loopback (TLS with its own CA, trusted via `upstream_cas`,
//! and plain HTTP). Clients are hyper clients speaking CONNECT, TLS (trusting the
//! interception CA) and HTTP/1.1 or h2 — nothing is mocked.

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

/// An audit log in a temporary file (the file lives as long as the returned handle).
fn audit_file() -> TestResult<(tempfile::NamedTempFile, AuditLog)> {
    let log = tempfile::NamedTempFile::new()?;
    let audit = AuditLog::open(&log.path().to_string_lossy())?;
    Ok((log, audit))
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

#[tokio::test]
async fn allowed_get_through_connect_and_tls_over_http1() -> TestResult {
    bounded(async {
        let Allowed {
            proxy,
            port,
            target,
        } = Allowed::tls().await?;
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (status, _, body) = h1_get(TokioIo::new(tls), "/hello", &target).await?;
        assert_eq!(status, StatusCode::OK, "{body:?}");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with("upstream "), "{text}");
        assert!(text.contains(" /hello "), "{text}");
        assert!(text.ends_with(&format!("host=localhost:{port}")), "{text}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn allowed_get_through_connect_and_tls_over_h2() -> TestResult {
    bounded(async {
        let Allowed { proxy, target, .. } = Allowed::tls().await?;
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"h2"]).await?;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        for path in ["/one", "/two"] {
            let request =
                Request::get(format!("https://{target}{path}")).body(Empty::<Bytes>::new())?;
            let response = sender.send_request(request).await?;
            assert_eq!(response.status(), StatusCode::OK);
            let body = response.into_body().collect().await?.to_bytes();
            let text = String::from_utf8_lossy(&body);
            assert!(text.contains(&format!(" {path} ")), "{text}");
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn refused_host_gets_the_json_403_inside_tls() -> TestResult {
    bounded(async {
        let Allowed { proxy, .. } = Allowed::tls_refusing_inside_tls().await?;
        let tls = tls_tunnel(&proxy, "evil.example:443", "evil.example", &[b"http/1.1"]).await?;
        let (status, headers, body) =
            h1_get(TokioIo::new(tls), "/x?token=1", "evil.example").await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(headers["x-airlock-decision"], "deny");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let value = json(&body);
        assert_eq!(value["error"], "blocked_by_policy");
        assert_eq!(value["reason"], "host_not_allowed");
        assert_eq!(value["host"], "evil.example");
        assert_eq!(value["path"], "/x");
        assert_eq!(value["method"], "GET");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn refused_tunnel_gets_the_json_403_on_connect() -> TestResult {
    bounded(async {
        let Allowed { proxy, .. } = Allowed::tls().await?;
        let (status, tunnel) = connect(proxy.addr, "evil.example:443").await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let body = tunnel.err().unwrap_or_default();
        let value = json(&body);
        assert_eq!(value["reason"], "host_not_allowed");
        assert_eq!(value["method"], "CONNECT");
        assert_eq!(value["host"], "evil.example");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn host_header_naming_another_host_is_refused() -> TestResult {
    bounded(async {
        let Allowed { proxy, target, .. } = Allowed::tls().await?;
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (status, _, body) = h1_get(TokioIo::new(tls), "/x", "evil.example").await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(json(&body)["reason"], "host_mismatch");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn refused_path_gets_the_json_403() -> TestResult {
    bounded(async {
        let (port, ca_pem) = start_tls_upstream().await?;
        let allows = [format!("GET localhost:{port}/ok/**")];
        let setup = Setup {
            allows: &allows,
            ..Setup::default()
        };
        let proxy = start_proxy(setup, &ca_pem).await?;
        let target = format!("localhost:{port}");
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (sender_io, _) = (TokioIo::new(tls), ());
        let (mut sender, connection) = hyper::client::conn::http1::handshake(sender_io).await?;
        tokio::spawn(connection);
        let get = |path: &str| {
            Request::get(path)
                .header(header::HOST, target.as_str())
                .body(Empty::<Bytes>::new())
        };
        let response = sender.send_request(get("/ok/yes")?).await?;
        assert_eq!(response.status(), StatusCode::OK);
        let _ = response.into_body().collect().await?;
        let response = sender.send_request(get("/no")?).await?;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body = response.into_body().collect().await?.to_bytes();
        assert_eq!(json(&body)["reason"], "path_not_allowed");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn absolute_form_plain_http_is_forwarded() -> TestResult {
    bounded(async {
        let Allowed { proxy, target, .. } = Allowed::plain().await?;
        let stream = TcpStream::connect(proxy.addr).await?;
        let (status, _, body) = h1_get(
            TokioIo::new(stream),
            &format!("http://{target}/plain"),
            &target,
        )
        .await?;
        assert_eq!(status, StatusCode::OK, "{body:?}");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains(" /plain "), "{text}");
        assert!(text.ends_with(&format!("host={target}")), "{text}");

        let stream = TcpStream::connect(proxy.addr).await?;
        let (status, _, body) = h1_get(
            TokioIo::new(stream),
            "http://evil.example/x",
            "evil.example",
        )
        .await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(json(&body)["reason"], "host_not_allowed");
        Ok(())
    })
    .await
}

/// Writes `request` raw, reads until the proxy closes the connection; returns what came
/// back. Every case here must end with the proxy closing the connection.
async fn raw_exchange(proxy: SocketAddr, request: &[u8]) -> TestResult<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(proxy).await?;
    stream.write_all(request).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn malformed_and_smuggling_shapes_get_400_and_a_close() -> TestResult {
    bounded(async {
        let Allowed {
            proxy, target: t, ..
        } = Allowed::plain().await?;
        let cases = [
            // Duplicate Host: our check.
            format!("GET http://{t}/ HTTP/1.1\r\nHost: {t}\r\nHost: {t}\r\n\r\n"),
            // Transfer-Encoding other than chunked: hyper.
            format!("POST http://{t}/ HTTP/1.1\r\nHost: {t}\r\nTransfer-Encoding: gzip\r\n\r\n"),
            // Conflicting Content-Length values: hyper.
            format!("POST http://{t}/ HTTP/1.1\r\nHost: {t}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"),
            // Whitespace before the colon: hyper (httparse).
            format!("GET http://{t}/ HTTP/1.1\r\nHost : {t}\r\n\r\n"),
            // Obsolete line folding: hyper (httparse).
            format!("GET http://{t}/ HTTP/1.1\r\nHost: {t}\r\nX-A: a\r\n b\r\n\r\n"),
            // Transfer-Encoding in HTTP/1.0: hyper.
            format!("POST http://{t}/ HTTP/1.0\r\nHost: {t}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ];
        for case in &cases {
            let answer = raw_exchange(proxy.addr, case.as_bytes()).await?;
            assert!(answer.starts_with("HTTP/1.1 400"), "{case:?} → {answer:?}");
        }
        // An origin-form request to the proxy itself is for its routes (none here).
        let case = format!("GET / HTTP/1.1\r\nHost: {t}\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(proxy.addr, case.as_bytes()).await?;
        assert!(
            answer.starts_with("HTTP/1.1 403") && answer.contains("path_not_allowed"),
            "{answer:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn content_length_with_chunked_cannot_smuggle_a_second_request() -> TestResult {
    bounded(async {
        let Allowed {
            proxy, target: t, ..
        } = Allowed::plain().await?;
        // Both framings in one request: 400 and a close (docs/contract.md §4), whichever
        // order they come in; nothing reaches the upstream and the tail is never read as a
        // request.
        let case = format!(
            "POST http://{t}/first HTTP/1.1\r\nHost: {t}\r\nContent-Length: 4\r\n\
             Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://{t}/smuggled HTTP/1.1\r\nHost: {t}\r\n\r\n"
        );
        let answer = raw_exchange(proxy.addr, case.as_bytes()).await?;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
        assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer:?}");
        assert!(!answer.contains("upstream "), "{answer:?}");
        assert!(answer.contains("connection: close"), "{answer:?}");
        assert!(!answer.contains("/smuggled"), "{answer:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn oversized_headers_are_refused() -> TestResult {
    bounded(async {
        let Allowed {
            proxy, target: t, ..
        } = Allowed::plain().await?;
        let big = "a".repeat(128 * 1024);
        let case = format!("GET http://{t}/ HTTP/1.1\r\nHost: {t}\r\nX-Big: {big}\r\n\r\n");
        let answer = raw_exchange(proxy.addr, case.as_bytes()).await;
        // 431, or a plain close (the client may still be writing when the proxy closes).
        if let Ok(answer) = answer {
            assert!(
                answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
                "{answer:?}"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn websocket_upgrade_is_relayed_and_audited_at_open_and_close() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    bounded(async {
        let (port, ca_pem) = start_tls_upstream().await?;
        let (log, audit) = audit_file()?;
        // Without the outbound guard the upgraded bytes are relayed as they are (with it,
        // the relay reads WebSocket frames: proxy_outbound_guard.rs in the CLI crate).
        let allows = [format!("GET localhost:{port}/ws")];
        let setup = Setup {
            allows: &allows,
            unguarded: true,
            audit: Some(audit.clone()),
            ..Setup::default()
        };
        let proxy = start_proxy(setup, &ca_pem).await?;
        let target = format!("localhost:{port}");
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection.with_upgrades());
        let request = Request::get("/ws")
            .header(header::HOST, target.as_str())
            .header(header::CONNECTION, "Upgrade")
            .header(header::UPGRADE, "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        let mut upgraded = TokioIo::new(hyper::upgrade::on(response).await?);
        upgraded.write_all(b"ping-pong").await?;
        let mut echo = [0u8; 9];
        upgraded.read_exact(&mut echo).await?;
        assert_eq!(&echo, b"ping-pong");
        drop(upgraded);

        // The ws line is written when the relay ends, after the one written when it opened.
        let mut ws_lines = Vec::new();
        for _ in 0..100 {
            audit.flush();
            let text = std::fs::read_to_string(log.path())?;
            ws_lines = text
                .lines()
                .filter(|line| line.contains(r#""kind":"ws""#))
                .map(str::to_owned)
                .collect();
            if ws_lines.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(ws_lines.len(), 2, "{ws_lines:?}");
        let opened: serde_json::Value = serde_json::from_str(&ws_lines[0])?;
        assert_eq!(opened["phase"], "open");
        assert!(opened.get("bytes_up").is_none());
        let line: serde_json::Value = serde_json::from_str(&ws_lines[1])?;
        assert_eq!(line["phase"], "close");
        assert_eq!(line["decision"], "allow");
        assert_eq!(line["path"], "/ws");
        assert_eq!(line["bytes_up"], 9);
        assert_eq!(line["bytes_down"], 9);
        assert!(line["ms"].is_number());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn passthrough_hosts_reach_the_upstream_certificate() -> TestResult {
    bounded(async {
        let (port, ca_pem) = start_tls_upstream().await?;
        let (log, audit) = audit_file()?;
        let target = format!("localhost:{port}");
        let setup = Setup {
            allows: std::slice::from_ref(&target),
            passthrough: &["localhost"],
            audit: Some(audit.clone()),
            ..Setup::default()
        };
        let proxy = start_proxy(setup, &ca_pem).await?;
        let (status, tunnel) = connect(proxy.addr, &target).await?;
        assert_eq!(status, StatusCode::OK);
        let tunnel = tunnel.map_err(|_| "no tunnel")?;
        // Trusting only the upstream's own CA proves the TLS session was not intercepted.
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(cert?)?;
        }
        let config = ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tls = TlsConnector::from(Arc::new(config.clone()))
            .connect(ServerName::try_from("localhost")?, TokioIo::new(tunnel))
            .await?;
        let (status, _, body) = h1_get(TokioIo::new(tls), "/direct", &target).await?;
        assert_eq!(status, StatusCode::OK);
        assert!(String::from_utf8_lossy(&body).contains(" /direct "));

        // A passthrough tunnel is decided on the SNI: one naming another host is cut, not
        // relayed (it would otherwise reach that host unseen through an allowed tunnel).
        let (status, tunnel) = connect(proxy.addr, &target).await?;
        assert_eq!(status, StatusCode::OK);
        let tunnel = tunnel.map_err(|_| "no tunnel")?;
        let fronted = TlsConnector::from(Arc::new(config))
            .connect(
                ServerName::try_from("elsewhere.test")?,
                TokioIo::new(tunnel),
            )
            .await;
        assert!(fronted.is_err(), "a passthrough tunnel relayed another SNI");
        // Cut by the proxy, not by certificate verification: the refusal is logged.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            audit.flush();
            let text = std::fs::read_to_string(log.path())?;
            if text.contains("\"reason\":\"host_mismatch\"") {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no host_mismatch line for the fronted passthrough: {text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    })
    .await
}

/// A TCP server echoing every byte; returns its port.
async fn start_echo() -> TestResult<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.into_split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    Ok(port)
}

#[tokio::test]
async fn raw_tcp_passes_only_for_destination_only_rules() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    bounded(async {
        let port = start_echo().await?;
        let (_, ca_pem) = start_tls_upstream().await?;
        let target = format!("localhost:{port}");

        let setup = Setup {
            allows: std::slice::from_ref(&target),
            ..Setup::default()
        };
        let open = start_proxy(setup, &ca_pem).await?;
        let (status, tunnel) = connect(open.addr, &target).await?;
        assert_eq!(status, StatusCode::OK);
        let mut tunnel = TokioIo::new(tunnel.map_err(|_| "no tunnel")?);
        tunnel.write_all(b"\x00binary").await?;
        let mut echo = [0u8; 7];
        tunnel.read_exact(&mut echo).await?;
        assert_eq!(&echo, b"\x00binary");

        let allows = [format!("GET {target}")];
        let setup = Setup {
            allows: &allows,
            ..Setup::default()
        };
        let http_only = start_proxy(setup, &ca_pem).await?;
        let (status, tunnel) = connect(http_only.addr, &target).await?;
        assert_eq!(status, StatusCode::OK);
        let mut tunnel = TokioIo::new(tunnel.map_err(|_| "no tunnel")?);
        tunnel.write_all(b"\x00binary").await?;
        let mut rest = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), tunnel.read_to_end(&mut rest)).await?;
        assert!(
            read.is_err() || rest.is_empty(),
            "raw bytes came back: {rest:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn surrogates_are_swapped_only_on_their_hosts() -> TestResult {
    bounded(async {
        let (port, ca_pem) = start_tls_upstream().await?;
        let (log, audit) = audit_file()?;
        let surrogate = "ghp_SURROGATE0000000000000000000000000000";
        let real = "ghp_realvalue11111111111111111111111111111";
        let spec = format!("GH_TOKEN={surrogate}={real}@localhost");
        let allows = [format!("localhost:{port}"), format!("127.0.0.1:{port}")];
        let setup = Setup {
            allows: &allows,
            secrets: &[(&spec, real)],
            audit: Some(audit.clone()),
            ..Setup::default()
        };
        let proxy = start_proxy(setup, &ca_pem).await?;
        let target = format!("localhost:{port}");
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        let request = Request::get("/api")
            .header(header::HOST, target.as_str())
            .header(header::AUTHORIZATION, format!("Bearer {surrogate}"))
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&body);
        // The upstream echoes the real value; the response from a secret's host comes back
        // scrubbed to the surrogate. (What the upstream itself received is asserted on the
        // upstream side in crates/airlock/tests/proxy_secrets.rs.)
        assert!(text.contains(&format!("auth=Bearer {surrogate}")), "{text}");
        assert!(!text.contains(real), "{text}");

        // The same surrogate sent to another allowed host trips the wire.
        let other = format!("127.0.0.1:{port}");
        let (status, tunnel) = connect(proxy.addr, &other).await?;
        assert_eq!(status, StatusCode::OK);
        let tunnel = tunnel.map_err(|_| "no tunnel")?;
        let tls = TlsConnector::from(Arc::new(proxy.client_tls.clone()))
            .connect(ServerName::try_from("127.0.0.1")?, TokioIo::new(tunnel))
            .await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        let request = Request::get("/api")
            .header(header::HOST, other.as_str())
            .header(header::AUTHORIZATION, format!("Bearer {surrogate}"))
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body = response.into_body().collect().await?.to_bytes();
        assert_eq!(json(&body)["reason"], "secret_out_of_scope");
        assert!(!String::from_utf8_lossy(&body).contains(real));

        audit.flush();
        let text = std::fs::read_to_string(log.path())?;
        assert!(!text.contains(real), "the real value reached the audit log");
        assert!(text.contains(r#""secrets":["GH_TOKEN"]"#), "{text}");
        assert!(text.contains(r#""reason":"secret_out_of_scope""#), "{text}");
        Ok(())
    })
    .await
}
