//! OAuth refreshes of projected logins under `airlock run` (docs/secrets.md,
//! "Refreshes"): a home with Claude Code's `.credentials.json` (real tokens), the policy
//! projecting it, and the scripted model server (`tests/fixtures/model_server.py`) as
//! Claude's token endpoint and API on `ADDRESS:443`. A python client inside the jail reads
//! the projected file, refreshes with its (surrogate) refresh token, and calls the API
//! with the new (surrogate) access token. Checked: the server saw the real refresh token,
//! then the new real access token; the command saw only surrogates (canaries); the host
//! file holds the new real tokens (mode and owner kept); an error answer changes nothing;
//! two runs refreshing at once leave the fresher login. As root, and as the test user.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::TestPki;
use crate::support::agents::{ModelServer, can_serve_443, header_values};
use crate::support::clients::{BoundedOutput, run_bounded};
use crate::support::run::{code, namespaces_available, read_lines};

const REAL_ACCESS: &str = "sk-ant-oat01-REALaccessCANARY0123456789abcdefghijklmnopqrstuv";
const REAL_REFRESH: &str = "sk-ant-ort01-REALrefreshCANARY0123456789abcdefghijklmnopqrstu";
const REVOKED_REFRESH: &str = "sk-ant-ort01-REVOKEDrefreshCANARY0123456789abcdefghijklmnop";

/// The client run inside the jail: refresh with the projected refresh token, then call
/// the API with the new access token; prints what it got, marked.
const CLIENT: &str = r#"
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

/// One test's home (with the credential file), logs and policy.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new(refresh: &str) -> Place {
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

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The working directory of the run (a project inside the home, as a user's: the
    /// home itself as a project would protect its `.claude` and `.codex`).
    fn project(&self) -> PathBuf {
        self.home().join("proj")
    }

    fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    fn credentials(&self) -> PathBuf {
        self.home().join(".claude/.credentials.json")
    }

    /// `airlock run` of the client against the server on `address`, audit log `log`.
    fn run(&self, pki: &TestPki, address: &str, log: &str) -> BoundedOutput {
        let client = ["python3".to_owned(), "client.py".to_owned()];
        self.run_program(pki, address, log, &client)
    }

    /// `airlock run` of `program` (argv) against the server on `address`.
    fn run_program(
        &self,
        pki: &TestPki,
        address: &str,
        log: &str,
        program: &[String],
    ) -> BoundedOutput {
        let airlock = env!("CARGO_BIN_EXE_airlock");
        let mut command = match crate::support::test_user::uid() {
            Some(uid) => {
                let mut command = crate::support::test_user::wrap(uid);
                command.arg(airlock);
                command
            }
            None => Command::new(airlock),
        };
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
            // One airlock home per run: two runs creating one CA at once race (not what
            // this module tests).
            .env(
                "AIRLOCK_HOME",
                self.dir.path().join(format!("airlock-home-{log}")),
            )
            .current_dir(self.project());
        run_bounded(&mut command, crate::support::agents::AGENT_TIMEOUT)
    }

    fn file(&self) -> Value {
        let text = std::fs::read_to_string(self.credentials()).expect("read credentials");
        serde_json::from_str(&text).expect("the host file is JSON")
    }
}

/// The PKI, a place and the server on `address:443`; `None` when this machine cannot.
fn setup(address: &str, test: &str, refresh: &str) -> Option<(TestPki, Place, ModelServer)> {
    if !namespaces_available(test) || !can_serve_443(address) {
        return None;
    }
    let pki = TestPki::new();
    let place = Place::new(refresh);
    let record = place.logs().join("requests.jsonl");
    let server = ModelServer::start(&pki, address, &record, "true");
    Some((pki, place, server))
}

/// The run's stdout, and stdout and stderr together for assertion messages.
fn outcome(output: &BoundedOutput) -> (String, String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let context = format!("stdout:\n{stdout}\nstderr:\n{}", output.stderr);
    (stdout, context)
}

