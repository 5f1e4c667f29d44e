//! Real clients signed in with the user's own login files under `airlock run`
//! (docs/secrets.md, "Credential files"; docs/agents.md, "Signing in with your own
//! login"), against the scripted server of `tests/fixtures/model_server.py` on
//! `ADDRESS:443` standing in for the real hosts (`--resolve`, `--upstream-ca`):
//!
//! - GitHub's `gh` (the Debian package) with `~/.config/gh/hosts.yml` only: `gh api user`
//!   reaches api.github.com with `Authorization: token <real>`; inside, the file holds a
//!   surrogate; the same surrogate sent by gh to another host is refused
//!   `secret_out_of_scope`.
//! - The real Codex CLI signed in with ChatGPT through `~/.codex/auth.json` only (no API
//!   key): its ChatGPT backend calls (workspace routing, then its model turn over the
//!   WebSocket of `chatgpt.com/backend-api/codex/responses`) carry the real access token
//!   and its `chatgpt-account-id`, its tool call runs in the jail and reads only
//!   surrogates.
//!
//! In both, no real token reaches the command's output, airlock's output or the audit
//! log, and the host's file is unchanged. `.ci/run` also runs this as an ordinary user.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::support::TestPki;
use crate::support::agents::{
    AGENT_TIMEOUT, Agent, FINAL_TEXT, ModelServer, Place, can_serve_443, header_values,
};
use crate::support::clients::BoundedOutput;
use crate::support::run::{code, namespaces_available, read_lines};

/// gh's token for github.com (a canary: only its surrogate may reach the command).
const GH_TOKEN: &str = "gho_REALagentLoginsGH0123456789abcdefghijkl";
/// Codex's refresh token (never sent in these runs: the access token is valid).
const CODEX_REFRESH: &str = "rt_REALagentLoginsCODEX0123456789abcdefgh";
/// The ChatGPT account the Codex login names.
const ACCOUNT: &str = "acct-agent-logins";

/// `airlock run ARGS... -- COMMAND...` as the test user when one is asked for, with only
/// PATH, HOME, AIRLOCK_HOME and `env` in the environment, bounded by [`AGENT_TIMEOUT`].
fn airlock_run(
    args: &[String],
    command: &[String],
    home: &Path,
    airlock_home: &Path,
    cwd: &Path,
    env: &[(&str, &str)],
) -> BoundedOutput {
    let airlock = env!("CARGO_BIN_EXE_airlock");
    let mut run = match crate::support::test_user::uid() {
        Some(uid) => {
            let mut run = crate::support::test_user::wrap(uid);
            run.arg(airlock);
            run
        }
        None => Command::new(airlock),
    };
    run.arg("run")
        .args(args)
        .arg("--")
        .args(command)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("AIRLOCK_HOME", airlock_home)
        .current_dir(cwd);
    for (name, value) in env {
        run.env(name, value);
    }
    crate::support::run_bounded(&mut run, AGENT_TIMEOUT)
}

/// No real token in the command's output, airlock's output or the audit log.
fn assert_never_seen(reals: &[&str], output: &BoundedOutput, audit: &Path, context: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let audit = std::fs::read_to_string(audit).unwrap_or_default();
    for real in reals {
        assert!(!stdout.contains(real), "a real token on stdout: {context}");
        assert!(
            !output.stderr.contains(real),
            "a real token on stderr: {context}"
        );
        assert!(!audit.contains(real), "a real token in the audit log");
    }
}

/// A tempdir under the target directory (the jail's `/tmp` is private) holding `home/`
/// with `files` and `logs/`, owned by the test user when one is asked for.
fn place_with(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let home = dir.path().join("home");
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).expect("logs");
    for (path, content) in files {
        let path = home.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        std::fs::write(&path, content).expect("write");
    }
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(dir.path(), uid);
    }
    (dir, home, logs)
}

