//! Hand-crafted clients for bypass shapes: bytes written straight to the proxy port, a
//! CONNECT followed by TLS with a chosen SNI and hand-written HTTP/1.1 bytes, an h2 request
//! with a chosen `:authority`, and a slow (slowloris) sender. Every read is bounded in time.
//! The WebSocket clients (upgrade, frames, scripted sessions) are in [`websocket`].

mod websocket;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::pki::{TestPki, provider};

pub use websocket::{
    ServerFrame, WS_ACCEPT, WS_KEY, WsStep, WsTranscript, WsUpgrade, websocket_echo,
    websocket_script,
};

/// How long a whole exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);
/// After a complete response, how long [`connect_tls_expect_close`] and
/// [`plain_expect_close`] wait for the peer to close.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// Responses larger than this are cut (tests only look at small ones).
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// A response read off a raw connection.
#[derive(Debug, Default)]
pub struct RawResponse {
    /// Status code, 0 when no status line arrived.
    pub status: u16,
    /// Header name (lower-case) / value pairs.
    pub headers: Vec<(String, String)>,
    /// Body (chunked framing removed when the response was chunked).
    pub body: Vec<u8>,
    /// Trailer name (lower-case) / value pairs (h2 responses only; over HTTP/1.1 they are
    /// in `raw`).
    pub trailers: Vec<(String, String)>,
    /// Whether the peer closed the connection (for the `*_expect_close` functions: within a
    /// few seconds after a complete response).
    pub closed: bool,
    /// Every byte received.
    pub raw: Vec<u8>,
}

impl RawResponse {
    /// First value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics with the raw bytes when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.raw)
            )
        })
    }
}

/// Where a request sent through a CONNECT tunnel was answered.
#[derive(Debug)]
pub enum TunnelOutcome {
    /// The proxy refused the CONNECT itself with this response.
    RefusedOnConnect(RawResponse),
    /// The tunnel was set up and this response came inside TLS.
    InsideTls(RawResponse),
    /// The tunnel was set up but TLS (or h2) failed; the text says how.
    TlsFailed(String),
}

impl TunnelOutcome {
    /// The response, wherever it was given; panics on a TLS failure.
    pub fn response(self) -> RawResponse {
        match self {
            TunnelOutcome::RefusedOnConnect(r) | TunnelOutcome::InsideTls(r) => r,
            TunnelOutcome::TlsFailed(e) => panic!("TLS through the tunnel failed: {e}"),
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses a response head and tells whether the body is complete in `raw`.
fn parse(raw: &[u8]) -> Option<(RawResponse, bool)> {
    let head_end = find(raw, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[head_end + 4..];
    let mut response = RawResponse {
        status,
        headers,
        ..RawResponse::default()
    };
    let complete = if let Some(length) = response
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        response.body = rest[..rest.len().min(length)].to_vec();
        rest.len() >= length
    } else if response
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        let (body, done) = dechunk(rest);
        response.body = body;
        done
    } else {
        response.body = rest.to_vec();
        false
    };
    Some((response, complete))
}

/// Removes chunked framing; tells whether the last chunk arrived.
fn dechunk(mut data: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    for _ in 0..100_000 {
        let Some(line_end) = find(data, b"\r\n") else {
            return (body, false);
        };
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let Ok(size) = usize::from_str_radix(size_hex, 16) else {
            return (body, false);
        };
        data = &data[line_end + 2..];
        if size == 0 {
            return (body, true);
        }
        if data.len() < size + 2 {
            body.extend_from_slice(&data[..data.len().min(size)]);
            return (body, false);
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
    (body, false)
}

/// Reads one response (bounded by `deadline`), then waits briefly to see whether the peer
/// closes.
async fn read_response<S: AsyncRead + Unpin>(
    stream: &mut S,
    deadline: Instant,
    close_wait: Duration,
) -> RawResponse {
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut closed = false;
    let mut complete_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let limit = match complete_at {
            Some(at) => (at + close_wait).min(deadline),
            None => deadline,
        };
        if (complete_at.is_some() && close_wait.is_zero())
            || now >= limit
            || raw.len() > MAX_RESPONSE
        {
            break;
        }
        match tokio::time::timeout(limit - now, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => {
                raw.extend_from_slice(&buf[..n]);
                if complete_at.is_none() && parse(&raw).is_some_and(|(_, done)| done) {
                    complete_at = Some(Instant::now());
                }
            }
            Err(_) => break,
        }
    }
    let mut response = parse(&raw).map(|(r, _)| r).unwrap_or_default();
    response.closed = closed;
    response.raw = raw;
    response
}

/// Sends `request` bytes straight to the proxy port and reads the answer.
pub fn plain(proxy_port: u16, request: &[u8]) -> RawResponse {
    plain_with_close_wait(proxy_port, request, Duration::ZERO)
}

/// As [`plain`], then waits a few seconds to see whether the proxy closes.
pub fn plain_expect_close(proxy_port: u16, request: &[u8]) -> RawResponse {
    plain_with_close_wait(proxy_port, request, CLOSE_WAIT)
}

fn plain_with_close_wait(proxy_port: u16, request: &[u8], close_wait: Duration) -> RawResponse {
    runtime().block_on(async {
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        let mut stream = TcpStream::connect(("127.0.0.1", proxy_port))
            .await
            .expect("connect to proxy");
        // A write error means the proxy already closed; the read below reports that.
        let _ = stream.write_all(request).await;
        read_response(&mut stream, deadline, close_wait).await
    })
}

/// Sends `CONNECT target` (15 s at most); on 200 returns the stream positioned after the
/// answer's head, for a test to speak in the tunnel itself; otherwise the answer as text.
pub async fn open_tunnel(proxy_port: u16, target: &str) -> Result<TcpStream, String> {
    connect(proxy_port, target, Instant::now() + EXCHANGE_TIMEOUT)
        .await
        .map_err(|answer| format!("CONNECT: {}", String::from_utf8_lossy(&answer.raw)))
}

/// Sends `CONNECT target`; on 200 returns the stream positioned after the answer's head,
/// otherwise the refusal.
async fn connect(
    proxy_port: u16,
    target: &str,
    deadline: Instant,
) -> Result<TcpStream, RawResponse> {
    let mut stream = TcpStream::connect(("127.0.0.1", proxy_port))
        .await
        .expect("connect to proxy");
    let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write CONNECT");
    let (head, response) = match read_head(&mut stream, deadline).await {
        Ok(read) => read,
        Err(response) => return Err(response),
    };
    if response.status == 200 {
        return Ok(stream);
    }
    // A refusal: read its body too, then see whether the proxy closes.
    let mut rest = read_response(
        &mut ChainedHead::new(head, &mut stream),
        deadline,
        Duration::ZERO,
    )
    .await;
    rest.raw.truncate(MAX_RESPONSE);
    Err(rest)
}

/// Reads a response head byte by byte (so no byte after it is consumed); on a close or
/// timeout before the head ends, returns what arrived as a closed response.
async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    deadline: Instant,
) -> Result<(Vec<u8>, RawResponse), RawResponse> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, stream.read(&mut byte)).await {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => {
                let mut response = parse(&head).map(|(r, _)| r).unwrap_or_default();
                response.closed = true;
                response.raw = head;
                return Err(response);
            }
        }
    }
    let (response, _) = parse(&head).unwrap_or_default();
    Ok((head, response))
}

