//! Secret presets (`secrets: NAME: {preset: anthropic}`): each expands to its hosts and
//! headers and reads `$NAME` unless a source is given; `hosts`/`headers` replace the
//! preset's; an unknown preset is a located error with a suggestion; the expansion
//! round-trips through the native YAML; the shipped example uses presets and loads.

use std::path::PathBuf;

use airlock_policy::canonical::Host;
use airlock_policy::emit::to_yaml;
use airlock_policy::load::{LoadError, load_str};
use airlock_policy::matcher::CompiledPolicy;
use airlock_policy::model::{HostPattern, SecretSource};
use airlock_policy::presets::{PRESETS, preset};
use airlock_policy::rule::parse_host_pattern;

fn load(text: &str) -> airlock_policy::Policy {
    load_str("p.yaml", text).unwrap_or_else(|e| panic!("{e}"))
}

fn errors(text: &str) -> LoadError {
    load_str("p.yaml", text).expect_err("should not load")
}

#[test]
fn a_preset_alone_is_hosts_headers_and_the_variable_of_the_same_name() {
    let policy = load("version: 1\nsecrets:\n  ANTHROPIC_API_KEY: {preset: anthropic}\n");
    let secret = &policy.secrets[0];
    assert_eq!(secret.name, "ANTHROPIC_API_KEY");
    assert_eq!(secret.source, SecretSource::Env("ANTHROPIC_API_KEY".into()));
    assert_eq!(
        secret.hosts,
        vec![HostPattern::Exact("api.anthropic.com".into())]
    );
    assert_eq!(
        secret.headers,
        Some(vec!["x-api-key".to_owned(), "authorization".to_owned()])
    );
    assert!(secret.inject.is_none() && !secret.body && !secret.foreign_allowed);
}

#[test]
fn every_preset_expands_to_its_table_entry() {
    for entry in &PRESETS {
        let text = format!(
            "version: 1\nsecrets:\n  TOKEN:\n    preset: {}\n    file: /run/secrets/token\n",
            entry.name
        );
        let policy = load(&text);
        let secret = &policy.secrets[0];
        assert_eq!(
            secret.source,
            SecretSource::File(PathBuf::from("/run/secrets/token"))
        );
        let hosts: Vec<HostPattern> = entry
            .hosts
            .iter()
            .map(|h| parse_host_pattern(h).unwrap())
            .collect();
        assert_eq!(secret.hosts, hosts, "{}", entry.name);
        let headers: Vec<String> = entry.headers.iter().map(|h| (*h).to_owned()).collect();
        assert_eq!(secret.headers.as_ref(), Some(&headers), "{}", entry.name);
        // The expansion is written out in full and reads back the same.
        let yaml = to_yaml(&policy);
        assert!(!yaml.contains("preset"), "{yaml}");
        assert_eq!(load_str("emitted.yaml", &yaml).unwrap(), policy, "{yaml}");
    }
}

#[test]
fn the_sdk_hosts_and_forms_are_the_documented_ones() {
    let anthropic = preset("anthropic").unwrap();
    assert_eq!(anthropic.hosts, ["api.anthropic.com"]);
    assert_eq!(anthropic.headers, ["x-api-key", "authorization"]);
    assert_eq!(preset("openai").unwrap().headers, ["authorization"]);
    assert!(preset("github").unwrap().hosts.contains(&"github.com"));
    assert_eq!(
        preset("gitlab").unwrap().headers,
        ["private-token", "authorization", "job-token"]
    );
    assert_eq!(preset("npm").unwrap().hosts, ["registry.npmjs.org"]);
    assert_eq!(preset("pypi").unwrap().hosts, ["upload.pypi.org"]);
    assert!(
        preset("huggingface")
            .unwrap()
            .hosts
            .contains(&"*.huggingface.co")
    );
}

