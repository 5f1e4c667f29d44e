//! The command line's small promises, through the real binary: every printing command
//! ends quietly with its own exit status when its reader goes away (`| head`), `run`
//! names a command it cannot find, `--resolve` takes curl's `HOST:PORT:ADDR`, a name that
//! does not resolve is refused in plain words, `airlock logs` lists, shows and prunes run
//! logs, and `completions`/`man` print what the shells and `man` read.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::support::run::{RunHome, code, namespaces_available};
use crate::support::{CurlRequest, ProxyBuilder, TestPki, Upstream, curl, run_bounded};

/// How long one command may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A private `AIRLOCK_HOME` (with a CA), a policy, an audit log and a seed file.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let fixture = Fixture {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let policy = "version: 1\nnetwork:\n  allow:\n    - host: api.example.com\n";
        std::fs::write(fixture.path("policy.yaml"), policy).expect("policy");
        let refused = r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"evil.example","port":443,"path":"/x"}"#;
        std::fs::write(fixture.path("audit.jsonl"), format!("{refused}\n")).expect("audit");
        let logs = fixture.home().join("logs");
        std::fs::create_dir_all(&logs).expect("logs dir");
        std::fs::write(logs.join("run-1700000000-42.jsonl"), format!("{refused}\n"))
            .expect("run log");
        let init = fixture.run(&["ca", "init"]);
        assert_eq!(code(&init), 0, "ca init: {}", init.stderr);
        fixture
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
        command
            .args(args)
            .env("AIRLOCK_HOME", self.home())
            .env_remove("XDG_DATA_HOME")
            .current_dir(self.dir.path());
        command
    }

    fn run(&self, args: &[&str]) -> crate::support::clients::BoundedOutput {
        run_bounded(&mut self.command(args), TIMEOUT)
    }
}

/// Runs `command` with its standard output closed before it writes: the read end of the
/// pipe is dropped right after the spawn. Returns the exit code and stderr.
fn with_closed_stdout(mut command: Command) -> (i32, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn airlock");
    drop(child.stdout.take());
    let mut stderr_pipe = child.stderr.take().expect("stderr pipe");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{command:?} did not end within {TIMEOUT:?} with its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = reader.join().expect("stderr reader");
    let code = status
        .code()
        .unwrap_or_else(|| panic!("{command:?} killed by a signal ({status:?}): {stderr}"));
    (code, stderr)
}

/// Every command that prints on stdout, with its arguments.
fn printing_commands(fixture: &Fixture) -> Vec<Vec<String>> {
    let policy = fixture.path("policy.yaml").display().to_string();
    let audit = fixture.path("audit.jsonl").display().to_string();
    let seed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../airlock-import/tests/fixtures/import/airut/network-allowlist.yaml")
        .display()
        .to_string();
    let lines: &[&[&str]] = &[
        &["policy", "check", &policy],
        &[
            "policy",
            "explain",
            "--policy",
            &policy,
            "GET",
            "https://api.example.com/",
        ],
        &["policy", "explain", "GET", "https://evil.example/"],
        &[
            "policy",
            "explain",
            "--json",
            "--policy",
            &policy,
            "GET",
            "https://api.example.com/",
        ],
        &["policy", "explain", "--fs", "."],
        &["policy", "suggest", &audit],
        &["policy", "import", "--from", "airut", &seed],
        &["ca", "show"],
        &["ca", "path"],
        &["ca", "init"],
        &["sandbox", "ls"],
        &["completions", "bash"],
        &["completions", "zsh"],
        &["man"],
        &["doctor"],
        &["doctor", "--json"],
        &["doctor", "--apparmor-profile"],
        &["logs"],
        &["logs", "--json"],
        &["logs", "show", "--last"],
        &["logs", "prune", "--keep", "5", "--dry-run"],
        &["--help"],
    ];
    lines
        .iter()
        .map(|args| args.iter().map(|a| (*a).to_owned()).collect())
        .collect()
}