/// Replays an already-read head before the rest of the stream.
struct ChainedHead<'a, S> {
    head: Vec<u8>,
    offset: usize,
    stream: &'a mut S,
}

impl<'a, S> ChainedHead<'a, S> {
    fn new(head: Vec<u8>, stream: &'a mut S) -> Self {
        ChainedHead {
            head,
            offset: 0,
            stream,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ChainedHead<'_, S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.offset < self.head.len() {
            let n = (self.head.len() - self.offset).min(buf.remaining());
            let start = self.offset;
            buf.put_slice(&self.head[start..start + n]);
            self.offset += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut *self.stream).poll_read(cx, buf)
    }
}

/// The server name a client presents.
#[derive(Clone, Copy, Debug)]
pub enum Sni<'a> {
    /// Send this name (an IP address sends none, as TLS clients do) and verify the proxy's
    /// certificate for it against the proxy CA.
    Verified(&'a str),
    /// Send no SNI and accept any certificate (for targets no name can express).
    NoneUnverified,
}

async fn tls_over<S: AsyncRead + AsyncWrite + Unpin>(
    pki: &TestPki,
    stream: S,
    sni: Sni<'_>,
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<S>, String> {
    let (config, name) = match sni {
        Sni::Verified(name) => (pki.client_config_trusting_proxy(alpn), name),
        Sni::NoneUnverified => (insecure_client_config(alpn), "sni.invalid"),
    };
    let server_name =
        ServerName::try_from(name.to_string()).map_err(|e| format!("bad SNI {name:?}: {e}"))?;
    tokio_rustls::TlsConnector::from(config)
        .connect(server_name, stream)
        .await
        .map_err(|e| format!("TLS handshake ({sni:?}): {e}"))
}

/// CONNECTs to `connect_target`, does TLS with `sni` (trusting the proxy CA), writes
/// `request` and reads the answer.
pub fn connect_tls(
    proxy_port: u16,
    pki: &TestPki,
    connect_target: &str,
    sni: &str,
    request: &[u8],
) -> TunnelOutcome {
    tunnel_exchange(
        proxy_port,
        pki,
        connect_target,
        Sni::Verified(sni),
        request,
        Duration::ZERO,
    )
}

/// As [`connect_tls`], then waits a few seconds to see whether the proxy closes.
pub fn connect_tls_expect_close(
    proxy_port: u16,
    pki: &TestPki,
    connect_target: &str,
    sni: &str,
    request: &[u8],
) -> TunnelOutcome {
    tunnel_exchange(
        proxy_port,
        pki,
        connect_target,
        Sni::Verified(sni),
        request,
        CLOSE_WAIT,
    )
}

/// CONNECTs to `connect_target`, does TLS with the given SNI choice, writes `request` and
/// reads the answer, then waits `close_wait` for a close.
pub fn tunnel_exchange(
    proxy_port: u16,
    pki: &TestPki,
    connect_target: &str,
    sni: Sni<'_>,
    request: &[u8],
    close_wait: Duration,
) -> TunnelOutcome {
    runtime().block_on(async {
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        let stream = match connect(proxy_port, connect_target, deadline).await {
            Ok(stream) => stream,
            Err(refusal) => return TunnelOutcome::RefusedOnConnect(refusal),
        };
        let mut tls = match tls_over(pki, stream, sni, &[b"http/1.1"]).await {
            Ok(tls) => tls,
            Err(e) => return TunnelOutcome::TlsFailed(e),
        };
        let _ = tls.write_all(request).await;
        let _ = tls.flush().await;
        TunnelOutcome::InsideTls(read_response(&mut tls, deadline, close_wait).await)
    })
}

/// CONNECTs to `connect_target`, does TLS with `sni` and ALPN h2, and sends one h2 GET for
/// `uri` (whose authority becomes `:authority`).
pub fn connect_h2(
    proxy_port: u16,
    pki: &TestPki,
    connect_target: &str,
    sni: &str,
    uri: &str,
) -> TunnelOutcome {
    let request = hyper::Request::get(uri)
        .body(Empty::<Bytes>::new())
        .expect("request");
    connect_h2_request(proxy_port, pki, connect_target, sni, request)
}

/// The name/value pairs of `headers`, names lower-case.
fn header_pairs(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// As [`connect_h2`], sending `request` (its headers and body included); the response's
/// trailers are kept.
pub fn connect_h2_request<B>(
    proxy_port: u16,
    pki: &TestPki,
    connect_target: &str,
    sni: &str,
    request: hyper::Request<B>,
) -> TunnelOutcome
where
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    runtime().block_on(async {
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        let stream = match connect(proxy_port, connect_target, deadline).await {
            Ok(stream) => stream,
            Err(refusal) => return TunnelOutcome::RefusedOnConnect(refusal),
        };
        let tls = match tls_over(pki, stream, Sni::Verified(sni), &[b"h2"]).await {
            Ok(tls) => tls,
            Err(e) => return TunnelOutcome::TlsFailed(e),
        };
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return TunnelOutcome::TlsFailed("the proxy did not negotiate h2".to_string());
        }
        let exchange = async {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                    .await
                    .map_err(|e| format!("h2 handshake: {e}"))?;
            tokio::spawn(connection);
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("h2 request: {e}"))?;
            let status = response.status().as_u16();
            let headers = header_pairs(response.headers());
            let collected = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("h2 body: {e}"))?;
            let trailers = collected.trailers().map(header_pairs).unwrap_or_default();
            let body = collected.to_bytes().to_vec();
            Ok::<_, String>(RawResponse {
                status,
                headers,
                raw: body.clone(),
                body,
                trailers,
                closed: false,
            })
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, exchange).await {
            Ok(Ok(response)) => TunnelOutcome::InsideTls(response),
            Ok(Err(e)) => TunnelOutcome::TlsFailed(e),
            Err(_) => TunnelOutcome::TlsFailed("h2 exchange timed out".to_string()),
        }
    })
}

