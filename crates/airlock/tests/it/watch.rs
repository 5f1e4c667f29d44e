//! `airlock watch` attached to a real `airlock proxy`'s admin API (unix socket): `--json`
//! prints each audit line as it happens and ends with the proxy; the full-screen view,
//! driven in tmux at 80×24, shows allowed and refused requests with the reason, filters
//! with `/`, and quits with `q`; under `--mode ask` it pins held requests on top and its
//! keys answer them (`a` once, `r` for the run, `d` deny); usage errors are clear.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::tmux::Tmux;
use crate::support::{CurlRequest, Proxy, ProxyBuilder, TestPki, Upstream, curl, run_bounded};
use serde_json::Value;

/// A proxy allowing `localhost/ok/**` on the upstream's port, with its admin API on a
/// unix socket; returns the proxy and `unix:SOCKET`.
fn proxy(pki: &TestPki, upstream: &Upstream) -> (Proxy, String) {
    proxy_with(pki, upstream, &[])
}

/// [`proxy`] with more flags.
fn proxy_with(pki: &TestPki, upstream: &Upstream, flags: &[&str]) -> (Proxy, String) {
    let mut builder = ProxyBuilder::new(pki).resolve_loopback("localhost");
    for flag in flags {
        builder = builder.arg(flag);
    }
    let admin = format!("unix:{}", builder.dir().join("admin.sock").display());
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{}]\n      paths: [\"/ok/**\"]\n",
        upstream.port()
    );
    let proxy = builder.policy(&policy).arg("--admin").arg(&admin).start();
    (proxy, admin)
}

fn get(proxy: &Proxy, pki: &TestPki, upstream: &Upstream, path: &str) -> u16 {
    let url = format!("https://localhost:{}{path}", upstream.port());
    curl(proxy, pki, &CurlRequest::get(&url)).status
}

/// `airlock watch --json ARGS...` with `env` set; its stdout lines arrive on the receiver.
fn watch_json(args: &[&str], env: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
    command
        .args(["watch", "--json"])
        .args(args)
        .envs(env.iter().copied());
    spawn_lines(&mut command)
}

/// Starts `command`; its stdout lines arrive on the receiver.
fn spawn_lines(command: &mut Command) -> (Child, mpsc::Receiver<String>) {
    let mut watch = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start airlock watch");
    let (sender, lines) = mpsc::channel::<String>();
    let stdout = watch.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    (watch, lines)
}

/// Requests `/ok/a` until its line comes out of `lines` (the stream is subscribed some
/// time after watch starts); returns that line.
fn first_line(
    proxy: &Proxy,
    pki: &TestPki,
    upstream: &Upstream,
    lines: &mpsc::Receiver<String>,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        assert!(Instant::now() < deadline, "no event within 15 s");
        assert_eq!(get(proxy, pki, upstream, "/ok/a"), 200);
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(500)) {
            return serde_json::from_str(&line).expect("a JSON line");
        }
    }
}

#[test]
fn json_mode_prints_each_decision_and_ends_with_the_proxy() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (mut proxy, admin) = proxy(&pki, &upstream);
    let (mut watch, lines) = watch_json(&["--admin", &admin], &[]);
    let first = first_line(&proxy, &pki, &upstream, &lines);
    assert_eq!(
        (first["decision"].as_str(), first["path"].as_str()),
        (Some("allow"), Some("/ok/a"))
    );
    assert_eq!(get(&proxy, &pki, &upstream, "/no"), 403);
    let refused = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the refusal's line");
        let line: Value = serde_json::from_str(&line).expect("a JSON line");
        if line["path"] == "/no" {
            break line;
        }
    };
    assert_eq!(refused["decision"], "deny");
    assert_eq!(refused["reason"], "path_not_allowed");

    proxy.terminate(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = watch.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "watch still running after the proxy stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
}