/// [`outcome`] of a run that must have exited 0.
fn succeeded(output: &BoundedOutput) -> (String, String) {
    let (stdout, context) = outcome(output);
    assert_eq!(code(output), 0, "{context}");
    (stdout, context)
}

/// The value after `marker ` on the output's line starting with it.
fn marked<'a>(stdout: &'a str, marker: &str) -> Option<&'a str> {
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{marker} ")))
}

/// What the server issued, in order.
fn issued(server: &ModelServer) -> Vec<Value> {
    server
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "OAUTH")
        .map(|r| r["issued"].clone())
        .collect()
}

fn credentials_lines(path: &Path) -> Vec<Value> {
    read_lines(path)
        .into_iter()
        .filter(|line| line["kind"] == "credentials")
        .collect()
}

#[test]
fn a_refresh_inside_run_gives_surrogates_and_writes_the_real_tokens_back() {
    let test = "a_refresh_inside_run_gives_surrogates_and_writes_the_real_tokens_back";
    let Some((pki, place, server)) = setup("127.35.2.35", test, REAL_REFRESH) else {
        return;
    };
    let owner = std::fs::metadata(place.credentials()).expect("stat").uid();
    let output = place.run(&pki, "127.35.2.35", "audit.jsonl");
    let (stdout, context) = succeeded(&output);
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "one refresh: {context}");
    let new_access = issued[0]["access_token"].as_str().expect("issued access");
    let new_refresh = issued[0]["refresh_token"].as_str().expect("issued refresh");
    // The server got the real refresh token, then the new real access token.
    let requests = server.requests();
    let refresh = requests
        .iter()
        .find(|r| r["path"] == "/v1/oauth/token")
        .expect("the refresh reached the server");
    assert_eq!(refresh["body"]["refresh_token"], REAL_REFRESH, "{context}");
    let api = requests
        .iter()
        .find(|r| r["path"] == "/v1/messages/count_tokens")
        .expect("the API call reached the server");
    assert_eq!(
        header_values(api, "authorization"),
        [format!("Bearer {new_access}")],
        "{context}"
    );
    // The command saw surrogates only: in the file, in the refresh's answer.
    let answer: Value =
        serde_json::from_str(marked(&stdout, "REFRESH 200").expect("refreshed")).expect("json");
    let shown = answer["access_token"].as_str().expect("access token shown");
    assert!(
        shown.starts_with("sk-ant-") && shown != new_access,
        "{context}"
    );
    assert_eq!(answer["expires_in"], issued[0]["expires_in"]);
    assert!(marked(&stdout, "API 200").is_some(), "{context}");
    let after = marked(&stdout, "AFTER").expect("the file read again");
    // The command's copy followed the refresh: it holds the new surrogates.
    assert!(after.contains(shown), "{context}");
    let shown_refresh = answer["refresh_token"].as_str().expect("refresh shown");
    assert!(after.contains(shown_refresh), "{context}");
    let audit = std::fs::read_to_string(place.logs().join("audit.jsonl")).unwrap_or_default();
    for real in [REAL_ACCESS, REAL_REFRESH, new_access, new_refresh] {
        assert!(
            !stdout.contains(real),
            "a real token reached the command: {context}"
        );
        assert!(
            !output.stderr.contains(real),
            "a real token on stderr: {context}"
        );
        assert!(!audit.contains(real), "a real token in the audit log");
    }
    // The host file holds the new real tokens, mode and owner kept.
    let file = place.file();
    assert_eq!(file["claudeAiOauth"]["accessToken"], new_access);
    assert_eq!(file["claudeAiOauth"]["refreshToken"], new_refresh);
    assert_eq!(file["claudeAiOauth"]["subscriptionType"], "max");
    assert!(file["claudeAiOauth"]["expiresAt"].as_u64() > Some(1000));
    let meta = std::fs::metadata(place.credentials()).expect("stat");
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, owner));
    let lines = credentials_lines(&place.logs().join("audit.jsonl"));
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert!(
        messages.iter().any(|m| m.starts_with("refreshed"))
            && messages.iter().any(|m| m.starts_with("written back")),
        "credentials lines: {lines:?}"
    );
}

