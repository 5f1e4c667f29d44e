//! `airlock sandbox` with the `local` provider, driven through the real binary: a sandbox
//! created once runs many commands with streamed output and exit codes, reaches only what
//! the policy allows (through the same capture as `airlock run`), keeps the real keys in
//! its daemon, works on a private clone whose commits are exported back as a branch, pushes
//! with a surrogate token swapped by the proxy, and leaves nothing behind — after `rm`, and
//! after its daemon or a CLI was killed with SIGKILL.

use std::time::Duration;

use crate::support;
use crate::support::run::namespaces_available;
use crate::support::sandbox;
use crate::support::sandbox::{
    GitSetup, SandboxHome, alive, assert_routed, files_containing, llm_route_flags,
    process_with_marker, status, wait_until,
};
use crate::support::{TestPki, Upstream};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// `create` flags that let the sandbox reach `allowed.test:PORT` (the loopback upstream).
fn upstream_flags(pki: &TestPki, port: u16) -> Vec<String> {
    vec![
        "--resolve".into(),
        "allowed.test:127.0.0.1".into(),
        "--upstream-ca".into(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
        "--allow".into(),
        format!("allowed.test:{port}"),
    ]
}

fn create(home: &SandboxHome, name: &str, flags: &[String], env: &[(&str, &str)]) {
    let mut args = vec!["create", name];
    args.extend(flags.iter().map(String::as_str));
    let output = home.run_with_env(&args, env);
    assert_eq!(status(&output), 0, "create {name}: {}", output.stderr);
}

#[test]
fn one_sandbox_runs_many_commands_with_streamed_output_and_rm_leaves_nothing() {
    if !namespaces_available("one_sandbox_runs_many_commands_with_streamed_output") {
        return;
    }
    crate::support::need_all(&["curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let home = SandboxHome::new();
    create(&home, "t1", &upstream_flags(&pki, port), &[]);

    let listed: Value = serde_json::from_str(home.must(&["ls", "--json"]).trim()).expect("ls json");
    assert_eq!(listed["name"], "t1");
    assert_eq!(listed["status"], "running", "{listed}");
    assert_eq!(listed["provider"], "local", "{listed}");

    // Streams kept apart, lines in order, the last line without newline, the exit code.
    let run = home.exec_json(
        "t1",
        "echo out1; echo err1 >&2; echo out2; printf tail; exit 7",
    );
    assert_eq!(run.stdout, ["out1", "out2", "tail"], "{run:?}");
    assert_eq!(run.stderr, ["err1"], "{run:?}");
    assert_eq!(run.report["exit"], 7, "{run:?}");
    assert_eq!(run.report["timed_out"], false, "{run:?}");
    for figure in ["wall_ms", "user_ms", "system_ms", "max_rss_kib"] {
        assert!(
            run.report[figure].is_u64(),
            "{figure} missing: {:?}",
            run.report
        );
    }

    // Plain mode: output passed through, the command's status is ours.
    let plain = home.run(&["exec", "t1", "--", "sh", "-c", "echo plain; exit 3"]);
    assert_eq!(status(&plain), 3, "{}", plain.stderr);
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "plain\n");
    let missing = home.run(&["exec", "t1", "--", "no-such-command-airlock"]);
    assert_eq!(status(&missing), 127, "{}", missing.stderr);

    // Environment and working directory per call; files persist between calls.
    let run = home.exec_json_with(
        "t1",
        &["--env", "GREETING=hello there", "--cwd", "/tmp"],
        "echo \"$GREETING\"; pwd; echo kept > \"$OLDPWD/kept.txt\" 2>/dev/null || true",
    );
    assert_eq!(run.stdout[..2], ["hello there", "/tmp"], "{run:?}");
    let workdir = home.state("t1")["workdir"]
        .as_str()
        .expect("workdir")
        .to_owned();
    home.must(&["exec", "t1", "--", "sh", "-c", "echo persisted > state.txt"]);
    let run = home.exec_json("t1", "cat state.txt; env | grep -c -i proxy || true");
    assert_eq!(run.stdout, ["persisted", "0"], "{run:?}");
    assert!(std::path::Path::new(&workdir).join("state.txt").is_file());

    // Standard input.
    let mut command = home.command(&["exec", "t1", "--stdin", "--", "wc", "-c"]);
    command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = command.spawn().expect("exec --stdin");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"12345").expect("write stdin");
    }
    let output = child.wait_with_output().expect("exec --stdin output");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "5");

    // The network: the allowed upstream answers; anything else is refused inside TLS.
    let run = home.exec_json(
        "t1",
        &format!(
            "curl -sS --max-time 20 https://allowed.test:{port}/echo/sandbox; echo; \
             curl -sS --max-time 20 https://refused.example/x; echo"
        ),
    );
    let allowed: Value = serde_json::from_str(&run.stdout[0]).expect("upstream echo");
    assert_eq!(allowed["path"], "/echo/sandbox", "{run:?}");
    let refused: Value = serde_json::from_str(&run.stdout[1]).expect("refusal body");
    assert_eq!(refused["reason"], "host_not_allowed", "{run:?}");
    assert_eq!(upstream.hit_count(), 1);
    let audit = home.audit_text("t1");
    assert!(audit.contains("\"host\":\"refused.example\""), "{audit}");

    // A wall-clock limit kills the command and everything it started.
    let run = home.exec_json_with(
        "t1",
        &["--timeout", "1"],
        "sleep 3071 & echo started; sleep 3072",
    );
    assert_eq!(run.stdout, ["started"], "{run:?}");
    assert_eq!(run.report["exit"], 124, "{run:?}");
    assert_eq!(run.report["timed_out"], true, "{run:?}");
    assert!(
        wait_until(Duration::from_secs(5), || !process_with_marker(
            "sleep 3071"
        ) && !process_with_marker(
            "sleep 3072"
        )),
        "a timed-out command's processes survived"
    );

    // rm: daemon, namespaces, listeners and files gone.
    let daemon = home.daemon_pid("t1");
    let jail = home.state("t1")["confinement"]["jail"]["pid"]
        .as_i64()
        .expect("jail pid") as i32;
    home.must(&["exec", "t1", "--", "sh", "-c", "sleep 3073 &"]);
    home.must(&["rm", "t1"]);
    assert!(
        !home.sandbox_dir("t1").exists(),
        "the sandbox's directory survived rm"
    );
    assert!(wait_until(Duration::from_secs(5), || !alive(daemon) && !alive(jail)));
    assert!(
        wait_until(Duration::from_secs(5), || !process_with_marker(
            "sleep 3073"
        )),
        "a background process survived rm"
    );
    let gone = home.run(&["exec", "t1", "--", "true"]);
    assert_eq!(status(&gone), 125);
    assert!(
        gone.stderr.contains("no sandbox named t1"),
        "{}",
        gone.stderr
    );
}

