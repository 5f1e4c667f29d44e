//! `airlock policy suggest`'s pure part: audit lines → grouped entries → YAML that loads,
//! and allows every request it was made from (property), minus what a base allows.

use airlock_policy::canonical::{Host, canonical_host};
use airlock_policy::suggest::{self, Observed, Seen, Suggestion};
use airlock_policy::{CompiledPolicy, Policy, Reason, load};
use proptest::prelude::*;

fn empty() -> CompiledPolicy {
    CompiledPolicy::compile(&Policy::default()).expect("empty policy")
}

fn compiled(yaml: &str) -> CompiledPolicy {
    let policy = load::load_str("suggested.yaml", yaml)
        .unwrap_or_else(|e| panic!("the suggestion must load: {e:?}\n{yaml}"));
    CompiledPolicy::compile(&policy).expect("compiles")
}

fn line(
    decision: &str,
    would: bool,
    reason: &str,
    method: &str,
    host: &str,
    port: u16,
    path: &str,
) -> String {
    let would = if would { r#","would":"deny""# } else { "" };
    format!(
        r#"{{"ts":"2026-11-25T10:00:00.000000Z","kind":"http","decision":"{decision}"{would},"rule":null,"reason":"{reason}","method":"{method}","scheme":"https","host":"{host}","port":{port},"path":"{path}","status":200,"secrets":[],"conn":1}}"#
    )
}

fn seen(lines: &[String]) -> Vec<Seen> {
    lines
        .iter()
        .map(|text| suggest::parse_line(text).expect("parses"))
        .collect()
}

fn allows(policy: &CompiledPolicy, observed: &Observed) -> bool {
    suggest::allowed_by(policy, observed)
}

#[test]
fn refusals_and_would_deny_lines_are_read_and_others_ignored() {
    let refused = line(
        "deny",
        false,
        "host_not_allowed",
        "GET",
        "pypi.example.test",
        443,
        "/simple/a/",
    );
    let Seen::Refused(observed) = suggest::parse_line(&refused).unwrap() else {
        panic!("a host refusal is read");
    };
    assert_eq!(observed.reason, Reason::HostNotAllowed);
    assert_eq!(observed.host, Host::Name("pypi.example.test".into()));
    assert_eq!(observed.path.as_deref(), Some("/simple/a/"));
    let would = line(
        "allow",
        true,
        "path_not_allowed",
        "POST",
        "a.example.test",
        8443,
        "/x",
    );
    assert!(matches!(suggest::parse_line(&would).unwrap(), Seen::Refused(o) if o.port == 8443));
    let plain_allow = r#"{"ts":"t","kind":"http","decision":"allow","rule":"network.allow[0]","host":"a.test","port":443,"path":"/","method":"GET"}"#;
    assert_eq!(suggest::parse_line(plain_allow).unwrap(), Seen::Other);
    let tripwire = line(
        "deny",
        false,
        "secret_out_of_scope",
        "GET",
        "a.test",
        443,
        "/",
    );
    assert_eq!(suggest::parse_line(&tripwire).unwrap(), Seen::Other);
    let private = line(
        "deny",
        false,
        "private_address",
        "GET",
        "inner.test",
        443,
        "/",
    );
    assert!(matches!(
        suggest::parse_line(&private).unwrap(),
        Seen::Private(_)
    ));
    let dns =
        r#"{"ts":"t","kind":"dns","decision":"allow","rule":null,"name":"x.test","qtype":"A"}"#;
    assert_eq!(suggest::parse_line(dns).unwrap(), Seen::Other);
    assert_eq!(suggest::parse_line("   ").unwrap(), Seen::Other);
}

#[test]
fn malformed_lines_are_errors() {
    for bad in [
        "not json",
        "[1,2]",
        r#"{"host":"a.test"}"#,
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","port":443,"path":"/"}"#,
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"a.test","port":"x","path":"/"}"#,
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"a.test","port":443}"#,
        r#"{"kind":"http","decision":"deny","reason":"host_not_allowed","method":"GET","host":"a b","port":443,"path":"/"}"#,
    ] {
        assert!(suggest::parse_line(bad).is_err(), "{bad}");
    }
}

