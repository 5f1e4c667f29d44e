//! In-process upstream servers on 127.0.0.1:0: TLS (h2 and http/1.1 by ALPN) or plain
//! HTTP. Every accepted connection and every request is counted and recorded, so tests can
//! assert that a refused request never reached the upstream.
//!
//! Endpoints: `/bytes/N` answers N bytes of [`pattern_bytes`]; `/compressed` answers with
//! `content-encoding: gzip` whatever was asked for; `/reflect` answers the
//! received `x-reflect` header value in a response header (`x-reflected`) and, in a text
//! body, in every encoding of [`super::encodings::reflect_document`]; `/coded-echo?list=gzip,br`
//! (or `?lines=identity,gzip`) echoes the request's headers as JSON coded with each listed
//! coding in turn, declared in one `Content-Encoding` value (`list`) or one line per
//! coding (`lines`). Three echo the received `Authorization` value outside the body:
//! `/reason-echo` in the status reason phrase (`200 Echo <value>`, HTTP/1.1 only),
//! `/trailers-echo` in an `x-echo` trailer after a short body (`end-of-body`; over
//! HTTP/1.1 chunked, when the request says `TE: trailers`), `/ws-echo` in a `101`
//! answer's `x-echo` header and reason phrase (the upgraded connection is then dropped).
//! Every other path echoes the
//! request as JSON: `{method, version, path, query, authority, headers: [[name, value]...],
//! body_len, body}` (`path` and `query` exactly as received; `body` only when UTF-8 and at
//! most 64 KiB).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::body::{Body, Frame};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::pki::TestPki;

/// The largest `/bytes/N` or request body the upstream handles.
const MAX_BYTES: usize = 64 * 1024 * 1024;
/// Bodies up to this size are echoed back as text.
const ECHO_BODY_LIMIT: usize = 64 * 1024;

/// Deterministic content of `/bytes/N`.
pub fn pattern_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// One request as the upstream received it.
#[derive(Clone, Debug)]
pub struct Hit {
    /// Request method.
    pub method: String,
    /// Path and query exactly as received.
    pub target: String,
    /// `Host` header, or the `:authority` for h2.
    pub authority: String,
    /// Header name/value pairs in received order.
    pub headers: Vec<(String, String)>,
}