#[test]
fn a_terminated_exec_kills_its_command_and_the_sandbox_goes_on() {
    if !namespaces_available("a_terminated_exec_kills_its_command") {
        return;
    }
    use std::io::BufRead;
    let home = SandboxHome::new();
    create(&home, "term", &[], &[]);
    let marker = format!("airlock-term-{}", std::process::id());
    let script = "echo started; sleep 300 && echo \"$0\"";
    let mut child = home
        .command(&["exec", "term", "--json", "--", "sh", "-c", script, &marker])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("exec");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a first line").expect("read");
    assert!(first.contains("started"), "{first}");
    assert!(process_with_marker(&marker), "the command runs");
    let pid = i32::try_from(child.id()).expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM to the CLI");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait for the CLI");
    let report: Value = serde_json::from_str(rest.last().expect("an exit report")).expect("json");
    assert_eq!(report["exit"], 137, "{rest:?}");
    assert_eq!(report["protocol"], 1, "{rest:?}");
    assert_eq!(status.code(), Some(137));
    assert!(
        wait_until(Duration::from_secs(10), || !process_with_marker(&marker)),
        "the command survived the CLI's SIGTERM"
    );
    let run = home.exec_json("term", "echo still-here");
    assert_eq!(run.stdout, ["still-here"], "{run:?}");
    home.must(&["rm", "term"]);
}