#[test]
fn a_refresh_answered_with_an_error_changes_nothing() {
    let test = "a_refresh_answered_with_an_error_changes_nothing";
    let Some((pki, place, server)) = setup("127.35.2.36", test, REVOKED_REFRESH) else {
        return;
    };
    let before = std::fs::read(place.credentials()).expect("read");
    let output = place.run(&pki, "127.35.2.36", "audit.jsonl");
    let (stdout, context) = succeeded(&output);
    let refused = marked(&stdout, "REFRESH 400").expect("the error passed on");
    assert!(refused.contains("invalid_grant"), "{context}");
    assert!(issued(&server).is_empty());
    assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
    assert!(!stdout.contains(REVOKED_REFRESH) && !stdout.contains(REAL_ACCESS));
    let lines = credentials_lines(&place.logs().join("audit.jsonl"));
    assert!(
        !lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("refreshed") || m.starts_with("written"))),
        "{lines:?}"
    );
}

#[test]
fn two_runs_refreshing_at_once_leave_the_fresher_login() {
    let test = "two_runs_refreshing_at_once_leave_the_fresher_login";
    let Some((pki, place, server)) = setup("127.35.2.37", test, REAL_REFRESH) else {
        return;
    };
    let outputs = std::thread::scope(|scope| {
        let runs: Vec<_> = ["a.jsonl", "b.jsonl"]
            .into_iter()
            .map(|log| {
                let (place, pki) = (&place, &pki);
                scope.spawn(move || place.run(pki, "127.35.2.37", log))
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("join"))
            .collect::<Vec<_>>()
    });
    for output in &outputs {
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            code(output),
            0,
            "stdout:\n{stdout}\nstderr:\n{}",
            output.stderr
        );
        assert!(stdout.contains("REFRESH 200"), "{stdout}");
    }
    let issued = issued(&server);
    assert_eq!(issued.len(), 2);
    // The later answer has the later expiry: the file holds it, whichever run wrote last.
    let fresher = issued
        .iter()
        .max_by_key(|i| i["expires_in"].as_u64())
        .expect("two");
    let file = place.file();
    assert_eq!(
        file["claudeAiOauth"]["accessToken"],
        fresher["access_token"]
    );
    assert_eq!(
        file["claudeAiOauth"]["refreshToken"],
        fresher["refresh_token"]
    );
    let lines: Vec<Value> = ["a.jsonl", "b.jsonl"]
        .iter()
        .flat_map(|log| credentials_lines(&place.logs().join(log)))
        .collect();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("written back") || m.starts_with("not written")))
            .count(),
        2,
        "{lines:?}"
    );
}

