//! A local sandbox projects the credential files its policy turns on as `airlock run`
//! does (docs/secrets.md): `airlock sandbox exec` reads a surrogate, never the real
//! token; the proxy swaps the real one back towards the file's host; the host's file is
//! left as it was, but for what the sandbox wrote beside it (copied back at `rm`). A
//! credential file whose directory cannot be made private is watched: replaced on the
//! host, it ends the sandbox. An OAuth refresh inside writes the real new tokens back to
//! the host's file, the sandbox holding surrogates only. The copy-back at `rm` waits for
//! the sandbox's processes to be gone and is followed by the end check.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::support::credential_refresh as refresh;
use crate::support::run::namespaces_available;
use std::time::Duration;

use crate::support::sandbox::{SandboxHome, alive, status, wait_until};
use crate::support::{TestPki, Upstream};

/// The canary: `.netrc`'s real password.
const NETRC: &str = "REALsandboxNETRCpassword0123456789ab";
/// The canary: Docker's real password.
const DOCKER: &str = "dckr_pat_REALsandboxDOCKER0123456789abcd";

/// Writes `home/policy.yaml` turning on `store` with `home` writable (as an agent profile
/// makes its own directories: under the tests' /tmp, which the jail shows private, only a
/// writable directory is seen), hands the home to the test user when there is one, and
/// returns the home's and the policy's paths as text.
fn policy_for(home: &std::path::Path, store: &str) -> (String, String) {
    let policy = home.join("policy.yaml");
    let text = format!(
        "version: 1\ncredentials:\n  files: [{store}]\nfilesystem:\n  writable: [\"{}\"]\n",
        home.display()
    );
    std::fs::write(&policy, text).expect("policy");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(home, uid);
    }
    (
        home.to_string_lossy().into_owned(),
        policy.to_string_lossy().into_owned(),
    )
}