#[test]
fn a_killed_daemon_or_cli_is_found_and_cleaned_at_the_next_command() {
    if !namespaces_available("a_killed_daemon_or_cli_is_found_and_cleaned") {
        return;
    }
    let home = SandboxHome::new();
    create(&home, "crash", &[], &[]);

    // kill -9 of an `exec` CLI: the sandbox goes on working.
    let mut running = home.command(&["exec", "crash", "--", "sleep", "4242"]);
    let mut child = running.spawn().expect("exec sleep");
    assert!(wait_until(Duration::from_secs(10), || process_with_marker(
        "sleep\x004242"
    )));
    child.kill().expect("kill -9 the exec CLI");
    let _ = child.wait();
    let run = home.exec_json("crash", "echo still-here");
    assert_eq!(run.stdout, ["still-here"], "{run:?}");

    // kill -9 of the daemon: its namespaces die with it; the next commands say so.
    let daemon = home.daemon_pid("crash");
    let jail = home.state("crash")["confinement"]["jail"]["pid"]
        .as_i64()
        .expect("jail") as i32;
    signal::kill(Pid::from_raw(daemon), Signal::SIGKILL).expect("kill -9 the daemon");
    assert!(wait_until(Duration::from_secs(10), || !alive(daemon)));
    assert!(
        wait_until(Duration::from_secs(10), || !alive(jail)),
        "the jail outlived its daemon"
    );
    assert!(
        wait_until(Duration::from_secs(5), || !process_with_marker(
            "sleep\x004242"
        )),
        "a command outlived its sandbox"
    );
    let listed: Value = serde_json::from_str(home.must(&["ls", "--json"]).trim()).expect("ls json");
    assert_eq!(listed["status"], "dead", "{listed}");
    let refused = home.run(&["exec", "crash", "--", "true"]);
    assert_eq!(status(&refused), 125);
    assert!(refused.stderr.contains("not running"), "{}", refused.stderr);
    let again = home.run(&["create", "crash"]);
    assert_eq!(status(&again), 125);
    assert!(again.stderr.contains("exists already"), "{}", again.stderr);
    home.must(&["rm", "crash"]);
    assert!(!home.sandbox_dir("crash").exists());
    create(&home, "crash", &[], &[]);
}