/// The real Claude Code CLI (from the `claude-agent-sdk` wheel), logged in through an
/// expired `.credentials.json` only (no API key): it refreshes, then calls the model with
/// the new token (its tool call runs `wc` on the projected file).
#[test]
fn the_real_claude_code_refreshes_an_expired_login_and_calls_the_model() {
    let test = "the_real_claude_code_refreshes_an_expired_login_and_calls_the_model";
    if !namespaces_available(test) || !can_serve_443("127.35.2.38") {
        return;
    }
    let claude = crate::support::agents::Agent::Claude;
    let executable = claude.executable();
    let pki = TestPki::new();
    let place = Place::new(REAL_REFRESH);
    let record = place.logs().join("requests.jsonl");
    let server = ModelServer::start(
        &pki,
        "127.35.2.38",
        &record,
        "wc -c ~/.claude/.credentials.json",
    );
    let mut args = vec![executable.to_string_lossy().into_owned()];
    args.extend(claude.arguments());
    let output = place.run_program(&pki, "127.35.2.38", "audit.jsonl", &args);
    let (stdout, context) = outcome(&output);
    let requests = server.requests();
    let paths: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r["method"], r["path"]))
        .collect();
    let refused: Vec<Value> = read_lines(&place.logs().join("audit.jsonl"))
        .into_iter()
        .filter(|line| line["decision"] == "deny")
        .collect();
    let context = format!("{context}\nrequests: {paths:?}\nrefused: {refused:?}");
    assert_eq!(code(&output), 0, "{context}");
    assert!(
        stdout.contains(crate::support::agents::FINAL_TEXT),
        "{context}"
    );
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "one refresh: {context}");
    let new_access = issued[0]["access_token"].as_str().expect("issued access");
    let new_refresh = issued[0]["refresh_token"].as_str().expect("issued refresh");
    let refresh = requests
        .iter()
        .find(|r| r["path"] == "/v1/oauth/token")
        .expect("the refresh reached the server");
    assert_eq!(refresh["body"]["refresh_token"], REAL_REFRESH, "{context}");
    let calls: Vec<&Value> = requests
        .iter()
        .filter(|r| {
            r["method"] == "POST"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/v1/messages"))
        })
        .collect();
    assert!(!calls.is_empty(), "{context}");
    for call in &calls {
        assert_eq!(
            header_values(call, "authorization"),
            [format!("Bearer {new_access}")],
            "{context}"
        );
    }
    // What the model got back from the tool (the file as the command sees it) and every
    // output hold no real token.
    let bodies: Vec<&Value> = calls.iter().map(|call| &call["body"]).collect();
    let sent_back = serde_json::to_string(&bodies).expect("json");
    let audit = std::fs::read_to_string(place.logs().join("audit.jsonl")).unwrap_or_default();
    for real in [REAL_ACCESS, REAL_REFRESH, new_access, new_refresh] {
        assert!(
            !stdout.contains(real) && !output.stderr.contains(real),
            "{context}"
        );
        assert!(
            !sent_back.contains(real),
            "a real token reached the model through the tool"
        );
        assert!(!audit.contains(real), "a real token in the audit log");
    }
    let file = place.file();
    assert_eq!(file["claudeAiOauth"]["accessToken"], new_access);
    assert_eq!(file["claudeAiOauth"]["refreshToken"], new_refresh);
}

/// A 2xx answer airlock cannot read (HTML) or place (a `session_token` besides the
/// tokens) is a 502: the command never gets the body, the host file is unchanged.
#[test]
fn a_refresh_answer_airlock_cannot_place_is_a_502_and_changes_nothing() {
    let test = "a_refresh_answer_airlock_cannot_place_is_a_502_and_changes_nothing";
    let garbled = "sk-ant-ort01-GARBLEDrefreshCANARY0123456789abcdefghijklmnop";
    let stray = "sk-ant-ort01-STRAYrefreshCANARY0123456789abcdefghijklmnopq";
    let Some((pki, first, server)) = setup("127.35.2.39", test, garbled) else {
        return;
    };
    let second = Place::new(stray);
    for place in [&first, &second] {
        let before = std::fs::read(place.credentials()).expect("read");
        let output = place.run(&pki, "127.35.2.39", "audit.jsonl");
        let (stdout, context) = succeeded(&output);
        assert!(marked(&stdout, "REFRESH 502").is_some(), "{context}");
        assert!(!stdout.contains("GARBLEDsecret") && !stdout.contains("sess-STRAY"));
        assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
        let lines = credentials_lines(&place.logs().join("audit.jsonl"));
        assert!(
            lines.iter().any(|l| l["decision"] == "deny"),
            "credentials lines: {lines:?}"
        );
    }
    // The stray answer's real tokens were issued and never reached the command.
    assert_eq!(issued(&server).len(), 1);
}

