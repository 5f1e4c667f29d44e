//! Provider bundles (`providers:`): expansion into allow rules with `providers.NAME[i]`
//! ids, the web-tool guards on the API host, the account-pin requirement, located errors,
//! and combining sources (the trustyclaw importer's use of the same bundles is tested in
//! `airlock-import`).

use airlock_policy::CompiledPolicy;
use airlock_policy::canonical::{CanonicalRequest, canonical_host};
use airlock_policy::json_deny::glob_matches;
use airlock_policy::load::{LoadError, load_str};
use airlock_policy::model::{HostPattern, Policy, Target};
use airlock_policy::providers::Provider;

const SECRETS: &str = "secrets:\n  OPENAI_API_KEY:\n    value: sk-real\n    hosts: [api.openai.com]\n  ANTHROPIC_API_KEY:\n    value: sk-ant-real\n    hosts: [api.anthropic.com]\n";

fn load(providers: &str) -> Policy {
    load_str(
        "p.yaml",
        &format!("version: 1\n{SECRETS}providers:\n{providers}"),
    )
    .unwrap_or_else(|error| panic!("{error}"))
}

/// The errors of `text` as `(line, column, message)`.
fn errors(text: &str) -> Vec<(u32, u32, String)> {
    match load_str("p.yaml", text) {
        Ok(policy) => panic!("expected errors, loaded {policy:?}"),
        Err(LoadError { errors }) => errors
            .into_iter()
            .map(|e| (e.line, e.column, e.message))
            .collect(),
    }
}

fn summary(policy: &Policy) -> Vec<(String, String, Vec<String>, usize)> {
    policy
        .network
        .allow
        .iter()
        .map(|rule| {
            let Target::Host(HostPattern::Exact(host)) = &rule.target else {
                panic!("bundle rules are exact hosts: {rule:?}")
            };
            (
                rule.id.clone(),
                host.clone(),
                rule.methods.clone().unwrap(),
                rule.json_deny.len(),
            )
        })
        .collect()
}

fn s(items: &[&str]) -> Vec<String> {
    items.iter().map(|i| (*i).to_owned()).collect()
}

#[test]
fn enabled_providers_expand_with_ids_and_guards() {
    let policy = load("  openai: true\n  anthropic: {web_tools: false}\n");
    assert_eq!(
        summary(&policy),
        [
            (
                "providers.openai[0]".into(),
                "api.openai.com".into(),
                s(&["POST"]),
                3
            ),
            (
                "providers.openai[1]".into(),
                "auth.openai.com".into(),
                s(&["GET", "POST"]),
                0
            ),
            (
                "providers.openai[2]".into(),
                "chatgpt.com".into(),
                s(&["GET", "POST"]),
                3
            ),
            (
                "providers.anthropic[0]".into(),
                "api.anthropic.com".into(),
                s(&["GET", "POST"]),
                2
            ),
            (
                "providers.anthropic[1]".into(),
                "platform.claude.com".into(),
                s(&["GET", "POST"]),
                0
            ),
        ]
    );
    assert_eq!(policy.network.allow[4].path_regex, ["^/v1/oauth(?:/.*)?$"]);
}

#[test]
fn web_tools_true_drops_the_guards_and_false_disables() {
    let policy = load("  openai: {web_tools: true}\n  anthropic: false\n");
    let ids: Vec<_> = policy.network.allow.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "providers.openai[0]",
            "providers.openai[1]",
            "providers.openai[2]"
        ]
    );
    assert!(policy.network.allow.iter().all(|r| r.json_deny.is_empty()));
    assert!(load("  openai: false\n").network.allow.is_empty());
    assert!(load("  {}\n").network.allow.is_empty());
    // `{}` enables with the default (guards on).
    assert_eq!(load("  openai: {}\n").network.allow[0].json_deny.len(), 3);
}

/// Whether a guard of `provider` refuses the string `text` at `/tools/*/type`.
fn tool_type_refused(provider: Provider, text: &str) -> bool {
    refused_at(provider, "/tools/*/type", text)
}

/// Whether a guard of `provider` on `path` refuses the string `text`.
fn refused_at(provider: Provider, path: &str, text: &str) -> bool {
    provider.web_tool_guards().iter().any(|guard| {
        guard.path.text == path
            && guard
                .values
                .as_ref()
                .is_some_and(|globs| globs.iter().any(|g| glob_matches(g, text)))
    })
}

