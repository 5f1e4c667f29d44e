//! Real clients as subprocesses, each bounded in time: curl, python3 urllib, git.
//! Proxy-related environment variables are removed so only the explicit settings apply.

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::pki::TestPki;
use super::proxy::Proxy;

/// Environment variables that would redirect or bypass a client's proxy.
const PROXY_ENV: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
];

/// The outcome of a bounded subprocess run.
pub struct BoundedOutput {
    /// Exit status, `None` when the process was killed at the deadline.
    pub status: Option<ExitStatus>,
    /// Everything written on stdout.
    pub stdout: Vec<u8>,
    /// Everything written on stderr (lossy UTF-8).
    pub stderr: String,
}

/// Runs `command` with piped output; kills it (and reaps it) after `timeout`.
pub fn run_bounded(command: &mut Command, timeout: Duration) -> BoundedOutput {
    for var in PROXY_ENV {
        command.env_remove(var);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let mut stdout = child.stdout.take().expect("stdout pipe");
    let mut stderr = child.stderr.take().expect("stderr pipe");
    let out_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    BoundedOutput {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned(),
    }
}

/// Which HTTP version curl should speak.
#[derive(Clone, Copy, Debug)]
pub enum HttpVersion {
    /// `--http1.1`
    Http1,
    /// `--http2` (ALPN h2 over TLS)
    Http2,
}

/// One curl invocation through the proxy.
pub struct CurlRequest<'a> {
    /// Target URL.
    pub url: &'a str,
    /// Request method (`-X`); `None` for curl's default.
    pub method: Option<&'a str>,
    /// Extra request headers, `Name: value`.
    pub headers: &'a [&'a str],
    /// Request body (`--data-binary`).
    pub body: Option<&'a str>,
    /// HTTP version.
    pub version: HttpVersion,
}

impl<'a> CurlRequest<'a> {
    /// A GET of `url` over HTTP/1.1.
    pub fn get(url: &'a str) -> CurlRequest<'a> {
        CurlRequest {
            url,
            method: None,
            headers: &[],
            body: None,
            version: HttpVersion::Http1,
        }
    }
}

/// What curl got back.
#[derive(Debug)]
pub struct CurlResponse {
    /// curl's exit code (`-1` when killed at the deadline).
    pub exit: i32,
    /// `%{http_code}` of the final response (0 when none).
    pub status: u16,
    /// `%{http_connect}`: status of the proxy's CONNECT answer (0 without CONNECT).
    pub connect_status: u16,
    /// `%{http_version}` of the final response.
    pub http_version: String,
    /// Headers of the final response.
    pub headers: Vec<(String, String)>,
    /// Every response head curl received (`-D`), CONNECT answer included.
    pub header_dump: String,
    /// Body of the final response.
    pub body: Vec<u8>,
    /// curl's stderr.
    pub stderr: String,
}

impl CurlResponse {
    /// The body parsed as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}\ncurl stderr: {}",
                String::from_utf8_lossy(&self.body),
                self.stderr
            )
        })
    }
}

