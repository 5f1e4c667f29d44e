//! The tamper-evident audit log (docs/operations.md, "What the audit record proves"):
//! a proxy's rotated log, closed cleanly, verifies with `airlock audit verify`; every kind
//! of tampering (an edit, a removed line, reordered lines, a truncation, a line from
//! another file) is refused with the file and line named and exit status 1; a run's log
//! verifies with the default key, which the command in the jail cannot read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::run::{RunHome, namespaces_available};
use crate::support::{ProxyBuilder, TestPki, run_bounded};

const AIRLOCK: &str = env!("CARGO_BIN_EXE_airlock");

/// `airlock audit verify ARGS...`: exit status, stdout, stderr.
fn verify(args: &[&Path], extra: &[&str]) -> (i32, String, String) {
    let mut command = Command::new(AIRLOCK);
    command.args(["audit", "verify"]).args(extra).args(args);
    let output = run_bounded(&mut command, Duration::from_secs(30));
    let status = output.status.and_then(|s| s.code()).unwrap_or(-1);
    (
        status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.stderr,
    )
}

/// Sends `count` distinct refused requests on one connection (nothing folds).
fn refused_requests(port: u16, count: usize) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut requests = String::new();
    for index in 0..count {
        let close = if index + 1 == count {
            "Connection: close\r\n"
        } else {
            ""
        };
        requests.push_str(&format!(
            "GET http://evil.example/r/{index} HTTP/1.1\r\nHost: evil.example\r\n{close}\r\n"
        ));
    }
    stream.write_all(requests.as_bytes()).expect("write");
    let mut answers = String::new();
    let _ = stream.read_to_string(&mut answers);
    assert_eq!(answers.matches("HTTP/1.1 403").count(), count);
}

/// A proxy log of 60 refusals rotated beyond 2 KiB, closed with SIGTERM: the files, oldest
/// first, and the public key.
fn rotated_log(pki: &TestPki) -> (tempfile::TempDir, Vec<PathBuf>, PathBuf) {
    let mut proxy = ProxyBuilder::new(pki)
        .allow("allowed.test")
        .arg("--audit-max-size")
        .arg("2K")
        .start();
    refused_requests(proxy.port(), 60);
    let status = proxy.terminate(Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{status:?}\n{}", proxy.stderr());
    // Copy the files out: the proxy's directory goes with it.
    let copy = tempfile::tempdir().expect("tempdir");
    let log = proxy.audit_log_path().to_owned();
    let mut files = Vec::new();
    for suffix in [".5", ".4", ".3", ".2", ".1", ""] {
        let mut name = log.clone().into_os_string();
        name.push(suffix);
        let from = PathBuf::from(name);
        if from.exists() {
            let to = copy.path().join(format!("audit.jsonl{suffix}"));
            std::fs::copy(&from, &to).expect("copy");
            files.push(to);
        }
    }
    assert!(files.len() >= 3, "the log rotated: {files:?}");
    let key = pki
        .proxy_ca_key
        .parent()
        .expect("dir")
        .join("audit-key.pub.pem");
    let private = key.with_file_name("audit-key.pem");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&private)
            .expect("signing key beside the CA")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    (copy, files, key)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write(path: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).expect("write");
}

/// Verifies `files` after `tamper` changed a copy of them; expects exit 1 naming
/// `file` (its name ends so) and `line`.
fn assert_refused(
    files: &[PathBuf],
    key: &Path,
    tamper: impl FnOnce(&[PathBuf]),
    file: &str,
    line: u64,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let copies: Vec<PathBuf> = files
        .iter()
        .map(|f| {
            let to = dir.path().join(f.file_name().expect("name"));
            std::fs::copy(f, &to).expect("copy");
            to
        })
        .collect();
    tamper(&copies);
    let paths: Vec<&Path> = copies.iter().map(PathBuf::as_path).collect();
    let key = key.to_str().expect("utf-8");
    let (status, _, stderr) = verify(&paths, &["--key", key]);
    assert_eq!(status, 1, "{stderr}");
    let named = format!("{file}: line {line}: ");
    assert!(stderr.contains(&named), "expected {named:?} in {stderr}");
}

