//! A scripted HTTP/1.1 upstream over TLS on 127.0.0.1:0, for answers hyper's server cannot
//! give (informational `1xx` heads before the final response): on each connection it
//! reads one request head, writes back the bytes a test's script makes of that head, and
//! closes. Every head received is recorded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::pki::TestPki;

/// The most bytes of a request head read.
const HEAD_LIMIT: usize = 64 * 1024;
/// How long one connection may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Makes the raw response bytes from a request head (its text up to the blank line).
pub type Script = fn(&str) -> Vec<u8>;

/// A running scripted upstream; stops when dropped.
pub struct ScriptedUpstream {
    runtime: Option<tokio::runtime::Runtime>,
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
}

impl ScriptedUpstream {
    /// Starts the upstream, offering http/1.1 by ALPN, answering every request by `script`.
    pub fn tls(pki: &TestPki, script: Script) -> ScriptedUpstream {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("scripted upstream runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind scripted upstream");
        let addr = listener.local_addr().expect("scripted upstream addr");
        let heads = Arc::new(Mutex::new(Vec::new()));
        let acceptor = tokio_rustls::TlsAcceptor::from(pki.upstream_server_config(&[b"http/1.1"]));
        runtime.spawn(accept_loop(listener, acceptor, script, Arc::clone(&heads)));
        ScriptedUpstream {
            runtime: Some(runtime),
            addr,
            heads,
        }
    }

    /// The port the upstream listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request head received so far.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().expect("heads lock").clone()
    }
}

impl Drop for ScriptedUpstream {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    script: Script,
    heads: Arc<Mutex<Vec<String>>>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let heads = Arc::clone(&heads);
        tokio::spawn(tokio::time::timeout(CONNECTION_TIMEOUT, async move {
            let Ok(mut tls) = acceptor.accept(stream).await else {
                return;
            };
            let Some(head) = read_head(&mut tls).await else {
                return;
            };
            heads.lock().expect("heads lock").push(head.clone());
            let _ = tls.write_all(&script(&head)).await;
            let _ = tls.shutdown().await;
        }));
    }
}

/// Reads up to the end of a request head; `None` when the peer stops before.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= HEAD_LIMIT || stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// The value of header `name` in a request head (case-insensitive name), or "".
pub fn head_value(head: &str, name: &str) -> String {
    head.split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default()
}
