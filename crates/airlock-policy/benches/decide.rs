//! Decision speed of the compiled matcher on a 10,000-rule policy (exact hosts, wildcards,
//! path globs, regexes, CIDRs, denies) over a mix of allowed and refused requests.
//! Also prints how long compiling that policy takes.
//!
//! Run: `cargo bench -p airlock-policy --bench decide -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::Instant;

use airlock_policy::CanonicalRequest;
use airlock_policy::canonical::{Host, canonical_host};
use airlock_policy::matcher::CompiledPolicy;
use airlock_policy::model::{HostPattern, Network, Policy, Rule, Target};
use criterion::{Criterion, criterion_group, criterion_main};

/// Rules in the benchmark policy.
const RULES: usize = 10_000;

/// A rule with only a target.
fn rule(id: String, target: Target) -> Rule {
    Rule {
        id,
        target,
        methods: None,
        paths: Vec::new(),
        path_regex: Vec::new(),
        ports: None,
        json_deny: Vec::new(),
        process: None,
    }
}

/// The 10,000-rule policy: per group of five, an exact host with path globs and methods,
/// a wildcard, an exact host with a regex, a CIDR with a port, and an exact host without
/// constraints; plus a deny every 50 rules.
fn big_policy() -> Policy {
    let mut allow = Vec::with_capacity(RULES);
    let mut deny = Vec::new();
    for i in 0..RULES {
        let id = format!("network.allow[{i}]");
        let group = i / 5;
        let allow_rule = match i % 5 {
            0 => Rule {
                methods: Some(vec!["GET".into(), "POST".into()]),
                paths: vec![
                    format!("/repos/org{group}/app"),
                    format!("/repos/org{group}/app/**"),
                    "/meta/*".into(),
                ],
                ..rule(
                    id,
                    Target::Host(HostPattern::Exact(format!("api{group}.example.com"))),
                )
            },
            1 => rule(
                id,
                Target::Host(HostPattern::Wildcard(format!("cdn{group}.example.net"))),
            ),
            2 => Rule {
                path_regex: vec![
                    format!(r"^/simple/pkg{group}(?:/.*)?(?:\?.*)?$"),
                    "/v[0-9]+/items/[a-z0-9-]+".into(),
                ],
                ..rule(
                    id,
                    Target::Host(HostPattern::Exact(format!("pypi{group}.example.org"))),
                )
            },
            3 => Rule {
                ports: Some(vec![5432]),
                json_deny: Vec::new(),
                process: None,
                ..rule(
                    id,
                    Target::Cidr(
                        format!("10.{}.{}.0/24", group / 256, group % 256)
                            .parse()
                            .expect("cidr"),
                    ),
                )
            },
            _ => rule(
                id,
                Target::Host(HostPattern::Exact(format!("plain{group}.example.io"))),
            ),
        };
        allow.push(allow_rule);
        if i % 50 == 0 {
            deny.push(Rule {
                paths: vec!["/admin/**".into()],
                ..rule(
                    format!("network.deny[{}]", deny.len()),
                    Target::Host(HostPattern::Exact(format!("api{group}.example.com"))),
                )
            });
        }
    }
    deny.push(rule(
        format!("network.deny[{}]", deny.len()),
        Target::Cidr("169.254.0.0/16".parse().expect("cidr")),
    ));
    Policy {
        network: Network {
            allow,
            deny,
            tls_passthrough: Vec::new(),
        },
        ..Policy::default()
    }
}

/// A mix of allowed and refused requests over every kind of rule.
fn requests() -> Vec<CanonicalRequest> {
    let host = |text: &str| canonical_host(text).expect("bench host");
    let name = |text: &str| Host::Name(text.to_owned());
    vec![
        CanonicalRequest::new(
            "GET",
            name("api1234.example.com"),
            443,
            "/repos/org1234/app/pulls/7?state=open",
        ),
        CanonicalRequest::new("POST", name("api10.example.com"), 443, "/admin/users"),
        CanonicalRequest::new("DELETE", name("api77.example.com"), 443, "/repos/org77/app"),
        CanonicalRequest::new("GET", name("api77.example.com"), 443, "/repos/org78/app"),
        CanonicalRequest::new(
            "GET",
            name("img.static.cdn1500.example.net"),
            443,
            "/a/b/c.png",
        ),
        CanonicalRequest::new("GET", name("cdn1500.example.net"), 443, "/"),
        CanonicalRequest::new(
            "GET",
            name("pypi999.example.org"),
            443,
            "/simple/pkg999/?format=json",
        ),
        CanonicalRequest::new("GET", name("pypi999.example.org"), 443, "/v2/items/abc-1"),
        CanonicalRequest::new("GET", name("pypi999.example.org"), 443, "/nope"),
        CanonicalRequest::new("GET", host("10.7.100.9"), 5432, "/"),
        CanonicalRequest::new("GET", host("169.254.169.254"), 80, "/latest/meta-data/"),
        CanonicalRequest::new("GET", name("plain1999.example.io"), 443, "/anything/at/all"),
        CanonicalRequest::new("GET", name("evil.example"), 443, "/x"),
        CanonicalRequest::new(
            "GET",
            name("api5.example.com"),
            443,
            "/repos/org5/app/%2e%2e%2fsecret",
        ),
    ]
}

fn bench_decide(c: &mut Criterion) {
    let policy = big_policy();
    let started = Instant::now();
    let compiled = CompiledPolicy::compile(&policy).expect("bench policy compiles");
    eprintln!(
        "compiling {} allow + {} deny rules took {:?}",
        policy.network.allow.len(),
        policy.network.deny.len(),
        started.elapsed()
    );
    let requests = requests();
    let allowed = requests
        .iter()
        .filter(|r| compiled.decide(r).is_allow())
        .count();
    eprintln!("{} requests in the mix, {allowed} allowed", requests.len());

    c.bench_function("decide/mix (per request)", |b| {
        let mut next = 0;
        b.iter(|| {
            let request = &requests[next % requests.len()];
            next += 1;
            black_box(compiled.decide(black_box(request)))
        })
    });
    c.bench_function("decide/exact host + glob allow", |b| {
        b.iter(|| black_box(compiled.decide(black_box(&requests[0]))))
    });
    c.bench_function("decide/regex allow", |b| {
        b.iter(|| black_box(compiled.decide(black_box(&requests[6]))))
    });
    c.bench_function("decide/wildcard allow", |b| {
        b.iter(|| black_box(compiled.decide(black_box(&requests[4]))))
    });
    c.bench_function("decide/unlisted host", |b| {
        b.iter(|| black_box(compiled.decide(black_box(&requests[12]))))
    });
    c.bench_function("canonicalise + decide", |b| {
        b.iter(|| {
            let host = canonical_host(black_box("API1234.example.com.")).expect("host");
            let request = CanonicalRequest::new(
                "get",
                host,
                443,
                black_box("/repos/org1234/app/./pulls/%37?state=open"),
            );
            black_box(compiled.decide(&request))
        })
    });
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