/// gh signed in through `~/.config/gh/hosts.yml` (as `gh auth login` leaves it): `gh api
/// user` gets GitHub's answer with the real token sent, the file read inside holds a
/// surrogate of the same length, and gh sending that surrogate to another host (a copy
/// of the file naming other.test, through `GH_CONFIG_DIR`) is refused.
#[test]
fn gh_signed_in_by_its_hosts_file_sends_the_real_token_only_to_github() {
    let test = "gh_signed_in_by_its_hosts_file_sends_the_real_token_only_to_github";
    let address = "127.33.35.11";
    if !namespaces_available(test) || !can_serve_443(address) {
        return;
    }
    crate::support::need_all(&["gh"]);
    let pki = TestPki::new();
    let hosts = format!(
        "github.com:\n    oauth_token: {GH_TOKEN}\n    git_protocol: https\n    user: me\n"
    );
    let (dir, home, logs) = place_with(&[(".config/gh/hosts.yml", &hosts)]);
    let server = ModelServer::start(&pki, address, &logs.join("requests.jsonl"), "true");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\ncredentials:\n  files: [gh]\nnetwork:\n  allow:\n    - host: api.github.com\n    - host: other.test\n",
    )
    .expect("policy");
    let audit = logs.join("audit.jsonl");
    let args: Vec<String> = [
        "--policy",
        &policy.to_string_lossy(),
        "--resolve",
        &format!("api.github.com:{address}"),
        "--resolve",
        &format!("other.test:{address}"),
        "--upstream-ca",
        &pki.upstream_ca_cert.to_string_lossy(),
        "--log",
        &audit.to_string_lossy(),
    ]
    .iter()
    .map(|a| (*a).to_string())
    .collect();
    // Nothing but the file may sign gh in, and nothing may take it elsewhere.
    let script = "unset GH_TOKEN GITHUB_TOKEN GH_ENTERPRISE_TOKEN GITHUB_ENTERPRISE_TOKEN \
         GH_HOST GH_CONFIG_DIR XDG_CONFIG_HOME; \
         export GH_NO_UPDATE_NOTIFIER=1 GH_PROMPT_DISABLED=1 GH_NO_EXTENSION_UPDATE_NOTIFIER=1; \
         echo FILE; cat ~/.config/gh/hosts.yml; echo USER; gh api user; echo; echo \"user=$?\"; \
         mkdir -p /tmp/elsewhere; \
         sed 's/^github.com:/other.test:/' ~/.config/gh/hosts.yml > /tmp/elsewhere/hosts.yml; \
         echo OTHER; GH_CONFIG_DIR=/tmp/elsewhere gh api --hostname other.test user; \
         echo \"other=$?\"";
    let command: Vec<String> = ["sh", "-c", script]
        .iter()
        .map(|a| (*a).to_string())
        .collect();
    let output = airlock_run(
        &args,
        &command,
        &home,
        &logs.join("airlock-home"),
        &home,
        &[],
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let requests = server.requests();
    let context = format!(
        "stdout:\n{stdout}\nstderr:\n{}\nrequests: {requests:#?}",
        output.stderr
    );
    assert_eq!(code(&output), 0, "{context}");
    assert!(
        output
            .stderr
            .contains("credential files: projected with surrogates: gh"),
        "{context}"
    );
    // Inside: the same file, the token a surrogate of the same shape.
    let seen = stdout
        .split_once("FILE\n")
        .and_then(|(_, rest)| rest.split_once("USER\n"))
        .map(|(file, _)| file)
        .unwrap_or_else(|| panic!("{context}"));
    assert_eq!(seen.len(), hosts.len(), "{seen}");
    let surrogate = seen
        .lines()
        .find_map(|line| line.trim().strip_prefix("oauth_token: "))
        .unwrap_or_else(|| panic!("no token line: {seen}"));
    assert!(
        surrogate.starts_with("gho_") && surrogate != GH_TOKEN,
        "{seen}"
    );
    // GitHub's answer reached gh; the server got the real token, never the surrogate.
    assert!(
        stdout.contains("\"login\": \"airlock-gh-user\""),
        "{context}"
    );
    assert!(stdout.contains("user=0"), "{context}");
    let user: Vec<&Value> = requests.iter().filter(|r| r["path"] == "/user").collect();
    assert_eq!(user.len(), 1, "{context}");
    assert_eq!(
        header_values(user[0], "authorization"),
        [format!("token {GH_TOKEN}")]
    );
    for request in &requests {
        assert!(
            !request.to_string().contains(surrogate),
            "a surrogate reached the server: {request}"
        );
    }
    check_refused_elsewhere(&stdout, &requests, &audit, &context);
    assert_never_seen(&[GH_TOKEN], &output, &audit, &context);
    assert_eq!(
        std::fs::read_to_string(home.join(".config/gh/hosts.yml")).expect("host file"),
        hosts
    );
}