/// `airlock policy explain … | head -0` and every other printing command: no panic, the
/// command's own exit status (the one it has with a reader), nothing on stderr that it
/// would not print anyway.
#[test]
fn every_printing_command_ends_quietly_on_a_closed_pipe() {
    let fixture = Fixture::new();
    for args in printing_commands(&fixture) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let normal = fixture.run(&args);
        let expected = code(&normal);
        assert!(
            !normal.stdout.is_empty(),
            "airlock {args:?} printed nothing: {}",
            normal.stderr
        );
        let (status, stderr) = with_closed_stdout(fixture.command(&args));
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "airlock {args:?} with a closed stdout: {stderr}"
        );
        assert_eq!(
            status, expected,
            "airlock {args:?} exits {status} with a closed stdout, {expected} with a reader: \
             {stderr}"
        );
    }
}

/// `watch --json` whose reader went away ends with status 0 at the next event.
#[test]
fn watch_json_ends_quietly_on_a_closed_pipe() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let builder = ProxyBuilder::new(&pki).resolve_loopback("localhost");
    let admin = format!("unix:{}", builder.dir().join("admin.sock").display());
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{}]\n",
        upstream.port()
    );
    let proxy = builder.policy(&policy).arg("--admin").arg(&admin).start();
    let mut watch = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["watch", "--json", "--admin", &admin])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start airlock watch");
    drop(watch.stdout.take());
    let url = format!("https://localhost:{}/x", upstream.port());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        assert!(Instant::now() < deadline, "watch did not end within 20 s");
        let _ = curl(&proxy, &pki, &CurlRequest::get(&url));
        if let Some(status) = watch.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stderr = String::new();
    let _ = watch
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    assert_eq!(status.code(), Some(0), "watch --json: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `run -- CMD` with a CMD that does not exist: 127, and the message names CMD.
#[test]
fn run_names_the_command_it_cannot_find() {
    if !namespaces_available("run_names_the_command_it_cannot_find") {
        return;
    }
    let home = RunHome::new();
    for jail in ["namespace", "env"] {
        let output = home.run(&["--jail", jail, "--", "airlock-no-such-command", "x"]);
        assert_eq!(code(&output), 127, "--jail {jail}: {}", output.stderr);
        assert!(
            output
                .stderr
                .contains("cannot run airlock-no-such-command: No such file or directory"),
            "--jail {jail}: {}",
            output.stderr
        );
    }
}

/// curl's `--resolve HOST:PORT:ADDR`: the pin holds on its port only; a name that does not
/// resolve is answered 502 with plain words (no resolver debug text).
#[test]
fn resolve_takes_curl_s_port_form_and_dns_failures_are_plain() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n      ports: [{port}]\n    \
         - host: elsewhere.invalid\n      ports: [{port}]\n"
    );
    let proxy = ProxyBuilder::new(&pki)
        .arg("--resolve")
        .arg(&format!("allowed.test:{port}:127.0.0.1"))
        .arg("--resolve")
        .arg("elsewhere.invalid:1:127.0.0.1")
        .policy(&policy)
        .start();
    let pinned = curl(
        &proxy,
        &pki,
        &CurlRequest::get(&format!("https://allowed.test:{port}/a")),
    );
    assert_eq!(pinned.status, 200, "pinned: {}", pinned.stderr);
    // The pin names port 1: on this port the name is looked up, and does not exist.
    let unpinned = curl(
        &proxy,
        &pki,
        &CurlRequest::get(&format!("https://elsewhere.invalid:{port}/a")),
    );
    let body = String::from_utf8_lossy(&unpinned.body);
    assert_eq!(unpinned.status, 502, "unpinned: {body}");
    let refusal: serde_json::Value = serde_json::from_slice(&unpinned.body).expect("JSON body");
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("cannot resolve elsewhere.invalid: "),
        "502 body: {body}"
    );
    for debug in ["Query", "Name(", "{", "soa", "query_type"] {
        assert!(
            !message.contains(debug),
            "resolver debug text in the 502 body: {body}"
        );
    }
}

