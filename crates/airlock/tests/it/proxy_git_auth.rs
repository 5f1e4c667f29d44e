//! Real `git clone` and `git push` over https through the proxy to a smart-HTTP server that
//! demands HTTP Basic auth with the REAL token (tests/fixtures/git_https_server.py with a
//! required password), while git is only ever given the placeholder (docs/contract.md §3,
//! docs/secrets.md): the proxy swaps it inside `Authorization: Basic`, so clone and push
//! succeed and the server sees the real token; the same placeholder sent to another allowed
//! host name is refused as `secret_out_of_scope` before it leaves the proxy; the swapped
//! requests are logged with `"secrets":["GIT_TOKEN"]`; and the real token appears nowhere
//! git, the clone, the audit log or the proxy's stderr can show.
//!
//! The server answers 401 to anything but the real token, so if the swap did not happen
//! (or happened on the wrong host) git would fail here.

use std::path::Path;

use crate::support::clients::{BoundedOutput, git};
use crate::support::fixture_server::{FixtureServer, make_repository};
use crate::support::{Proxy, ProxyBuilder, TestPki};

/// What the git server accepts as password (and git never sees).
const REAL: &str = "ghp_R3alGitT0kenOnlyTheServerKnows00042";
/// What git is given: same length and character classes as the real token.
const PLACEHOLDER: &str = "ghp_PlacEholDerGivenToTheSandbox0000175";
const USER: &str = "x-access-token";

fn ok(output: &BoundedOutput) -> bool {
    output.status.is_some_and(|s| s.success())
}

fn stdout_text(output: &BoundedOutput) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A credential helper that answers every `get` with the placeholder, as an agent's
/// credential setup would.
fn credential_helper() -> String {
    format!(
        "!f() {{ if [ \"$1\" = get ]; then printf 'username=%s\\npassword=%s\\n' '{USER}' '{PLACEHOLDER}'; fi; }}; f"
    )
}

/// `git ARGS` through `proxy`, trusting only the proxy CA, with the placeholder helper.
fn git_through(proxy: &Proxy, pki: &TestPki, cwd: &Path, args: &[&str]) -> BoundedOutput {
    let proxy_setting = format!("http.proxy={}", proxy.url());
    let ca_setting = format!(
        "http.sslCAInfo={}",
        pki.proxy_ca_cert.to_str().expect("utf-8 path")
    );
    let helper_setting = format!("credential.helper={}", credential_helper());
    let mut all = vec![
        "-c",
        &proxy_setting,
        "-c",
        &ca_setting,
        "-c",
        &helper_setting,
    ];
    all.extend_from_slice(args);
    git(cwd, &all)
}

/// Panics if the real token is in any of git's output.
fn assert_git_never_shows_the_token(what: &str, output: &BoundedOutput) {
    assert!(
        !stdout_text(output).contains(REAL),
        "{what}: the real token is on git's stdout"
    );
    assert!(
        !output.stderr.contains(REAL),
        "{what}: the real token is on git's stderr:\n{}",
        output.stderr
    );
}

