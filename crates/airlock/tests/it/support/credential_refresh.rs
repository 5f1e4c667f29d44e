//! The shared setup of the OAuth refresh tests (`run_credential_refresh`,
//! `run_credential_refresh_agents`; docs/secrets.md, "Refreshes"): a home with Claude
//! Code's `.credentials.json` holding real canary tokens, the policy projecting it, the
//! `airlock run` command against the scripted model server on `ADDRESS:443` (Claude's and
//! Codex's token endpoints and APIs), the python token clients' shared prelude, a slow
//! token endpoint counting its hits, and the helpers reading a run's output, the server's
//! record and the audit log.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::TestPki;
use crate::support::agents::{Agent, ModelServer, airlock_command, can_serve_443};
use crate::support::clients::{BoundedOutput, run_bounded};
use crate::support::run::{code, namespaces_available, read_lines};

pub const REAL_ACCESS: &str = "sk-ant-oat01-REALaccessCANARY0123456789abcdefghijklmnopqrstuv";
pub const REAL_REFRESH: &str = "sk-ant-ort01-REALrefreshCANARY0123456789abcdefghijklmnopqrstu";
pub const REVOKED_REFRESH: &str = "sk-ant-ort01-REVOKEDrefreshCANARY0123456789abcdefghijklmnop";

/// The client run inside the jail: refresh with the projected refresh token, then call
/// the API with the new access token; prints what it got, marked.
pub const CLIENT: &str = r#"
import json, os, sys, urllib.request, urllib.error
path = os.path.expanduser("~/.claude/.credentials.json")
creds = json.load(open(path))["claudeAiOauth"]
print("FILE " + json.dumps(creds))
grant_file = os.path.expanduser("~/grant.txt")
grant = open(grant_file).read().strip() if os.path.exists(grant_file) else "refresh_token"
fields = {"grant_type": grant, "refresh_token": creds["refreshToken"],
          "client_id": "9d1c250a-e61b-44d9-88ed-5944d1962f5e"}
if grant != "refresh_token":
    fields["code"] = "attacker-code"