#[test]
fn keys_control_files_and_other_sandboxes_stay_out_of_reach() {
    if !namespaces_available("keys_control_files_and_other_sandboxes_stay_out_of_reach") {
        return;
    }
    crate::support::need_all(&["curl"]);
    let real = sandbox::real_secret();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let home = SandboxHome::new();
    let mut flags = upstream_flags(&pki, port);
    flags.extend(["--secret".into(), "API_TOKEN@allowed.test".into()]);
    // A literal value on the command line: it travels in the daemon's arguments, which the
    // jail's forked processes must not show in /proc/PID/cmdline.
    let argv_real = sandbox::real_secret();
    flags.extend([
        "--secret".into(),
        format!("ARGV_TOKEN=ghp_{}={argv_real}@allowed.test", "S".repeat(36)),
    ]);
    create(&home, "keys", &flags, &[("API_TOKEN", real.as_str())]);
    create(&home, "later", &[], &[]);

    let control = home.sandbox_dir("keys").join("control");
    let ca_dir = home.airlock_home();
    let script = format!(
        "echo \"$API_TOKEN\"; \
         curl -sS --max-time 20 -H \"Authorization: Bearer $API_TOKEN\" https://allowed.test:{port}/echo/key >/dev/null && echo SENT; \
         ls -A {control} | wc -l; cat {control}/state.json 2>/dev/null | wc -c; \
         ls -A {ca_dir} 2>/dev/null | wc -l; \
         ls -A {later} | wc -l; touch {later}/planted 2>/dev/null || echo READONLY; \
         cat /proc/1/environ 2>/dev/null | wc -c; \
         {{ a={real_head}; b={real_tail}; grep -rl \"$a$b\" /tmp /etc /var/tmp /run /dev/shm 2>/dev/null; \
            cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' \\
              | awk -v a={real_head} -v b={real_tail} -v c={argv_head} -v d={argv_tail} \\
                'index($0, a b) || index($0, c d) {{ print; exit }}'; }} | wc -l",
        // The values are split so that this script's own command line does not hold them.
        real_head = &real[..20],
        real_tail = &real[20..],
        argv_head = &argv_real[..20],
        argv_tail = &argv_real[20..],
        control = control.display(),
        ca_dir = ca_dir.display(),
        later = home.sandbox_dir("later").display(),
    );
    let run = home.exec_json_with("keys", &["--timeout", "100"], &script);
    let surrogate = &run.stdout[0];
    assert_eq!(surrogate.len(), real.as_str().len(), "{run:?}");
    assert_ne!(surrogate, real.as_str());
    assert!(
        surrogate.starts_with("ghp_"),
        "format-preserving surrogate: {surrogate}"
    );
    assert_eq!(
        run.stdout[1..],
        ["SENT", "0", "0", "0", "0", "READONLY", "0", "0"],
        "control dir, CA dir, a later sandbox and the init's environment must be \
         invisible, and no file inside may hold the real key: {run:?}"
    );
    let hit = upstream.hits().pop().expect("the upstream was reached");
    let authorization = hit
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.clone());
    assert_eq!(
        authorization.as_deref(),
        Some(format!("Bearer {real}").as_str())
    );
    // Nothing airlock wrote holds a real value: state, logs, audit.
    assert_eq!(
        files_containing(&home.root(), real.as_str()),
        Vec::<String>::new()
    );
    assert_eq!(
        files_containing(&home.root(), &argv_real),
        Vec::<String>::new()
    );
}

#[test]
fn a_private_clone_is_exported_back_and_git_pushes_with_a_surrogate() {
    if !namespaces_available("a_private_clone_is_exported_back_and_git_pushes_with_a_surrogate") {
        return;
    }
    crate::support::need_all(&["git"]);
    let real = sandbox::real_secret();
    let pki = TestPki::new();
    let home = SandboxHome::new();
    let git = GitSetup::new(&home, &pki, &real);
    let (repos, source, server) = (&git.repos, &git.source, &git.server);
    let flags = git.repo_flags(&["--branch", "task/one"]);
    create(&home, "work", &flags, &[("GIT_TOKEN", real.as_str())]);

    let script = format!(
        "git rev-parse --abbrev-ref HEAD; cat README.md; \
         echo change > agent.txt && git add agent.txt && \
         git -c user.name=agent -c user.email=agent@example.invalid commit -q -m 'agent change' && echo COMMITTED; \
         git push -q https://other.test:{port}/repo.git HEAD:refs/heads/from-sandbox 2>&1 && echo PUSHED",
        port = server.port
    );
    let run = home.exec_json_with("work", &["--timeout", "100"], &script);
    assert_eq!(
        run.stdout,
        ["task/one", "# airlock git test", "COMMITTED", "PUSHED"],
        "{run:?}"
    );
    // The push reached the server with the real token (it answers 401 to anything else).
    assert_eq!(
        GitSetup::subject(&repos.join("repo.git"), "from-sandbox"),
        "agent change"
    );
    // The user's tree was never written; the branch comes back with export.
    assert!(
        !source.join("agent.txt").exists(),
        "the agent wrote into the user's tree"
    );
    home.must(&["export", "work"]);
    assert_eq!(
        GitSetup::subject(&source.join(".git"), "task/one"),
        "agent change"
    );
    // A second export of a diverged branch is refused without --force.
    home.must(&[
        "exec", "work", "--", "sh", "-c",
        "git reset -q --hard HEAD~1 && git -c user.name=a -c user.email=a@b.invalid commit -q --allow-empty -m other",
    ]);
    let diverged = home.run(&["export", "work"]);
    assert_eq!(status(&diverged), 125, "{}", diverged.stderr);
    home.must(&["export", "work", "--force"]);

    // A repository named by URL is cloned from inside, through the proxy, with the
    // surrogate; exporting it needs --to.
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
    let run = home.exec_json(
        "remote",
        "git log -1 --format=%s from-sandbox; git rev-parse --abbrev-ref HEAD",
    );
    assert_eq!(run.stdout, ["agent change", "airlock/remote"], "{run:?}");
    let without_target = home.run(&["export", "remote"]);
    assert_eq!(status(&without_target), 125);
    assert!(
        without_target.stderr.contains("--to"),
        "{}",
        without_target.stderr
    );
    assert_eq!(
        files_containing(&home.root(), real.as_str()),
        Vec::<String>::new()
    );
}