#[test]
fn a_local_sandbox_shows_netrc_as_a_surrogate_and_sends_the_real_password() {
    if !namespaces_available("a_local_sandbox_shows_netrc_as_a_surrogate") {
        return;
    }
    crate::support::need_all(&["curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let sandboxes = SandboxHome::new();
    let home = sandboxes.scratch().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let netrc = format!("machine allowed.test\n  login me\n  password {NETRC}\n");
    std::fs::write(home.join(".netrc"), &netrc).expect("netrc");
    let (home_text, policy_text) = policy_for(&home, "netrc");
    let env = [("HOME", home_text.as_str())];
    let ca = pki.upstream_ca_cert.to_string_lossy().into_owned();
    let allow = format!("allowed.test:{port}");
    let args = [
        "create",
        "creds",
        "--policy",
        &policy_text,
        "--resolve",
        "allowed.test:127.0.0.1",
        "--upstream-ca",
        &ca,
        "--allow",
        &allow,
    ];
    let created = sandboxes.run_with_env(&args, &env);
    assert_eq!(status(&created), 0, "create: {}", created.stderr);

    let inside = home.join(".netrc").to_string_lossy().into_owned();
    let shown = sandboxes.run_with_env(&["exec", "creds", "--", "cat", &inside], &env);
    assert_eq!(status(&shown), 0, "cat: {}", shown.stderr);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(!shown.contains(NETRC), "the sandbox read the real password");
    assert!(
        shown.contains("machine allowed.test"),
        "not the same shape: {shown}"
    );
    assert!(shown.contains("password "), "not the same shape: {shown}");

    let curl = format!("curl -sS --max-time 20 --netrc https://allowed.test:{port}/netrc");
    let sent = sandboxes.run_with_env(&["exec", "creds", "--", "sh", "-c", &curl], &env);
    assert_eq!(status(&sent), 0, "curl: {}", sent.stderr);
    let echoed = String::from_utf8_lossy(&sent.stdout).into_owned();
    assert!(
        !echoed.contains(NETRC),
        "the upstream's echo reached the sandbox unswapped"
    );
    let hits = upstream.hits();
    let hit = hits
        .iter()
        .find(|hit| hit.target == "/netrc")
        .unwrap_or_else(|| panic!("no request: {hits:?}; {echoed}"));
    let basic = format!("Basic {}", STANDARD.encode(format!("me:{NETRC}")));
    assert_eq!(hit.header_values("authorization"), [basic]);

    // The projected copy is read-only; a new file in its private home goes back at `rm`.
    let write = "if (echo planted >> ~/.netrc) 2>/dev/null; then echo netrc=written; \
                 else echo netrc=refused; fi; echo kept > ~/notes.txt && echo notes=yes";
    let wrote = sandboxes.run_with_env(&["exec", "creds", "--", "sh", "-c", write], &env);
    assert_eq!(
        String::from_utf8_lossy(&wrote.stdout),
        "netrc=refused\nnotes=yes\n",
        "{}",
        wrote.stderr
    );
    assert!(
        !home.join("notes.txt").exists(),
        "the home is private to the sandbox"
    );

    sandboxes.must(&["rm", "creds"]);
    let notes = std::fs::read_to_string(home.join("notes.txt")).unwrap_or_default();
    assert_eq!(notes, "kept\n", "copied back when the sandbox is removed");
    let after = std::fs::read_to_string(home.join(".netrc")).expect("host netrc");
    assert_eq!(after, netrc, "the host's file changed");
}

#[test]
fn a_host_rename_over_a_watched_credential_file_kills_the_sandbox() {
    if !namespaces_available("a_host_rename_over_a_watched_credential_file_kills_the_sandbox") {
        return;
    }
    let sandboxes = SandboxHome::new();
    let home = sandboxes.scratch().join("home");
    std::fs::create_dir_all(home.join(".docker")).expect("home");
    let auth = STANDARD.encode(format!("me:{DOCKER}"));
    let config = home.join(".docker/config.json");
    std::fs::write(
        &config,
        format!("{{\"auths\": {{\"registry.test\": {{\"auth\": \"{auth}\"}}}}}}\n"),
    )
    .expect("docker config");
    // `~/.docker` is hidden by the plan: its directory cannot be made private, the
    // projected file is bound over the host's and watched (the fallback).
    let (home_text, policy_text) = policy_for(&home, "docker");
    let env = [("HOME", home_text.as_str())];
    let created = sandboxes.run_with_env(&["create", "watched", "--policy", &policy_text], &env);
    assert_eq!(status(&created), 0, "create: {}", created.stderr);
    let log = sandboxes.sandbox_dir("watched").join("control/daemon.log");
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(log.contains("shown as it is"), "{log}");
    let inside = config.to_string_lossy().into_owned();
    let shown = sandboxes.run_with_env(&["exec", "watched", "--", "cat", &inside], &env);
    assert_eq!(status(&shown), 0, "cat: {}", shown.stderr);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains("registry.test"), "not projected: {shown}");
    assert!(!shown.contains(&auth), "the sandbox read the real login");

    let daemon = sandboxes.daemon_pid("watched");
    let tmp = config.with_file_name("config.json.tmp");
    std::fs::write(&tmp, "{}\n").expect("new file");
    std::fs::rename(&tmp, &config).expect("rename over");
    assert!(
        wait_until(Duration::from_secs(10), || !alive(daemon)),
        "the sandbox outlived the replacement of its credential file"
    );
    let refused = sandboxes.run_with_env(&["exec", "watched", "--", "cat", &inside], &env);
    assert_eq!(status(&refused), 125, "{}", refused.stderr);
    let audit = sandboxes.audit_text("watched");
    assert!(audit.contains("\"kind\":\"credentials\""), "{audit}");
    assert!(!audit.contains(DOCKER), "the audit holds the real token");
    sandboxes.must(&["rm", "watched"]);
    let after = std::fs::read_to_string(&config).expect("host config");
    assert_eq!(after, "{}\n", "the host keeps what it wrote");
}

#[test]
fn a_refresh_inside_a_sandbox_writes_the_real_tokens_back() {
    let test = "a_refresh_inside_a_sandbox_writes_the_real_tokens_back";
    let address = "127.35.2.90";
    let Some((pki, place, server)) = refresh::setup(address, test, refresh::REAL_REFRESH) else {
        return;
    };
    let sandboxes = SandboxHome::new();
    let home = place.home().to_string_lossy().into_owned();
    let env = [("HOME", home.as_str())];
    let policy = place
        .logs()
        .join("airlock.yaml")
        .to_string_lossy()
        .into_owned();
    let ca = pki.upstream_ca_cert.to_string_lossy().into_owned();
    let mut args = vec!["create", "fresh", "--policy", &policy, "--upstream-ca", &ca];
    let pins = [
        format!("platform.claude.com:{address}"),
        format!("api.anthropic.com:{address}"),
    ];
    for pin in &pins {
        args.extend(["--resolve", pin.as_str()]);
    }
    let created = sandboxes.run_with_env(&args, &env);
    assert_eq!(status(&created), 0, "create: {}", created.stderr);
    let client = place
        .project()
        .join("client.py")
        .to_string_lossy()
        .into_owned();
    let output = sandboxes.run_with_env(&["exec", "fresh", "--", "python3", &client], &env);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let context = format!("stdout:\n{stdout}\nstderr:\n{}", output.stderr);
    assert_eq!(status(&output), 0, "{context}");
    let issued = refresh::issued(&server);
    assert_eq!(issued.len(), 1, "one refresh: {context}");
    let new_access = issued[0]["access_token"].as_str().expect("issued access");
    let new_refresh = issued[0]["refresh_token"].as_str().expect("issued refresh");
    let requests = server.requests();
    let sent = requests
        .iter()
        .find(|r| r["path"] == "/v1/oauth/token")
        .expect("the refresh reached the server");
    assert_eq!(
        sent["body"]["refresh_token"],
        refresh::REAL_REFRESH,
        "{context}"
    );
    assert!(refresh::marked(&stdout, "API 200").is_some(), "{context}");
    for real in [
        refresh::REAL_ACCESS,
        refresh::REAL_REFRESH,
        new_access,
        new_refresh,
    ] {
        assert!(
            !stdout.contains(real),
            "a real token reached the sandbox: {context}"
        );
    }
    // Written back while the sandbox runs; the copy inside holds new surrogates.
    let file = place.file();
    assert_eq!(file["claudeAiOauth"]["accessToken"], new_access);
    assert_eq!(file["claudeAiOauth"]["refreshToken"], new_refresh);
    let after = refresh::marked(&stdout, "AFTER").expect("the file read again");
    assert!(!after.contains(new_access), "{context}");
    sandboxes.must(&["rm", "fresh"]);
    let file = place.file();
    assert_eq!(
        file["claudeAiOauth"]["refreshToken"], new_refresh,
        "kept after rm"
    );
}

/// A local sandbox's end runs `airlock run`'s end check with its copy-back, once its
/// processes are confirmed gone: a `.git` pointer file in a new directory of its private
/// home goes to quarantine, the directory's other files reach the host.
#[test]
fn a_local_sandbox_quarantines_a_git_pointer_it_copies_back() {
    if !namespaces_available("a_local_sandbox_quarantines_a_git_pointer_it_copies_back") {
        return;
    }
    let sandboxes = SandboxHome::new();
    let home = sandboxes.scratch().join("home");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(
        home.join(".netrc"),
        format!("machine a.test password {NETRC}\n"),
    )
    .expect("netrc");
    let (home_text, policy_text) = policy_for(&home, "netrc");
    let env = [("HOME", home_text.as_str())];
    let created = sandboxes.run_with_env(&["create", "pointer", "--policy", &policy_text], &env);
    assert_eq!(status(&created), 0, "create: {}", created.stderr);
    let write = "set -e; mkdir ~/repo; printf 'gitdir: /nowhere/evil\\n' > ~/repo/.git; \
                 echo work > ~/repo/readme; echo WROTE";
    let wrote = sandboxes.run_with_env(&["exec", "pointer", "--", "sh", "-c", write], &env);
    assert_eq!(
        String::from_utf8_lossy(&wrote.stdout),
        "WROTE\n",
        "{}",
        wrote.stderr
    );
    assert!(
        !home.join("repo").exists(),
        "the home is private to the sandbox"
    );
    sandboxes.must(&["rm", "pointer"]);
    let readme = std::fs::read_to_string(home.join("repo/readme")).unwrap_or_default();
    assert_eq!(readme, "work\n", "copied back when the sandbox is removed");
    assert!(
        std::fs::symlink_metadata(home.join("repo/.git")).is_err(),
        "the .git pointer reached the host"
    );
    let quarantined = std::fs::read_to_string(home.join("repo/.git.airlock-quarantine"));
    assert_eq!(quarantined.unwrap_or_default(), "gitdir: /nowhere/evil\n");
}
