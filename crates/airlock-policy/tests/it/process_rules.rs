//! `process:` on network rules (docs/policy.md, "Rules per program"): loading, the
//! decisions for a known program, another program and an unknown one (fail closed both
//! ways), tunnels, and the emitted YAML.

use airlock_policy::canonical::{CanonicalRequest, Host};
use airlock_policy::decision::Reason;
use airlock_policy::load::load_str;
use airlock_policy::programs::ProgramCheck;
use airlock_policy::{CompiledPolicy, Decision};

/// A program whose executable is `exe`; `git` and `/usr/bin/git` stand for `/usr/bin/git`,
/// every other entry for itself.
struct Program(&'static str);

impl ProgramCheck for Program {
    fn is(&self, entry: &str) -> bool {
        let resolved = match entry {
            "git" => "/usr/bin/git",
            "curl" => "/usr/bin/curl",
            other => other,
        };
        resolved == self.0
    }
}

const GIT: Program = Program("/usr/bin/git");
const CURL: Program = Program("/usr/bin/curl");

fn compiled(text: &str) -> CompiledPolicy {
    CompiledPolicy::compile(&load_str("p.yaml", text).expect("loads")).expect("compiles")
}

fn get(host: &str) -> CanonicalRequest {
    CanonicalRequest::new("GET", Host::Name(host.to_owned()), 443, "/x")
}

const ALLOW_GIT: &str = "version: 1
network:
  allow:
    - host: github.com
      process: [git]
    - host: pypi.org
";

#[test]
fn entries_are_names_or_absolute_paths() {
    let policy = load_str(
        "p.yaml",
        "version: 1\nnetwork:\n  allow:\n    - host: a.com\n      process: [git, /usr/bin/ssh]\n",
    )
    .expect("loads");
    let programs = policy.network.allow[0].process.clone();
    assert_eq!(
        programs,
        Some(vec!["git".to_owned(), "/usr/bin/ssh".to_owned()])
    );
    for bad in ["[bin/git]", "[]", "[\"\"]", "[..]", "git"] {
        let text =
            format!("version: 1\nnetwork:\n  allow:\n    - host: a.com\n      process: {bad}\n");
        let error = load_str("p.yaml", &text).expect_err(bad).to_string();
        assert!(error.contains("process"), "{bad}: {error}");
    }
}

#[test]
fn an_allow_rule_per_program_allows_that_program_only() {
    let policy = compiled(ALLOW_GIT);
    let git = policy.decide_as(&get("github.com"), Some(&GIT));
    assert_eq!(git, Decision::allow("network.allow[0]".to_owned()));
    let curl = policy.decide_as(&get("github.com"), Some(&CURL));
    assert_eq!(curl.reason, Some(Reason::HostNotAllowed));
    let unknown = policy.decide_as(&get("github.com"), None);
    assert_eq!(
        unknown.reason,
        Some(Reason::HostNotAllowed),
        "unknown fails closed"
    );
    assert_eq!(
        policy.decide(&get("github.com")).reason,
        Some(Reason::HostNotAllowed)
    );
    // Rules without `process` stay for every program, known or not.
    assert!(policy.decide_as(&get("pypi.org"), Some(&CURL)).is_allow());
    assert!(policy.decide_as(&get("pypi.org"), None).is_allow());
}

#[test]
fn a_deny_rule_per_program_denies_it_and_every_unknown_program() {
    let policy = compiled(
        "version: 1
network:
  allow:
    - host: github.com
  deny:
    - host: github.com
      process: [curl]
",
    );
    assert!(policy.decide_as(&get("github.com"), Some(&GIT)).is_allow());
    let curl = policy.decide_as(&get("github.com"), Some(&CURL));
    assert_eq!(curl.reason, Some(Reason::DeniedByRule));
    assert_eq!(curl.rule.as_deref(), Some("network.deny[0]"));
    let unknown = policy.decide_as(&get("github.com"), None);
    assert_eq!(
        unknown.reason,
        Some(Reason::DeniedByRule),
        "unknown fails closed"
    );
    // The address check leaves per-program denies to the decision that knew the program.
    let address = "140.82.112.3".parse().expect("address");
    assert!(
        policy
            .check_address(&Host::Name("github.com".into()), address)
            .is_ok()
    );
}

#[test]
fn tunnels_are_decided_per_program_too() {
    let policy = compiled(ALLOW_GIT);
    let host = Host::Name("github.com".to_owned());
    let git = policy.decide_tunnel_as(&host, 443, Some(&GIT));
    assert!(git.decision.is_allow());
    assert!(git.raw_tcp_allowed, "a program is no request constraint");
    assert!(
        !policy
            .decide_tunnel_as(&host, 443, Some(&CURL))
            .decision
            .is_allow()
    );
    assert!(!policy.decide_tunnel(&host, 443).decision.is_allow());
}

#[test]
fn emitted_yaml_keeps_the_programs() {
    let policy = load_str("p.yaml", ALLOW_GIT).expect("loads");
    let yaml = airlock_policy::emit::to_yaml(&policy);
    assert!(yaml.contains("process:"), "{yaml}");
    assert_eq!(
        load_str("again.yaml", &yaml).expect("reloads").network,
        policy.network
    );
}

#[test]
fn suggestions_group_by_program_when_asked() {
    use airlock_policy::suggest::{parse_line, suggest, suggest_by};
    let lines = [
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"github.com","port":443,"path":"/a","process":{"pid":3,"exe":"/usr/bin/git","argv0":"git","parents":[]}}"#,
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"github.com","port":443,"path":"/b","process":{"pid":4,"exe":"/usr/bin/curl","argv0":"curl","parents":[]}}"#,
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"github.com","port":443,"path":"/c","process":{"pid":5,"exe":"/tmp/x\\u{1b}","parents":[]}}"#,
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"github.com","port":443,"path":"/d","process":null}"#,
    ];
    let seen: Vec<_> = lines
        .iter()
        .map(|l| parse_line(l).expect("parses"))
        .collect();
    let base = compiled("version: 1\n");
    let by_host = suggest(&seen, &base);
    assert_eq!(by_host.entries.len(), 1);
    assert_eq!(by_host.entries[0].process, None);
    let by_program = suggest_by(&seen, &base, true);
    let programs: Vec<Option<&str>> = by_program
        .entries
        .iter()
        .map(|e| e.process.as_deref())
        .collect();
    assert_eq!(
        programs,
        [None, Some("/usr/bin/curl"), Some("/usr/bin/git")]
    );
    let yaml = by_program.render();
    assert!(yaml.contains("process: [\"/usr/bin/git\"]"), "{yaml}");
    let reloaded = load_str("s.yaml", &yaml).expect("the suggestion loads");
    // What the suggestion allows, the base with it allows: git's request passes as git.
    let with = CompiledPolicy::compile(&reloaded).expect("compiles");
    let git_request = CanonicalRequest::new("GET", Host::Name("github.com".into()), 443, "/a");
    assert!(
        with.decide_as(&git_request, Some(&Program("/usr/bin/git")))
            .is_allow()
    );
}
