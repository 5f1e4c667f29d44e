//! The airut importer's fnmatch against Python's own: thousands of generated patterns and
//! names, decided once by CPython's `fnmatch` (run as a real `python3` process) and once by
//! airlock, must agree on every pair.
//!
//! * Paths: `fnmatch.fnmatch(name, pattern)` against the regex of
//!   [`airlock_import::airut::fnmatch_regex`].
//! * Hosts: airut's rule (lower-case both, `fnmatch` when the pattern holds `*` or `?`,
//!   equality otherwise) against the whole import: `domains: [PATTERN]` imported, compiled
//!   and asked to decide `GET https://NAME/`.
//!
//! `python3` is required: without it this test fails and says so.

use std::io::Write;
use std::process::{Command, Stdio};

use airlock_import::airut::fnmatch_regex;
use airlock_import::{SeedFormat, import};
use airlock_policy::canonical::{CanonicalRequest, Host, canonical_host};
use airlock_policy::matcher::CompiledPolicy;
use serde_json::{Value, json};

/// The reference: CPython's `fnmatch`, and airut's host rule built on it.
const PYTHON: &str = r#"
import fnmatch, json, sys

def airut_host(pattern, host):
    pattern, host = pattern.lower(), host.lower()
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatch(host, pattern)
    return pattern == host

cases = json.load(sys.stdin)
json.dump({
    "paths": [[fnmatch.fnmatch(n, p) for n in names] for p, names in cases["paths"]],
    "hosts": [[airut_host(p, n) for n in names] for p, names in cases["hosts"]],
}, sys.stdout)
"#;

/// A small deterministic generator (xorshift64*), so that a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick(&mut self, alphabet: &[char]) -> char {
        alphabet[self.below(alphabet.len())]
    }

    fn string(&mut self, alphabet: &[char], max: usize) -> String {
        let len = self.below(max + 1);
        (0..len).map(|_| self.pick(alphabet)).collect()
    }
}

/// A name that matches `pattern` more often than a random one: each wildcard and set
/// replaced by something plausible.
fn near_miss(rng: &mut Rng, pattern: &str, filler: &[char]) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(&rng.string(filler, 3)),
            '?' => out.push(rng.pick(filler)),
            '[' if rng.below(2) == 0 => {
                // Take one character from inside the brackets, or a filler.
                let inner: Vec<char> = chars.clone().take_while(|&x| x != ']').collect();
                if inner.is_empty() || rng.below(3) == 0 {
                    out.push('[');
                } else {
                    out.push(inner[rng.below(inner.len())]);
                    for _ in 0..=inner.len() {
                        chars.next();
                    }
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// Run the reference on `cases`; a missing `python3` fails the test with a clear message.
fn python(cases: &Value) -> Value {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(PYTHON)
        .env("PYTHONIOENCODING", "utf-8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("this test compares against CPython's fnmatch and needs `python3` on PATH: {e}")
        });
    let input = serde_json::to_vec(cases).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "python3 failed: {output:?}");
    serde_json::from_slice(&output.stdout).expect("python3 printed JSON")
}

/// Whether the airut allowlist `domains: [pattern]` lets `GET https://host/` through,
/// or `None` when the pattern does not import.
fn airlock_host(compiled: &Option<CompiledPolicy>, host: &Host) -> Option<bool> {
    let request = CanonicalRequest::new("GET", host.clone(), 443, "/");
    compiled
        .as_ref()
        .map(|policy| policy.decide(&request).is_allow())
}