/// Without `--admin`, watch attaches to the newest run socket in this user's runtime
/// directory (`$XDG_RUNTIME_DIR/airlock/run-PID.sock`, where `airlock run` serves it).
#[test]
fn without_admin_watch_attaches_to_the_newest_run() {
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let xdg = tempfile::tempdir().expect("a runtime dir");
    let sockets = xdg.path().join("airlock");
    std::fs::create_dir(&sockets).expect("airlock dir");
    for dir in [xdg.path(), sockets.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let builder = ProxyBuilder::new(&pki).resolve_loopback("localhost");
    let admin = format!("unix:{}", sockets.join("run-4242.sock").display());
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{}]\n      paths: [\"/ok/**\"]\n",
        upstream.port()
    );
    let proxy = builder.policy(&policy).arg("--admin").arg(&admin).start();
    let xdg_text = xdg.path().display().to_string();
    let (mut watch, lines) = watch_json(&[], &[("XDG_RUNTIME_DIR", &xdg_text)]);
    let first = first_line(&proxy, &pki, &upstream, &lines);
    assert_eq!(first["path"], "/ok/a", "{first}");
    let _ = watch.kill();
    let _ = watch.wait();

    // With no run at all, watch says what to do.
    let empty = tempfile::tempdir().expect("an empty runtime dir");
    std::fs::set_permissions(empty.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let output = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["watch", "--json"])
            .env("XDG_RUNTIME_DIR", empty.path()),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(1));
    assert!(
        output.stderr.contains("no running `airlock run`"),
        "{}",
        output.stderr
    );
}

