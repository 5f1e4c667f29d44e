//! trustyclaw's runtime network controls, the body of `PUT /v1/network/policy`:
//!
//! ```json
//! {
//!   "managed_ai_provider_network_access": {"openai": true, "claude": false},
//!   "allowed_network_access": {
//!     "api.github.com": {"allow_http_methods": ["GET", "HEAD"],
//!                        "path_guards": ["^/repos/[^/]+/[^/]+(?:/.*)?$"]},
//!     "*.githubusercontent.com": {"allow_http_methods": ["GET"]}
//!   }
//! }
//! ```
//!
//! Validation is trustyclaw's own: only those two keys; domain keys are exact DNS names
//! (two labels or more of letters, digits and `-`) or `*.` followed by one; they are
//! lower-cased and must stay distinct; two wildcards that can match the same host are
//! refused; names under `openai.com`/`chatgpt.com` (managed by `openai`) and
//! `anthropic.com`/`claude.ai`/`claude.com` (managed by `claude`) are refused; a rule has
//! exactly `allow_http_methods` (required; GET, HEAD, POST, PUT, PATCH, DELETE; an empty
//! list keeps the domain closed) and optionally `path_guards` (Python regexes fully
//! matched against the normalised path plus `?query`).
//!
//! Translation:
//!
//! * each rule with methods becomes an allow rule with those methods and its guards as
//!   `path_regex` (airlock also fully matches the canonical path plus `?query`); a guard
//!   that the regex crate cannot compile (look-around, backreferences, `\Z`...) fails the
//!   import;
//! * `*.suffix` is airlock's `*.suffix` (a non-empty prefix, never the apex);
//! * trustyclaw lets an exact rule *override* a wildcard for that host. Where the
//!   wildcard allows methods the exact rule does not, a deny rule for those methods on
//!   that host is added (a closed exact rule denies the host outright); where both allow a
//!   method but the wildcard allows paths the exact rule does not, airlock cannot subtract
//!   them and the import fails naming both rules;
//! * `managed_ai_provider_network_access` expands into the provider bundles trustyclaw
//!   documents ([`airlock_policy::providers`], shared with the native `providers:` key): `openai`
//!   adds `api.openai.com` (POST), `auth.openai.com` and `chatgpt.com` (GET, POST);
//!   `claude` adds `api.anthropic.com` (GET, POST) and `platform.claude.com` (GET, POST on
//!   `^/v1/oauth(?:/.*)?$`). trustyclaw's account and live-web-search guards on those hosts
//!   depend on its own runtime state and are not imported; the native `providers:` key
//!   adds web-tool body guards and requires a pinning secret.
//!
//! Ports are airlock's default 80 and 443, as trustyclaw's proxy opens them.

use serde::Deserialize;
use serde_saphyr::{Location, Spanned};

use super::{Ordered, Problems, at, host_rule, hosts_overlap, parse_document, push_unique};
use airlock_policy::load::LoadError;
use airlock_policy::model::{HostPattern, Policy, Rule};
use airlock_policy::providers::Provider;
use airlock_policy::rule::{check_path_regex, parse_host_pattern};

/// The methods trustyclaw accepts in `allow_http_methods`.
const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// Apex domains whose names (and subdomains) only the `openai` bundle may list.
const OPENAI_APEXES: [&str; 2] = ["openai.com", "chatgpt.com"];
/// Apex domains whose names (and subdomains) only the `claude` bundle may list.
const CLAUDE_APEXES: [&str; 3] = ["anthropic.com", "claude.ai", "claude.com"];

/// The request body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Controls {
    managed_ai_provider_network_access: Option<Spanned<Managed>>,
    allowed_network_access: Option<Ordered<Spanned<String>, Spanned<DomainRule>>>,
}

/// `managed_ai_provider_network_access`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Managed {
    openai: Option<bool>,
    claude: Option<bool>,
}

/// One value of `allowed_network_access`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainRule {
    allow_http_methods: Option<Vec<Spanned<String>>>,
    path_guards: Option<Vec<Spanned<String>>>,
}

/// A domain rule after validation, user-written or from a provider bundle.
struct Entry {
    /// How errors name it: `allowed_network_access["x"]` or the bundle.
    name: String,
    /// Where it is written.
    location: Location,
    /// The key in lower case (the bundle's host for bundle entries).
    key: String,
    host: HostPattern,
    methods: Vec<String>,
    guards: Vec<String>,
}

