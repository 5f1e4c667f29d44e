//! `git clone` over https through the proxy from a local smart-HTTP server
//! (`git http-backend` behind TLS, tests/fixtures/git_https_server.py): the clone matches
//! the source; a policy that does not allow the repository's path refuses it before the
//! server sees anything.

use std::path::Path;

use crate::support;
use crate::support::clients::git;
use crate::support::fixture_server::{FixtureServer, make_repository};
use crate::support::{ProxyBuilder, TestPki};

fn clone_through(
    proxy: &support::Proxy,
    pki: &TestPki,
    url: &str,
    dest: &Path,
) -> support::clients::BoundedOutput {
    let parent = dest.parent().expect("dest parent");
    git(
        parent,
        &[
            "-c",
            &format!("http.proxy={}", proxy.url()),
            "-c",
            &format!(
                "http.sslCAInfo={}",
                pki.proxy_ca_cert.to_str().expect("utf-8 path")
            ),
            "clone",
            "-q",
            url,
            dest.to_str().expect("utf-8 path"),
        ],
    )
}

#[test]
fn git_clone_over_https_through_the_proxy() {
    let pki = TestPki::new();
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path().join("repos");
    std::fs::create_dir_all(&root).expect("mkdir repos");
    let files = make_repository(&root, scratch.path());
    let server = FixtureServer::git(&pki, &root);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", server.port))
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{}/repo.git", server.port);
    let dest = scratch.path().join("clone");
    let output = clone_through(&proxy, &pki, &url, &dest);
    assert!(
        output.status.is_some_and(|s| s.success()),
        "git clone through the proxy failed: {}\nproxy stderr:\n{}",
        output.stderr,
        proxy.stderr()
    );
    for (name, content) in &files {
        let cloned = std::fs::read_to_string(dest.join(name)).expect("cloned file");
        assert_eq!(&cloned, content, "{name} differs");
    }
    assert!(server.hits() >= 2, "info/refs and upload-pack went through");
    let line = proxy.audit_line_where("for info/refs", |l| {
        l["path"] == "/repo.git/info/refs" && l["decision"] == "allow"
    });
    assert_eq!(line["query"], "service=REDACTED", "{line}");
    proxy.audit_line_where("for git-upload-pack", |l| {
        l["path"] == "/repo.git/git-upload-pack" && l["method"] == "POST" && l["status"] == 200
    });
}

#[test]
fn git_clone_of_a_path_the_policy_does_not_allow_is_refused() {
    let pki = TestPki::new();
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path().join("repos");
    std::fs::create_dir_all(&root).expect("mkdir repos");
    make_repository(&root, scratch.path());
    let server = FixtureServer::git(&pki, &root);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}/other.git/**", server.port))
        .resolve_loopback("localhost")
        .start();
    let url = format!("https://localhost:{}/repo.git", server.port);
    let dest = scratch.path().join("refused");
    let output = clone_through(&proxy, &pki, &url, &dest);
    assert!(
        !output.status.is_some_and(|s| s.success()),
        "clone must fail under a policy without the path"
    );
    assert!(
        output.stderr.contains("403"),
        "git reports the 403: {}",
        output.stderr
    );
    assert_eq!(server.hits(), 0, "the refused clone reached the git server");
    let line = proxy.audit_line_where("refusing info/refs", |l| {
        l["decision"] == "deny" && l["path"] == "/repo.git/info/refs"
    });
    assert_eq!(line["reason"], "path_not_allowed", "{line}");
}
