//! `airlock run` exit statuses and what the command sees: its own status, 126/127 for a
//! command that cannot run, 125 (command not started) for any failure of airlock itself,
//! the environment (surrogates, no real secret, CA variables) and the hidden CA key.

use crate::support;

use crate::support::run::{RunHome, code, namespaces_available};

#[test]
fn exit_status_is_the_commands() {
    if !namespaces_available("exit_status_is_the_commands") {
        return;
    }
    let home = RunHome::new();
    let output = home.run(&["--", "sh", "-c", "exit 7"]);
    assert_eq!(code(&output), 7, "{}", output.stderr);
    assert!(
        output.stderr.contains("all network access is refused"),
        "no policy must be announced: {}",
        output.stderr
    );
    let output = home.run(&["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(code(&output), 128 + 15, "{}", output.stderr);
}

#[test]
fn missing_and_unexecutable_commands_are_127_and_126() {
    if !namespaces_available("missing_and_unexecutable_commands_are_127_and_126") {
        return;
    }
    let home = RunHome::new();
    let output = home.run(&["--", "/nonexistent/command"]);
    assert_eq!(code(&output), 127, "{}", output.stderr);
    let script = home.scratch().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write script");
    let output = home.run(&["--", script.to_str().expect("utf-8 path")]);
    assert_eq!(code(&output), 126, "{}", output.stderr);
}

#[test]
fn airlock_failures_are_125_and_the_command_never_runs() {
    let home = RunHome::new();
    let marker = home.scratch().join("marker");
    let touch = ["touch", marker.to_str().expect("utf-8 path")];
    let bad_policy = home.scratch().join("bad.yaml");
    std::fs::write(
        &bad_policy,
        "version: 1\nnetwork:\n  allow:\n    - hots: x\n",
    )
    .expect("write");
    let bad_policy = bad_policy.to_str().expect("utf-8 path").to_owned();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--policy", &bad_policy, "--"],
        vec!["--policy", "/nonexistent/policy.yaml", "--"],
        vec!["--secret", "AIRLOCK_TEST_MISSING_VAR@api.example", "--"],
        vec!["--allow", "bad host name!", "--"],
        vec!["--resolve", "nonsense", "--"],
        vec!["--no-such-flag", "--"],
        vec!["--jail", "nonsense", "--"],
    ];
    for case in cases {
        let mut args = case.clone();
        args.extend_from_slice(&touch);
        let output = home.run(&args);
        assert_eq!(code(&output), 125, "{case:?}: {}", output.stderr);
        assert!(!marker.exists(), "{case:?}: the command ran");
        assert!(!output.stderr.is_empty(), "{case:?}: no explanation");
    }
}

#[test]
fn the_command_sees_surrogates_ca_trust_and_no_ca_key() {
    if !namespaces_available("the_command_sees_surrogates_ca_trust_and_no_ca_key") {
        return;
    }
    let home = RunHome::new();
    let real = "ghp_RealSecretValue0123456789abcdefghijkl";
    let script = "echo \"TOKEN=$GH_TOKEN\"; echo \"COPY=$COPY_OF_TOKEN\"; \
                  echo \"AIRLOCK=$AIRLOCK\"; echo \"CA=$SSL_CERT_FILE\"; \
                  echo \"NODE=$NODE_EXTRA_CA_CERTS\"; \
                  if cat \"$AIRLOCK_HOME/ca-key.pem\" 2>/dev/null | grep -q KEY; then echo KEY=readable; else echo KEY=hidden; fi; \
                  grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\"; \
                  env | grep -c -e \"$REAL\" || true; \
                  cat /proc/1/comm";
    let output = home.run_with_env(
        &[
            "--secret",
            "GH_TOKEN@api.github.com",
            "--",
            "sh",
            "-c",
            script,
        ],
        &[("GH_TOKEN", real), ("COPY_OF_TOKEN", real), ("REAL", real)],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(code(&output), 0, "{stdout}\n{}", output.stderr);
    assert!(
        !stdout.contains(real),
        "a real secret reached the command: {stdout}"
    );
    let token = stdout
        .lines()
        .find_map(|l| l.strip_prefix("TOKEN="))
        .expect("TOKEN line");
    assert_eq!(
        token.len(),
        real.len(),
        "surrogate keeps the length: {token}"
    );
    assert!(
        token.starts_with("ghp_"),
        "surrogate keeps the prefix: {token}"
    );
    assert!(
        stdout.contains("COPY=\n"),
        "a copy of the real value is removed: {stdout}"
    );
    assert!(stdout.contains("AIRLOCK=1"), "{stdout}");
    assert!(
        stdout.contains("KEY=hidden"),
        "the CA key must be hidden: {stdout}"
    );
    let bundle = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CA="))
        .expect("CA line");
    assert!(!bundle.is_empty(), "SSL_CERT_FILE must be set: {stdout}");
    assert!(stdout.contains(&format!("NODE={bundle}")), "{stdout}");
    let certificates: usize = stdout
        .lines()
        .find_map(|l| l.trim().parse().ok())
        .expect("certificate count");
    assert!(
        certificates >= 1,
        "the bundle holds the airlock CA: {stdout}"
    );
    let init = stdout.lines().last().unwrap_or_default();
    assert_ne!(
        init, "systemd",
        "/proc/1 inside must be the jail's init: {stdout}"
    );
    assert_ne!(
        init, "init",
        "/proc/1 inside must be the jail's init: {stdout}"
    );
}

#[test]
fn env_mode_is_announced_as_advisory() {
    let home = RunHome::new();
    let output = home.run(&[
        "--jail",
        "env",
        "--",
        "sh",
        "-c",
        "echo \"$HTTPS_PROXY|$NO_PROXY\"",
    ]);
    assert_eq!(code(&output), 0, "{}", output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("http://127.0.0.1:"), "{stdout}");
    assert!(stdout.trim_end().ends_with('|'), "no NO_PROXY: {stdout}");
    assert!(output.stderr.contains("advisory"), "{}", output.stderr);
    assert!(output.stderr.contains("bypass"), "{}", output.stderr);
}

#[test]
fn sigterm_reaches_the_command() {
    if !namespaces_available("sigterm_reaches_the_command") {
        return;
    }
    let home = RunHome::new();
    let ready = home.scratch().join("ready");
    let script = format!(
        "trap 'exit 42' TERM; touch {}; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exit 3",
        ready.display()
    );
    let mut child = spawn_until_ready(&home, &script, &ready);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let killed = crate::support::tool("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let mut status = None;
    while status.is_none() && std::time::Instant::now() < deadline {
        status = child.try_wait().expect("wait airlock");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("airlock run did not exit after SIGTERM");
    };
    assert_eq!(
        status.code(),
        Some(42),
        "SIGTERM must reach the command's trap"
    );
}

/// What the jail's init (a fork of airlock, holding a copy of its memory) and the hidden
/// files give away: nothing. /proc/1/environ and /proc/1/mem are unreadable (the init is
/// not dumpable), no visible process's environment or arguments hold a real value, and
/// the policy file, a `file:` secret source, the audit log and the CA directory read empty.
#[test]
fn the_jails_init_and_hidden_files_reveal_no_real_secret() {
    if !namespaces_available("the_jails_init_and_hidden_files_reveal_no_real_secret") {
        return;
    }
    crate::support::need_all(&["python3"]);
    let home = RunHome::new();
    let env_real = "ghp_EnvRealValue0123456789abcdefghijklmn";
    let file_real = "sk-proj-FileRealValue0123456789abcdef";
    // A literal value on airlock's own command line: the jail's processes are forked
    // from airlock, so their /proc/PID/cmdline would show it unless blanked.
    let argv_real = "glpat-ArgvRealValue0123456789ab";
    let argv_secret = format!("ARGV_TOKEN=glpat-ArgvSurrogate0000000000ab={argv_real}@gitlab.com");
    let secret_file = home.scratch().join("file-token");
    std::fs::write(&secret_file, file_real).expect("secret file");
    let policy = home.scratch().join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "# POLICY-MARKER-7f3a\nversion: 1\nnetwork:\n  allow:\n    - host: api.github.com\n\
             secrets:\n  GH_TOKEN:\n    env: GH_TOKEN\n    hosts: [api.github.com]\n  \
             FILE_TOKEN:\n    file: {}\n    hosts: [api.openai.com]\n",
            secret_file.display()
        ),
    )
    .expect("policy");
    let log = home.log_path();
    let probe = r#"
import sys
try:
    open("/proc/1/environ", "rb").read(); print("ENVIRON=readable")
except OSError:
    print("ENVIRON=denied")
try:
    first = open("/proc/1/maps").readline().split("-")[0]
    mem = open("/proc/1/mem", "rb"); mem.seek(int(first, 16)); mem.read(16); print("MEM=readable")
except OSError:
    print("MEM=denied")
"#;
    let probe_path = home.scratch().join("probe.py");
    std::fs::write(&probe_path, probe).expect("probe");
    let script = format!(
        "python3 {probe}; echo DUMP; \
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat \"$f\" 2>/dev/null; echo; done; \
         cat {policy} {secret} {log} 2>&1; ls -A \"$AIRLOCK_HOME\" 2>&1; echo END",
        probe = probe_path.display(),
        policy = policy.display(),
        secret = secret_file.display(),
        log = log.display(),
    );
    let policy_arg = policy.to_string_lossy().into_owned();
    let log_arg = log.to_string_lossy().into_owned();
    let home_dir = home.airlock_home().to_string_lossy().into_owned();
    let output = home.run_with_env(
        &[
            "--secret",
            &argv_secret,
            "--policy",
            &policy_arg,
            "--log",
            &log_arg,
            "--",
            "sh",
            "-c",
            &script,
        ],
        &[("GH_TOKEN", env_real), ("AIRLOCK_HOME", &home_dir)],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(code(&output), 0, "{stdout}\n{}", output.stderr);
    assert!(stdout.contains("ENVIRON=denied"), "{stdout}");
    assert!(stdout.contains("MEM=denied"), "{stdout}");
    assert!(stdout.contains("END"), "{stdout}");
    for real in [env_real, file_real, argv_real] {
        assert!(
            !stdout.contains(real),
            "a real value is visible inside the jail: {stdout}"
        );
    }
    assert!(
        !stdout.contains("POLICY-MARKER-7f3a"),
        "the policy file is readable inside: {stdout}"
    );
    assert!(
        !stdout.contains("ca-key.pem"),
        "the CA directory is listed inside: {stdout}"
    );
}

/// Starts `airlock run -- sh -c SCRIPT` in the background and waits (at most 30 s) until
/// the script has created `ready`.
fn spawn_until_ready(home: &RunHome, script: &str, ready: &std::path::Path) -> std::process::Child {
    let child = home
        .command()
        .args(["run", "--", "sh", "-c", script])
        .env("AIRLOCK_HOME", home.airlock_home())
        .current_dir(home.scratch())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn airlock run");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ready.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(ready.exists(), "the command never started");
    child
}

/// Whether any process on the host has `marker` in its command line.
fn process_with_marker(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
    })
}