#[test]
fn one_entry_per_host_with_methods_and_a_prefix_glob() {
    let mut lines = Vec::new();
    for package in ["requests", "idna", "certifi", "urllib3"] {
        lines.push(line(
            "allow",
            true,
            "host_not_allowed",
            "GET",
            "pypi.example.test",
            443,
            &format!("/simple/{package}/"),
        ));
    }
    lines.push(line(
        "allow",
        true,
        "host_not_allowed",
        "HEAD",
        "pypi.example.test",
        443,
        "/simple/idna/",
    ));
    lines.push(line(
        "deny",
        false,
        "method_not_allowed",
        "POST",
        "api.example.test",
        8443,
        "/v1/messages",
    ));
    let suggestion = suggest::suggest(&seen(&lines), &empty());
    assert_eq!(suggestion.entries.len(), 2, "{suggestion:?}");
    let api = &suggestion.entries[0];
    assert_eq!(api.host, "api.example.test");
    assert_eq!(api.ports, Some(vec![8443]));
    assert_eq!(api.methods, Some(vec!["POST".to_owned()]));
    assert_eq!(api.paths, Some(vec!["/v1/messages".to_owned()]));
    let pypi = &suggestion.entries[1];
    assert_eq!(pypi.host, "pypi.example.test");
    assert_eq!(pypi.ports, None);
    assert_eq!(
        pypi.methods,
        Some(vec!["GET".to_owned(), "HEAD".to_owned()])
    );
    assert_eq!(pypi.paths, Some(vec!["/simple/**".to_owned()]));
    assert_eq!(pypi.count(), 5);
    let yaml = suggestion.render();
    assert!(
        yaml.contains(
            "# 5 request(s): host_not_allowed 5; e.g. GET /simple/requests/, GET /simple/idna/"
        ),
        "{yaml}"
    );
    assert!(yaml.contains("    - host: \"pypi.example.test\"\n      methods: [\"GET\", \"HEAD\"]\n      paths: [\"/simple/**\"]\n"), "{yaml}");
    let policy = compiled(&yaml);
    for seen in seen(&lines) {
        let Seen::Refused(observed) = seen else {
            unreachable!()
        };
        assert!(allows(&policy, &observed), "{observed:?}\n{yaml}");
    }
    // Narrow: a path outside the glob and another method stay refused.
    let other = Observed {
        method: Some("GET".into()),
        host: Host::Name("pypi.example.test".into()),
        port: 443,
        path: Some("/packages/x.whl".into()),
        reason: Reason::HostNotAllowed,
        program: None,
    };
    assert!(!allows(&policy, &other));
}

#[test]
fn few_paths_stay_exact_and_many_patterns_become_every_path() {
    let few: Vec<String> = ["/a/1", "/a/2", "/b"]
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        suggest::generalise(&few.iter().cloned().collect()),
        Some(few)
    );
    let scattered: std::collections::BTreeSet<String> =
        (0..12).map(|i| format!("/top{i}")).collect();
    assert_eq!(suggest::generalise(&scattered), None);
    let with_parent: std::collections::BTreeSet<String> = [
        "/repos/acme/app",
        "/repos/acme/app/issues",
        "/repos/acme/app/pulls",
        "/repos/acme/app/commits",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    assert_eq!(
        suggest::generalise(&with_parent),
        Some(vec![
            "/repos/acme/app".to_owned(),
            "/repos/acme/app/**".to_owned()
        ]),
        "the parent itself is one of the paths below the first segment"
    );
}

#[test]
fn private_addresses_route_host_and_base_allowed_are_left_out() {
    let lines = vec![
        line(
            "allow",
            true,
            "host_not_allowed",
            "GET",
            "127.0.0.1",
            443,
            "/",
        ),
        line(
            "allow",
            true,
            "host_not_allowed",
            "GET",
            "10.1.2.3",
            443,
            "/",
        ),
        line(
            "deny",
            false,
            "host_not_allowed",
            "GET",
            "[fe80::1]",
            443,
            "/",
        ),
        line(
            "deny",
            false,
            "path_not_allowed",
            "GET",
            "airlock.internal",
            80,
            "/llm/x",
        ),
        line(
            "deny",
            false,
            "private_address",
            "GET",
            "inner.example.test",
            443,
            "/",
        ),
        line(
            "allow",
            true,
            "host_not_allowed",
            "GET",
            "inner.example.test",
            443,
            "/",
        ),
        line(
            "allow",
            true,
            "path_not_allowed",
            "GET",
            "known.example.test",
            443,
            "/docs",
        ),
        line(
            "allow",
            true,
            "host_not_allowed",
            "GET",
            "new.example.test",
            443,
            "/",
        ),
    ];
    let base = compiled("version: 1\nnetwork:\n  allow:\n    - host: known.example.test\n");
    let suggestion = suggest::suggest(&seen(&lines), &base);
    let hosts: Vec<&str> = suggestion.entries.iter().map(|e| e.host.as_str()).collect();
    assert_eq!(hosts, ["new.example.test"]);
    assert_eq!(suggestion.already_allowed, 1);
    let skipped: Vec<&str> = suggestion.skipped.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        skipped,
        [
            "10.1.2.3",
            "127.0.0.1",
            "[fe80::1]",
            "airlock.internal",
            "inner.example.test"
        ]
    );
    let only_private = seen(&[line(
        "deny",
        false,
        "private_address",
        "GET",
        "10.9.9.9",
        443,
        "/",
    )]);
    let private_only = suggest::suggest(&only_private, &base);
    assert_eq!(
        private_only.skipped.len(),
        1,
        "named although nothing else was seen: {private_only:?}"
    );
    assert!(private_only.entries.is_empty());
    let yaml = suggestion.render();
    assert!(
        yaml.contains("# not suggested: 127.0.0.1: a private"),
        "{yaml}"
    );
    compiled(&yaml);
}