/// gh's request with the surrogate to other.test was refused `secret_out_of_scope` (in
/// its output and the audit log) and never forwarded; the api.github.com call is audited
/// with the file's secret.
fn check_refused_elsewhere(stdout: &str, requests: &[Value], audit: &Path, context: &str) {
    // The surrogate sent to another host: refused there, never forwarded.
    let other = stdout
        .split_once("OTHER\n")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    assert!(other.contains("secret_out_of_scope"), "{context}");
    assert!(!stdout.contains("other=0"), "{context}");
    assert!(
        requests.iter().all(|r| r["path"] != "/api/v3/user"),
        "{context}"
    );
    let lines = read_lines(audit);
    assert!(
        lines.iter().any(|l| l["host"] == "other.test"
            && l["decision"] == "deny"
            && l["reason"] == "secret_out_of_scope"),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l["host"] == "api.github.com"
            && l["decision"] == "allow"
            && l["secrets"] == serde_json::json!(["file:gh:oauth_token:github.com"])),
        "{lines:#?}"
    );
}

/// A JWT with the claims Codex reads from a ChatGPT sign-in (valid until 2100) and
/// `signature`.
fn chatgpt_jwt(signature: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = format!(
        r#"{{"email":"user@example.com","exp":4102444800,"https://api.openai.com/auth":{{"chatgpt_plan_type":"plus","chatgpt_account_id":"{ACCOUNT}","chatgpt_user_id":"user"}}}}"#
    );
    let payload = URL_SAFE_NO_PAD.encode(claims);
    format!("{header}.{payload}.{signature}")
}

/// The model calls of Codex's ChatGPT backend: its Responses POSTs and the
/// `response.create` messages of its WebSocket (recorded as `WS`).
fn is_model_call(request: &Value) -> bool {
    let path = request["path"].as_str().unwrap_or_default();
    (request["method"] == "POST" || request["method"] == "WS")
        && path.split('?').next() == Some("/backend-api/codex/responses")
}

