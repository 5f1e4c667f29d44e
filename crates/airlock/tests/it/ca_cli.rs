//! `airlock ca init|path|show` driven through the real binary, with `AIRLOCK_HOME` set to a
//! temporary directory.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::tools;

fn airlock(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .env("AIRLOCK_HOME", home)
        .env_remove("XDG_DATA_HOME")
        .output()
        .expect("run airlock")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn fingerprint(home: &Path) -> String {
    let output = airlock(home, &["ca", "show"]);
    assert!(output.status.success(), "show: {}", stderr(&output));
    let text = stdout(&output);
    text.lines()
        .find_map(|line| line.strip_prefix("SHA-256 fingerprint: "))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no fingerprint line in {text}"))
}

fn ca_path(home: &Path) -> PathBuf {
    let output = airlock(home, &["ca", "path"]);
    assert!(output.status.success(), "path: {}", stderr(&output));
    PathBuf::from(stdout(&output).trim_end())
}

#[test]
fn path_without_a_ca_tells_to_init() {
    let home = tempfile::tempdir().expect("tempdir");
    let output = airlock(home.path(), &["ca", "path"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let err = stderr(&output);
    assert!(err.starts_with("airlock: "), "{err}");
    assert!(err.contains("airlock ca init"), "{err}");
}

#[test]
fn init_keeps_then_force_replaces() {
    let home = tempfile::tempdir().expect("tempdir");
    let created = airlock(home.path(), &["ca", "init"]);
    assert!(created.status.success(), "{}", stderr(&created));
    assert!(stdout(&created).contains("created"), "{}", stdout(&created));
    let first = fingerprint(home.path());

    let kept = airlock(home.path(), &["ca", "init"]);
    assert!(kept.status.success(), "{}", stderr(&kept));
    assert!(stdout(&kept).contains("kept"), "{}", stdout(&kept));
    assert_eq!(fingerprint(home.path()), first);

    let forced = airlock(home.path(), &["ca", "init", "--force"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(stdout(&forced).contains("created"), "{}", stdout(&forced));
    assert_ne!(fingerprint(home.path()), first);
}

#[test]
fn path_is_absolute_and_key_sits_beside_it_with_mode_0600() {
    let home = tempfile::tempdir().expect("tempdir");
    assert!(airlock(home.path(), &["ca", "init"]).status.success());
    let cert = ca_path(home.path());
    assert!(cert.is_absolute(), "{}", cert.display());
    assert_eq!(cert, home.path().join("ca.pem"));
    let pem = fs::read_to_string(&cert).expect("read cert");
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let key = cert.with_file_name("ca-key.pem");
    let mode = fs::metadata(&key).expect("key").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn show_prints_the_certificate_and_its_fingerprint() {
    let home = tempfile::tempdir().expect("tempdir");
    assert!(airlock(home.path(), &["ca", "init"]).status.success());
    let output = airlock(home.path(), &["ca", "show"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let pem = fs::read_to_string(ca_path(home.path())).expect("read cert");
    assert!(text.starts_with(&pem), "{text}");
    let fingerprint = fingerprint(home.path());
    assert_eq!(fingerprint.len(), 95);
    assert!(!text.contains("PRIVATE KEY"));

    // The fingerprint is the SHA-256 of the DER, as openssl computes it.
    let openssl = tools::tool("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(ca_path(home.path()))
        .output()
        .expect("openssl is installed");
    assert!(openssl.status.success(), "{}", stderr(&openssl));
    assert!(
        stdout(&openssl)
            .trim_end()
            .ends_with(&format!("={fingerprint}")),
        "{}",
        stdout(&openssl)
    );
}

#[test]
fn openssl_sees_a_ca_certificate() {
    let home = tempfile::tempdir().expect("tempdir");
    assert!(airlock(home.path(), &["ca", "init"]).status.success());
    let output = tools::tool("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(ca_path(home.path()))
        .output()
        .expect("openssl is installed");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("CA:TRUE"), "{text}");
    assert!(text.contains("Certificate Sign"), "{text}");
    assert!(text.contains("airlock local CA"), "{text}");
}

#[test]
fn show_refuses_a_key_readable_by_others() {
    let home = tempfile::tempdir().expect("tempdir");
    assert!(airlock(home.path(), &["ca", "init"]).status.success());
    let key = home.path().join("ca-key.pem");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).expect("chmod");
    let output = airlock(home.path(), &["ca", "show"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("chmod 600"), "{}", stderr(&output));
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let home = tempfile::tempdir().expect("tempdir");
    let output = airlock(home.path(), &["ca", "frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
}
