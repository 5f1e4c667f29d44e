//! Shared helpers of the `import_*` tests: fixtures, a request probe and the round trip.
//!
//! The probe decides a request against an imported [`Policy`] by the model's documented
//! semantics (docs/policy.md "Matching": a request passes if it matches no deny rule and
//! some allow rule; host patterns, methods, ports, globs, regexes fully matched on the
//! canonical path plus `?query`). Requests are canonicalised by the real canonicaliser. The
//! thing under test is the importer: the probe only reads what it produced.

use std::path::PathBuf;

use airlock_import::{SeedFormat, import};
use airlock_policy::canonical::{CanonicalRequest, Host, canonical_host};
use airlock_policy::emit::to_yaml;
use airlock_policy::load::{LoadError, load_str};
use airlock_policy::matcher::CompiledPolicy;
use airlock_policy::model::{HostPattern, Policy, Rule, Target};

/// The text of `tests/fixtures/import/FORMAT/NAME`.
pub fn fixture(format: &str, name: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "import",
        format,
        name,
    ]
    .iter()
    .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Import `text` or panic with every located error.
pub fn imported(format: SeedFormat, text: &str) -> Policy {
    import(format, "test-input", text).unwrap_or_else(|e| panic!("import failed:\n{e}"))
}

/// Import `text`, expecting failure; the errors.
pub fn import_errors(format: SeedFormat, text: &str) -> LoadError {
    match import(format, "test-input", text) {
        Ok(policy) => panic!("import should have failed, got {policy:#?}"),
        Err(error) => error,
    }
}

/// Whether `policy` lets `method url` through (url: `https://host[:port]/path?query`),
/// decided by the real compiled matcher; the reference reading of the model below must
/// agree with it.
pub fn allows(policy: &Policy, method: &str, url: &str) -> bool {
    let request = request(method, url);
    let compiled = CompiledPolicy::compile(policy)
        .unwrap_or_else(|e| panic!("imported policy does not compile: {e}"));
    let decision = compiled.decide(&request);
    let reference = reference_allows(policy, &request);
    assert_eq!(
        decision.is_allow(),
        reference,
        "matcher ({decision:?}) and the model's reading disagree on {method} {url}:\n{policy:#?}"
    );
    decision.is_allow()
}

/// The model's documented semantics: no deny rule matches (a deny without `ports` covers
/// every port) and some allow rule does.
pub fn reference_allows(policy: &Policy, request: &CanonicalRequest) -> bool {
    let denied = policy
        .network
        .deny
        .iter()
        .any(|rule| rule_matches(rule, request, rule.ports.is_none()));
    let allowed = policy
        .network
        .allow
        .iter()
        .any(|rule| rule_matches(rule, request, false));
    !denied && allowed
}

/// Assert `allows` for every `(method, url)` and its negation for every one in `refused`.
pub fn check(policy: &Policy, allowed: &[(&str, &str)], refused: &[(&str, &str)]) {
    for (method, url) in allowed {
        assert!(
            allows(policy, method, url),
            "{method} {url} should pass:\n{policy:#?}"
        );
    }
    for (method, url) in refused {
        assert!(
            !allows(policy, method, url),
            "{method} {url} should be refused:\n{policy:#?}"
        );
    }
}

/// A canonical request from a URL.
pub fn request(method: &str, url: &str) -> CanonicalRequest {
    let (scheme, rest) = url.split_once("://").expect("url has a scheme");
    let default_port = if scheme == "http" { 80 } else { 443 };
    let (authority, path_and_query) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, "/"),
    };
    let (host_text, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            match port.parse::<u16>() {
                Ok(port) => (host, port),
                Err(_) => (authority, default_port),
            }
        }
        _ => (authority, default_port),
    };
    let host = canonical_host(host_text).expect("valid host");
    CanonicalRequest::new(method, host, port, path_and_query)
}

/// Whether one rule matches a request (destination, port, method, path).
pub fn rule_matches(rule: &Rule, request: &CanonicalRequest, every_port: bool) -> bool {
    let destination = match (&rule.target, &request.host) {
        (Target::Host(pattern), host) => host_matches(pattern, host),
        (Target::Cidr(net), Host::Ip(addr)) => net.contains(addr),
        (Target::Cidr(_), Host::Name(_)) => false,
        (Target::HostRegex(regex), Host::Name(name)) => {
            regex::RegexBuilder::new(&format!("^(?:{regex})$"))
                .case_insensitive(true)
                .build()
                .expect("host_regex compiles")
                .is_match(name)
        }
        (Target::HostRegex(_), Host::Ip(_)) => false,
    };
    let port = every_port || rule.effective_ports().contains(&request.port);
    let method = rule
        .methods
        .as_ref()
        .is_none_or(|m| m.contains(&request.method));
    let Ok(path) = &request.path else {
        return false;
    };
    let target = match &request.query {
        Some(query) => format!("{path}?{query}"),
        None => path.clone(),
    };
    let globs = rule.paths.is_empty()
        || rule.paths.iter().any(|glob| {
            globset::GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .expect("glob compiles")
                .compile_matcher()
                .is_match(path)
        });
    let regexes = rule.path_regex.is_empty()
        || rule.path_regex.iter().any(|regex| {
            regex::Regex::new(&format!("^(?:{regex})$"))
                .expect("regex compiles")
                .is_match(&target)
        });
    destination && port && method && globs && regexes
}

/// Whether a host pattern matches a host.
pub fn host_matches(pattern: &HostPattern, host: &Host) -> bool {
    match (pattern, host) {
        (HostPattern::Exact(name), Host::Name(host)) => name == host,
        (HostPattern::Wildcard(suffix), Host::Name(host)) => host
            .strip_suffix(suffix.as_str())
            .is_some_and(|front| front.len() > 1 && front.ends_with('.')),
        (HostPattern::Any, Host::Name(_)) => true,
        (HostPattern::Ip(a), Host::Ip(b)) => a == b,
        _ => false,
    }
}

/// `policy` written as native YAML and loaded back must be the same policy.
pub fn assert_round_trip(policy: &Policy) {
    let yaml = to_yaml(policy);
    assert!(yaml.starts_with("version: 1\n"), "{yaml}");
    let loaded = load_str("emitted.yaml", &yaml)
        .unwrap_or_else(|e| panic!("emitted YAML does not load:\n{e}\n---\n{yaml}"));
    assert_eq!(
        &loaded, policy,
        "round trip changed the policy; YAML:\n{yaml}"
    );
}

/// Assert that some error mentions every fragment and sits at `line`.
pub fn assert_error(error: &LoadError, line: u32, fragments: &[&str]) {
    let found = error.errors.iter().any(|located| {
        located.line == line && fragments.iter().all(|f| located.message.contains(f))
    });
    assert!(
        found,
        "no error at line {line} with {fragments:?} in:\n{error}"
    );
}
