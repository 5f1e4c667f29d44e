//! The real Claude Code, Codex and aider CLIs (from PyPI, [`crate::support::agents`])
//! under `airlock run`, against a scripted local model server standing in for
//! api.anthropic.com / api.openai.com on port 443 (`--resolve`, `--upstream-ca`): the
//! model's first answer is a tool call running `sh probe.sh` in the jail, its second (once
//! the tool result came back) final text. The probe reports that the command holds a
//! surrogate key, cannot read `~/.ssh`, is refused an unlisted host and cannot write the
//! agent's hook settings; the test checks the agent's state reached the home and the
//! model server got the real key. As root, and as the test user (`AIRLOCK_TEST_UID`).

use serde_json::Value;

use crate::support::TestPki;
use crate::support::agents::{
    Agent, FINAL_TEXT, ModelServer, Place, can_serve_443, header_values, settings_content,
};
use crate::support::run::{code, namespaces_available, read_lines};

/// A real-looking key per agent (only the surrogate may reach the command).
fn real_key(agent: Agent) -> &'static str {
    match agent {
        Agent::Claude => "sk-ant-api03-REALagentsClaude0123456789abcdefghijklmn",
        Agent::Codex => "sk-proj-REALagentsCodex0123456789abcdefghijklmnopq",
        Agent::Aider => "sk-proj-REALagentsAider0123456789abcdefghijklmnopq",
    }
}

/// The model calls: POSTs to the API paths (side calls such as Claude Code's `/api/...`
/// apart) and the `response.create` messages of Codex's WebSocket (recorded as `WS`,
/// with the headers of their upgrade).
fn is_model_call(request: &Value) -> bool {
    let path = request["path"].as_str().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    (request["method"] == "POST" || request["method"] == "WS")
        && ["/v1/messages", "/v1/responses", "/v1/chat/completions"].contains(&path)
}

/// The policy a user writes without a profile: the API host, the agent's state directory
/// writable, its hook settings protected.
fn explicit_policy(agent: Agent) -> String {
    let state = agent.state_dir();
    let protected = match agent {
        Agent::Aider => String::new(),
        _ => format!("  protected: [\"~/{}\"]\n", agent.hook_settings()),
    };
    format!(
        "version: 1\nnetwork:\n  allow:\n    - host: {host}\nfilesystem:\n  writable: \
         [\".\", \"~/{state}\"]\n{protected}",
        host = agent.api_host()
    )
}

/// A PKI, a place for `agent` and the model server on `address:443`; `None` when this
/// machine cannot run the test (said by [`crate::support::skip_or_fail`]).
fn setup(agent: Agent, address: &str, test: &str) -> Option<(TestPki, Place, ModelServer)> {
    if !namespaces_available(test) || !can_serve_443(address) {
        return None;
    }
    let pki = TestPki::new();
    let place = Place::new(agent);
    let record = place.logs().join("model-requests.jsonl");
    let server = ModelServer::start(&pki, address, &record, "sh probe.sh");
    Some((pki, place, server))
}

/// Runs `agent` with an explicit policy file against a model server on `address:443`,
/// and checks everything the module doc names.
fn agent_with_explicit_policy(agent: Agent, address: &str, test: &str) {
    let Some((pki, place, server)) = setup(agent, address, test) else {
        return;
    };
    let policy = place.logs().join("airlock.yaml");
    std::fs::write(&policy, explicit_policy(agent)).expect("write the policy");
    let (key, preset) = agent.key();
    let args: Vec<String> = [
        "--profile",
        "none",
        "--policy",
        &policy.to_string_lossy(),
        "--secret",
        &format!("{key}@preset:{preset}"),
        "--resolve",
        &format!("{}:{address}", agent.api_host()),
        "--upstream-ca",
        &pki.upstream_ca_cert.to_string_lossy(),
    ]
    .iter()
    .map(|a| (*a).to_string())
    .collect();
    let output = place.run(agent, &args, real_key(agent));
    check_run(agent, &place, &server, &output);
}

/// The checks shared by every run of `agent`.
fn check_run(
    agent: Agent,
    place: &Place,
    server: &ModelServer,
    output: &crate::support::clients::BoundedOutput,
) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let context = format!("stdout:\n{stdout}\nstderr:\n{}", output.stderr);
    assert_eq!(code(output), 0, "{context}");
    assert!(stdout.contains(FINAL_TEXT), "no final answer: {context}");
    let report = place.report();
    check_report(agent, &report, &context);
    assert_eq!(
        std::fs::read_to_string(place.home().join(agent.hook_settings())).expect("settings"),
        settings_content(agent),
        "the hook settings changed"
    );
    check_model_requests(agent, server, &report);
    check_state(agent, place);
    check_audit(agent, place, &context);
    let real = real_key(agent);
    let audit = std::fs::read_to_string(place.audit_log()).unwrap_or_default();
    assert!(
        !stdout.contains(real) && !output.stderr.contains(real) && !audit.contains(real),
        "the real key leaked: {context}"
    );
}