#[test]
fn the_terminal_view_shows_refusals_filters_and_quits() {
    support::need("tmux");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (proxy, admin) = proxy(&pki, &upstream);
    let line = format!("{} watch --admin {admin}", env!("CARGO_BIN_EXE_airlock"));
    let tmux = Tmux::start("watch", proxy.dir(), (80, 24), &line);
    tmux.expect("airlock watch");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !tmux.screen().contains("localhost/ok/a") {
        assert!(
            Instant::now() < deadline,
            "no decision shown:\n{}",
            tmux.screen()
        );
        assert_eq!(get(&proxy, &pki, &upstream, "/ok/a"), 200);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(get(&proxy, &pki, &upstream, "/no/x"), 403);
    tmux.expect("path_not_allowed");
    tmux.expect_that("DENY on the refused line", |screen| {
        screen
            .lines()
            .any(|l| l.contains("DENY") && l.contains("localhost/no/x"))
    });

    tmux.keys(&["/", "no/x", "Enter"]);
    tmux.expect("[no/x]");
    tmux.expect_that("only the refusal left", |screen| {
        screen.contains("localhost/no/x") && !screen.contains("localhost/ok/a")
    });
    tmux.keys(&["Escape"]);
    tmux.expect("localhost/ok/a");

    tmux.keys(&["q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux.running() {
        assert!(
            Instant::now() < deadline,
            "q did not quit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn held_requests_are_pinned_on_top_and_answered_with_keys() {
    support::need("tmux");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let flags = ["--mode", "ask", "--ask-timeout", "30s"];
    let (proxy, admin) = proxy_with(&pki, &upstream, &flags);
    let line = format!("{} watch --admin {admin}", env!("CARGO_BIN_EXE_airlock"));
    let tmux = Tmux::start("watch-ask", proxy.dir(), (80, 24), &line);
    tmux.expect("airlock watch");
    let held = |path: &'static str, key: &str| {
        std::thread::scope(|scope| {
            let request = scope.spawn(|| get(&proxy, &pki, &upstream, path));
            tmux.expect_that("the held request on top", |screen| {
                screen.contains("1 waiting") && screen.contains(path)
            });
            tmux.keys(&[key]);
            request.join().expect("the request thread")
        })
    };
    assert_eq!(held("/held/once", "a"), 200, "a: allowed once");
    tmux.expect("answered 1: allow once");
    assert_eq!(held("/held/run", "r"), 200, "r: allowed for the run");
    tmux.expect("allow run");
    // Allowed for the run: the same request now passes without being held.
    assert_eq!(get(&proxy, &pki, &upstream, "/held/run"), 200);
    assert_eq!(held("/held/denied", "d"), 403, "d: denied");
    tmux.expect_that("no ask left", |screen| {
        !screen.contains("waiting for an answer")
    });
    tmux.keys(&["q"]);
}

#[test]
fn without_an_api_or_a_terminal_watch_says_what_to_do() {
    let airlock = env!("CARGO_BIN_EXE_airlock");
    let output = run_bounded(
        Command::new(airlock).args([
            "watch",
            "--admin",
            "unix:/nonexistent/airlock.sock",
            "--json",
        ]),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(1));
    assert!(
        output
            .stderr
            .contains("cannot reach the admin API at unix:/nonexistent/airlock.sock"),
        "{}",
        output.stderr
    );

    let output = run_bounded(
        Command::new(airlock).args(["watch", "--admin", "unix:/nonexistent/airlock.sock"]),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(1));
    assert!(
        output.stderr.contains("not a terminal: use --json"),
        "{}",
        output.stderr
    );

    let output = run_bounded(
        Command::new(airlock).args(["watch", "--admin", "nowhere"]),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(2));
}

/// An ask-mode proxy whose policy lists only `localhost/ok/**`: `other.test` (resolved to
/// loopback) is unlisted; returns the proxy and `unix:SOCKET`.
fn unlisted_proxy(pki: &TestPki, upstream: &Upstream) -> (Proxy, String) {
    let builder = ProxyBuilder::new(pki)
        .resolve_loopback("localhost")
        .resolve_loopback("other.test")
        .arg("--mode")
        .arg("ask")
        .arg("--ask-timeout")
        .arg("8s");
    let admin = format!("unix:{}", builder.dir().join("admin.sock").display());
    let policy = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [{}]\n      paths: [\"/ok/**\"]\n",
        upstream.port()
    );
    let proxy = builder.policy(&policy).arg("--admin").arg(&admin).start();
    (proxy, admin)
}

/// A request to an unlisted host through the explicit proxy is asked about once, with its
/// method, host and path (never as a CONNECT): `a` lets it through, the same request asks
/// again, `r` lets it and the next one through (the next without asking: an ask would
/// have been refused after the 8 s timeout).
#[test]
fn an_unlisted_host_is_asked_once_per_request_and_a_and_r_let_it_through() {
    support::need("tmux");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (proxy, admin) = unlisted_proxy(&pki, &upstream);
    let line = format!("{} watch --admin {admin}", env!("CARGO_BIN_EXE_airlock"));
    let tmux = Tmux::start("watch-unlisted", proxy.dir(), (80, 24), &line);
    tmux.expect("airlock watch");
    let url = format!("https://other.test:{}/unlisted/x", upstream.port());
    let held = |key: &str| {
        std::thread::scope(|scope| {
            let request = scope.spawn(|| curl(&proxy, &pki, &CurlRequest::get(&url)).status);
            tmux.expect_that("the request asked about with method and path", |screen| {
                screen.contains("1 waiting")
                    && screen.lines().any(|l| {
                        l.contains("GET") && l.contains("other.test") && l.contains("/unlisted/x")
                    })
                    && !screen.contains("CONNECT")
            });
            tmux.keys(&[key]);
            request.join().expect("the request thread")
        })
    };
    assert_eq!(held("a"), 200, "a: allowed once, nothing asked again");
    tmux.expect("answered 1: allow once");
    tmux.expect_that("the answer shown as such", |screen| {
        screen
            .lines()
            .any(|l| l.contains("answer") && l.contains("allow once"))
    });
    assert_eq!(
        held("r"),
        200,
        "the same request asks again; r: for the run"
    );
    tmux.expect("answered 2: allow run");
    let started = Instant::now();
    assert_eq!(curl(&proxy, &pki, &CurlRequest::get(&url)).status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the next one was held"
    );
    let asks = proxy
        .audit_log_text()
        .lines()
        .filter(|l| l.contains("\"asked\":true"))
        .count();
    assert_eq!(asks, 2, "{}", proxy.audit_log_text());
    tmux.keys(&["q"]);
}

/// Decisions made before watch attaches are shown (the run's backlog); Enter opens the
/// detail of the selected one (full URL with the query redacted, rule, reason, status);
/// `f` filters by decision; at 132×40 a PROGRAM column appears; `NO_COLOR` is honoured.
#[test]
fn the_backlog_and_the_detail_view_at_80x24_and_132x40() {
    support::need("tmux");
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let (proxy, admin) = proxy(&pki, &upstream);
    assert_eq!(get(&proxy, &pki, &upstream, "/ok/before"), 200);
    assert_eq!(get(&proxy, &pki, &upstream, "/no/secret?token=abc123"), 403);
    // Both lines have reached the control plane before watch attaches.
    proxy.audit_line_where("the refusal", |l| l["path"] == "/no/secret");
    let line = format!(
        "NO_COLOR=1 {} watch --admin {admin}",
        env!("CARGO_BIN_EXE_airlock")
    );
    for (name, size) in [("watch-small", (80, 24)), ("watch-large", (132, 40))] {
        let tmux = Tmux::start(name, proxy.dir(), size, &line);
        tmux.expect("2 decisions, 1 refused");
        tmux.expect("localhost/ok/before");
        tmux.expect("localhost/no/secret");
        if size.0 >= 120 {
            tmux.expect("PROGRAM");
        }
        tmux.keys(&["Down", "Enter"]);
        let url = format!(
            "https://localhost:{}/no/secret?token=REDACTED",
            upstream.port()
        );
        tmux.expect_that("the detail view", |screen| {
            let joined: String = screen.lines().map(str::trim).collect();
            joined.contains(&url)
                && screen.contains("path_not_allowed")
                && screen.contains("403")
                && !screen.contains("abc123")
        });
        tmux.keys(&["Escape"]);
        tmux.expect("TIME");
        tmux.keys(&["f", "decision:deny", "Enter"]);
        tmux.expect_that("only the refusal", |screen| {
            screen.contains("localhost/no/secret") && !screen.contains("localhost/ok/before")
        });
        tmux.keys(&["q"]);
    }
}

/// `airlock watch --sandbox NAME` attaches to a sandbox's admin API (its control
/// directory's socket) and starts with the sandbox's backlog: a refusal made before it
/// attached is its first line.
#[test]
fn sandbox_attach_shows_the_backlog_of_a_sandbox() {
    if !crate::support::run::namespaces_available("sandbox_attach_shows_the_backlog_of_a_sandbox") {
        return;
    }
    support::need_all(&["curl"]);
    let home = crate::support::sandbox::SandboxHome::new();
    let output = home.run(&["create", "watched", "--allow", "allowed.test"]);
    assert_eq!(
        crate::support::sandbox::status(&output),
        0,
        "create: {}",
        output.stderr
    );
    let script = "curl -sS -o /dev/null -w '%{http_code}\\n' --max-time 20 https://refused.test/x";
    let exec = home.exec_json("watched", script);
    assert_eq!(exec.stdout, ["403"], "{:?}", exec.stderr);
    let dir = home.root().parent().expect("home dir").to_owned();
    let mut command = crate::support::test_user::airlock(&dir);
    command
        .args(["watch", "--sandbox", "watched", "--json"])
        .env("AIRLOCK_SANDBOX_DIR", home.root());
    let (mut watch, lines) = spawn_lines(&mut command);
    let deadline = Instant::now() + Duration::from_secs(15);
    let refused = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).expect("the backlog's refusal");
        let line: Value = serde_json::from_str(&line).expect("a JSON line");
        if line["host"] == "refused.test" {
            break line;
        }
    };
    assert_eq!(refused["decision"], "deny", "{refused}");
    let _ = watch.kill();
    let _ = watch.wait();
    home.must(&["rm", "watched"]);
    let output = run_bounded(
        crate::support::test_user::airlock(&dir)
            .args(["watch", "--sandbox", "watched", "--json"])
            .env("AIRLOCK_SANDBOX_DIR", home.root()),
        Duration::from_secs(10),
    );
    assert_eq!(output.status.and_then(|s| s.code()), Some(1));
    assert!(
        output.stderr.contains("no running sandbox named watched"),
        "{}",
        output.stderr
    );
}

/// Inside `airlock run --mode ask` (namespace jail, transparent capture) each request to an
/// unlisted host is asked about once with its method and path, and watch, attached to the
/// run's socket in tmux, answers: `a` lets the first through, the identical second asks
/// again and `r` lets it and the third (unasked) through.
#[test]
fn run_asks_at_the_request_and_watch_answers_it() {
    if !crate::support::run::namespaces_available("run_asks_at_the_request_and_watch_answers_it") {
        return;
    }
    support::need_all(&["tmux", "curl"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let home = crate::support::run::RunHome::new();
    let xdg = home.airlock_home().parent().expect("parent").join("xdg");
    std::fs::create_dir_all(&xdg).expect("xdg");
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    // As the test user (AIRLOCK_TEST_UID) the run's socket is that user's: so is watch.
    let user = crate::support::test_user::uid();
    if let Some(uid) = user {
        crate::support::test_user::chown_tree(&xdg, uid);
    }
    let as_user = user.map_or_else(String::new, |uid| {
        format!("setpriv --reuid={uid} --regid={uid} --clear-groups ")
    });
    let curl_line = format!(
        "curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 40 https://other.test:{port}/a"
    );
    let script = format!("{curl_line}; {curl_line}; {curl_line}");
    let policy = home.scratch().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\nnetwork:\n  allow:\n    - host: allowed.test\n",
    )
    .expect("policy");
    let ca = pki.upstream_ca_cert.display().to_string();
    let log = home.log_path().display().to_string();
    let policy = policy.display().to_string();
    let args = [
        "--resolve",
        "other.test:127.0.0.1",
        "--upstream-ca",
        &ca,
        "--log",
        &log,
        "--policy",
        &policy,
        "--mode",
        "ask",
        "--ask-timeout",
        "30s",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let xdg_text = xdg.display().to_string();
    let output = std::thread::scope(|scope| {
        let running = scope.spawn(|| home.run_with_env(&args, &[("XDG_RUNTIME_DIR", &xdg_text)]));
        let line = format!(
            "XDG_RUNTIME_DIR={xdg_text} {as_user}{} watch",
            env!("CARGO_BIN_EXE_airlock")
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::read_dir(xdg.join("airlock"))
            .map_or(true, |mut entries| entries.next().is_none())
        {
            assert!(Instant::now() < deadline, "no run socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        let tmux = Tmux::start("watch-run", &home.scratch(), (80, 24), &line);
        for (n, key) in [(1, "a"), (2, "r")] {
            tmux.expect_that("the request asked about with method and path", |screen| {
                screen.contains("1 waiting")
                    && screen
                        .lines()
                        .any(|l| l.contains("GET") && l.contains("other.test") && l.contains("/a"))
            });
            tmux.keys(&[key]);
            // After the last answer the run may end at once; the status then reads
            // "the run ended" (after the answer, when it came back first). The audit
            // below is what proves the answer took effect.
            let answered = format!("answered {n}:");
            tmux.expect_that(&answered, |screen| {
                screen.contains(&answered) || (n == 2 && screen.contains("the run ended"))
            });
        }
        let result = running.join().expect("run");
        tmux.keys(&["q"]);
        result
    });
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(stdout, "200\n200\n200\n", "{}", output.stderr);
    let lines = home.audit_lines();
    let for_a: Vec<&Value> = lines.iter().filter(|l| l["path"] == "/a").collect();
    let rules: Vec<&str> = for_a.iter().filter_map(|l| l["rule"].as_str()).collect();
    assert_eq!(rules, ["ask.once", "ask.run", "ask.run"], "{lines:?}");
    assert!(
        for_a[2].get("asked").is_none(),
        "the third was not asked: {lines:?}"
    );
}