body = json.dumps(fields).encode()
request = urllib.request.Request("https://platform.claude.com/v1/oauth/token", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        status, text = answer.status, answer.read().decode()
except urllib.error.HTTPError as error:
    status, text = error.code, error.read().decode()
print("REFRESH %d %s" % (status, text))
if status != 200:
    sys.exit(0)
access = json.loads(text)["access_token"]
call = urllib.request.Request("https://api.anthropic.com/v1/messages/count_tokens",
    data=b'{"model":"m","messages":[]}', method="POST",
    headers={"Authorization": "Bearer " + access, "Content-Type": "application/json"})
with urllib.request.urlopen(call, timeout=30) as answer:
    print("API %d %s" % (answer.status, answer.read().decode()))
# The file again, after the host's file was written back: still the projection.
print("AFTER " + open(path).read().replace("\n", " "))
"#;

/// The start of the token clients the refresh tests write ([`Place::token_script`]): the
/// projected Claude login as `creds`, `token_request(data, content_type)` (a POST to
/// Claude's token endpoint) and `send(request)` (the answer's status and body, an HTTP
/// error's too).
const TOKEN_PRELUDE: &str = r#"
import json, os, threading, urllib.request, urllib.error
creds = json.load(open(os.path.expanduser("~/.claude/.credentials.json")))["claudeAiOauth"]
def token_request(data, content_type):
    return urllib.request.Request("https://platform.claude.com/v1/oauth/token",
        data=data, method="POST", headers={"Content-Type": content_type})
def send(request):
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
"#;

/// One test's home (with the credential file), logs and policy.
pub struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    pub fn new(refresh: &str) -> Place {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let place = Place { dir };
        let claude = place.home().join(".claude");
        std::fs::create_dir_all(&claude).expect("claude dir");
        std::fs::create_dir_all(place.logs()).expect("logs");
        std::fs::create_dir_all(place.project()).expect("project");
        let file = format!(
            "{{\"claudeAiOauth\":{{\"accessToken\":\"{REAL_ACCESS}\",\"refreshToken\":\
             \"{refresh}\",\"expiresAt\":1000,\"scopes\":[\"user:inference\"],\
             \"subscriptionType\":\"max\"}}}}"
        );
        std::fs::write(place.credentials(), file).expect("credentials");
        std::fs::set_permissions(place.credentials(), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        std::fs::write(place.project().join("client.py"), CLIENT).expect("client");
        let policy = "version: 1\nnetwork:\n  allow:\n    - host: platform.claude.com\n    \
                      - host: api.anthropic.com\nfilesystem:\n  writable: [\"~/.claude\"]\n\
                      credentials:\n  files: [claude]\n";
        std::fs::write(place.logs().join("airlock.yaml"), policy).expect("policy");
        if let Some(uid) = crate::support::test_user::uid() {
            crate::support::test_user::chown_tree(place.dir.path(), uid);
        }
        place
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The working directory of the run (a project inside the home, as a user's: the
    /// home itself as a project would protect its `.claude` and `.codex`).
    pub fn project(&self) -> PathBuf {
        self.home().join("proj")
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    pub fn credentials(&self) -> PathBuf {
        self.home().join(".claude/.credentials.json")
    }

    /// `airlock run` of the client against the server on `address`, audit log `log`.
    pub fn run(&self, pki: &TestPki, address: &str, log: &str) -> BoundedOutput {
        let client = ["python3".to_owned(), "client.py".to_owned()];
        self.run_program(pki, address, log, &client)
    }

    /// `airlock run` of `program` (argv) against the server on `address`.
    pub fn run_program(
        &self,
        pki: &TestPki,
        address: &str,
        log: &str,
        program: &[String],
    ) -> BoundedOutput {
        let mut command = self.command(pki, address, log, program);
        run_bounded(&mut command, crate::support::agents::AGENT_TIMEOUT)
    }

    /// The command [`Place::run_program`] runs (`AIRLOCK_HOME` one per `log`: two runs
    /// creating one CA at once is `run_credential_refresh`'s own test).
    pub fn command(&self, pki: &TestPki, address: &str, log: &str, program: &[String]) -> Command {
        let mut command = airlock_command();
        command
            .arg("run")
            .args(["--profile", "none", "--policy"])
            .arg(self.logs().join("airlock.yaml"))
            .arg("--resolve")
            .arg(format!("platform.claude.com:{address}"))
            .arg("--resolve")
            .arg(format!("api.anthropic.com:{address}"))
            .arg("--resolve")
            .arg(format!("auth.openai.com:{address}"))
            .arg("--resolve")
            .arg(format!("api.openai.com:{address}"))
            .arg("--resolve")
            .arg(format!("chatgpt.com:{address}"))
            .arg("--upstream-ca")
            .arg(&pki.upstream_ca_cert)
            .arg("--log")
            .arg(self.logs().join(log))
            .arg("--")
            .args(program)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.home())
            .env(
                "AIRLOCK_HOME",
                self.dir.path().join(format!("airlock-home-{log}")),
            )
            .current_dir(self.project());
        command
    }

    /// `airlock run` of the real `agent` CLI (its usual arguments) against the server on
    /// `address`, audit log `audit.jsonl`.
    pub fn run_agent(&self, pki: &TestPki, address: &str, agent: Agent) -> BoundedOutput {
        let mut args = vec![agent.executable().to_string_lossy().into_owned()];
        args.extend(agent.arguments());
        self.run_program(pki, address, "audit.jsonl", &args)
    }

    /// The server's record, and for assertion messages the method and path of each
    /// request and the audit log's refusals (`requests: [..]\nrefused: [..]`).
    pub fn requests_seen(&self, server: &ModelServer) -> (Vec<Value>, String) {
        let requests = server.requests();
        let paths: Vec<String> = requests
            .iter()
            .map(|r| format!("{} {}", r["method"], r["path"]))
            .collect();
        let refused: Vec<Value> = read_lines(&self.logs().join("audit.jsonl"))
            .into_iter()
            .filter(|line| line["decision"] == "deny")
            .collect();
        (
            requests,
            format!("requests: {paths:?}\nrefused: {refused:?}"),
        )
    }

    /// Writes Codex's `auth.json` (`auth`, mode 0600) and the policy `policy` (the
    /// Claude file stays, unprojected unless the policy names it); owned by the test user.
    pub fn codex(&self, auth: &str, policy: &str) -> PathBuf {
        let codex = self.home().join(".codex");
        std::fs::create_dir_all(&codex).expect("codex dir");
        let file = codex.join("auth.json");
        std::fs::write(&file, auth).expect("auth.json");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::write(self.logs().join("airlock.yaml"), policy).expect("policy");
        self.adopt();
        file
    }

    /// Writes `script` as `name` in the project; the home owned by the test user.
    pub fn script(&self, name: &str, script: &str) -> Vec<String> {
        std::fs::write(self.project().join(name), script).expect("script");
        self.adopt();
        vec!["python3".to_owned(), name.to_owned()]
    }

    /// [`Place::script`] of `body` after the token clients' prelude (`creds`,
    /// `token_request`, `send`).
    pub fn token_script(&self, name: &str, body: &str) -> Vec<String> {
        self.script(name, &format!("{TOKEN_PRELUDE}{body}"))
    }

    /// Hands the home and logs to the test user (when the tests run as one).
    pub fn adopt(&self) {
        if let Some(uid) = crate::support::test_user::uid() {
            crate::support::test_user::chown_tree(&self.home(), uid);
            crate::support::test_user::chown_tree(&self.logs(), uid);
        }
    }

    /// The directory of the place (outside the home).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self) -> Value {
        let text = std::fs::read_to_string(self.credentials()).expect("read credentials");
        serde_json::from_str(&text).expect("the host file is JSON")
    }
}

/// The PKI, a place and the server on `address:443`; `None` when this machine cannot.
pub fn setup(address: &str, test: &str, refresh: &str) -> Option<(TestPki, Place, ModelServer)> {
    setup_with_tool(address, test, refresh, "true")
}

/// [`setup`] with a server whose scripted tool call runs `tool` (the agent tests).
pub fn setup_with_tool(
    address: &str,
    test: &str,
    refresh: &str,
    tool: &str,
) -> Option<(TestPki, Place, ModelServer)> {
    if !namespaces_available(test) || !can_serve_443(address) {
        return None;
    }
    let pki = TestPki::new();
    let place = Place::new(refresh);
    let record = place.logs().join("requests.jsonl");
    let server = ModelServer::start(&pki, address, &record, tool);
    Some((pki, place, server))
}

/// The run's stdout, and stdout and stderr together for assertion messages.
pub fn outcome(output: &BoundedOutput) -> (String, String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let context = format!("stdout:\n{stdout}\nstderr:\n{}", output.stderr);
    (stdout, context)
}

/// [`outcome`] of a run that must have exited 0.
pub fn succeeded(output: &BoundedOutput) -> (String, String) {
    let (stdout, context) = outcome(output);
    assert_eq!(code(output), 0, "{context}");
    (stdout, context)
}

/// The value after `marker ` on the output's line starting with it.
pub fn marked<'a>(stdout: &'a str, marker: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{marker} ")))
}

/// The first request of the server's record (`requests`) to `path`; fails the test with
/// `what` when none went there.
pub fn request_to<'a>(requests: &'a [Value], path: &str, what: &str) -> &'a Value {
    requests.iter().find(|r| r["path"] == path).expect(what)
}