/// The probe's report: surrogate, `~/.ssh`, unlisted host, hook settings.
fn check_report(agent: Agent, report: &str, context: &str) {
    assert!(
        report.contains("AIRLOCK-PROBE"),
        "the probe did not run: {context}"
    );
    let field = |name: &str| {
        report
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in the probe report:\n{report}\n{context}"))
            .to_string()
    };
    let surrogate = field("key");
    let real = real_key(agent);
    let prefix = if agent == Agent::Claude {
        "sk-ant-api03-"
    } else {
        "sk-proj-"
    };
    assert!(
        surrogate.starts_with(prefix) && surrogate.len() == real.len() && surrogate != real,
        "the command must hold a surrogate of the key, got {surrogate:?}"
    );
    assert_eq!(field("ssh"), "unreadable", "{report}");
    assert_eq!(
        field("unlisted"),
        "403 \"reason\":\"host_not_allowed\"",
        "{report}"
    );
    assert_eq!(field("hooks"), "refused", "{report}");
}

/// The model server got the real key on every model call, never the surrogate, and the
/// tool result came back to it.
fn check_model_requests(agent: Agent, server: &ModelServer, report: &str) {
    let requests = server.requests();
    let calls: Vec<&Value> = requests.iter().filter(|r| is_model_call(r)).collect();
    assert!(calls.len() >= 2, "two model turns expected: {requests:#?}");
    let real = real_key(agent);
    for call in &calls {
        let credentials = match agent {
            Agent::Claude => header_values(call, "x-api-key"),
            _ => header_values(call, "authorization"),
        };
        let expected = match agent {
            Agent::Claude => real.to_string(),
            _ => format!("Bearer {real}"),
        };
        assert_eq!(credentials, [expected], "{}", call["path"]);
    }
    let surrogate = report
        .lines()
        .find_map(|line| line.strip_prefix("key="))
        .expect("key line");
    // The conversation carries the probe's report (surrogate included) as text; no
    // header may carry a surrogate.
    for request in &requests {
        let headers = request["headers"].to_string();
        assert!(
            !headers.contains(surrogate),
            "a surrogate reached the server: {request}"
        );
    }
    assert!(
        calls.iter().any(|call| {
            let body = call["body"].to_string();
            body.contains("AIRLOCK-PROBE") && body.contains("hooks=refused")
        }),
        "the tool result never reached the model"
    );
}

/// The agent's own state was written to the home (or, for aider, the project).
fn check_state(agent: Agent, place: &Place) {
    let (root, name_part) = match agent {
        Agent::Claude => (place.home().join(".claude/projects"), ".jsonl"),
        Agent::Codex => (place.home().join(".codex/sessions"), "rollout-"),
        Agent::Aider => (place.project(), ".aider.chat.history.md"),
    };
    let files = files_below(&root, 6);
    let found = files.iter().any(|path| {
        path.file_name()
            .is_some_and(|n| n.to_string_lossy().contains(name_part))
            && std::fs::read_to_string(path).is_ok_and(|text| text.contains(FINAL_TEXT))
    });
    assert!(
        found,
        "no {name_part} file holding the session under {}: {files:?}",
        root.display()
    );
}

/// The files below `root`, at most `depth` directories down.
fn files_below(root: &std::path::Path, depth: usize) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && depth > 0 {
            files.extend(files_below(&path, depth - 1));
        } else if path.is_file() {
            files.push(path);
        }
    }
    files
}

/// The audit log names the key on a model call and the refusal of the unlisted host.
fn check_audit(agent: Agent, place: &Place, context: &str) {
    let lines = read_lines(&place.audit_log());
    // Codex's model calls go over a WebSocket (`kind: ws`, docs/contract.md §5).
    let http: Vec<&Value> = lines
        .iter()
        .filter(|l| l["kind"] == "http" || l["kind"] == "ws")
        .collect();
    let key = agent.key().0;
    assert!(
        http.iter().any(|l| l["decision"] == "allow"
            && l["host"] == agent.api_host()
            && l["secrets"] == serde_json::json!([key])),
        "no audited model call with {key}: {http:#?}\n{context}"
    );
    assert!(
        http.iter().any(|l| l["decision"] == "deny"
            && l["host"] == "unlisted.test"
            && l["reason"] == "host_not_allowed"),
        "the unlisted host's refusal is not audited: {http:#?}"
    );
}