#[test]
fn resource_limits_bind_every_command_and_vanish_with_the_sandbox() {
    if !namespaces_available("resource_limits_bind_every_command") {
        return;
    }
    crate::support::need_all(&["python3"]);
    let home = SandboxHome::new();
    let output = home.run(&[
        "create", "limited", "--pids", "24", "--memory", "64", "--cpus", "0.5",
    ]);
    if status(&output) != 0 && output.stderr.contains("need a writable cgroup") {
        let what = format!(
            "resource_limits_bind_every_command: no writable cgroup file system here \
             (run as root): {}",
            output.stderr
        );
        if crate::support::test_user::uid().is_some() {
            use crate::support::require::{Exemption, skip_exempt};
            skip_exempt(Exemption::CgroupAsTestUser, &what);
        } else {
            crate::support::skip_or_fail(&what);
        }
        return;
    }
    assert_eq!(status(&output), 0, "{}", output.stderr);
    let groups: Vec<std::path::PathBuf> = home.state("limited")["confinement"]["cgroups"]
        .as_array()
        .expect("cgroups recorded")
        .iter()
        .map(|g| g.as_str().expect("path").into())
        .collect();
    assert!(!groups.is_empty());
    // Many processes: the fork limit stops them; a big allocation: the memory limit kills it.
    let run = home.exec_json_with(
        "limited",
        &["--timeout", "60"],
        "python3 -c '\nimport os, time\nforked = 0\nfor _ in range(40):\n    try:\n        pid = os.fork()\n    \
         except OSError:\n        break\n    if pid == 0:\n        time.sleep(2)\n        os._exit(0)\n    \
         forked += 1\nprint(forked)\n'; cat /proc/self/cgroup",
    );
    let forked: u32 = run.stdout[0].parse().unwrap_or_else(|_| panic!("{run:?}"));
    assert!(
        forked < 24,
        "the process limit did not hold: {forked} forks"
    );
    let tag = groups[0]
        .file_name()
        .expect("group name")
        .to_string_lossy()
        .into_owned();
    assert!(
        run.stdout.iter().any(|l| l.ends_with(&tag)),
        "the command is not in the sandbox's group {tag}: {run:?}"
    );
    let run = home.exec_json(
        "limited",
        "python3 -c 'b = bytearray(256 * 1024 * 1024); print(len(b))'",
    );
    assert_eq!(
        run.report["exit"], 137,
        "a 256 MiB allocation must be killed: {run:?}"
    );
    home.must(&["rm", "limited"]);
    for group in groups {
        assert!(!group.exists(), "{} survived rm", group.display());
    }
}