/// Import a trustyclaw network policy.
pub fn import(file: &str, text: &str) -> Result<Policy, LoadError> {
    let Some(document) = parse_document::<Spanned<Controls>>(file, text)? else {
        let mut problems = Problems::new(file);
        problems.at(
            &Location::UNKNOWN,
            "the policy is empty: trustyclaw requires an object with `allowed_network_access`",
        );
        return Err(problems.into_error());
    };
    let mut problems = Problems::new(file);
    let controls = &document.value;
    let mut entries = Vec::new();
    match &controls.allowed_network_access {
        Some(rules) => read_rules(&rules.0, &mut entries, &mut problems),
        None => problems.at(
            at(&document),
            "allowed_network_access is required: an object of domain rules (`{}` for none)",
        ),
    }
    if let Some(managed) = &controls.managed_ai_provider_network_access {
        if managed.value.openai == Some(true) {
            add_bundle("openai", Provider::OpenAi, at(managed), &mut entries);
        }
        if managed.value.claude == Some(true) {
            add_bundle("claude", Provider::Anthropic, at(managed), &mut entries);
        }
    }
    let mut policy = Policy::default();
    for entry in &entries {
        if !entry.methods.is_empty() {
            push_unique(
                &mut policy.network.allow,
                host_rule(
                    entry.host.clone(),
                    Some(entry.methods.clone()),
                    entry.guards.clone(),
                ),
            );
        }
    }
    exact_overrides(&entries, &mut policy.network.deny, &mut problems);
    super::assign_ids(&mut policy);
    problems.finish(policy)
}

/// Validate the user's domain rules (trustyclaw's parser) into `entries`.
fn read_rules(
    rules: &[(Spanned<String>, Spanned<DomainRule>)],
    entries: &mut Vec<Entry>,
    problems: &mut Problems,
) {
    let mut wildcards: Vec<(String, String, Location)> = Vec::new();
    for (key, rule) in rules {
        let name = format!("allowed_network_access[{:?}]", key.value);
        let domain = key.value.to_ascii_lowercase();
        if !domain_shape_ok(&key.value) {
            problems.at(
                at(key),
                format!(
                    "{name}: a key is an exact domain such as `api.example.com` or a wildcard such as `*.example.com`"
                ),
            );
            continue;
        }
        if let Some(provider) = reserved_provider(&domain) {
            problems.at(
                at(key),
                format!(
                    "{name} is managed by managed_ai_provider_network_access.{provider}: remove this rule and set that flag to true"
                ),
            );
            continue;
        }
        if entries.iter().any(|e| e.key == domain) {
            problems.at(
                at(key),
                format!("{name} repeats a domain (keys are compared in lower case)"),
            );
            continue;
        }
        if let Some(suffix) = domain.strip_prefix('*') {
            for (other, other_name, _) in &wildcards {
                let other_suffix = other.strip_prefix('*').unwrap_or(other);
                if suffix.ends_with(other_suffix) || other_suffix.ends_with(suffix) {
                    problems.at(
                        at(key),
                        format!(
                            "{name} and {other_name} are wildcards that can match the same host; trustyclaw refuses overlapping wildcards: keep one"
                        ),
                    );
                }
            }
            wildcards.push((domain.clone(), name.clone(), *at(key)));
        }
        let host = match parse_host_pattern(&domain) {
            Ok(host) => host,
            Err(error) => {
                problems.at(at(key), format!("{name}: {error}"));
                continue;
            }
        };
        let methods = read_methods(&name, rule, problems);
        let guards = read_guards(&name, &rule.value, problems);
        entries.push(Entry {
            name,
            location: *at(key),
            key: domain,
            host,
            methods,
            guards,
        });
    }
}

/// trustyclaw's key syntax: `label(.label)+` or `*.label(.label)+`, labels of ASCII
/// letters, digits and `-`.
fn domain_shape_ok(key: &str) -> bool {
    let body = key.strip_prefix("*.").unwrap_or(key);
    let labels: Vec<&str> = body.split('.').collect();
    labels.len() >= 2
        && labels.iter().all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The provider flag that owns `domain`, if any.
fn reserved_provider(domain: &str) -> Option<&'static str> {
    let name = domain.strip_prefix("*.").unwrap_or(domain);
    let under = |apex: &&str| name == *apex || name.ends_with(&format!(".{apex}"));
    if OPENAI_APEXES.iter().any(under) {
        Some("openai")
    } else if CLAUDE_APEXES.iter().any(under) {
        Some("claude")
    } else {
        None
    }
}