/// Every file under `dir` whose bytes contain the real token.
fn files_with_token(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(REAL.len()).any(|w| w == REAL.as_bytes())
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

fn assert_proxy_never_shows_the_token(proxy: &Proxy) {
    let log = proxy.audit_log_text();
    assert!(
        !log.contains(REAL),
        "the real token is in the audit log:\n{log}"
    );
    assert!(
        !proxy.stderr().contains(REAL),
        "the real token is on the proxy's stderr"
    );
}

struct Setup {
    pki: TestPki,
    scratch: tempfile::TempDir,
    root: std::path::PathBuf,
    files: Vec<(&'static str, String)>,
    server: FixtureServer,
    proxy: Proxy,
}

fn setup() -> Setup {
    let pki = TestPki::new();
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path().join("repos");
    std::fs::create_dir_all(&root).expect("mkdir repos");
    let files = make_repository(&root, scratch.path());
    let server = FixtureServer::git_with_password(&pki, &root, REAL);
    let proxy = ProxyBuilder::new(&pki)
        .allow(&format!("localhost:{}", server.port))
        .allow(&format!("other.test:{}", server.port))
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .secret(&format!("GIT_TOKEN={PLACEHOLDER}={REAL}@localhost"))
        .start();
    Setup {
        pki,
        scratch,
        root,
        files,
        server,
        proxy,
    }
}

#[test]
fn clone_and_push_with_only_the_placeholder() {
    let Setup {
        pki,
        scratch,
        root,
        files,
        server,
        proxy,
    } = setup();
    let url = format!("https://localhost:{}/repo.git", server.port);
    let before = assert_the_placeholder_alone_is_refused(&pki, scratch.path(), &server, &url);

    // Clone through the proxy.
    let dest = scratch.path().join("clone");
    let clone = git_through(
        &proxy,
        &pki,
        scratch.path(),
        &["clone", "-q", &url, dest.to_str().expect("utf-8 path")],
    );
    assert!(
        ok(&clone),
        "git clone with the placeholder through the proxy failed: {}\nserver: {:?}\nproxy stderr:\n{}\naudit:\n{}",
        clone.stderr,
        server.hit_lines(),
        proxy.stderr(),
        proxy.audit_log_text()
    );
    assert_git_never_shows_the_token("clone", &clone);
    for (name, content) in &files {
        let cloned = std::fs::read_to_string(dest.join(name)).expect("cloned file");
        assert_eq!(&cloned, content, "{name} differs");
    }

    push_a_commit_through(&proxy, &pki, &server, &dest);
    let bare = root.join("repo.git");
    let landed = git(
        scratch.path(),
        &[
            "--git-dir",
            bare.to_str().expect("utf-8 path"),
            "log",
            "-1",
            "--format=%s",
            "main",
        ],
    );
    assert_eq!(
        stdout_text(&landed).trim(),
        "pushed through airlock",
        "the pushed commit is on the server: {}",
        landed.stderr
    );

    assert_the_swap_was_seen_and_logged(&server.hit_lines()[before..], &proxy);

    // Nothing the sandbox can read holds the real token: not the clone (config, packs),
    // not the log or stderr.
    let leaked = files_with_token(&dest);
    assert!(
        leaked.is_empty(),
        "the real token is in the clone: {leaked:?}"
    );
    assert_proxy_never_shows_the_token(&proxy);
}

/// The server really demands the real token: the placeholder alone, straight to the
/// server (no proxy), is refused. Returns how many lines the server has logged so far.
fn assert_the_placeholder_alone_is_refused(
    pki: &TestPki,
    scratch: &Path,
    server: &FixtureServer,
    url: &str,
) -> usize {
    let direct_dest = scratch.join("direct");
    let direct = git(
        scratch,
        &[
            "-c",
            &format!(
                "http.sslCAInfo={}",
                pki.upstream_ca_cert.to_str().expect("utf-8 path")
            ),
            "-c",
            &format!("credential.helper={}", credential_helper()),
            "clone",
            "-q",
            url,
            direct_dest.to_str().expect("utf-8 path"),
        ],
    );
    assert!(
        !ok(&direct),
        "the git server accepted the placeholder without the proxy: the test would prove nothing"
    );
    let direct_lines = server.hit_lines();
    assert!(
        direct_lines.iter().any(|l| l.ends_with("auth=wrong")),
        "the direct clone offered the placeholder and was refused: {direct_lines:?}"
    );
    direct_lines.len()
}

/// Commits a file in the clone `dest` and pushes it through the proxy.
fn push_a_commit_through(proxy: &Proxy, pki: &TestPki, server: &FixtureServer, dest: &Path) {
    // Push a commit back through the proxy.
    std::fs::write(dest.join("pushed.txt"), "pushed through airlock\n").expect("write file");
    let add = git(dest, &["add", "pushed.txt"]);
    assert!(ok(&add), "git add: {}", add.stderr);
    let commit = git(dest, &["commit", "-q", "-m", "pushed through airlock"]);
    assert!(ok(&commit), "git commit: {}", commit.stderr);
    let push = git_through(proxy, pki, dest, &["push", "-q", "origin", "main"]);
    assert!(
        ok(&push),
        "git push with the placeholder through the proxy failed: {}\nserver: {:?}\nproxy stderr:\n{}\naudit:\n{}",
        push.stderr,
        server.hit_lines(),
        proxy.stderr(),
        proxy.audit_log_text()
    );
    assert_git_never_shows_the_token("push", &push);
}

/// The server saw the real token on the upload and the receive side (in `lines`, its log
/// since the direct attempt), never the placeholder, and the audit log names the secret.
fn assert_the_swap_was_seen_and_logged(lines: &[String], proxy: &Proxy) {
    // The server saw the real token on the upload and the receive side, and never the
    // placeholder (or anything else wrong).
    let authenticated = |needle: &str| {
        lines
            .iter()
            .any(|l| l.contains(needle) && l.ends_with("auth=ok"))
    };
    assert!(
        authenticated("POST /repo.git/git-upload-pack"),
        "the clone's upload-pack carried the real token: {lines:?}"
    );
    assert!(
        authenticated("POST /repo.git/git-receive-pack"),
        "the push's receive-pack carried the real token: {lines:?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.ends_with("auth=wrong") || l.ends_with("auth=malformed")),
        "through the proxy, the server only ever saw the real token: {lines:?}"
    );

    // The audit log names the secret on the swapped requests.
    for path in ["/repo.git/git-upload-pack", "/repo.git/git-receive-pack"] {
        let line = proxy.audit_line_where(&format!("for an authenticated {path}"), |l| {
            l["path"] == path && l["method"] == "POST" && l["status"] == 200
        });
        assert_eq!(line["decision"], "allow", "{line}");
        assert_eq!(
            line["secrets"],
            serde_json::json!(["GIT_TOKEN"]),
            "the swap is logged: {line}"
        );
    }
}

#[test]
fn placeholder_sent_to_another_allowed_host_is_refused() {
    let Setup {
        pki,
        scratch,
        server,
        proxy,
        ..
    } = setup();
    // Same server, same repository, an allowed name that is not the secret's host; the
    // placeholder given in the URL this time.
    let url = format!(
        "https://{USER}:{PLACEHOLDER}@other.test:{}/repo.git",
        server.port
    );
    let dest = scratch.path().join("exfil");
    let clone = git_through(
        &proxy,
        &pki,
        scratch.path(),
        &["clone", "-q", &url, dest.to_str().expect("utf-8 path")],
    );
    assert!(
        !ok(&clone),
        "a clone offering the placeholder to other.test must fail; server: {:?}",
        server.hit_lines()
    );
    assert!(
        clone.stderr.contains("403"),
        "git reports the proxy's 403: {}",
        clone.stderr
    );
    assert_git_never_shows_the_token("refused clone", &clone);

    // The server may have seen git's first, credential-less probe (answered 401), but never
    // any credential: not the placeholder, and certainly not the real token.
    let lines = server.hit_lines();
    assert!(
        lines.iter().all(|l| l.ends_with("auth=none")),
        "a credential reached the server from the other host name: {lines:?}"
    );

    let line = proxy.audit_line_where("with secret_out_of_scope for other.test", |l| {
        l["reason"] == "secret_out_of_scope" && l["host"] == "other.test"
    });
    assert_eq!(line["decision"], "deny", "{line}");
    assert_eq!(line["path"], "/repo.git/info/refs", "{line}");
    assert!(
        !proxy
            .audit(1)
            .iter()
            .any(|l| l["host"] == "other.test" && l["secrets"] == serde_json::json!(["GIT_TOKEN"])),
        "no request to other.test was swapped:\n{}",
        proxy.audit_log_text()
    );
    assert_proxy_never_shows_the_token(&proxy);
}