/// What the server issued, in order.
pub fn issued(server: &ModelServer) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "OAUTH")
        .map(|r| r["issued"].clone())
        .collect()
}

pub fn credentials_lines(path: &Path) -> Vec<Value> {
    read_lines(path)
        .into_iter()
        .filter(|line| line["kind"] == "credentials")
        .collect()
}

/// A token endpoint (`POST /v1/oauth/token` on `ADDRESS:443`) that takes [`SLOW_FOR`]
/// to answer each refresh with new tokens and writes one line per hit (the refresh
/// token it got) to its record: two grants in flight at once both reach it unless the
/// proxy serialises them.
pub struct SlowTokenServer {
    child: Child,
    record: PathBuf,
}

/// How long [`SlowTokenServer`] holds each refresh.
pub const SLOW_FOR: Duration = Duration::from_millis(1500);

const SLOW_SERVER: &str = r#"
import json, ssl, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
cert, key, address, record, delay = sys.argv[1:6]
lock, hits = threading.Lock(), [0]
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = json.loads(body or b"{}")
        with lock:
            hits[0] += 1
            n = hits[0]
            with open(record, "a") as out:
                out.write(json.dumps({"refresh_token": request.get("refresh_token")}) + "\n")
        time.sleep(float(delay))
        pad = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
        data = json.dumps({"token_type": "Bearer", "expires_in": 3600,
                           "access_token": "sk-ant-oat01-SLOWACCESS%04d%s" % (n, pad),
                           "refresh_token": "sk-ant-ort01-SLOWREFRESH%04d%s" % (n, pad)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
server = ThreadingHTTPServer((address, 443), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
"#;

impl SlowTokenServer {
    /// Starts it on `address:443`, recording to `record`; waits (bounded) until it listens.
    pub fn start(pki: &TestPki, address: &str, record: &Path) -> SlowTokenServer {
        let mut child = crate::support::tool("python3")
            .args(["-c", SLOW_SERVER])
            .arg(&pki.upstream_leaf_cert)
            .arg(&pki.upstream_leaf_key)
            .arg(address)
            .arg(record)
            .arg(SLOW_FOR.as_secs_f64().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect((address, 443)).is_err() {
            if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
                let _ = child.kill();
                panic!("the slow token server did not start on {address}:443");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        SlowTokenServer {
            child,
            record: record.to_owned(),
        }
    }

    /// The refresh token of each hit, in order.
    pub fn hits(&self) -> Vec<String> {
        read_lines(&self.record)
            .iter()
            .filter_map(|hit| hit["refresh_token"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for SlowTokenServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