#[test]
fn an_llm_route_answers_inside_the_sandbox_with_the_key_injected_outside() {
    if !namespaces_available("an_llm_route_answers_inside_the_sandbox") {
        return;
    }
    crate::support::need_all(&["curl"]);
    let real = sandbox::real_secret();
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let home = SandboxHome::new();
    let flags = llm_route_flags(&home, upstream.port(), &pki.upstream_ca_cert);
    create(&home, "llm", &flags, &[("LLM_KEY", real.as_str())]);
    let run = home.exec_json(
        "llm",
        "curl -sS --max-time 20 -H 'Authorization: Bearer agent-chosen-key' \
         -d '{\"model\":\"m\"}' http://airlock.internal/llm/fake/chat/completions; echo; \
         curl -sS --max-time 20 http://airlock.internal/other/; echo",
    );
    let hit = upstream.hits().pop().expect("the upstream was reached");
    assert_routed(&run, &hit, "/api/v1/chat/completions", real.as_str());
    let refused: Value = serde_json::from_str(&run.stdout[1]).expect("refusal");
    assert_eq!(refused["host"], "airlock.internal", "{run:?}");
    assert_eq!(
        files_containing(&home.root(), real.as_str()),
        Vec::<String>::new()
    );
}

/// Start time (field 22 of `/proc/PID/stat`) of a live process.
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("name") + 1..];
    after
        .split_whitespace()
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("number")
}

/// Writes `control/state.json` of sandbox `name` as airlock would (0600, own user).
fn plant_state(home: &SandboxHome, name: &str, state: &Value, mode: u32) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let control = home.sandbox_dir(name).join("control");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&control)
        .expect("control dir");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(control.join("state.json"))
        .expect("state file");
    std::io::Write::write_all(&mut file, state.to_string().as_bytes()).expect("write");
}