#[test]
fn a_refused_tunnel_makes_a_destination_only_entry() {
    let connect = r#"{"ts":"t","kind":"http","decision":"deny","rule":null,"reason":"host_not_allowed","method":"CONNECT","host":"git.example.test","port":22,"status":403}"#;
    let tcp = r#"{"ts":"t","kind":"tcp","decision":"allow","would":"deny","rule":null,"reason":"host_not_allowed","host":"git.example.test","port":22}"#;
    let lines = vec![
        connect.to_owned(),
        tcp.to_owned(),
        line(
            "allow",
            true,
            "host_not_allowed",
            "GET",
            "git.example.test",
            22,
            "/x",
        ),
    ];
    let suggestion = suggest::suggest(&seen(&lines), &empty());
    let entry = &suggestion.entries[0];
    assert_eq!(
        (
            entry.methods.clone(),
            entry.paths.clone(),
            entry.ports.clone()
        ),
        (None, None, Some(vec![22]))
    );
    let yaml = suggestion.render();
    assert!(yaml.contains("e.g. CONNECT git.example.test:22"), "{yaml}");
    let policy = compiled(&yaml);
    let tunnel = policy.decide_tunnel(&canonical_host("git.example.test").unwrap(), 22);
    assert!(tunnel.decision.is_allow() && tunnel.raw_tcp_allowed);
}

#[test]
fn nothing_to_suggest_is_still_a_valid_policy() {
    let yaml = Suggestion::default().render();
    assert!(yaml.contains("nothing to suggest"), "{yaml}");
    let policy = compiled(&yaml);
    assert!(policy.policy().network.allow.is_empty());
}

fn observed_strategy() -> impl Strategy<Value = Observed> {
    let host = prop::sample::select(vec![
        "a.example.test",
        "pypi.example.test",
        "xn--bcher-kva.example",
        "93.184.215.14",
    ]);
    let port = prop::sample::select(vec![443u16, 80, 8443, 22]);
    let method = prop::option::weighted(
        0.9,
        prop::sample::select(vec!["GET", "POST", "HEAD", "PROPFIND"]),
    );
    let segment = prop::sample::select(vec![
        "simple", "a", "b", "", "x*y", "q?", "[z]", "{a,b}", "sp ace", "ü", "100%", "v1", "-",
    ]);
    let path = prop::collection::vec(segment, 1..5).prop_map(|segments| {
        let mut path = format!("/{}", segments.join("/"));
        // Canonical paths never hold `//` (runs are merged).
        while path.contains("//") {
            path = path.replace("//", "/");
        }
        path
    });
    (host, port, method, path).prop_map(|(host, port, method, path)| Observed {
        method: method.map(str::to_owned),
        host: canonical_host(host).expect("host"),
        port,
        path: method.map(|_| path),
        reason: Reason::HostNotAllowed,
        program: None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The rendered suggestion loads, compiles and allows every request it was made from;
    /// made again against itself as the base, it suggests nothing.
    #[test]
    fn the_suggestion_allows_every_request_it_was_made_from(
        observed in prop::collection::vec(observed_strategy(), 1..40)
    ) {
        let seen: Vec<Seen> = observed.iter().cloned().map(Seen::Refused).collect();
        let suggestion = suggest::suggest(&seen, &empty());
        let yaml = suggestion.render();
        let policy = compiled(&yaml);
        for request in &observed {
            prop_assert!(allows(&policy, request), "{:?} not allowed by\n{}", request, yaml);
        }
        let again = suggest::suggest(&seen, &policy);
        prop_assert!(again.entries.is_empty(), "{:?}", again);
        prop_assert_eq!(again.already_allowed, observed.len());
    }
}
