//! Fuzz target for the proxy's HTTP/1 front door, whole: arbitrary bytes are written to a
//! real `airlock_proxy::Proxy` listening on 127.0.0.1 (hyper's head parser and chunked
//! framing with airlock's limits, the smuggling check, CONNECT targets and the tunnel's
//! sniffing, canonicalisation, the policy decision, JSON guards and MCP rules on bodies
//! read whole, the credential swap on streamed bodies, refusals and the audit line).
//! Allowed requests reach a plain HTTP upstream on 127.0.0.1:18080 that echoes what it
//! read. Seeds and the dictionary use the hosts below.
//!
//! Checks: no panic anywhere in the proxy (libFuzzer's panic hook aborts on a panic in
//! any task); every connection is answered or closed within 10 s of the client's last
//! byte; the real value of the secret never comes back to the client (unless the input
//! itself held a piece of it).

#![no_main]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use airlock_audit::AuditLog;
use airlock_credentials::Credentials;
use airlock_policy::CompiledPolicy;
use airlock_proxy::ca::CertificateAuthority;
use airlock_proxy::{Proxy, ProxyConfig};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

/// The upstream's fixed port: inputs name it (`http://open.test:18080/`).
const UPSTREAM: &str = "127.0.0.1:18080";
/// The real value of the one secret; its surrogate is in the policy.
const REAL: &str = "ghp_R3alValueOfTheTokenXYZ0123456789abc";
const POLICY: &str = r#"version: 1
network:
  allow:
    - host: open.test
      ports: [18080]
    - host: guarded.test
      ports: [18080]
      json_deny:
        - path: /tools/*/type
          values: ["web_search*"]
    - host: mcp.test
      ports: [18080]
mcp:
  - host: mcp.test
    path: /mcp
    tools:
      allow: [read_file]
      deny: [exec]
      args: {read_file: {path: ["/workspace/**"]}}
secrets:
  TOKEN:
    value: unused
    hosts: [open.test]
    surrogate: "ghp_SurrogateOfTheTokenXYZ012345678def"
    body: true
"#;

struct Harness {
    runtime: Runtime,
    proxy: SocketAddr,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let proxy = runtime.block_on(start());
        Harness { runtime, proxy }
    })
}

/// Starts the upstream and the proxy; returns the proxy's address.
async fn start() -> SocketAddr {
    let upstream = TcpListener::bind(UPSTREAM).await.expect("127.0.0.1:18080 is free");
    tokio::spawn(serve_upstream(upstream));
    let policy = airlock_policy::load::load_str("fuzz.yaml", POLICY).expect("the policy loads");
    let values = policy.secrets.iter().map(|s| (s.clone(), REAL.to_owned())).collect();
    let compiled = CompiledPolicy::compile(&policy).expect("the policy compiles");
    let (ca, _) = CertificateAuthority::generate().expect("a CA");
    let credentials = Credentials::new(values).expect("credentials");
    let audit = AuditLog::discarding().expect("an audit log");
    let mut config = ProxyConfig::new(compiled, ca, credentials, audit);
    for host in ["open.test", "guarded.test", "mcp.test"] {
        config.resolve.insert(host.to_owned(), [127, 0, 0, 1].into());
    }
    let proxy = Proxy::new(config).expect("the proxy builds");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    address
}

async fn serve_upstream(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let service = service_fn(echo);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Answers with the body it read (at most 4 MiB).
async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = Limited::new(request.into_body(), 4 << 20);
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    Ok(Response::new(Full::new(bytes)))
}

fuzz_target!(|data: &[u8]| {
    let harness = harness();
    harness.runtime.block_on(async {
        let mut stream = TcpStream::connect(harness.proxy).await.expect("the proxy accepts");
        let _ = stream.write_all(data).await;
        let _ = stream.shutdown().await;
        let mut answer = Vec::new();
        let read = stream.read_to_end(&mut answer);
        let done = tokio::time::timeout(Duration::from_secs(10), read).await;
        assert!(done.is_ok(), "neither answered nor closed within 10 s");
        // (Unless the input itself holds a piece of it: then the client knew it.)
        let real = REAL.as_bytes();
        let told = data.windows(9).any(|w| w == b"R3alValue");
        assert!(
            told || !answer.windows(real.len()).any(|w| w == real),
            "the real value came back to the client"
        );
    });
});