/// The real Codex CLI signed in with ChatGPT through `~/.codex/auth.json` only, with its
/// profile alone (it allows chatgpt.com's backend): workspace routing, then a model turn whose tool call runs the
/// probe in the jail (which reads auth.json), then the final answer; every ChatGPT
/// backend request carries the real access token and the account, the probe saw only
/// surrogates.
#[test]
fn codex_signed_in_with_chatgpt_runs_its_tool_with_the_real_token() {
    let test = "codex_signed_in_with_chatgpt_runs_its_tool_with_the_real_token";
    let address = "127.33.35.12";
    if !namespaces_available(test) || !can_serve_443(address) {
        return;
    }
    let agent = Agent::Codex;
    let executable = agent.executable();
    let pki = TestPki::new();
    let place = Place::new(agent);
    let server = ModelServer::start(
        &pki,
        address,
        &place.logs().join("model-requests.jsonl"),
        "sh probe.sh",
    );
    let access = chatgpt_jwt("REALagentLoginsACCESSsig0123456789abcdefghij");
    let id = chatgpt_jwt("REALagentLoginsIDsig0123456789abcdefghijklmn");
    let auth = place.home().join(".codex/auth.json");
    // `last_refresh` recent: Codex does not refresh a login younger than a week.
    let now = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"])
        .output()
        .expect("date");
    let now = String::from_utf8_lossy(&now.stdout).trim().to_owned();
    let file = format!(
        "{{\n  \"auth_mode\": \"chatgpt\",\n  \"OPENAI_API_KEY\": null,\n  \"tokens\": {{\n    \"id_token\": \"{id}\",\n    \"access_token\": \"{access}\",\n    \"refresh_token\": \"{CODEX_REFRESH}\",\n    \"account_id\": \"{ACCOUNT}\"\n  }},\n  \"last_refresh\": \"{now}\"\n}}\n"
    );
    std::fs::write(&auth, &file).expect("auth.json");
    let probe = place.project().join("probe.sh");
    let script = std::fs::read_to_string(&probe).expect("probe");
    std::fs::write(
        &probe,
        format!("cat \"$HOME/.codex/auth.json\" > seen-auth.json\n{script}"),
    )
    .expect("probe");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
    }
    let mut args: Vec<String> = vec![
        "--upstream-ca".into(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
        "--log".into(),
        place.audit_log().to_string_lossy().into_owned(),
    ];
    for host in ["chatgpt.com", "api.openai.com", "auth.openai.com"] {
        args.extend(["--resolve".into(), format!("{host}:{address}")]);
    }
    let mut command = vec![executable.to_string_lossy().into_owned()];
    command.extend(agent.arguments());
    let output = airlock_run(
        &args,
        &command,
        &place.home(),
        &place.logs().join("airlock-home"),
        &place.project(),
        &[],
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let requests = server.requests();
    let context = format!(
        "stdout:\n{stdout}\nstderr:\n{}\nrequests: {:#?}",
        output.stderr,
        requests
            .iter()
            .map(|r| format!("{} {}", r["method"], r["path"]))
            .collect::<Vec<_>>()
    );
    assert_eq!(code(&output), 0, "{context}");
    assert!(stdout.contains(FINAL_TEXT), "no final answer: {context}");
    assert!(
        output
            .stderr
            .contains("credential files: projected with surrogates: codex"),
        "{context}"
    );
    check_backend_calls(&requests, &access, &context);
    // The probe (Codex's tool call, in the jail) read the file: surrogates only.
    let seen =
        std::fs::read_to_string(place.project().join("seen-auth.json")).expect("the probe ran");
    assert_eq!(seen.len(), file.len(), "{seen}");
    assert!(
        seen.contains(&format!("\"account_id\": \"{ACCOUNT}\"")),
        "{seen}"
    );
    let seen_access = serde_json::from_str::<Value>(&seen).expect("JSON")["tokens"]["access_token"]
        .as_str()
        .expect("access_token")
        .to_owned();
    assert_ne!(seen_access, access);
    // The surrogate JWT keeps the header and claims (Codex reads them); its signature is
    // new.
    let claims = |jwt: &str| jwt.rsplit_once('.').map(|(head, _)| head.to_owned());
    assert_eq!(claims(&seen_access), claims(&access));
    for request in &requests {
        assert!(
            !request["headers"].to_string().contains(&seen_access),
            "a surrogate reached the server: {request}"
        );
    }
    let reals = [access.as_str(), id.as_str(), CODEX_REFRESH];
    for real in reals {
        assert!(!seen.contains(real), "the command saw a real token");
    }
    assert_never_seen(&reals, &output, &place.audit_log(), &context);
    assert_eq!(std::fs::read_to_string(&auth).expect("host file"), file);
}

/// Codex asked ChatGPT's workspace routing and had a model turn with the tool result sent
/// back, every backend request carrying the real access token and the account.
fn check_backend_calls(requests: &[Value], access: &str, context: &str) {
    let backend: Vec<&Value> = requests
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/backend-api/"))
        })
        .collect();
    assert!(
        backend
            .iter()
            .any(|r| r["path"] == "/backend-api/wham/accounts/check"),
        "{context}"
    );
    for call in &backend {
        assert_eq!(
            header_values(call, "authorization"),
            [format!("Bearer {access}")],
            "{} {}",
            call["method"],
            call["path"]
        );
        assert_eq!(header_values(call, "chatgpt-account-id"), [ACCOUNT]);
    }
    let calls: Vec<&&Value> = backend.iter().filter(|r| is_model_call(r)).collect();
    assert!(calls.len() >= 2, "two model turns expected: {context}");
    assert!(
        calls.iter().any(|call| {
            let body = call["body"].to_string();
            body.contains("AIRLOCK-PROBE") && body.contains("hooks=refused")
        }),
        "the tool result never reached the model: {context}"
    );
}