/// Sends `prefix` then one more header byte every `interval`, never finishing the head,
/// until the proxy closes the connection or `bound` passes; returns how long the proxy
/// kept the connection open (`None`: still open at `bound`).
pub fn slowloris(
    proxy_port: u16,
    prefix: &[u8],
    interval: Duration,
    bound: Duration,
) -> Option<Duration> {
    runtime().block_on(async {
        let started = Instant::now();
        let mut stream = TcpStream::connect(("127.0.0.1", proxy_port))
            .await
            .expect("connect to proxy");
        if stream.write_all(prefix).await.is_err() {
            return Some(started.elapsed());
        }
        let mut buf = [0u8; 4096];
        let max_steps = (bound.as_millis() / interval.as_millis().max(1)) as usize + 2;
        for _ in 0..max_steps {
            if started.elapsed() >= bound {
                return None;
            }
            // Any answer (e.g. 408) followed by a close, or a plain close, ends the test.
            match tokio::time::timeout(interval, stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
                Ok(Ok(_)) => continue,
                Err(_) => {}
            }
            if stream.write_all(b"a").await.is_err() {
                return Some(started.elapsed());
            }
        }
        None
    })
}

/// Accepts any server certificate: only for probing refusals where no name can be verified.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn insecure_client_config(alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let provider = provider();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        .with_no_client_auth();
    config.enable_sni = false;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}
