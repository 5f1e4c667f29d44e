//! Self-checks of the test harness without the proxy: the upstream servers answer real
//! clients directly, and the git server serves a clone. When these pass and a proxy test
//! fails, the proxy is at fault, not the harness.

use std::time::Duration;

use crate::support::clients::{git, run_bounded};
use crate::support::fixture_server::{FixtureServer, make_repository};
use crate::support::{TestPki, Upstream, pattern_bytes};

fn curl_direct(pki: &TestPki, url: &str, port: u16, extra: &[&str]) -> (String, Vec<u8>) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let body = scratch.path().join("body");
    let mut command = crate::support::tool("curl");
    command
        .args(["-q", "-sS", "--max-time", "20", "--noproxy", "*"])
        .arg("--cacert")
        .arg(&pki.upstream_ca_cert)
        .args(["--resolve", &format!("allowed.test:{port}:127.0.0.1")])
        .arg("-o")
        .arg(&body)
        .args(["-w", "%{http_code} %{http_version}"])
        .args(extra)
        .arg(url);
    let output = run_bounded(&mut command, Duration::from_secs(30));
    assert!(
        output.status.is_some_and(|s| s.success()),
        "{}",
        output.stderr
    );
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        std::fs::read(&body).unwrap_or_default(),
    )
}

#[test]
fn tls_upstream_echoes_over_h1_and_h2() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let url = format!("https://allowed.test:{port}/echo/a%2Fb?x=1&x=2");
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let (written, body) = curl_direct(
            &pki,
            &url,
            port,
            &[flag, "-H", "X-Dup: 1", "-H", "X-Dup: 2"],
        );
        assert_eq!(written, format!("200 {version}"));
        let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
        assert_eq!(echo["path"], "/echo/a%2Fb", "raw path kept: {echo}");
        assert_eq!(echo["query"], "x=1&x=2");
        assert_eq!(echo["authority"], format!("allowed.test:{port}"));
        let dups = echo["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .filter(|h| h[0] == "x-dup")
            .count();
        assert_eq!(dups, 2, "duplicates kept: {echo}");
    }
    let (written, body) = curl_direct(
        &pki,
        &format!("https://allowed.test:{port}/bytes/100000"),
        port,
        &[],
    );
    assert!(written.starts_with("200"));
    assert_eq!(body, pattern_bytes(100_000));
    assert_eq!(upstream.hit_count(), 3);
    assert!(upstream.connections() >= 3);
}

#[test]
fn plain_upstream_echoes() {
    let pki = TestPki::new();
    let upstream = Upstream::plain();
    let port = upstream.port();
    let (written, body) = curl_direct(&pki, &format!("http://127.0.0.1:{port}/echo/p"), port, &[]);
    assert!(written.starts_with("200"), "{written}");
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
    assert_eq!(echo["path"], "/echo/p");
    assert_eq!(upstream.hit_count(), 1);
}

#[test]
fn git_server_serves_a_clone_directly() {
    let pki = TestPki::new();
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path().join("repos");
    std::fs::create_dir_all(&root).expect("mkdir");
    let files = make_repository(&root, scratch.path());
    let server = FixtureServer::git(&pki, &root);
    let dest = scratch.path().join("direct");
    let output = git(
        scratch.path(),
        &[
            "-c",
            &format!("http.sslCAInfo={}", pki.upstream_ca_cert.display()),
            "clone",
            "-q",
            &format!("https://localhost:{}/repo.git", server.port),
            dest.to_str().expect("utf-8"),
        ],
    );
    assert!(
        output.status.is_some_and(|s| s.success()),
        "{}",
        output.stderr
    );
    for (name, content) in &files {
        assert_eq!(
            &std::fs::read_to_string(dest.join(name)).expect("file"),
            content
        );
    }
    assert!(server.hits() >= 2);
}