/// `allow_http_methods`: required, each one of [`METHODS`] in any case.
fn read_methods(name: &str, rule: &Spanned<DomainRule>, problems: &mut Problems) -> Vec<String> {
    let Some(listed) = &rule.value.allow_http_methods else {
        problems.at(
            at(rule),
            format!(
                "{name}: allow_http_methods is required (a list; `[]` keeps the domain closed)"
            ),
        );
        return Vec::new();
    };
    let mut methods = Vec::new();
    for method in listed {
        let upper = method.value.trim().to_ascii_uppercase();
        if METHODS.contains(&upper.as_str()) {
            if !methods.contains(&upper) {
                methods.push(upper);
            }
        } else {
            problems.at(
                at(method),
                format!(
                    "{name}: allow_http_methods has {:?}; trustyclaw accepts GET, HEAD, POST, PUT, PATCH and DELETE",
                    method.value
                ),
            );
        }
    }
    methods
}

/// `path_guards`: optional, each a regex the regex crate compiles.
fn read_guards(name: &str, rule: &DomainRule, problems: &mut Problems) -> Vec<String> {
    let mut guards = Vec::new();
    for guard in rule.path_guards.iter().flatten() {
        let pattern = guard.value.trim();
        if pattern.is_empty() {
            problems.at(at(guard), format!("{name}: a path guard is empty"));
            continue;
        }
        match check_path_regex(pattern) {
            Ok(()) => {
                if !guards.iter().any(|g: &String| g == pattern) {
                    guards.push(pattern.to_owned());
                }
            }
            Err(error) => problems.at(
                at(guard),
                format!(
                    "{name}: path guard {pattern:?} cannot be used by airlock ({error}); Python-only features such as look-around, backreferences or \\Z have no equivalent: rewrite it without them"
                ),
            ),
        }
    }
    guards
}

/// Append a provider bundle's rules (shared with the native `providers:` key) as exact
/// entries located at the flag.
fn add_bundle(flag: &str, provider: Provider, location: &Location, entries: &mut Vec<Entry>) {
    for entry in provider.bundle() {
        let host = entry.host;
        entries.push(Entry {
            name: format!("managed_ai_provider_network_access.{flag} ({host})"),
            location: *location,
            key: host.to_owned(),
            host: HostPattern::Exact(host.to_owned()),
            methods: entry.methods.iter().map(|m| (*m).to_owned()).collect(),
            guards: entry.path_regex.iter().map(|g| (*g).to_owned()).collect(),
        });
    }
}

/// Reproduce "an exact rule overrides a wildcard for its host" with deny rules, or fail
/// where it would need subtracting paths.
fn exact_overrides(entries: &[Entry], deny: &mut Vec<Rule>, problems: &mut Problems) {
    let wildcards = entries
        .iter()
        .filter(|e| matches!(e.host, HostPattern::Wildcard(_)));
    for wildcard in wildcards {
        if wildcard.methods.is_empty() {
            continue;
        }
        let exacts = entries
            .iter()
            .filter(|e| !matches!(e.host, HostPattern::Wildcard(_)))
            .filter(|e| hosts_overlap(&e.host, &wildcard.host));
        for exact in exacts {
            if exact.methods.is_empty() {
                push_unique(deny, host_rule(exact.host.clone(), None, Vec::new()));
                continue;
            }
            let extra: Vec<String> = wildcard
                .methods
                .iter()
                .filter(|m| !exact.methods.contains(m))
                .cloned()
                .collect();
            if !extra.is_empty() {
                push_unique(deny, host_rule(exact.host.clone(), Some(extra), Vec::new()));
            }
            let shared = wildcard.methods.iter().any(|m| exact.methods.contains(m));
            let paths_covered = exact.guards.is_empty()
                || (!wildcard.guards.is_empty()
                    && wildcard.guards.iter().all(|g| exact.guards.contains(g)));
            if shared && !paths_covered {
                problems.at(
                    &exact.location,
                    format!(
                        "{} overrides {} for {}, but the wildcard allows paths there that the exact rule does not, and airlock cannot subtract paths from an allow: give both rules the same path_guards (or none to the exact rule)",
                        exact.name, wildcard.name, exact.host
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_shapes() {
        assert!(domain_shape_ok("api.example.com"));
        assert!(domain_shape_ok("*.example.com"));
        assert!(domain_shape_ok("Example.COM"));
        assert!(!domain_shape_ok("localhost"));
        assert!(!domain_shape_ok("*.com"));
        assert!(!domain_shape_ok("api.*.com"));
        assert!(!domain_shape_ok("a..com"));
        assert!(!domain_shape_ok("a_b.com"));
    }

    #[test]
    fn reserved_domains() {
        assert_eq!(reserved_provider("openai.com"), Some("openai"));
        assert_eq!(reserved_provider("*.chatgpt.com"), Some("openai"));
        assert_eq!(reserved_provider("x.claude.ai"), Some("claude"));
        assert_eq!(reserved_provider("notopenai.com"), None);
    }
}