#[test]
fn guards_refuse_web_tools_and_leave_function_tools() {
    for refused in [
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
        "mcp",
    ] {
        assert!(tool_type_refused(Provider::OpenAi, refused), "{refused}");
    }
    for model in [
        "gpt-4o-search-preview",
        "gpt-4o-mini-search-preview",
        "gpt-5-search-api",
        "x-search",
    ] {
        assert!(refused_at(Provider::OpenAi, "/model", model), "{model}");
    }
    for model in ["gpt-5", "gpt-5-codex", "o3", "research-model"] {
        assert!(!refused_at(Provider::OpenAi, "/model", model), "{model}");
    }
    assert!(
        Provider::Anthropic
            .web_tool_guards()
            .iter()
            .any(|g| g.path.text == "/mcp_servers" && g.values.is_none())
    );
    for passed in [
        "function",
        "file_search",
        "code_interpreter",
        "Web_Search",
        "custom",
    ] {
        assert!(!tool_type_refused(Provider::OpenAi, passed), "{passed}");
    }
    let options = Provider::OpenAi.web_tool_guards();
    assert!(
        options
            .iter()
            .any(|g| g.path.text == "/web_search_options" && g.values.is_none())
    );
    for refused in ["web_search_20250305", "web_fetch_20250910"] {
        assert!(tool_type_refused(Provider::Anthropic, refused), "{refused}");
    }
    for passed in [
        "custom",
        "bash_20250124",
        "text_editor_20250429",
        "web_search",
    ] {
        assert!(!tool_type_refused(Provider::Anthropic, passed), "{passed}");
    }
}

/// The ids of the guarded allow rules that apply to `req`.
fn guard_ids(compiled: &CompiledPolicy, req: &CanonicalRequest) -> Vec<String> {
    compiled
        .body_guards(req)
        .into_iter()
        .map(|rule| rule.id.clone())
        .collect()
}

fn request(method: &str, host: &str, path: &str) -> CanonicalRequest {
    CanonicalRequest::new(method, canonical_host(host).unwrap(), 443, path)
}

#[test]
fn the_matcher_allows_bundle_hosts_and_applies_the_guard() {
    let compiled = CompiledPolicy::compile(&load("  openai: true\n  anthropic: true\n")).unwrap();
    let post = request("POST", "api.openai.com", "/v1/responses");
    assert_eq!(
        compiled.decide(&post).rule.as_deref(),
        Some("providers.openai[0]")
    );
    assert_eq!(guard_ids(&compiled, &post), ["providers.openai[0]"]);
    // Bundle methods and paths hold.
    assert_eq!(
        compiled
            .decide(&request("GET", "api.openai.com", "/v1/models"))
            .rule,
        None
    );
    assert_eq!(
        compiled
            .decide(&request("GET", "platform.claude.com", "/v1/other"))
            .rule,
        None
    );
    assert_eq!(
        compiled
            .decide(&request("GET", "platform.claude.com", "/v1/oauth/token"))
            .rule
            .as_deref(),
        Some("providers.anthropic[1]")
    );
    // Neighbouring names are not in the bundle.
    assert_eq!(
        compiled
            .decide(&request("POST", "files.openai.com", "/"))
            .rule,
        None
    );
}

#[test]
fn unknown_names_and_keys_are_located_with_a_hint() {
    let head = format!("version: 1\n{SECRETS}providers:\n");
    let line = 10; // the first line under `providers:`
    let found = errors(&format!("{head}  opnai: true\n"));
    assert_eq!((found[0].0, found[0].1), (line, 3), "{found:?}");
    assert!(
        found[0].2.contains("did you mean `openai`"),
        "{}",
        found[0].2
    );
    let found = errors(&format!("{head}  claude: true\n"));
    assert!(
        found[0].2.contains("`openai`, `anthropic`"),
        "{}",
        found[0].2
    );
    let found = errors(&format!("{head}  openai: {{web_tool: true}}\n"));
    assert_eq!((found[0].0, found[0].1), (line, 12), "{found:?}");
    assert!(
        found[0].2.contains("did you mean `web_tools`"),
        "{}",
        found[0].2
    );
    let found = errors(&format!("{head}  openai: yes\n"));
    assert!(
        found[0]
            .2
            .contains("providers.openai must be true, false or"),
        "{}",
        found[0].2
    );
    let found = errors(&format!("{head}  openai: {{web_tools: 1}}\n"));
    assert!(
        found[0]
            .2
            .contains("providers.openai.web_tools must be true or false"),
        "{}",
        found[0].2
    );
    let found = errors(&format!("{head}  - openai\n"));
    assert!(
        found[0].2.contains("providers must be a mapping"),
        "{}",
        found[0].2
    );
}