#[test]
fn hosts_and_headers_next_to_a_preset_replace_its_own() {
    let policy = load(
        "version: 1\nsecrets:\n  GITLAB_TOKEN:\n    preset: gitlab\n    env: GL_TOKEN\n    hosts: [gitlab.example.org]\n    surrogate: glpat-00000000000000000000\n    foreign: allow\n",
    );
    let secret = &policy.secrets[0];
    assert_eq!(secret.source, SecretSource::Env("GL_TOKEN".into()));
    assert_eq!(
        secret.hosts,
        vec![HostPattern::Exact("gitlab.example.org".into())]
    );
    assert_eq!(
        secret.headers,
        Some(vec![
            "private-token".to_owned(),
            "authorization".to_owned(),
            "job-token".to_owned()
        ])
    );
    assert_eq!(
        secret.surrogate.as_deref(),
        Some("glpat-00000000000000000000")
    );
    assert!(secret.foreign_allowed);
    let policy = load(
        "version: 1\nsecrets:\n  ANTHROPIC_API_KEY:\n    preset: anthropic\n    headers: [x-api-key]\n",
    );
    assert_eq!(
        policy.secrets[0].headers,
        Some(vec!["x-api-key".to_owned()])
    );
    assert_eq!(
        policy.secrets[0].hosts,
        vec![HostPattern::Exact("api.anthropic.com".into())]
    );
}

#[test]
fn an_unknown_preset_is_a_located_error_naming_the_presets() {
    let error = errors("version: 1\nsecrets:\n  KEY:\n    preset: Anthropic\n");
    assert_eq!(error.errors.len(), 1, "{error}");
    let located = &error.errors[0];
    assert_eq!((located.line, located.column), (4, 13), "{error}");
    for fragment in [
        "secrets.KEY.preset",
        "`Anthropic` is not a preset",
        "did you mean `anthropic`?",
        "anthropic, openai, github, gitlab, huggingface, npm, pypi, gemini",
    ] {
        assert!(located.message.contains(fragment), "{fragment}: {error}");
    }
    assert!(error.to_string().starts_with("p.yaml:4:13: "), "{error}");
    let error = errors("version: 1\nsecrets:\n  KEY: {preset: [openai]}\n");
    assert!(
        error.errors[0].message.contains("secrets.KEY.preset"),
        "{error}"
    );
    // Two sources are still refused with a preset.
    let error = errors("version: 1\nsecrets:\n  KEY: {preset: npm, env: A, file: /b}\n");
    assert!(error.to_string().contains("one source only"), "{error}");
}

#[test]
fn the_secret_applies_on_the_preset_hosts_only() {
    let policy = load("version: 1\nsecrets:\n  HF_TOKEN: {preset: huggingface}\n");
    let compiled = CompiledPolicy::compile(&policy).unwrap();
    let name = |n: &str| Host::Name(n.to_owned());
    for host in ["huggingface.co", "router.huggingface.co"] {
        assert_eq!(compiled.secrets_for_host(&name(host)).len(), 1, "{host}");
    }
    for host in ["hf.co", "huggingface.co.evil.test", "evilhuggingface.co"] {
        assert!(compiled.secrets_for_host(&name(host)).is_empty(), "{host}");
    }
}

#[test]
fn the_shipped_example_uses_presets_and_loads() {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "examples",
        "airlock.yaml",
    ]
    .iter()
    .collect();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("preset: anthropic"), "{text}");
    let policy = load_str("examples/airlock.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    let anthropic = policy
        .secrets
        .iter()
        .find(|s| s.name == "ANTHROPIC_API_KEY")
        .expect("ANTHROPIC_API_KEY");
    assert_eq!(
        anthropic.headers,
        Some(vec!["x-api-key".to_owned(), "authorization".to_owned()])
    );
}

#[test]
fn a_preset_secret_pins_its_provider_bundle() {
    for provider in ["anthropic", "openai"] {
        let text = format!(
            "version: 1\nsecrets:\n  KEY: {{preset: {provider}}}\nproviders:\n  {provider}: true\n"
        );
        let policy = load(&text);
        assert!(
            policy
                .network
                .allow
                .iter()
                .any(|rule| rule.id.starts_with(&format!("providers.{provider}"))),
            "{policy:?}"
        );
    }
    // Narrower than the preset: the agent could bring its own key in the other header.
    let error = errors(
        "version: 1\nsecrets:\n  KEY: {preset: anthropic, headers: [x-api-key]}\nproviders:\n  anthropic: true\n",
    );
    assert!(
        error
            .to_string()
            .contains("add a secret with `preset: anthropic`"),
        "{error}"
    );
    // The preset of another service does not pin this one.
    let error = errors(
        "version: 1\nsecrets:\n  KEY: {preset: openai, hosts: [api.anthropic.com]}\nproviders:\n  anthropic: true\n",
    );
    assert!(error.to_string().contains("providers.anthropic"), "{error}");
}