/// `airlock logs`: lists the run logs oldest first (text and JSON), shows one by ID or the
/// newest, says which ID does not exist, prunes by age and by count.
#[test]
fn logs_lists_shows_and_prunes_run_logs() {
    let fixture = Fixture::new();
    let logs = fixture.home().join("logs");
    let day = Duration::from_secs(86_400);
    let write = |name: &str, text: &str, age: Duration| {
        let path = logs.join(name);
        std::fs::write(&path, text).expect("log");
        let file = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_modified(SystemTime::now() - age).expect("mtime");
    };
    write("run-1700000000-42.jsonl", "{\"old\":1}\n", day * 10);
    write("run-1700000100-7.jsonl", "{\"middle\":1}\n", day * 3);
    write("run-1700000200-9.jsonl", "{\"new\":1}\n", Duration::ZERO);
    write("not-a-run.jsonl", "{}\n", day * 30);

    let list = fixture.run(&["logs"]);
    assert_eq!(code(&list), 0, "{}", list.stderr);
    let text = String::from_utf8_lossy(&list.stdout).into_owned();
    let ids: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        ids,
        ["run-1700000000-42", "run-1700000100-7", "run-1700000200-9"],
        "{text}"
    );
    assert!(
        text.contains("2023-11-14 22:13:20"),
        "start times in UTC: {text}"
    );
    let json = fixture.run(&["logs", "--json"]);
    let first: serde_json::Value =
        serde_json::from_slice(json.stdout.split(|b| *b == b'\n').next().expect("a line"))
            .expect("JSON");
    assert_eq!(first["id"], "run-1700000000-42");
    assert_eq!(first["started_unix"], 1_700_000_000);
    assert_eq!(first["bytes"], 10);
    assert!(
        first["path"]
            .as_str()
            .is_some_and(|p| p.ends_with("run-1700000000-42.jsonl"))
    );

    let shown = fixture.run(&["logs", "show", "run-1700000100-7"]);
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "{\"middle\":1}\n");
    let last = fixture.run(&["logs", "show", "--last"]);
    assert_eq!(String::from_utf8_lossy(&last.stdout), "{\"new\":1}\n");
    let missing = fixture.run(&["logs", "show", "run-1-1"]);
    assert_eq!(code(&missing), 1);
    assert!(
        missing.stderr.contains("no run log run-1-1"),
        "{}",
        missing.stderr
    );
    let usage = fixture.run(&["logs", "prune"]);
    assert_eq!(code(&usage), 2, "prune needs a criterion: {}", usage.stderr);

    let dry = fixture.run(&["logs", "prune", "--older-than", "7d", "--dry-run"]);
    assert!(String::from_utf8_lossy(&dry.stdout).contains("would remove 1 run log(s)"));
    assert!(logs.join("run-1700000000-42.jsonl").exists());
    let pruned = fixture.run(&["logs", "prune", "--older-than", "7d"]);
    assert_eq!(code(&pruned), 0, "{}", pruned.stderr);
    assert!(!logs.join("run-1700000000-42.jsonl").exists());
    assert!(logs.join("run-1700000100-7.jsonl").exists());
    assert!(
        logs.join("not-a-run.jsonl").exists(),
        "only run logs are pruned"
    );
    let kept = fixture.run(&["logs", "prune", "--keep", "1"]);
    assert_eq!(code(&kept), 0, "{}", kept.stderr);
    assert!(!logs.join("run-1700000100-7.jsonl").exists());
    assert!(
        logs.join("run-1700000200-9.jsonl").exists(),
        "the newest stays"
    );
}