#[test]
fn fnmatch_agrees_with_cpython_on_generated_patterns() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);

    // Paths (and any string): every metacharacter, the characters ranges trip on, a
    // backslash, a newline and a non-ASCII letter.
    let pattern_chars: Vec<char> = "ab-!^]]][[[**??/.\\é\n&~Zz0".chars().collect();
    let name_chars: Vec<char> = "ab-!^][/.\\é\n&~Zz0cy_".chars().collect();
    let mut paths = Vec::new();
    for _ in 0..3000 {
        let pattern = rng.string(&pattern_chars, 10);
        let mut names: Vec<String> = (0..12).map(|_| rng.string(&name_chars, 8)).collect();
        names.extend((0..12).map(|_| near_miss(&mut rng, &pattern, &name_chars)));
        paths.push((pattern, names));
    }

    // Hosts: patterns in mixed case with every fnmatch feature, and two letters whose
    // lower case is special (`É`, and the Kelvin sign, which lower-cases to ASCII `k`);
    // names are canonical host names (what airlock matches on).
    let host_pattern_chars: Vec<char> = "abAB0-.*?[]!_ZÉ\u{212A}".chars().collect();
    let label_chars: Vec<char> = "abkz0-".chars().collect();
    let mut hosts = Vec::new();
    for _ in 0..2000 {
        let pattern = rng.string(&host_pattern_chars, 9);
        let mut names = Vec::new();
        for k in 0..24 {
            let candidate = if k % 2 == 0 {
                let labels = 1 + rng.below(3);
                (0..labels)
                    .map(|_| {
                        let label = rng.string(&label_chars, 4);
                        if label.is_empty() {
                            "a".to_owned()
                        } else {
                            label
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(".")
            } else {
                near_miss(&mut rng, &pattern.to_lowercase(), &label_chars)
            };
            // Only names that are already canonical: that is what a request carries.
            if let Ok(Host::Name(name)) = canonical_host(&candidate)
                && name == candidate
                && !names.contains(&candidate)
            {
                names.push(candidate);
            }
        }
        hosts.push((pattern, names));
    }

    let cases = json!({ "paths": paths, "hosts": hosts });
    let reference = python(&cases);

    let mut checked = 0usize;
    let mut positives = 0usize;
    for ((pattern, names), expected) in paths.iter().zip(reference["paths"].as_array().unwrap()) {
        let regex = fnmatch_regex(pattern);
        let compiled = regex::Regex::new(&regex)
            .unwrap_or_else(|e| panic!("{pattern:?} -> {regex} does not compile: {e}"));
        for (name, expected) in names.iter().zip(expected.as_array().unwrap()) {
            let expected = expected.as_bool().unwrap();
            assert_eq!(
                compiled.is_match(name),
                expected,
                "fnmatch.fnmatch({name:?}, {pattern:?}) is {expected} in CPython; airlock's regex {regex}"
            );
            checked += 1;
            positives += usize::from(expected);
        }
    }

    let mut host_checked = 0usize;
    let mut host_positives = 0usize;
    for ((pattern, names), expected) in hosts.iter().zip(reference["hosts"].as_array().unwrap()) {
        // An exact name with a trailing dot is the same DNS name without it; airlock
        // canonicalises both the pattern and every request's host that way, airut compares
        // the text. (A wildcard pattern ending in `.` matches no canonical name: stricter.)
        if !pattern.contains(['*', '?']) && pattern.ends_with('.') {
            continue;
        }
        let text = format!(
            "domains:\n  - {}\n",
            serde_json::to_string(pattern).unwrap()
        );
        let imported = import(SeedFormat::Airut, "allowlist.yaml", &text);
        let compiled = imported
            .as_ref()
            .ok()
            .map(|policy| CompiledPolicy::compile(policy).expect("imported policy compiles"));
        for (name, expected) in names.iter().zip(expected.as_array().unwrap()) {
            let expected = expected.as_bool().unwrap();
            let host = Host::Name(name.clone());
            match airlock_host(&compiled, &host) {
                Some(actual) => assert_eq!(
                    actual,
                    expected,
                    "airut host pattern {pattern:?} on {name:?}: airut says {expected}; airlock imported {:?}",
                    imported.as_ref().map(|p| &p.network.allow)
                ),
                // Only a pattern without wildcards that is no valid host name may fail to
                // import, and airut's exact comparison matches no host name with it.
                None => {
                    assert!(
                        !pattern.contains(['*', '?']) && !expected,
                        "airut host pattern {pattern:?} failed to import ({}) but airut matches {name:?}: {expected}",
                        imported.as_ref().unwrap_err()
                    );
                }
            }
            host_checked += 1;
            host_positives += usize::from(expected);
        }
    }

    // The generators must exercise both outcomes, or the comparison proves little.
    assert!(
        checked > 50_000 && positives > 5_000,
        "{checked} paths, {positives} matches"
    );
    assert!(
        host_checked > 20_000 && host_positives > 1_000,
        "{host_checked} hosts, {host_positives} matches"
    );
}