#[test]
fn planted_state_files_run_no_program_and_kill_no_process() {
    use std::os::unix::fs::PermissionsExt;
    let home = SandboxHome::new();
    std::fs::create_dir_all(home.root()).expect("root");
    // A program a state file names as the engine: it must never run.
    let marker = home.scratch().join("engine-ran");
    let engine = home.scratch().join("docker");
    std::fs::write(&engine, format!("#!/bin/sh\ntouch {}\n", marker.display())).expect("engine");
    std::fs::set_permissions(&engine, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // A process of this user that a state file names as daemon and jail: it must survive.
    let mut victim = match support::test_user::uid() {
        Some(uid) => {
            let mut command = support::test_user::wrap(uid);
            command.arg("sleep");
            command
        }
        None => std::process::Command::new("sleep"),
    }
    .arg("60")
    .spawn()
    .expect("sleep");
    let victim_id = serde_json::json!({"pid": victim.id(), "start_time": start_time(victim.id())});
    let base = |confinement: Value| {
        serde_json::json!({
            "name": "", "provider": "local", "daemon": victim_id, "confinement": confinement,
            "env": [], "workdir": "/", "workspace": null, "created_unix": 0, "policy": []
        })
    };
    let planted = [
        (
            "engine",
            serde_json::json!({"kind": "docker", "container": "0123456789ab",
                                      "engine": engine}),
            0o600,
        ),
        (
            "cgroup",
            serde_json::json!({"kind": "local", "jail": victim_id,
                                      "cgroups": ["/sys/fs/cgroup/user.slice"]}),
            0o600,
        ),
        (
            "sleeper",
            serde_json::json!({"kind": "local", "jail": victim_id,
                                       "cgroups": ["/sys/fs/cgroup/airlock-sleeper-1"]}),
            0o600,
        ),
        (
            "loose",
            serde_json::json!({"kind": "local", "jail": victim_id, "cgroups": []}),
            0o644,
        ),
    ];
    for (name, confinement, mode) in planted {
        let mut state = base(confinement);
        state["name"] = Value::from(name);
        if name == "engine" {
            state["provider"] = Value::from("docker");
        }
        plant_state(&home, name, &state, mode);
    }
    if let Some(uid) = support::test_user::uid() {
        support::test_user::chown_tree(&home.root(), uid);
        support::test_user::chown_tree(&home.scratch(), uid);
    }
    let listed = home.run(&["ls", "--json"]);
    let exec = home.run(&["exec", "sleeper", "--", "true"]);
    assert_ne!(
        status(&exec),
        0,
        "a planted jail PID is never joined: {}",
        exec.stderr
    );
    for name in ["engine", "cgroup", "sleeper", "loose"] {
        let removed = home.run(&["rm", name]);
        assert_eq!(status(&removed), 0, "rm {name}: {}", removed.stderr);
        assert!(!home.sandbox_dir(name).exists(), "{name} removed");
    }
    assert!(
        !marker.exists(),
        "the engine named in a state file ran: {}",
        listed.stderr
    );
    assert!(
        victim.try_wait().expect("wait").is_none(),
        "a process named in a state file was killed"
    );
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn a_sandbox_writes_its_workspace_and_its_policys_writable_directories_only() {
    if !namespaces_available(
        "a_sandbox_writes_its_workspace_and_its_policys_writable_directories_only",
    ) {
        return;
    }
    let home = SandboxHome::new();
    let cache = home.scratch().join("cache");
    let elsewhere = home.scratch().join("elsewhere");
    std::fs::create_dir_all(&cache).expect("cache");
    std::fs::create_dir_all(&elsewhere).expect("elsewhere");
    let policy = home.scratch().join("fs.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nfilesystem:\n  writable: [\"{}\"]\n",
            cache.display()
        ),
    )
    .expect("policy");
    if let Some(uid) = support::test_user::uid() {
        support::test_user::chown_tree(&home.scratch(), uid);
    }
    create(
        &home,
        "fsw",
        &["--policy".into(), policy.display().to_string()],
        &[],
    );
    let script = format!(
        "touch made && echo workspace=yes; touch {cache}/made && echo cache=yes; \
         touch {elsewhere}/made 2>/dev/null && echo elsewhere=yes; echo done",
        cache = cache.display(),
        elsewhere = elsewhere.display(),
    );
    let run = home.exec_json("fsw", &script);
    assert_eq!(
        run.stdout,
        ["workspace=yes", "cache=yes", "done"],
        "the workspace and the policy's writable directory only: {run:?}"
    );
    assert!(cache.join("made").exists());
    assert!(!elsewhere.join("made").exists());
    home.must(&["rm", "fsw"]);
}

#[test]
fn the_sandbox_audit_log_rotates_out_of_the_sandboxs_sight() {
    if !namespaces_available("the_sandbox_audit_log_rotates_out_of_the_sandboxs_sight") {
        return;
    }
    let home = SandboxHome::new();
    create(&home, "rot", &["--audit-max-size".into(), "2K".into()], &[]);
    let control = home.sandbox_dir("rot").join("control");
    // Distinct names, so that nothing folds; then the command looks at the control files.
    let script = format!(
        "for i in $(seq 1 40); do getent hosts n$i.example >/dev/null; done; ls -A {} | wc -l",
        control.display()
    );
    let run = home.exec_json("rot", &script);
    assert_eq!(
        run.stdout,
        ["0"],
        "the control directory is hidden: {run:?}"
    );
    let rotated = control.join("audit.jsonl.1");
    assert!(
        wait_until(Duration::from_secs(10), || rotated.exists()),
        "no rotation in {}",
        control.display()
    );
    for name in ["audit.jsonl", "audit.jsonl.1"] {
        let text = std::fs::read_to_string(control.join(name)).expect("a log file");
        assert!(text.len() <= 2048, "{name}: {} bytes", text.len());
    }
    home.must(&["rm", "rot"]);
}
