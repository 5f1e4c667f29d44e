//! `airlock mcp` in front of a server built on the official Python `mcp` SDK from PyPI
//! (installed once into a venv under the target directory), the stdio smuggling of
//! issue 31: the SDK reads its input with universal newlines, so a bare `\r` ends a line
//! there while airlock frames on `\n` only. A line airlock would judge as an allowed
//! notification could carry a denied `tools/call` after a `\r`; such lines (and lines with
//! raw U+2028, U+2029 and the other characters `str.splitlines` breaks at) are refused in
//! both directions (docs/mcp.md). The denied tool writes a marker file when it runs, so
//! the test sees whether it ever ran.

use std::ffi::OsString;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::mcp_stdio::{Mcp, mcp_lines};
use crate::support::run::namespaces_available;

/// The policy: the SDK server's `run_command` is denied, `echo` allowed.
const POLICY: &str = "version: 1\nmcp:\n  - stdio: sdk\n    tools:\n      deny: [run_command]\n";

/// A stdio server on the SDK's high-level API (`MCPServer`, `FastMCP` before 2.0):
/// `echo` returns its text; `run_command` appends its `cmd` to the file named by the
/// first argument.
const SERVER: &str = r#"
import pathlib, sys
try:
    from mcp.server.mcpserver import MCPServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer

marker = pathlib.Path(sys.argv[1])
server = MCPServer("sdk")

@server.tool()
def echo(text: str) -> str:
    """Returns the text."""
    return text

@server.tool()
def run_command(cmd: str) -> str:
    """Denied by the policy; records that it ran."""
    with marker.open("a") as out:
        out.write(cmd + "\n")
    return "ran " + cmd

server.run("stdio")
"#;

/// The venv's python and the server script, made once under the target directory;
/// fails the test, saying why, when python3 or PyPI is not available.
fn sdk_server() -> (PathBuf, PathBuf) {
    static SERVER_FILES: std::sync::OnceLock<(PathBuf, PathBuf)> = std::sync::OnceLock::new();
    SERVER_FILES.get_or_init(install).clone()
}

/// [`sdk_server`]'s work.
fn install() -> (PathBuf, PathBuf) {
    // Made from the system's python (not one under root's home), so that the ordinary
    // user of `.ci/run`'s second pass can run it too.
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-sdk-venv-system");
    let python = venv.join("bin/python");
    let ready = |python: &std::path::Path| {
        std::process::Command::new(python)
            .args(["-c", "import mcp.server"])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if !ready(&python) {
        let made = std::process::Command::new("/usr/bin/python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "this test needs /usr/bin/python3 with venv (Debian packages python3, \
                     python3-venv): {e}"
                )
            });
        assert!(made.status.success(), "python3 -m venv failed: {made:?}");
        let installed = std::process::Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "mcp"])
            .output()
            .expect("run pip");
        assert!(
            installed.status.success() && ready(&python),
            "this test needs the `mcp` package from PyPI; pip install failed: {}",
            String::from_utf8_lossy(&installed.stderr)
        );
    }
    let script = venv.join("airlock_test_server.py");
    std::fs::write(&script, SERVER).expect("write the server script");
    (python, script)
}

/// The installed SDK's version, for the test's output.
fn sdk_version(python: &std::path::Path) -> String {
    let output = std::process::Command::new(python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output()
        .expect("python");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A `tools/call` line, written by hand so that `arguments` (JSON text) stays as given.
fn call_line(id: u64, tool: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

/// A notification that a peer splitting at `brk` reads as three lines, the middle one a
/// `tools/call` of the denied tool with `id`.
fn smuggling_line(brk: char, id: u64) -> String {
    let hidden = call_line(id, "run_command", r#"{"cmd":"smuggled"}"#);
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":"x","x":{brk}{hidden}{brk}}}}}"#
    )
}

/// The text of a successful `tools/call` answer with `id`.
fn result_text(answer: &Value, id: u64) -> String {
    assert_eq!(answer["id"], id, "{answer}");
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result: {answer}"))
        .to_owned()
}

/// airlock's refusal of a line, answered for `id`.
fn assert_line_refused(answer: &Value, id: u64) {
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "body_uninspectable",
        "{answer}"
    );
}

fn initialize(mcp: &mut Mcp) {
    let answer = mcp.request(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}}));
    assert_eq!(answer["result"]["serverInfo"]["name"], "sdk", "{answer}");
    mcp.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
}

#[test]
fn line_breaks_cannot_smuggle_a_denied_call_to_the_python_sdk_server() {
    if !namespaces_available("line_breaks_cannot_smuggle_a_denied_call_to_the_python_sdk_server") {
        return;
    }
    let (python, script) = sdk_server();
    eprintln!("mcp SDK {}", sdk_version(&python));
    let server: Vec<OsString> = vec![python.into(), script.into(), "ran.txt".into()];
    let mut mcp = Mcp::spawn(POLICY, "sdk", &[], &server);
    initialize(&mut mcp);
    // Controls: the allowed tool works through airlock, the denied one is refused, the
    // list is filtered, and a CRLF line end is accepted.
    let list = mcp.request(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools: {list}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert_eq!(names, ["echo"], "{list}");
    assert_eq!(
        result_text(&mcp.call(2, "echo", json!({"text": "hello"})), 2),
        "hello"
    );
    mcp.send(&format!("{}\r", call_line(3, "echo", r#"{"text":"crlf"}"#)));
    assert_eq!(result_text(&mcp.next(), 3), "crlf");
    let denied = mcp.call(4, "run_command", json!({"cmd": "direct"}));
    assert_eq!(
        denied["error"]["data"]["reason"], "mcp_tool_denied",
        "{denied}"
    );
    // The smuggling lines: the hidden call gets airlock's error, the server never sees it.
    for (id, brk) in (10..).zip(['\r', '\u{2028}', '\u{2029}', '\u{85}', '\u{0b}', '\u{0c}']) {
        mcp.send(&smuggling_line(brk, id));
        assert_line_refused(&mcp.next(), id);
    }
    // U+2028 is valid JSON inside a string, and still refused.
    mcp.send(
        "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"ping\",\"params\":{\"s\":\"a\u{2028}b\"}}",
    );
    assert_line_refused(&mcp.next(), 20);
    // Server to client: the SDK writes U+2028 raw in its answer; the client gets an error
    // in its place.
    mcp.send(&call_line(21, "echo", r#"{"text":"a\u2028b"}"#));
    let answer = mcp.next();
    assert_line_refused(&answer, 21);
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("response")),
        "{answer}"
    );
    // The relay goes on.
    assert_eq!(
        result_text(&mcp.call(22, "echo", json!({"text": "after"})), 22),
        "after"
    );
    let (code, home) = mcp.finish();
    assert_eq!(code, 0);
    let marker = home.scratch().join("ran.txt");
    assert!(
        !marker.exists(),
        "the denied tool ran: {:?}",
        std::fs::read_to_string(&marker)
    );
    let refused: Vec<Value> = mcp_lines(&home)
        .into_iter()
        .filter(|line| line["reason"] == "body_uninspectable")
        .collect();
    assert!(
        refused.iter().any(|line| line["server"] == "sdk"
            && line["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("client line refused: a raw line break"))),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|line| line["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("server line refused: a raw line break"))),
        "{refused:?}"
    );
}