/// Codex's `auth.json`: the refresh's `id_token` (a JWT) is shown with its claims and a
/// random signature; the new access token works towards api.openai.com; the host file
/// gets the new tokens and `last_refresh`.
const CODEX_CLIENT: &str = r#"
import json, os, urllib.request
auth = json.load(open(os.path.expanduser("~/.codex/auth.json")))
body = json.dumps({"client_id": "app_EMoamEEZ73f0CkXaXp7hrann", "grant_type": "refresh_token",
                   "refresh_token": auth["tokens"]["refresh_token"],
                   "scope": "openid profile email"}).encode()
request = urllib.request.Request("https://auth.openai.com/oauth/token", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
with urllib.request.urlopen(request, timeout=30) as answer:
    text = answer.read().decode()
    print("REFRESH %d %s" % (answer.status, text))
access = json.loads(text)["access_token"]
call = urllib.request.Request("https://api.openai.com/v1/models",
                              headers={"Authorization": "Bearer " + access})
with urllib.request.urlopen(call, timeout=30) as answer:
    print("API %d" % answer.status)
# The file again, after the host's file was written back: still the projection.
print("AFTER " + open(os.path.expanduser("~/.codex/auth.json")).read().replace("\n", " "))
"#;

#[test]
fn a_codex_refresh_keeps_the_id_token_claims_and_writes_back() {
    let test = "a_codex_refresh_keeps_the_id_token_claims_and_writes_back";
    let Some((pki, place, server)) = setup("127.35.2.40", test, REAL_REFRESH) else {
        return;
    };
    let real_access = "REALcodexACCESScanary0123456789abcdefghijklmnopqrstuvwxyz";
    let real_refresh = "rt_REALcodexREFRESHcanary0123456789abcdefghijklmnopqrstu";
    let real_id = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.REALcodexIDsignature0123456789abcdef";
    let codex = place.home().join(".codex");
    std::fs::create_dir_all(&codex).expect("codex dir");
    let auth = format!(
        "{{\n  \"OPENAI_API_KEY\": null,\n  \"tokens\": {{\n    \"id_token\": \"{real_id}\",\n    \
         \"access_token\": \"{real_access}\",\n    \"refresh_token\": \"{real_refresh}\",\n    \
         \"account_id\": \"acct\"\n  }},\n  \"last_refresh\": \"2026-01-01T00:00:00Z\"\n}}\n"
    );
    std::fs::write(codex.join("auth.json"), auth).expect("auth.json");
    std::fs::set_permissions(
        codex.join("auth.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    std::fs::write(place.project().join("codex_client.py"), CODEX_CLIENT).expect("client");
    let policy = "version: 1\nnetwork:\n  allow:\n    - host: auth.openai.com\n    \
                  - host: api.openai.com\ncredentials:\n  files: [codex]\n";
    std::fs::write(place.logs().join("airlock.yaml"), policy).expect("policy");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
        crate::support::test_user::chown_tree(&place.logs(), uid);
    }
    let program = ["python3".to_owned(), "codex_client.py".to_owned()];
    let output = place.run_program(&pki, "127.35.2.40", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "{context}");
    let new_id = issued[0]["id_token"].as_str().expect("id");
    let new_access = issued[0]["access_token"].as_str().expect("access");
    let new_refresh = issued[0]["refresh_token"].as_str().expect("refresh");
    let requests = server.requests();
    let refresh = requests
        .iter()
        .find(|r| r["path"] == "/oauth/token")
        .expect("the refresh reached the server");
    assert_eq!(refresh["body"]["refresh_token"], real_refresh);
    let models = requests
        .iter()
        .find(|r| r["path"] == "/v1/models")
        .expect("the API call");
    assert_eq!(
        header_values(models, "authorization"),
        [format!("Bearer {new_access}")]
    );
    let answer: Value =
        serde_json::from_str(marked(&stdout, "REFRESH 200").expect("refreshed")).expect("json");
    let shown_id = answer["id_token"].as_str().expect("id shown");
    let (claims, signature) = new_id.rsplit_once('.').expect("jwt");
    assert!(shown_id.starts_with(&format!("{claims}.")), "{context}");
    assert!(!shown_id.ends_with(signature), "{context}");
    for real in [
        real_access,
        real_refresh,
        real_id,
        new_access,
        new_refresh,
        new_id,
    ] {
        assert!(
            !stdout.contains(real),
            "a real token reached the command: {context}"
        );
    }
    let file: Value =
        serde_json::from_slice(&std::fs::read(codex.join("auth.json")).expect("read"))
            .expect("json");
    assert_eq!(file["tokens"]["id_token"], new_id);
    assert_eq!(file["tokens"]["access_token"], new_access);
    assert_eq!(file["tokens"]["refresh_token"], new_refresh);
    assert_eq!(file["tokens"]["account_id"], "acct");
    assert_ne!(file["last_refresh"], "2026-01-01T00:00:00Z");
}

/// A token request that carries the projected refresh token but is not a refresh grant
/// (an `authorization_code` login of another account, say) is refused 403 before it is
/// sent (the real token is never swapped into it), and the host file is unchanged.
#[test]
fn a_token_request_that_is_not_a_refresh_grant_is_never_written_back() {
    let test = "a_token_request_that_is_not_a_refresh_grant_is_never_written_back";
    let Some((pki, place, server)) = setup("127.35.2.41", test, REAL_REFRESH) else {
        return;
    };
    std::fs::write(place.home().join("grant.txt"), "authorization_code").expect("grant");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
    }
    let before = std::fs::read(place.credentials()).expect("read");
    let output = place.run(&pki, "127.35.2.41", "audit.jsonl");
    let (stdout, context) = succeeded(&output);
    assert!(issued(&server).is_empty(), "{context}");
    assert!(marked(&stdout, "REFRESH 403").is_some(), "{context}");
    assert!(!stdout.contains(REAL_REFRESH), "{context}");
    assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
    let lines = credentials_lines(&place.logs().join("audit.jsonl"));
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.contains("not a refresh grant"))),
        "{lines:?}"
    );
}