#[test]
fn a_provider_needs_a_pinning_secret_in_the_same_file() {
    let found = errors("version: 1\nproviders:\n  anthropic: true\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].0, found[0].1), (3, 3));
    assert!(
        found[0]
            .2
            .contains("providers.anthropic: no secret in this file covers api.anthropic.com"),
        "{}",
        found[0].2
    );
    assert!(
        found[0].2.contains("hosts: [api.anthropic.com]"),
        "{}",
        found[0].2
    );
    // A secret for another host, or one letting foreign credentials through, is no pin.
    let other = "version: 1\nsecrets:\n  K:\n    value: x\n    hosts: [api.anthropic.com.evil.com, auth.openai.com]\nproviders:\n  openai: true\n  anthropic: true\n";
    assert_eq!(errors(other).len(), 2);
    let foreign = "version: 1\nsecrets:\n  K:\n    value: x\n    hosts: [api.openai.com]\n    foreign: allow\nproviders:\n  openai: true\n";
    assert!(
        errors(foreign)[0]
            .2
            .contains("no secret in this file covers api.openai.com")
    );
    // A wildcard secret covers the API host.
    let wildcard = "version: 1\nsecrets:\n  K:\n    value: x\n    hosts: [\"*.openai.com\"]\nproviders:\n  openai: true\n";
    assert_eq!(load_str("p.yaml", wildcard).unwrap().network.allow.len(), 3);
}

#[test]
fn combined_sources_keep_every_guard() {
    // One source opts into web tools, the other does not: both rules stay and the guarded
    // one applies (every matching guarded rule applies), so the stricter choice wins.
    let open = load_str(
        "a.yaml",
        "version: 1\nsecrets:\n  A:\n    value: x\n    hosts: [api.openai.com]\nproviders:\n  openai: {web_tools: true}\n",
    )
    .unwrap();
    let strict = load_str(
        "b.yaml",
        "version: 1\nsecrets:\n  B:\n    value: y\n    hosts: [api.openai.com]\nproviders:\n  openai: true\n",
    )
    .unwrap();
    let combined = Policy::combine(vec![
        (Some("a.yaml".into()), open),
        (Some("b.yaml".into()), strict),
    ])
    .unwrap();
    let compiled = CompiledPolicy::compile(&combined).unwrap();
    let post = request("POST", "api.openai.com", "/v1/responses");
    assert_eq!(
        compiled.decide(&post).rule.as_deref(),
        Some("a.yaml:providers.openai[0]")
    );
    assert_eq!(guard_ids(&compiled, &post), ["b.yaml:providers.openai[0]"]);
}

#[test]
fn a_guarded_api_host_cannot_be_passed_through() {
    let text = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: api.openai.com\n  tls_passthrough: [api.openai.com]\n{SECRETS}providers:\n  openai: true\n"
    );
    let found = errors(&text);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .2
            .contains("api.openai.com is in network.tls_passthrough"),
        "{}",
        found[0].2
    );
    // With web tools allowed there is no guard to lose.
    let open = text.replace("openai: true", "openai: {web_tools: true}");
    assert!(load_str("p.yaml", &open).is_ok());
}

#[test]
fn a_broader_user_rule_does_not_switch_the_guard_off() {
    let text = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: \"*.openai.com\"\n{SECRETS}providers:\n  openai: true\n"
    );
    let compiled = CompiledPolicy::compile(&load_str("p.yaml", &text).unwrap()).unwrap();
    let post = request("POST", "api.openai.com", "/v1/responses");
    assert_eq!(
        compiled.decide(&post).rule.as_deref(),
        Some("network.allow[0]")
    );
    assert_eq!(guard_ids(&compiled, &post), ["providers.openai[0]"]);
}