/// A real run's log lands where `airlock logs` looks, and `show --last` prints it.
#[test]
fn logs_finds_the_log_of_a_real_run() {
    if !namespaces_available("logs_finds_the_log_of_a_real_run") {
        return;
    }
    let home = RunHome::new();
    let output = home.run(&["--allow", "api.example.com", "--", "true"]);
    assert_eq!(code(&output), 0, "{}", output.stderr);
    let mut logs = home.command();
    logs.args(["logs", "--json"])
        .env("AIRLOCK_HOME", home.airlock_home());
    let listed = run_bounded(&mut logs, TIMEOUT);
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert_eq!(
        text.lines().count(),
        1,
        "one run, one log: {text} {}",
        listed.stderr
    );
    let mut show = home.command();
    show.args(["logs", "show", "--last"])
        .env("AIRLOCK_HOME", home.airlock_home());
    let shown = run_bounded(&mut show, TIMEOUT);
    assert_eq!(code(&shown), 0, "{}", shown.stderr);
    let first: serde_json::Value =
        serde_json::from_slice(shown.stdout.split(|b| *b == b'\n').next().expect("a line"))
            .expect("an audit line");
    assert!(first.get("kind").is_some(), "{first}");
}

/// The completion scripts and the manual page come from the CLI itself: every subcommand
/// is in them, and `man --dir` writes one page per command.
#[test]
fn completions_and_man_pages_cover_every_command() {
    let fixture = Fixture::new();
    let subcommands = ["run", "proxy", "policy", "doctor", "logs", "completions"];
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = fixture.run(&["completions", shell]);
        assert_eq!(code(&output), 0, "{shell}: {}", output.stderr);
        let script = String::from_utf8_lossy(&output.stdout);
        for name in subcommands {
            assert!(script.contains(name), "{shell} completions lack {name}");
        }
    }
    let bash = fixture.run(&["completions", "bash"]);
    let script = fixture.path("airlock.bash");
    std::fs::write(&script, &bash.stdout).expect("script");
    let mut check = Command::new("bash");
    check.arg("-n").arg(&script);
    let checked = run_bounded(&mut check, TIMEOUT);
    assert_eq!(code(&checked), 0, "bash -n: {}", checked.stderr);

    let man = fixture.run(&["man"]);
    let page = String::from_utf8_lossy(&man.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH airlock 1"),
        "{page}"
    );
    assert!(page.contains("doctor") && page.contains("logs"), "{page}");
    let dir = fixture.path("man1");
    let written = fixture.run(&["man", "--dir", dir.to_str().expect("utf-8")]);
    assert_eq!(code(&written), 0, "{}", written.stderr);
    for page in [
        "airlock.1",
        "airlock-run.1",
        "airlock-doctor.1",
        "airlock-logs-prune.1",
    ] {
        assert!(dir.join(page).is_file(), "man --dir wrote no {page}");
    }
    assert_eq!(code(&fixture.run(&["completions", "tcsh"])), 2);
}

/// `cd /tmp && airlock run`: the working directory is `/tmp` itself, shown (writable) as
/// the host's instead of being covered by the private `/tmp` (which used to make every
/// write-protected path found in it missing: exit 125).
///
/// The run watches its working directory for write-protected names created during it and
/// quarantines them at the end; on the host's `/tmp` that took other tests' files (the
/// `airlock.yaml` of `cli_init`, written in a temporary directory meanwhile). So `/tmp`
/// here is a directory of this test's own, bound over `/tmp` in a mount namespace of its own.
#[test]
fn run_works_with_tmp_itself_as_the_working_directory() {
    if !namespaces_available("run_works_with_tmp_itself_as_the_working_directory") {
        return;
    }
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let tmp = base.path().join("tmp");
    std::fs::create_dir(&tmp).expect("tmp");
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .expect("chmod");
    std::fs::write(tmp.join("marker"), "host").expect("marker");
    let mut command = Command::new("unshare");
    if !nix::unistd::geteuid().is_root() {
        command.args(["--user", "--map-root-user"]);
    }
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /tmp && cd /tmp && exec "$@""#)
        .arg(&tmp)
        .arg(env!("CARGO_BIN_EXE_airlock"))
        .args(["run", "--", "sh", "-c", "cat /tmp/marker && pwd"])
        .env("AIRLOCK_HOME", base.path().join("home"));
    let output = run_bounded(&mut command, TIMEOUT);
    assert_eq!(code(&output), 0, "{}", output.stderr);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "host/tmp\n");
}
