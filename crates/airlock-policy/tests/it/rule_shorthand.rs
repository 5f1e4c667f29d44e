//! The command-line shorthands: `--allow RULE` and `--secret SPEC`.

use std::net::IpAddr;
use std::path::PathBuf;

use airlock_policy::model::{HostPattern, Rule, SecretSource, Target};
use airlock_policy::rule::{RuleError, ValueError, parse_allow, parse_secret};

/// A predicate on the error variant a case expects.
type Expected = fn(&RuleError) -> bool;

fn exact(name: &str) -> HostPattern {
    HostPattern::Exact(name.to_owned())
}

fn allowed(text: &str) -> Rule {
    parse_allow(text, 0).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn host_alone_is_every_method_and_path_on_the_default_ports() {
    let rule = parse_allow("api.github.com", 3).expect("valid");
    assert_eq!(
        rule,
        Rule {
            id: "--allow[3]".into(),
            target: Target::Host(exact("api.github.com")),
            methods: None,
            paths: Vec::new(),
            path_regex: Vec::new(),
            ports: None,
            json_deny: Vec::new(),
            process: None,
        }
    );
    assert_eq!(rule.effective_ports(), [80, 443]);
    assert!(rule.is_destination_only());
}

#[test]
fn methods_and_path_glob() {
    let rule = allowed("GET,head pypi.org/simple/**");
    assert_eq!(rule.methods, Some(vec!["GET".into(), "HEAD".into()]));
    assert_eq!(rule.target, Target::Host(exact("pypi.org")));
    assert_eq!(rule.paths, ["/simple/**"]);
    assert_eq!(rule.ports, None);
}

#[test]
fn port_restricts_the_rule_to_that_port() {
    let rule = allowed("localhost:8443");
    assert_eq!(rule.target, Target::Host(exact("localhost")));
    assert_eq!(rule.ports, Some(vec![8443]));
    assert!(rule.is_destination_only(), "HOST:PORT allows raw TCP too");
    let rule = allowed("GET localhost:40123/tiny");
    assert_eq!(rule.methods, Some(vec!["GET".into()]));
    assert_eq!(rule.ports, Some(vec![40123]));
    assert_eq!(rule.paths, ["/tiny"]);
}

#[test]
fn wildcards_ip_literals_and_canonical_names() {
    assert_eq!(
        allowed("*.Example.COM").target,
        Target::Host(HostPattern::Wildcard("example.com".into()))
    );
    let rule = allowed("[::1]:8443/x");
    assert_eq!(
        rule.target,
        Target::Host(HostPattern::Ip("::1".parse::<IpAddr>().expect("v6")))
    );
    assert_eq!(rule.ports, Some(vec![8443]));
    assert_eq!(rule.paths, ["/x"]);
    assert_eq!(
        allowed("127.0.0.1:9000").target,
        Target::Host(HostPattern::Ip("127.0.0.1".parse().expect("v4")))
    );
    assert_eq!(
        allowed("  Bücher.de.  ").target,
        Target::Host(exact("xn--bcher-kva.de"))
    );
}

#[test]
fn cidr_is_refused_with_a_hint() {
    let error = parse_allow("10.0.0.0/8", 0).expect_err("cidr");
    assert!(matches!(error, RuleError::RuleCidr { .. }), "{error:?}");
    assert!(error.to_string().contains("- cidr: 10.0.0.0/8"), "{error}");
    assert!(matches!(
        parse_allow("[fd00::]/8", 0),
        Err(RuleError::RuleCidr { .. })
    ));
}

#[test]
fn malformed_rules_say_how_to_write_them() {
    let cases: [(&str, Expected, &str); 11] = [
        (
            "",
            |e| matches!(e, RuleError::EmptyRule),
            "[METHOD[,METHOD...] ]HOST",
        ),
        (
            "GET HEAD a.com",
            |e| matches!(e, RuleError::RuleShape { .. }),
            "commas",
        ),
        (
            "https://a.com/x",
            |e| matches!(e, RuleError::RuleScheme { .. }),
            "leave out the scheme",
        ),
        (
            "GE(T a.com",
            |e| matches!(e, RuleError::RuleMethod { .. }),
            "RFC 9110 token",
        ),
        (
            "fetch a.com",
            |e| matches!(e, RuleError::RuleMethod { .. }),
            "FETCH",
        ),
        (
            "GET, a.com",
            |e| matches!(e, RuleError::RuleShape { .. }),
            "commas",
        ),
        (
            "a.com:0",
            |e| matches!(e, RuleError::RulePort { .. }),
            "1 to 65535",
        ),
        (
            "a.com:99999",
            |e| matches!(e, RuleError::RulePort { .. }),
            "1 to 65535",
        ),
        (
            "a.com:/x",
            |e| matches!(e, RuleError::RulePort { .. }),
            "1 to 65535",
        ),
        (
            "a.com/x/{y",
            |e| matches!(e, RuleError::RulePath { .. }),
            "not a valid glob",
        ),
        (
            "*",
            |e| {
                matches!(
                    e,
                    RuleError::RuleHost {
                        problem: ValueError::BareStar,
                        ..
                    }
                )
            },
            "every host",
        ),
    ];
    for (text, is_expected, needle) in cases {
        let error = parse_allow(text, 0).expect_err(text);
        assert!(is_expected(&error), "{text}: {error:?}");
        assert!(error.to_string().contains(needle), "{text}: {error}");
    }
    for text in [
        "a..com", "a b", "*.*.com", "a*.com", "[::1", ":443", "a.com x/",
    ] {
        assert!(parse_allow(text, 0).is_err(), "{text} must be refused");
    }
}

#[test]
fn secret_from_the_environment_variable_of_its_name() {
    let secret = parse_secret("GH_TOKEN@api.github.com,github.com").expect("valid");
    assert_eq!(secret.name, "GH_TOKEN");
    assert_eq!(secret.source, SecretSource::Env("GH_TOKEN".into()));
    assert_eq!(secret.hosts, [exact("api.github.com"), exact("github.com")]);
    assert_eq!(secret.surrogate, None);
    assert_eq!(secret.headers, None);
    assert!(!secret.body && !secret.foreign_allowed);
}

#[test]
fn secret_from_another_variable_or_a_file() {
    let secret = parse_secret("GH=env:GITHUB_TOKEN@*.github.com").expect("valid");
    assert_eq!(secret.source, SecretSource::Env("GITHUB_TOKEN".into()));
    assert_eq!(secret.hosts, [HostPattern::Wildcard("github.com".into())]);
    let secret = parse_secret("NPM=file:/run/secrets/npm@registry.npmjs.org").expect("valid");
    assert_eq!(
        secret.source,
        SecretSource::File(PathBuf::from("/run/secrets/npm"))
    );
}

#[test]
fn secret_with_fixed_surrogate_and_value_splits_at_the_last_at() {
    let secret = parse_secret("KEY=sk-0000000000=sk-real=with@at@api.openai.com").expect("valid");
    assert_eq!(secret.name, "KEY");
    assert_eq!(secret.surrogate.as_deref(), Some("sk-0000000000"));
    assert_eq!(secret.source, SecretSource::Value("sk-real=with@at".into()));
    assert_eq!(secret.hosts, [exact("api.openai.com")]);
    assert!(
        !format!("{secret:?}").contains("sk-real"),
        "Debug hides the value"
    );
}

#[test]
fn secret_errors_never_show_the_value() {
    let value = "v3ry-s3cret-v4lue";
    let specs = [
        format!("K=S={value}"),
        format!("K=S={value}@"),
        format!("K=S={value}@bad host"),
        format!("K=S={value}@a.com,*"),
        format!("K=={value}@a.com"),
        format!("K={value}={value}@a.com"),
        format!("{value}@a.com"),
        format!("9K=S={value}@a.com"),
    ];
    for spec in &specs {
        let error = parse_secret(spec).expect_err(spec);
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(value), "{spec}: {shown}");
    }
}