#[test]
fn killing_airlock_kills_the_whole_sandbox() {
    if !namespaces_available("killing_airlock_kills_the_whole_sandbox") {
        return;
    }
    let home = RunHome::new();
    let ready = home.scratch().join("ready");
    // A background grandchild and a foreground sleep, both tagged with a unique duration.
    let marker = format!("{}.{}", 500 + std::process::id() % 400, 25);
    let script = format!("sleep {marker} & touch {}; sleep {marker}", ready.display());
    let mut child = spawn_until_ready(&home, &script, &ready);
    let sleep_marker = format!("sleep\0{marker}");
    // `ready` may appear before the background sleep has executed: wait for it, bounded.
    let started = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !process_with_marker(&sleep_marker) && std::time::Instant::now() < started {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        process_with_marker(&sleep_marker),
        "the sandbox's sleeps are running"
    );
    child.kill().expect("SIGKILL airlock");
    let _ = child.wait();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while process_with_marker(&sleep_marker) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !process_with_marker(&sleep_marker),
        "a process of the sandbox outlived airlock"
    );
}

#[test]
fn a_rotated_run_log_needs_a_directory_of_its_own_and_rotates() {
    if !namespaces_available("a_rotated_run_log_needs_a_directory_of_its_own_and_rotates") {
        return;
    }
    let home = RunHome::new();
    let marker = home.scratch().join("marker");
    let touch = ["touch", marker.to_str().expect("utf-8 path")];
    // The default log path's directory holds the working directory: it could not be
    // hidden, so rotation is refused there (125, the command never runs).
    let log = home.log_path();
    let log = log.to_str().expect("utf-8 path");
    let mut args = vec!["--log", log, "--audit-max-size", "1K", "--"];
    args.extend_from_slice(&touch);
    let output = home.run(&args);
    assert_eq!(code(&output), 125, "{}", output.stderr);
    assert!(
        output.stderr.contains("--audit-max-size"),
        "{}",
        output.stderr
    );
    assert!(!marker.exists(), "the command ran");
    for bad in ["0", "1T", "lots"] {
        let output = home.run(&["--audit-max-size", bad, "--", "true"]);
        assert_eq!(code(&output), 125, "{bad}: {}", output.stderr);
    }
    // In a directory of its own the log rotates (distinct DNS names: nothing folds).
    let logs = home.scratch().parent().expect("parent").join("logs");
    std::fs::create_dir_all(&logs).expect("logs dir");
    if let Some(uid) = support::test_user::uid() {
        support::test_user::chown_tree(&logs, uid);
    }
    let log = logs.join("audit.jsonl");
    let script = "for i in $(seq 1 40); do getent hosts n$i.example >/dev/null; done; true";
    let output = home.run(&[
        "--log",
        log.to_str().expect("utf-8 path"),
        "--audit-max-size",
        "2K",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code(&output), 0, "{}", output.stderr);
    for name in ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"] {
        let text = std::fs::read_to_string(logs.join(name)).expect("a log file");
        assert!(text.len() <= 2048, "{name}: {} bytes", text.len());
        assert!(
            text.lines()
                .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        );
    }
}