impl Hit {
    /// Every value of header `name` (case-insensitive), in received order.
    pub fn header_values(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[derive(Default)]
struct Record {
    connections: AtomicUsize,
    hits: Mutex<Vec<Hit>>,
    /// Every request body byte received, in arrival order (bodies cut short included),
    /// up to [`RECEIVED_LIMIT`]; request trailers as `name: value` lines.
    received: Mutex<Vec<u8>>,
}

/// The most body bytes [`Upstream::received`] keeps.
const RECEIVED_LIMIT: usize = 32 * 1024 * 1024;

/// A running upstream server; stops when dropped.
pub struct Upstream {
    runtime: Option<tokio::runtime::Runtime>,
    addr: SocketAddr,
    record: Arc<Record>,
}

impl Upstream {
    /// Starts a TLS upstream offering h2 and http/1.1.
    pub fn tls(pki: &TestPki) -> Upstream {
        Upstream::start(Some(pki.upstream_server_config(&[b"h2", b"http/1.1"])))
    }

    /// Starts a TLS upstream offering http/1.1 only (for what only HTTP/1.1 carries: a
    /// status reason phrase, chunked trailers).
    pub fn tls_http1(pki: &TestPki) -> Upstream {
        Upstream::start(Some(pki.upstream_server_config(&[b"http/1.1"])))
    }

    /// Starts a plain-HTTP upstream (http/1.1 and h2 prior knowledge).
    pub fn plain() -> Upstream {
        Upstream::start(None)
    }

    fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Upstream {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("upstream runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let record = Arc::new(Record::default());
        let accept_record = Arc::clone(&record);
        runtime.spawn(accept_loop(listener, tls, accept_record));
        Upstream {
            runtime: Some(runtime),
            addr,
            record,
        }
    }

    /// The port the upstream listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.record.connections.load(Ordering::SeqCst)
    }

    /// Requests received so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.record.hits.lock().expect("hits lock").clone()
    }

    /// Every request body byte received so far (from every request, also those whose
    /// body was cut short), up to 32 MiB, request trailers as `name: value` lines; `/sink`
    /// bodies are only counted.
    pub fn received(&self) -> Vec<u8> {
        self.record.received.lock().expect("received lock").clone()
    }

    /// Number of requests received so far.
    pub fn hit_count(&self) -> usize {
        self.record.hits.lock().expect("hits lock").len()
    }

    /// Asserts nothing reached this upstream: no request and no TCP connection.
    pub fn assert_untouched(&self, what: &str) {
        assert_eq!(
            self.hit_count(),
            0,
            "{what}: a refused request reached the upstream: {:?}",
            self.hits()
        );
        assert_eq!(
            self.connections(),
            0,
            "{what}: the proxy opened a connection to the upstream for a refused destination"
        );
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    record: Arc<Record>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        record.connections.fetch_add(1, Ordering::SeqCst);
        let record = Arc::clone(&record);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let record = Arc::clone(&record);
                async move { Ok::<_, Infallible>(respond(req, &record).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            match acceptor {
                Some(acceptor) => {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = builder
                        .serve_connection_with_upgrades(TokioIo::new(tls), service)
                        .await;
                }
                None => {
                    let _ = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
    }
}

/// A body of frames given in advance, of no declared length (chunked over HTTP/1.1).
pub struct FramesBody(VecDeque<Frame<Bytes>>);

impl FramesBody {
    /// A body of `frames`, in order (data, then trailers).
    pub fn new(frames: impl IntoIterator<Item = Frame<Bytes>>) -> FramesBody {
        FramesBody(frames.into_iter().collect())
    }
}

impl Body for FramesBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.get_mut().0.pop_front().map(Ok))
    }
}

/// What the upstream answers with.
type UpstreamBody = Either<Full<Bytes>, FramesBody>;

/// Answers one request: [`handle`], then the routes that echo the `Authorization` value
/// outside the body reshape its answer.
async fn respond(req: Request<Incoming>, record: &Record) -> Response<UpstreamBody> {
    let path = req.uri().path().to_owned();
    let authorization = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .unwrap_or_default();
    let response = handle(req, record).await;
    let echo = || hyper::header::HeaderValue::from_str(&authorization).expect("echo value");
    let reason = |prefix: &str| {
        hyper::ext::ReasonPhrase::try_from(format!("{prefix} {authorization}")).expect("reason")
    };
    match path.as_str() {
        "/reason-echo" => {
            let mut response = response.map(Either::Left);
            response.extensions_mut().insert(reason("Echo"));
            response
        }
        "/trailers-echo" => {
            let mut trailers = hyper::HeaderMap::new();
            trailers.insert("x-echo", echo());
            let frames = [
                Frame::data(Bytes::from_static(b"end-of-body")),
                Frame::trailers(trailers),
            ];
            Response::builder()
                .header("content-type", "text/plain")
                .header("trailer", "x-echo")
                .body(Either::Right(FramesBody(frames.into())))
                .expect("trailers response")
        }
        "/ws-echo" => {
            let mut response = Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header("upgrade", "websocket")
                .header("connection", "upgrade")
                .header("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
                .header("x-echo", echo())
                .body(Either::Left(Full::new(Bytes::new())))
                .expect("101 response");
            response.extensions_mut().insert(reason("Switching"));
            response
        }
        _ => response.map(Either::Left),
    }
}

/// `data` coded with each of `codings` in turn (`identity` leaves it as it is).
fn encode_layers(mut data: Vec<u8>, codings: &[&str]) -> Vec<u8> {
    use std::io::Write as _;
    for coding in codings {
        data = match *coding {
            "gzip" => {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                encoder.write_all(&data).expect("gzip");
                encoder.finish().expect("gzip end")
            }
            "br" => {
                let mut out = Vec::new();
                let mut encoder = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
                encoder.write_all(&data).expect("br");
                drop(encoder);
                out
            }
            "zstd" => zstd::encode_all(data.as_slice(), 3).expect("zstd"),
            "identity" => data,
            other => panic!("no such coding in the test upstream: {other}"),
        };
    }
    data
}

/// The `/coded-echo` answer: `echo` coded as the query says (`list=` one header value,
/// `lines=` one header line per coding).
fn coded_echo(query: &str, echo: &Value) -> Response<Full<Bytes>> {
    let (form, codings) = query.split_once('=').unwrap_or(("list", ""));
    let codings: Vec<&str> = codings.split(',').filter(|c| !c.is_empty()).collect();
    let body = encode_layers(echo.to_string().into_bytes(), &codings);
    let mut builder = Response::builder()
        .header("content-type", "application/json")
        .header("x-upstream", "coded-echo");
    if form == "lines" {
        for coding in &codings {
            builder = builder.header("content-encoding", *coding);
        }
    } else {
        builder = builder.header("content-encoding", codings.join(", "));
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .expect("coded-echo response")
}

async fn handle(req: Request<Incoming>, record: &Record) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            parts
                .headers
                .get(hyper::header::HOST)
                .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        })
        .unwrap_or_default();
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    record.hits.lock().expect("hits lock").push(Hit {
        method: parts.method.as_str().to_string(),
        target: target.clone(),
        authority: authority.clone(),
        headers: headers.clone(),
    });

    let path = parts.uri.path();
    let sink = path == "/sink";
    let (body, body_len) = match read_body(body, record, sink).await {
        Some(read) => read,
        None => return status_response(StatusCode::BAD_REQUEST, "body unreadable"),
    };

    if let Some(count) = path.strip_prefix("/bytes/") {
        return match count.parse::<usize>() {
            Ok(n) if n <= MAX_BYTES => Response::builder()
                .header("content-type", "application/octet-stream")
                .header("x-upstream", "bytes")
                .body(Full::new(Bytes::from(pattern_bytes(n))))
                .expect("bytes response"),
            _ => status_response(StatusCode::BAD_REQUEST, "bad count"),
        };
    }

    if path == "/compressed" {
        // Claims gzip whatever the request asked for (a server ignoring Accept-Encoding).
        return Response::builder()
            .header("content-type", "text/plain")
            .header("content-encoding", "gzip")
            .header("x-upstream", "compressed")
            .body(Full::new(Bytes::from_static(b"\x1f\x8b not really gzip")))
            .expect("compressed response");
    }
    if path == "/gzip-echo" {
        // A real gzip body echoing the request's headers (a server that compresses
        // whatever the request asked for).
        let echo = json!({"headers": headers.iter().map(|(n, v)| vec![n.clone(), v.clone()]).collect::<Vec<_>>()});
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut encoder, echo.to_string().as_bytes()).expect("gzip");
        return Response::builder()
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .header("x-upstream", "gzip-echo")
            .body(Full::new(Bytes::from(encoder.finish().expect("gzip end"))))
            .expect("gzip-echo response");
    }
    if path == "/coded-echo" {
        let echo = json!({"headers": headers.iter().map(|(n, v)| vec![n.clone(), v.clone()]).collect::<Vec<_>>()});
        return coded_echo(parts.uri.query().unwrap_or_default(), &echo);
    }
    if path == "/reflect" {
        let value = headers
            .iter()
            .find(|(n, _)| n == "x-reflect")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        return Response::builder()
            .header("content-type", "text/plain")
            .header("x-upstream", "reflect")
            .header("x-reflected", value.as_str())
            .body(Full::new(Bytes::from(super::encodings::reflect_document(
                &value,
            ))))
            .expect("reflect response");
    }