#[test]
fn a_rotated_proxy_log_verifies_and_each_tampering_is_found() {
    let pki = TestPki::new();
    let (_dir, files, key) = rotated_log(&pki);
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let key_arg = key.to_str().expect("utf-8");
    let (status, stdout, stderr) = verify(&paths, &["--key", key_arg]);
    assert_eq!(status, 0, "{stdout}{stderr}");
    assert!(stdout.starts_with("verified: "), "{stdout}");
    // The newest files alone verify too (the older ones rotated away).
    let (status, _, stderr) = verify(&paths[paths.len() - 2..], &["--key", key_arg]);
    assert_eq!(status, 0, "{stderr}");

    let current = files.len() - 1;
    let name = |index: usize| {
        let name = files[index].file_name().expect("name");
        name.to_string_lossy().into_owned()
    };
    // An edit: a refused host made to look allowed.
    assert_refused(
        &files,
        &key,
        |f| {
            let mut text = lines(&f[current]);
            text[2] = text[2].replace("\"decision\":\"deny\"", "\"decision\":\"allow\"");
            write(&f[current], &text);
        },
        &name(current),
        3,
    );
    // A removed line.
    assert_refused(
        &files,
        &key,
        |f| {
            let mut text = lines(&f[current - 1]);
            text.remove(3);
            write(&f[current - 1], &text);
        },
        &name(current - 1),
        4,
    );
    // Reordered lines.
    assert_refused(
        &files,
        &key,
        |f| {
            let mut text = lines(&f[current]);
            text.swap(1, 2);
            write(&f[current], &text);
        },
        &name(current),
        2,
    );
    // A truncation: the closing checkpoint and the lines before it cut off.
    let kept = lines(&files[current]).len() - 3;
    assert_refused(
        &files,
        &key,
        |f| {
            let mut text = lines(&f[current]);
            text.truncate(kept);
            write(&f[current], &text);
        },
        &name(current),
        kept as u64,
    );
    // A line from another file put in place of one.
    assert_refused(
        &files,
        &key,
        |f| {
            let other = lines(&f[current - 2]);
            let mut text = lines(&f[current - 1]);
            text[2] = other[2].clone();
            write(&f[current - 1], &text);
        },
        &name(current - 1),
        3,
    );
    // Files out of order.
    let mut swapped: Vec<&Path> = paths.clone();
    swapped.swap(current - 1, current);
    let (status, _, stderr) = verify(&swapped, &["--key", key_arg]);
    assert_eq!(status, 1, "{stderr}");
}

#[test]
fn a_wrong_key_or_a_missing_file_is_refused() {
    let pki = TestPki::new();
    let (_dir, files, _key) = rotated_log(&pki);
    let other = TestPki::new();
    let (_other_dir, _, other_key) = rotated_log(&other);
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (status, _, stderr) = verify(&paths, &["--key", other_key.to_str().expect("utf-8")]);
    assert_eq!(status, 1, "{stderr}");
    assert!(stderr.contains("not with the key given"), "{stderr}");
    let missing = Path::new("/nonexistent/audit.jsonl");
    let (status, _, stderr) = verify(&[missing], &["--key", other_key.to_str().expect("utf-8")]);
    assert_eq!(status, 2, "{stderr}");
}

#[test]
fn a_run_log_verifies_with_the_default_key_the_command_cannot_read() {
    if !namespaces_available("a_run_log_verifies_with_the_default_key_the_command_cannot_read") {
        return;
    }
    crate::support::need_all(&["curl"]);
    let home = RunHome::new();
    let log = home.log_path();
    let key = home.airlock_home().join("audit-key.pem");
    // One refused request, so that the log has lines; then the key, which must be hidden.
    let script = format!(
        "curl -sS --max-time 10 http://refused.example/ >/dev/null; \
         cat {} && echo READ-THE-KEY; exit 0",
        key.display()
    );
    let output = home.run(&[
        "--log",
        log.to_str().expect("utf-8"),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.and_then(|s| s.code()),
        Some(0),
        "{stdout}{}",
        output.stderr
    );
    assert!(!stdout.contains("READ-THE-KEY"), "{stdout}");
    assert!(!stdout.contains("PRIVATE KEY"), "{stdout}");
    assert!(key.exists(), "the key is created beside the CA");
    let mut command = home.command();
    command
        .args(["audit", "verify"])
        .arg(&log)
        .env("AIRLOCK_HOME", home.airlock_home());
    let verified = run_bounded(&mut command, Duration::from_secs(30));
    assert_eq!(
        verified.status.and_then(|s| s.code()),
        Some(0),
        "{}",
        verified.stderr
    );
}
