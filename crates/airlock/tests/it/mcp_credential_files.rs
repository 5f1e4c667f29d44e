//! The user's credential files under `airlock mcp` (docs/secrets.md, "Credential files"):
//! `mcp` runs its server in the same jail as `airlock run`, so a store the policy turns on
//! is projected there too. The server (a shell script speaking one JSON-RPC notification)
//! reads `~/.netrc` and `~/.npmrc` and sends them back through the relay: the client sees
//! the files' shape with surrogates in place of the tokens, never the real values, and
//! airlock's stderr names no store as "not projected". `.ci/run` also runs this as an
//! ordinary user.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::support::run::{RunHome, namespaces_available};

const NETRC: &str = "REALmcpNETRCpassword0123456789abcdef";
const NPM: &str = "npm_REALmcpNPMtoken0123456789abcdefghijk";

const POLICY: &str = "version: 1\ncredentials:\n  files: [netrc, npm]\nmcp:\n  - stdio: creds\n    tools: {allow: [\"*\"]}\n";

/// The server: one `notifications/message` carrying both files (base64), then it waits
/// for the end of its input (airlock closing it) and exits.
const SERVER: &str = r#"n=$(base64 -w0 "$HOME/.netrc"); m=$(base64 -w0 "$HOME/.npmrc")
printf '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"netrc":"%s","npmrc":"%s"}}}\n' "$n" "$m"
cat >/dev/null"#;

/// A home holding the two stores and the policy, owned by the test user when there is one.
fn make_home(run: &RunHome) -> std::path::PathBuf {
    let home = run.scratch().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let netrc = format!("machine registry.test\n  login me\n  password {NETRC}\n");
    std::fs::write(home.join(".netrc"), netrc).expect(".netrc");
    std::fs::write(
        home.join(".npmrc"),
        format!("//registry.test/:_authToken={NPM}\n"),
    )
    .expect(".npmrc");
    std::fs::write(home.join("policy.yaml"), POLICY).expect("policy");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&run.scratch(), uid);
    }
    home
}

/// Lines of `stream` on a channel (a thread that ends with the stream).
fn lines_of(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Runs `airlock mcp` with `home` as `HOME`: the server's first line, and airlock's
/// stderr and exit code once its input is closed.
fn serve_once(run: &RunHome, home: &Path) -> (Value, String, i32) {
    let mut child = run
        .command()
        .arg("mcp")
        .arg("--policy")
        .arg(home.join("policy.yaml"))
        .arg("--log")
        .arg(run.log_path())
        .args(["--name", "creds", "--", "sh", "-c", SERVER])
        .env("AIRLOCK_HOME", run.airlock_home())
        .env("HOME", home)
        .current_dir(run.scratch())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("airlock mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines = lines_of(child.stdout.take().expect("stdout"));
    let errors = lines_of(child.stderr.take().expect("stderr"));
    let first = lines.recv_timeout(Duration::from_secs(30));
    let _ = stdin.flush();
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("airlock mcp did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = errors.try_iter().collect::<Vec<_>>().join("\n");
    let first = first.unwrap_or_else(|_| panic!("no line from the server; stderr:\n{stderr}"));
    let message =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("not JSON ({e}): {first}"));
    (message, stderr, status.code().expect("exit code"))
}

/// The file the server sent under `key`, decoded.
fn sent_file(message: &Value, key: &str) -> String {
    let encoded = message["params"]["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{message}"));
    let bytes = STANDARD.decode(encoded).expect("base64");
    String::from_utf8(bytes).expect("utf-8")
}

#[test]
fn an_mcp_server_reads_its_credential_files_as_surrogates() {
    if !namespaces_available("an_mcp_server_reads_its_credential_files_as_surrogates") {
        return;
    }
    let run = RunHome::new();
    let home = make_home(&run);
    let (message, stderr, status) = serve_once(&run, &home);
    assert_eq!(status, 0, "stderr:\n{stderr}");
    assert!(!stderr.contains("not projected"), "stderr:\n{stderr}");
    let (netrc, npmrc) = (sent_file(&message, "netrc"), sent_file(&message, "npmrc"));
    for real in [NETRC, NPM] {
        assert!(
            !netrc.contains(real) && !npmrc.contains(real),
            "a real token inside:\n{netrc}\n{npmrc}"
        );
        assert!(!stderr.contains(real), "a real token on stderr");
    }
    // Same shape: the lines around the tokens are the user's, the tokens keep their length.
    let password = netrc
        .lines()
        .nth(2)
        .and_then(|l| l.strip_prefix("  password "))
        .expect(&netrc);
    assert_eq!(password.len(), NETRC.len(), "{netrc}");
    let token = npmrc
        .trim_end()
        .strip_prefix("//registry.test/:_authToken=")
        .expect(&npmrc);
    assert!(
        token.starts_with("npm_") && token.len() == NPM.len(),
        "{npmrc}"
    );
    // The host's files are untouched.
    let host_netrc = std::fs::read_to_string(home.join(".netrc")).expect("host .netrc");
    assert!(host_netrc.contains(NETRC));
}
