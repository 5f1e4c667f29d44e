//! The exporter's I/O: a thread of its own running a small tokio runtime that takes lines
//! from a bounded queue, gathers them into batches (at most [`BATCH_RECORDS`] records or
//! [`BATCH_BYTES`] bytes, sent at the latest [`BATCH_DELAY`] after its first line) and
//! posts each batch as an `ExportLogsServiceRequest` (`Content-Type:
//! application/x-protobuf`) with hyper's HTTP/1.1 client, over TLS (rustls, the system's
//! roots plus `--audit-otlp-ca`) for `https://`.
//!
//! A batch that fails (no connection, a timeout, `429`, `502`, `503`, `504`) is tried
//! again after a backoff that doubles from 250 ms up to [`MAX_BACKOFF`] (a `Retry-After`
//! of seconds is honoured within that cap); meanwhile new lines wait in the queue, and
//! once it is full they are dropped and counted. Any other answer refuses the batch for
//! good: its lines are counted as dropped. Dropping the [`Exporter`] closes the queue: the
//! thread sends what is left for at most [`SHUTDOWN_FLUSH`], then counts the rest as
//! dropped and says so on stderr.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use prost::Message;
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use tokio::sync::mpsc::{self, error::TrySendError};

use super::proto::ExportLogsServiceResponse;
use super::record::{Identity, encode};
use super::{
    BATCH_BYTES, BATCH_DELAY, BATCH_RECORDS, Config, DROPPED, MAX_BACKOFF, SHUTDOWN_FLUSH, Stats,
};

/// How long one connection or one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The first backoff after a failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// The most response body bytes read.
const RESPONSE_LIMIT: usize = 64 * 1024;

/// The handle the writer hands lines to; dropping it flushes (bounded) and stops the thread.
pub struct Exporter {
    sender: Option<mpsc::Sender<String>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<Stats>,
    /// When the shutdown flush must end (set on drop).
    deadline: Arc<Mutex<Option<Instant>>>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

/// Where the collector is.
struct Target {
    uri: Uri,
    host: String,
    port: u16,
    /// `Some` for `https://`.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Exporter {
    /// Checks `config` (the URL, the CA file) and starts the exporter's thread.
    pub fn start(config: &Config) -> Result<Exporter, String> {
        let target = target(config)?;
        let (sender, receiver) = mpsc::channel(config.queue.max(1));
        let stats = Arc::new(Stats::default());
        let deadline = Arc::new(Mutex::new(None));
        let task = Task {
            target,
            identity: Identity::this_process(),
            stats: Arc::clone(&stats),
            deadline: Arc::clone(&deadline),
            conn: None,
            failing: false,
        };
        let thread = std::thread::Builder::new()
            .name("airlock-otlp".to_owned())
            .spawn(move || task.run(receiver))
            .map_err(|e| format!("cannot start the OTLP exporter: {e}"))?;
        Ok(Exporter {
            sender: Some(sender),
            thread: Some(thread),
            stats,
            deadline,
        })
    }

    /// The exporter's counters.
    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// Queues each line of `batch` (lines ending in `\n`, as written) without waiting; a
    /// line that finds the queue full is counted as dropped. A line that itself reports
    /// drops ([`DROPPED`]) is counted but not noted again, so that notes cannot feed
    /// themselves.
    pub fn offer(&self, batch: &[u8]) {
        let Some(sender) = &self.sender else {
            return;
        };
        for line in batch.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let text = String::from_utf8_lossy(line).into_owned();
            let note = is_note(&text);
            // Counted before it can be taken, so that the count never goes below zero.
            self.stats.queued.fetch_add(1, Ordering::Relaxed);
            if let Err(TrySendError::Full(_) | TrySendError::Closed(_)) = sender.try_send(text) {
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                self.stats.drop_lines(1, note);
            }
        }
    }

    /// Lines dropped since the last call (to be noted in the audit file).
    pub(crate) fn take_unnoted(&self) -> u64 {
        self.stats.unnoted.swap(0, Ordering::Relaxed)
    }