/// Splits the last header block of a `-D` dump into name/value pairs.
fn last_header_block(dump: &str) -> Vec<(String, String)> {
    let blocks: Vec<&str> = dump
        .split("\r\n\r\n")
        .filter(|b| b.trim_start().starts_with("HTTP/"))
        .collect();
    let Some(last) = blocks.last() else {
        return Vec::new();
    };
    last.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

/// [`curl`]: a GET of `url` over HTTP/1.1 with extra `headers` (`Name: value`).
pub fn curl_get(proxy: &Proxy, pki: &TestPki, url: &str, headers: &[&str]) -> CurlResponse {
    curl(
        proxy,
        pki,
        &CurlRequest {
            headers,
            ..CurlRequest::get(url)
        },
    )
}

/// [`curl`]: a POST of `body` (curl `--data-binary`, so `@FILE` reads a file) to `url` as
/// `Content-Type: application/json`, with extra `headers` (`Name: value`).
pub fn curl_post_json(
    proxy: &Proxy,
    pki: &TestPki,
    url: &str,
    body: &str,
    headers: &[&str],
) -> CurlResponse {
    let mut all = vec!["Content-Type: application/json"];
    all.extend_from_slice(headers);
    curl(
        proxy,
        pki,
        &CurlRequest {
            method: Some("POST"),
            headers: &all,
            body: Some(body),
            ..CurlRequest::get(url)
        },
    )
}

/// Runs curl through `proxy`, trusting only the proxy CA; at most 30 s.
pub fn curl(proxy: &Proxy, pki: &TestPki, request: &CurlRequest<'_>) -> CurlResponse {
    let scratch = tempfile::tempdir().expect("curl tempdir");
    let body_file = scratch.path().join("body");
    let header_file = scratch.path().join("headers");
    let mut command = crate::support::tool("curl");
    command
        .arg("-q")
        .args(["-sS", "--max-time", "25"])
        .args(["--noproxy", ""])
        .arg("-x")
        .arg(proxy.url())
        .arg("--cacert")
        .arg(&pki.proxy_ca_cert)
        .arg("-o")
        .arg(&body_file)
        .arg("-D")
        .arg(&header_file)
        .args(["-w", "%{http_code} %{http_connect} %{http_version}"]);
    command.arg(match request.version {
        HttpVersion::Http1 => "--http1.1",
        HttpVersion::Http2 => "--http2",
    });
    if let Some(method) = request.method {
        command.args(["-X", method]);
    }
    for header in request.headers {
        command.args(["-H", header]);
    }
    if let Some(body) = request.body {
        command.args(["--data-binary", body]);
    }
    command.arg(request.url);
    let output = run_bounded(&mut command, Duration::from_secs(30));
    let written = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut fields = written.split_whitespace();
    let status = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let connect_status = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let http_version = fields.next().unwrap_or_default().to_string();
    let dump = std::fs::read_to_string(&header_file).unwrap_or_default();
    CurlResponse {
        exit: output.status.and_then(|s| s.code()).unwrap_or(-1),
        status,
        connect_status,
        http_version,
        headers: last_header_block(&dump),
        header_dump: dump,
        body: std::fs::read(&body_file).unwrap_or_default(),
        stderr: output.stderr,
    }
}

const URLLIB_SCRIPT: &str = r#"
import json, ssl, sys, urllib.error, urllib.request
proxy, cafile, url, method, headers = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=cafile)
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
    urllib.request.HTTPSHandler(context=ctx))
req = urllib.request.Request(url, method=method, headers=json.loads(headers))
try:
    with opener.open(req, timeout=20) as r:
        status, hdrs, body = r.status, r.getheaders(), r.read()
except urllib.error.HTTPError as e:
    status, hdrs, body = e.code, list(e.headers.items()), e.read()
except Exception as e:
    print(json.dumps({"error": repr(e)}))
    sys.exit(0)
print(json.dumps({"status": status, "headers": hdrs, "body": body.decode("latin-1")}))
"#;

/// What python3 urllib got back: `status`, `headers`, `body` (latin-1 text), or `error`.
pub fn python_urllib(
    proxy: &Proxy,
    pki: &TestPki,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> Value {
    let header_map: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), Value::String(v.to_string())))
        .collect();
    let mut command = crate::support::tool("python3");
    command
        .arg("-c")
        .arg(URLLIB_SCRIPT)
        .arg(proxy.url())
        .arg(&pki.proxy_ca_cert)
        .arg(url)
        .arg(method)
        .arg(Value::Object(header_map).to_string());
    let output = run_bounded(&mut command, Duration::from_secs(30));
    assert!(
        output.status.is_some_and(|s| s.success()),
        "python3 urllib failed: {}",
        output.stderr
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "python3 printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            output.stderr
        )
    })
}

/// Runs `git ARGS` in `cwd` with a clean, non-interactive environment; at most 60 s.
pub fn git(cwd: &Path, args: &[&str]) -> BoundedOutput {
    let mut command = crate::support::tool("git");
    command
        .current_dir(cwd)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "airlock test")
        .env("GIT_AUTHOR_EMAIL", "test@airlock.invalid")
        .env("GIT_COMMITTER_NAME", "airlock test")
        .env("GIT_COMMITTER_EMAIL", "test@airlock.invalid");
    run_bounded(&mut command, Duration::from_secs(60))
}