/// A JWT with `claims` and signature `signature` (unsigned: only its shape matters here).
fn jwt(claims: &Value, signature: &str) -> String {
    use base64::Engine as _;
    let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let payload = encode(claims.to_string().as_bytes());
    format!("{header}.{payload}.{signature}")
}

/// The real Codex CLI (from the `openai-codex-cli-bin` wheel), logged in with ChatGPT
/// tokens in `auth.json` whose access token expired: it refreshes at auth.openai.com, then
/// calls chatgpt.com with the new token (the turn itself is not checked: the scripted
/// server does not play ChatGPT's backend).
#[test]
fn the_real_codex_refreshes_an_expired_login_and_calls_the_model() {
    let test = "the_real_codex_refreshes_an_expired_login_and_calls_the_model";
    if !namespaces_available(test) || !can_serve_443("127.35.2.42") {
        return;
    }
    let codex_agent = crate::support::agents::Agent::Codex;
    let executable = codex_agent.executable();
    let pki = TestPki::new();
    let place = Place::new(REAL_REFRESH);
    let record = place.logs().join("requests.jsonl");
    let server = ModelServer::start(&pki, "127.35.2.42", &record, "echo probe");
    let claims = serde_json::json!({
        "exp": 1000, "email": "user@example.com",
        "https://api.openai.com/auth": {"chatgpt_plan_type": "plus",
            "chatgpt_account_id": "acct", "chatgpt_user_id": "user"}});
    let real_id = jwt(&claims, "REALcodexIDsignature0123456789abcdefghij");
    let real_access = jwt(&claims, "REALcodexACCESSsignature0123456789abcdef");
    let real_refresh = "rt_REALcodexREFRESHcanary0123456789abcdefghijklmnopqrstu";
    let codex = place.home().join(".codex");
    std::fs::create_dir_all(&codex).expect("codex dir");
    let auth = serde_json::json!({
        "OPENAI_API_KEY": null,
        "tokens": {"id_token": real_id, "access_token": real_access,
                   "refresh_token": real_refresh, "account_id": "acct"},
        "last_refresh": "2020-01-01T00:00:00Z"});
    std::fs::write(codex.join("auth.json"), auth.to_string()).expect("auth.json");
    std::fs::set_permissions(
        codex.join("auth.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    let policy = "version: 1\nnetwork:\n  allow:\n    - host: auth.openai.com\n    \
                  - host: chatgpt.com\n    - host: api.openai.com\nfilesystem:\n  writable: \
                  [\"~/.codex\", \".\"]\ncredentials:\n  files: [codex]\n";
    std::fs::write(place.logs().join("airlock.yaml"), policy).expect("policy");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
        crate::support::test_user::chown_tree(&place.logs(), uid);
    }
    let mut args = vec![executable.to_string_lossy().into_owned()];
    args.extend(codex_agent.arguments());
    let output = place.run_program(&pki, "127.35.2.42", "audit.jsonl", &args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let requests = server.requests();
    let paths: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {}", r["method"], r["path"]))
        .collect();
    let refused: Vec<Value> = read_lines(&place.logs().join("audit.jsonl"))
        .into_iter()
        .filter(|line| line["decision"] == "deny")
        .collect();
    let credentials = credentials_lines(&place.logs().join("audit.jsonl"));
    let context = format!(
        "stdout:\n{stdout}\nstderr:\n{}\nrequests: {paths:?}\nrefused: {refused:?}\n\
         credentials: {credentials:?}",
        output.stderr
    );
    // The scripted server does not play ChatGPT's backend (models list, plugins...), so
    // the CLI's run is not expected to finish its turn: what is checked is the refresh
    // and that every call to chatgpt.com afterwards carries the new real token.
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "one refresh: {context}");
    let new_access = issued[0]["access_token"].as_str().expect("access");
    let refresh = requests
        .iter()
        .find(|r| r["path"] == "/oauth/token")
        .expect("the refresh reached the server");
    assert_eq!(refresh["body"]["refresh_token"], real_refresh, "{context}");
    let calls: Vec<&Value> = requests
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/backend-api/"))
                && !header_values(r, "authorization").is_empty()
        })
        .collect();
    assert!(!calls.is_empty(), "{context}");
    for call in &calls {
        assert_eq!(
            header_values(call, "authorization"),
            [format!("Bearer {new_access}")],
            "{context}"
        );
    }
    let file: Value =
        serde_json::from_slice(&std::fs::read(codex.join("auth.json")).expect("read"))
            .expect("json");
    assert_eq!(file["tokens"]["access_token"], new_access, "{context}");
    for real in [real_access.as_str(), real_refresh, new_access] {
        assert!(
            !stdout.contains(real) && !output.stderr.contains(real),
            "{context}"
        );
    }
}

