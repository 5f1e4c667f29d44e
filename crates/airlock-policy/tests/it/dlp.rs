//! The `dlp` section: its modes, its `allow` entries, located errors, how sources combine
//! and which kinds a host may receive once compiled.

use crate::section_support::{error, load};
use airlock_policy::model::{DlpMode, Policy};
use airlock_policy::{CompiledPolicy, Host};

fn host(name: &str) -> Host {
    Host::Name(name.to_owned())
}

#[test]
fn the_default_refuses_and_each_mode_loads() {
    assert_eq!(load("version: 1\n").dlp.mode(), DlpMode::Refuse);
    for (text, mode) in [
        ("refuse", DlpMode::Refuse),
        ("log", DlpMode::Log),
        ("off", DlpMode::Off),
    ] {
        let policy = load(&format!("version: 1\ndlp: {{credentials: {text}}}\n"));
        assert_eq!(policy.dlp.mode(), mode);
    }
}

#[test]
fn allow_entries_name_hosts_and_kinds() {
    let policy = load(
        "version: 1\ndlp:\n  allow:\n    - {host: api.github.com, kinds: [github]}\n    - host: '*.internal.example'\n",
    );
    let compiled = CompiledPolicy::compile(&policy).unwrap();
    assert_eq!(
        compiled.dlp_kinds_for_host(&host("api.github.com")),
        Some(vec!["github"])
    );
    assert_eq!(
        compiled.dlp_kinds_for_host(&host("a.internal.example")),
        None
    );
    assert_eq!(
        compiled.dlp_kinds_for_host(&host("example.org")),
        Some(vec![])
    );
}

#[test]
fn mistakes_are_located_and_name_the_fix() {
    let (line, column, message) = error("version: 1\ndlp:\n  credentials: block\n");
    assert_eq!((line, column), (3, 16));
    assert!(message.contains("refuse, log or off"), "{message}");
    let (line, _, message) =
        error("version: 1\ndlp:\n  allow:\n    - {host: a.example, kinds: [gihub]}\n");
    assert_eq!(line, 4);
    assert!(
        message.contains("`gihub`") && message.contains("github, aws"),
        "{message}"
    );
    let (_, _, message) = error("version: 1\ndlp:\n  allow:\n    - {kinds: [aws]}\n");
    assert!(message.contains("needs a `host`"), "{message}");
    let (_, _, message) = error("version: 1\ndlp:\n  mode: log\n");
    assert!(message.contains("credentials"), "{message}");
}

#[test]
fn combined_sources_keep_the_stricter_mode() {
    let strict = load("version: 1\ndlp: {credentials: refuse}\n");
    let loose = load("version: 1\ndlp: {credentials: off, allow: [{host: a.example}]}\n");
    let unset = load("version: 1\n");
    let combined = Policy::combine(vec![
        (Some("a.yaml".into()), strict),
        (Some("b.yaml".into()), loose.clone()),
    ])
    .unwrap();
    assert_eq!(combined.dlp.mode(), DlpMode::Refuse);
    assert_eq!(combined.dlp.allow.len(), 1);
    let combined = Policy::combine(vec![
        (Some("a.yaml".into()), unset),
        (Some("b.yaml".into()), loose),
    ])
    .unwrap();
    assert_eq!(combined.dlp.mode(), DlpMode::Off);
}