    let echoed_body = if body.len() <= ECHO_BODY_LIMIT {
        std::str::from_utf8(&body).ok().map(str::to_string)
    } else {
        None
    };
    let echo: Value = json!({
        "method": parts.method.as_str(),
        "version": format!("{:?}", parts.version),
        "path": path,
        "query": parts.uri.query(),
        "authority": authority,
        "headers": headers.iter().map(|(n, v)| vec![n.clone(), v.clone()]).collect::<Vec<_>>(),
        "body_len": body_len,
        "body": echoed_body,
    });
    Response::builder()
        .header("content-type", "application/json")
        .header("x-upstream", "echo")
        .body(Full::new(Bytes::from(echo.to_string())))
        .expect("echo response")
}

/// Reads a request body frame by frame, logging every byte in `record.received` as it
/// arrives; keeps it (up to `MAX_BYTES`) unless `sink`. `None` when it fails or is too big.
async fn read_body(mut body: Incoming, record: &Record, sink: bool) -> Option<(Bytes, usize)> {
    let mut kept = Vec::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.ok()?;
        let Some(data) = frame.data_ref() else {
            // Trailers are recorded too, as `name: value` lines.
            if let Some(trailers) = frame.trailers_ref() {
                let mut received = record.received.lock().expect("received lock");
                for (name, value) in trailers {
                    received.extend_from_slice(format!("{name}: ").as_bytes());
                    received.extend_from_slice(value.as_bytes());
                    received.extend_from_slice(b"\r\n");
                }
            }
            continue;
        };
        len += data.len();
        if !sink {
            let mut received = record.received.lock().expect("received lock");
            let room = RECEIVED_LIMIT.saturating_sub(received.len());
            received.extend_from_slice(&data[..data.len().min(room)]);
            drop(received);
            if kept.len() + data.len() > MAX_BYTES {
                return None;
            }
            kept.extend_from_slice(data);
        }
    }
    Some((Bytes::from(kept), len))
}

fn status_response(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from_static(text.as_bytes())))
        .expect("status response")
}