/// review35 F4 and F3 (fixB): a refresh body whose first `refresh_token` hides behind an
/// encoded key (`refresh%5Ftoken=<attacker's token>`) is refused 403 and never sent (a
/// first-value-wins server would refresh the attacker's login and airlock would write it
/// into the host file); a 2xx with tokens from the token host that answers no refresh of
/// the projected login (here an `authorization_code` login the command made) is a 502:
/// the command never gets its tokens; a `create_api_key` call with the projected access
/// token is refused 403 before it is sent.
#[test]
fn ambiguous_refreshes_and_other_token_answers_are_refused() {
    let test = "ambiguous_refreshes_and_other_token_answers_are_refused";
    let Some((pki, place, server)) = setup("127.35.2.61", test, REAL_REFRESH) else {
        return;
    };
    let script = r#"
import json, os, urllib.request, urllib.error
creds = json.load(open(os.path.expanduser("~/.claude/.credentials.json")))["claudeAiOauth"]
attacker = "".join("%%%02X" % ord(c) for c in "sk-ant-ort01-ATTACKERownREFRESHtoken0123456789abcdef")
bodies = {
    "FORMKEY": "refresh%5Ftoken=" + attacker + "&grant_type=refresh_token&refresh_token="
               + creds["refreshToken"] + "&client_id=c",
    "OWNLOGIN": "grant_type=authorization_code&code=x&refresh_token=attacker-own-login",
}
for name, body in bodies.items():
    request = urllib.request.Request("https://platform.claude.com/v1/oauth/token",
        data=body.encode(), method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    print("%s %d %s" % (name, status, text.replace("\n", " ")))
mint = urllib.request.Request("https://api.anthropic.com/api/oauth/claude_cli/create_api_key",
    data=b"{}", method="POST", headers={"Authorization": "Bearer " + creds["accessToken"],
                                         "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(mint, timeout=30) as answer:
        status, text = answer.status, answer.read().decode()
except urllib.error.HTTPError as error:
    status, text = error.code, error.read().decode()
print("MINT %d %s" % (status, text.replace("\n", " ")))
"#;
    std::fs::write(place.project().join("attack.py"), script).expect("script");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
    }
    let before = std::fs::read(place.credentials()).expect("read");
    let program = ["python3".to_owned(), "attack.py".to_owned()];
    let output = place.run_program(&pki, "127.35.2.61", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    let formkey = marked(&stdout, "FORMKEY 403").expect(&context);
    assert!(formkey.contains("ambiguous"), "{context}");
    let own = marked(&stdout, "OWNLOGIN 502").expect(&context);
    assert!(own.contains("token fields"), "{context}");
    // Minting an API key from the projected access token is refused before it is sent.
    let mint = marked(&stdout, "MINT 403").expect(&context);
    assert!(mint.contains("mints an API key"), "{context}");
    // Only the command's own login reached the server; its tokens never reached the command.
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "{context}");
    for field in ["access_token", "refresh_token"] {
        let value = issued[0][field].as_str().expect("issued");
        assert!(!stdout.contains(value), "{context}");
    }
    assert!(
        !stdout.contains(REAL_REFRESH) && !stdout.contains(REAL_ACCESS),
        "{context}"
    );
    let requests = std::fs::read_to_string(place.logs().join("requests.jsonl")).unwrap_or_default();
    assert!(
        !requests.contains("ATTACKER")
            && !requests.contains(REAL_REFRESH)
            && !requests.contains("create_api_key"),
        "{requests}"
    );
    assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
}

/// A refresh surrogate an earlier refresh in this run replaced (rereview35 G3) is refused
/// 403 before it is sent, even in a clean refresh grant: replaying a rotated refresh token
/// may revoke the new login. Only the first grant reached the server.
#[test]
fn a_retired_refresh_surrogate_is_refused_and_never_sent() {
    let test = "a_retired_refresh_surrogate_is_refused_and_never_sent";
    let Some((pki, place, server)) = setup("127.35.2.62", test, REAL_REFRESH) else {
        return;
    };
    let script = r#"
import json, os, urllib.request, urllib.error
creds = json.load(open(os.path.expanduser("~/.claude/.credentials.json")))["claudeAiOauth"]
body = "grant_type=refresh_token&refresh_token=" + creds["refreshToken"] + "&client_id=c"
for name in ["FIRST", "SECOND"]:
    request = urllib.request.Request("https://platform.claude.com/v1/oauth/token",
        data=body.encode(), method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    print("%s %d %s" % (name, status, text.replace("\n", " ")))
"#;
    std::fs::write(place.project().join("retired.py"), script).expect("script");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
    }
    let program = ["python3".to_owned(), "retired.py".to_owned()];
    let output = place.run_program(&pki, "127.35.2.62", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    assert!(marked(&stdout, "FIRST 200").is_some(), "{context}");
    let second = marked(&stdout, "SECOND 403").expect(&context);
    assert!(second.contains("earlier refresh"), "{context}");
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "{context}");
    // The host file holds the first (and only) refresh's login.
    let file = place.file();
    assert_eq!(
        file["claudeAiOauth"]["refreshToken"], issued[0]["refresh_token"],
        "{context}"
    );
}
