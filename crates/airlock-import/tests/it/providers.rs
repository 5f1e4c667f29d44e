//! The trustyclaw importer expands `managed_ai_provider_network_access` into the same
//! provider bundles as the native `providers:` key (`airlock_policy::providers`).

use airlock_import::trustyclaw;
use airlock_policy::model::{HostPattern, Target};
use airlock_policy::providers::Provider;

#[test]
fn trustyclaw_import_uses_the_same_bundles() {
    let policy = trustyclaw::import(
        "t.json",
        r#"{"managed_ai_provider_network_access": {"openai": true, "claude": true}, "allowed_network_access": {}}"#,
    )
    .unwrap();
    let hosts: Vec<_> = policy
        .network
        .allow
        .iter()
        .map(|rule| match &rule.target {
            Target::Host(HostPattern::Exact(host)) => host.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    let bundled: Vec<_> = [Provider::OpenAi, Provider::Anthropic]
        .iter()
        .flat_map(|p| p.bundle().iter().map(|b| b.host.to_owned()))
        .collect();
    assert_eq!(hosts, bundled);
}