#[test]
fn secret_errors_say_how_to_write_it() {
    let cases: [(&str, Expected); 10] = [
        ("GH_TOKEN", |e| matches!(e, RuleError::SecretHostsMissing)),
        ("GH-TOKEN@a.com", |e| matches!(e, RuleError::SecretName)),
        ("@a.com", |e| matches!(e, RuleError::SecretName)),
        ("K=env:@a.com", |e| {
            matches!(e, RuleError::SecretEnvVar { .. })
        }),
        ("K=file:@a.com", |e| {
            matches!(e, RuleError::SecretFile { .. })
        }),
        ("K=plain@a.com", |e| {
            matches!(e, RuleError::SecretSource { .. })
        }),
        ("K==v@a.com", |e| {
            matches!(e, RuleError::SecretSurrogate { .. })
        }),
        ("K=s=@a.com", |e| matches!(e, RuleError::SecretValue { .. })),
        ("K=same=same@a.com", |e| {
            matches!(e, RuleError::SecretSurrogateIsValue { .. })
        }),
        ("K@a.com,", |e| {
            matches!(e, RuleError::SecretHost { position: 2, .. })
        }),
    ];
    for (spec, is_expected) in cases {
        let error = parse_secret(spec).expect_err(spec);
        assert!(is_expected(&error), "{spec}: {error:?}");
        assert!(error.to_string().starts_with("--secret"), "{spec}: {error}");
    }
    let error = parse_secret("K@a.com:443").expect_err("port");
    assert!(error.to_string().contains("(`a.com:443`)"), "{error}");
}

#[test]
fn secret_with_a_preset_in_place_of_the_hosts() {
    let secret = parse_secret("ANTHROPIC_API_KEY@preset:anthropic").expect("valid");
    assert_eq!(secret.source, SecretSource::Env("ANTHROPIC_API_KEY".into()));
    assert_eq!(
        secret.hosts,
        vec![HostPattern::Exact("api.anthropic.com".into())]
    );
    assert_eq!(
        secret.headers,
        Some(vec!["x-api-key".to_owned(), "authorization".to_owned()])
    );
    let secret = parse_secret("NPM=sk-surrogate-1=sk-real@preset:npm").expect("valid");
    assert_eq!(secret.surrogate.as_deref(), Some("sk-surrogate-1"));
    assert_eq!(
        secret.hosts,
        vec![HostPattern::Exact("registry.npmjs.org".into())]
    );
    let error = parse_secret("K=surrogate=real-value@preset:nope").expect_err("unknown");
    assert!(matches!(error, RuleError::SecretPreset { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("anthropic, openai, github"), "{message}");
    assert!(
        !message.contains("real-value") && !message.contains("nope"),
        "{message}"
    );
}