#[test]
fn claude_code_with_a_policy_file_runs_its_tool_in_the_jail() {
    agent_with_explicit_policy(
        Agent::Claude,
        "127.33.0.1",
        "claude_code_with_a_policy_file_runs_its_tool_in_the_jail",
    );
}

#[test]
fn codex_with_a_policy_file_runs_its_tool_in_the_jail() {
    agent_with_explicit_policy(
        Agent::Codex,
        "127.33.0.2",
        "codex_with_a_policy_file_runs_its_tool_in_the_jail",
    );
}

#[test]
fn aider_with_a_policy_file_runs_its_tool_in_the_jail() {
    agent_with_explicit_policy(
        Agent::Aider,
        "127.33.0.3",
        "aider_with_a_policy_file_runs_its_tool_in_the_jail",
    );
}

/// The hosts `airlock profile show NAME` allows (each gets a `--resolve` to the model
/// server, so that nothing the profile allows leaves loopback).
fn profile_hosts(agent: Agent) -> Vec<String> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["profile", "show", agent.name()])
        .output()
        .expect("run airlock profile show");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "profile show: {output:?}");
    let hosts: Vec<String> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- host:"))
        .map(|host| host.trim().trim_matches('"').to_string())
        .collect();
    assert!(
        hosts.iter().any(|h| h == agent.api_host()),
        "the {} profile does not allow {}: {text}",
        agent.name(),
        agent.api_host()
    );
    assert!(
        !text.contains("host_regex") && hosts.iter().all(|h| !h.contains('*')),
        "a pattern cannot be pinned with --resolve: {text}"
    );
    hosts
}

/// Runs `agent` with only its profile (picked by the command's name) and a key source,
/// every host of the profile pinned to the model server on `address:443`.
/// Returns the place, for further checks (`None` when the test could not run).
fn agent_with_profile(agent: Agent, address: &str, test: &str) -> Option<Place> {
    let (pki, place, server) = setup(agent, address, test)?;
    let (key, preset) = agent.key();
    let hosts = profile_hosts(agent);
    let mut args = vec![
        "--secret".to_string(),
        format!("{key}@preset:{preset}"),
        "--upstream-ca".to_string(),
        pki.upstream_ca_cert.to_string_lossy().into_owned(),
    ];
    for host in &hosts {
        args.extend(["--resolve".to_string(), format!("{host}:{address}")]);
    }
    let output = place.run(agent, &args, real_key(agent));
    assert!(
        output
            .stderr
            .contains(&format!("airlock: profile {}", agent.name())),
        "stderr names the profile: {}",
        output.stderr
    );
    check_run(agent, &place, &server, &output);
    // Nothing allowed went anywhere but the pinned hosts.
    for line in read_lines(&place.audit_log()) {
        if (line["kind"] == "http" || line["kind"] == "ws") && line["decision"] == "allow" {
            let host = line["host"].as_str().unwrap_or_default();
            assert!(hosts.iter().any(|h| h == host), "unpinned host: {line}");
        }
    }
    Some(place)
}

#[test]
fn claude_code_with_only_its_profile_and_a_key_runs_its_tool_in_the_jail() {
    let Some(place) = agent_with_profile(
        Agent::Claude,
        "127.33.1.1",
        "claude_code_with_only_its_profile_and_a_key_runs_its_tool_in_the_jail",
    ) else {
        return;
    };
    // Claude Code's own state file outside ~/.claude, kept by the profile.
    let state = std::fs::read_to_string(place.home().join(".claude.json")).unwrap_or_default();
    assert!(
        state.contains("firstStartTime"),
        "~/.claude.json was not written: {state:?}"
    );
}

#[test]
fn codex_with_only_its_profile_and_a_key_runs_its_tool_in_the_jail() {
    agent_with_profile(
        Agent::Codex,
        "127.33.1.2",
        "codex_with_only_its_profile_and_a_key_runs_its_tool_in_the_jail",
    );
}

#[test]
fn aider_with_only_its_profile_and_a_key_runs_its_tool_in_the_jail() {
    agent_with_profile(
        Agent::Aider,
        "127.33.1.3",
        "aider_with_only_its_profile_and_a_key_runs_its_tool_in_the_jail",
    );
}