    /// Gives back `n` lines taken by [`Exporter::take_unnoted`] whose note was not written.
    pub(crate) fn restore_unnoted(&self, n: u64) {
        self.stats.unnoted.fetch_add(n, Ordering::Relaxed);
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Ok(mut deadline) = self.deadline.lock() {
            *deadline = Some(Instant::now() + SHUTDOWN_FLUSH);
        }
        self.sender.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether `line` is the writer's own note of dropped lines.
fn is_note(line: &str) -> bool {
    // A string value cannot hold an unescaped quote: only the writer's key matches.
    line.contains(&format!("\"reason\":\"{DROPPED}\""))
}

/// Checks the URL and reads the trust anchors.
fn target(config: &Config) -> Result<Target, String> {
    let bad = |why: &str| format!("--audit-otlp {}: {why}", config.url);
    let uri: Uri = config.url.parse().map_err(|e| bad(&format!("{e}")))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(bad("the URL must start with http:// or https://")),
    };
    let host = uri.host().ok_or_else(|| bad("no host"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    if !https && config.ca.is_some() {
        return Err(bad("--audit-otlp-ca needs an https:// URL"));
    }
    let tls = if https {
        Some(tls_connector(config.ca.as_deref())?)
    } else {
        None
    };
    Ok(Target {
        uri,
        host,
        port,
        tls,
    })
}

/// The TLS client: the system's roots and the certificates of `ca`.
fn tls_connector(ca: Option<&Path>) -> Result<tokio_rustls::TlsConnector, String> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = ca {
        let failed = |why: String| format!("--audit-otlp-ca {}: {why}", path.display());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| failed(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| failed(e.to_string()))?;
        if certs.is_empty() {
            return Err(failed("holds no PEM certificate".to_owned()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| failed(e.to_string()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// What one try of a batch came to.
enum Outcome {
    /// Accepted; this many records were refused by a partial success.
    Sent(u64),
    /// Try again, after at least this long if the collector said; why it failed.
    Retry(Option<Duration>, String),
    /// Refused for good.
    Refused(String),
}

/// The exporter thread's state.
struct Task {
    target: Target,
    identity: Identity,
    stats: Arc<Stats>,
    deadline: Arc<Mutex<Option<Instant>>>,
    conn: Option<SendRequest<Full<Bytes>>>,
    /// Tries are failing (said once on stderr, and again when they work).
    failing: bool,
}

impl Task {
    fn run(self, receiver: mpsc::Receiver<String>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                eprintln!("airlock: the OTLP exporter cannot start: {e}");
                return;
            }
        };
        runtime.block_on(self.serve(receiver));
    }

    async fn serve(mut self, mut receiver: mpsc::Receiver<String>) {
        let mut batch: Vec<String> = Vec::new();
        loop {
            let Some(first) = receiver.recv().await else {
                break;
            };
            let mut bytes = first.len();
            batch.push(first);
            let due = tokio::time::Instant::now() + BATCH_DELAY;
            while batch.len() < BATCH_RECORDS && bytes < BATCH_BYTES {
                match tokio::time::timeout_at(due, receiver.recv()).await {
                    Ok(Some(line)) => {
                        bytes += line.len();
                        batch.push(line);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            let sent = self.send(&batch).await;
            self.stats
                .queued
                .fetch_sub(batch.len() as u64, Ordering::Relaxed);
            if !sent {
                // The shutdown flush ran out of time: count what is left.
                let mut left = batch.len() as u64;
                receiver.close();
                while receiver.recv().await.is_some() {
                    self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                    left += 1;
                }
                self.stats.drop_lines(left, true);
                eprintln!(
                    "airlock: {left} audit line(s) not exported to {} before shutdown",
                    self.target.uri
                );
                return;
            }
            batch.clear();
        }
    }

    /// Sends `batch` until it is accepted or refused for good (`true`), or the shutdown
    /// flush runs out of time (`false`).
    async fn send(&mut self, batch: &[String]) -> bool {
        let observed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let body = Bytes::from(encode(&self.identity, batch, observed));
        let mut backoff = FIRST_BACKOFF;
        loop {
            let Some(limit) = self.time_left() else {
                return false;
            };
            let outcome = tokio::time::timeout(limit.min(REQUEST_TIMEOUT), self.post(&body))
                .await
                .unwrap_or_else(|_| Err("timed out".to_owned()))
                .unwrap_or_else(|why| {
                    self.conn = None;
                    Outcome::Retry(None, why)
                });
            match outcome {
                Outcome::Sent(rejected) => {
                    if std::mem::take(&mut self.failing) {
                        eprintln!("airlock: OTLP export to {} works again", self.target.uri);
                    }
                    let accepted = (batch.len() as u64).saturating_sub(rejected);
                    self.stats.exported.fetch_add(accepted, Ordering::Relaxed);
                    if rejected > 0 {
                        self.stats.drop_lines(rejected, false);
                    }
                    return true;
                }
                Outcome::Refused(why) => {
                    eprintln!(
                        "airlock: the OTLP collector refused {} audit line(s): {why}",
                        batch.len()
                    );
                    self.stats.drop_lines(batch.len() as u64, false);
                    return true;
                }
                Outcome::Retry(after, why) => {
                    if !std::mem::replace(&mut self.failing, true) {
                        eprintln!(
                            "airlock: OTLP export to {} failed ({why}); trying again with \
                             backoff, lines wait in the queue",
                            self.target.uri
                        );
                    }
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    let wait = after.unwrap_or(backoff).min(MAX_BACKOFF);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    if !self.pause(wait).await {
                        return false;
                    }
                }
            }
        }
    }

    /// How long the exporter may still try: unbounded until the log closes, then what is
    /// left of the shutdown flush (`None`: nothing).
    fn time_left(&self) -> Option<Duration> {
        let deadline = self.deadline.lock().ok().and_then(|d| *d);
        match deadline {
            None => Some(Duration::MAX),
            Some(at) => Some(at.checked_duration_since(Instant::now())?).filter(|d| !d.is_zero()),
        }
    }

    /// Sleeps `wait`, in steps, waking early to give up once the shutdown flush is over;
    /// `false` when it is.
    async fn pause(&self, wait: Duration) -> bool {
        let end = Instant::now() + wait;
        loop {
            let Some(left) = self.time_left() else {
                return false;
            };
            let now = Instant::now();
            if now >= end {
                return true;
            }
            let step = (end - now).min(left).min(Duration::from_millis(100));
            tokio::time::sleep(step).await;
        }
    }

    /// One try: connects when needed, posts, reads the answer.
    async fn post(&mut self, body: &Bytes) -> Result<Outcome, String> {
        let mut conn = match self.conn.take() {
            Some(conn) if !conn.is_closed() => conn,
            _ => self.connect().await?,
        };
        conn.ready().await.map_err(|e| e.to_string())?;
        let path = self.target.uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = self.target.uri.authority().map_or("", |a| a.as_str());
        let request = Request::post(path)
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(body.clone()))
            .map_err(|e| e.to_string())?;
        let response = conn
            .send_request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let answer = Limited::new(response.into_body(), RESPONSE_LIMIT)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        self.conn = Some(conn);
        Ok(outcome(status, retry_after, &answer))
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let target = &self.target;
        let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let Some(tls) = &target.tls else {
            return handshake(tcp).await;
        };
        let name = ServerName::try_from(target.host.clone()).map_err(|e| e.to_string())?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        handshake(stream).await
    }
}

/// The HTTP/1.1 handshake over `io`; the connection is driven by a task of its own.
async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// What an answer means (OTLP/HTTP: 2xx accepted, perhaps partly; 429, 502, 503 and 504
/// retryable; anything else refused for good).
fn outcome(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> Outcome {
    if status.is_success() {
        let rejected = ExportLogsServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| u64::try_from(p.rejected_log_records).unwrap_or(0));
        return Outcome::Sent(rejected);
    }
    match status.as_u16() {
        429 | 502 | 503 | 504 => Outcome::Retry(retry_after, format!("HTTP {status}")),
        _ => Outcome::Refused(format!("HTTP {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_otlp_says() {
        assert!(matches!(
            outcome(StatusCode::OK, None, b""),
            Outcome::Sent(0)
        ));
        let partial = ExportLogsServiceResponse {
            partial_success: Some(super::super::proto::ExportLogsPartialSuccess {
                rejected_log_records: 2,
                error_message: "no".into(),
            }),
        };
        assert!(matches!(
            outcome(StatusCode::OK, None, &partial.encode_to_vec()),
            Outcome::Sent(2)
        ));
        let after = Some(Duration::from_secs(3));
        assert!(matches!(
            outcome(StatusCode::SERVICE_UNAVAILABLE, after, b""),
            Outcome::Retry(Some(d), _) if d == Duration::from_secs(3)
        ));
        assert!(matches!(
            outcome(StatusCode::TOO_MANY_REQUESTS, None, b""),
            Outcome::Retry(None, _)
        ));
        assert!(matches!(
            outcome(StatusCode::BAD_REQUEST, None, b""),
            Outcome::Refused(_)
        ));
    }

    #[test]
    fn urls_are_checked() {
        for bad in ["ftp://x/v1/logs", "/v1/logs", "http:///v1/logs"] {
            assert!(target(&Config::new(bad)).is_err(), "{bad}");
        }
        let ok = target(&Config::new("http://127.0.0.1:4318/v1/logs")).expect("http");
        assert_eq!((ok.host.as_str(), ok.port), ("127.0.0.1", 4318));
        let v6 = target(&Config::new("http://[::1]/v1/logs")).expect("v6");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 80));
        let mut with_ca = Config::new("http://127.0.0.1/v1/logs");
        with_ca.ca = Some("/nonexistent".into());
        assert!(target(&with_ca).is_err());
    }

    #[test]
    fn a_full_queue_counts_drops_but_not_of_notes() {
        // Nothing listens on port 9 of loopback: the thread holds its first batch and
        // tries again; behind it the queue of two fills.
        let mut config = Config::new("http://127.0.0.1:9/v1/logs");
        config.queue = 2;
        let exporter = Exporter::start(&config).expect("starts");
        exporter.offer("{}\n".repeat(100).as_bytes());
        std::thread::sleep(BATCH_DELAY * 2);
        exporter.offer("{}\n".repeat(5).as_bytes());
        let dropped = exporter.stats().counts().dropped;
        assert!(dropped >= 3, "{dropped} dropped");
        let note = format!("{{\"kind\":\"audit\",\"reason\":\"{DROPPED}\"}}\n");
        exporter.offer(note.as_bytes());
        assert_eq!(exporter.stats().counts().dropped, dropped + 1);
        assert_eq!(exporter.take_unnoted(), dropped);
    }
}
