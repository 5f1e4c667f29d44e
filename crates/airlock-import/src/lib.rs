//! Importers for the seed systems' own policy files (docs/contract.md §2 `policy import`
//! and `--policy FORMAT:FILE`, docs/policy.md "Importers"): each reads the file exactly as
//! its source system does and produces the typed [`Policy`] that grants the same decisions.
//!
//! | format | file | module |
//! | --- | --- | --- |
//! | `airut` | `.airut/network-allowlist.yaml` | [`airut`] |
//! | `trustyclaw` | the `PUT /v1/network/policy` JSON | [`trustyclaw`] |
//! | `secrets-proxy` | the secrets JSON (and `--allow-net` hosts) | [`secrets_proxy`] |
//! | `sandbox0` | a `SandboxNetworkPolicy` (YAML or JSON) | [`sandbox0`] |
//!
//! Faithfulness (docs/policy.md "Importers"): where a source's meaning can be written in
//! airlock's union-of-allows-minus-denies model it is translated exactly; where it cannot
//! (a first-match order that a later deny would change, a regex feature airlock's engine
//! lacks, a body filter) the import fails with every such problem, located at
//! `file:line:col` and naming the rules involved. The few places where airlock is
//! deliberately *stricter* than the source (the private-address guard, no UDP, ports 80
//! and 443 when the source names none) are listed in each module's documentation; none of
//! them ever allows something the source refuses.
//!
//! JSON is read with the YAML parser (JSON is YAML flow syntax), so every error in either
//! format carries a line and column.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod airut;
pub mod sandbox0;
pub mod secrets_proxy;
pub mod trustyclaw;

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_saphyr::{Location, Spanned};

use airlock_policy::load::{LoadError, Located};
use airlock_policy::model::{HostPattern, Policy, Rule, Target};

/// The seed systems whose files airlock reads as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SeedFormat {
    /// airut's `.airut/network-allowlist.yaml` (mitmproxy sandbox with a DNS responder).
    Airut,
    /// trustyclaw's `PUT /v1/network/policy` JSON (runtime network controls).
    Trustyclaw,
    /// secrets-proxy's secrets JSON (placeholder secrets proxy with an nftables jail).
    SecretsProxy,
    /// sandbox0's `SandboxNetworkPolicy` (traffic rules and MCP protocol rules).
    Sandbox0,
}

impl SeedFormat {
    /// Every format, in the order the command line lists them.
    pub const ALL: [SeedFormat; 4] = [
        SeedFormat::Airut,
        SeedFormat::Trustyclaw,
        SeedFormat::SecretsProxy,
        SeedFormat::Sandbox0,
    ];

    /// The name used on the command line (`--from NAME`, `--policy NAME:FILE`).
    pub fn as_str(self) -> &'static str {
        match self {
            SeedFormat::Airut => "airut",
            SeedFormat::Trustyclaw => "trustyclaw",
            SeedFormat::SecretsProxy => "secrets-proxy",
            SeedFormat::Sandbox0 => "sandbox0",
        }
    }
}

impl fmt::Display for SeedFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A format name that is not one of the seed formats.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy format {given:?}: use one of airut, trustyclaw, secrets-proxy, sandbox0")]
pub struct UnknownFormat {
    /// What was given.
    pub given: String,
}

impl FromStr for SeedFormat {
    type Err = UnknownFormat;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        SeedFormat::ALL
            .into_iter()
            .find(|format| format.as_str() == text)
            .ok_or_else(|| UnknownFormat {
                given: text.to_owned(),
            })
    }
}

/// Read a seed system's file `text` (named `file` in error locations) and translate it.
///
/// Fails with every problem found, each located; a policy is never half-imported.
/// secrets-proxy's `--allow-net` hosts are not part of its file: see
/// [`secrets_proxy::import_with_allow_net`] to pass them.
pub fn import(format: SeedFormat, file: &str, text: &str) -> Result<Policy, LoadError> {
    match format {
        SeedFormat::Airut => airut::import(file, text),
        SeedFormat::Trustyclaw => trustyclaw::import(file, text),
        SeedFormat::SecretsProxy => secrets_proxy::import_with_allow_net(file, text, &[]),
        SeedFormat::Sandbox0 => sandbox0::import(file, text),
    }
}

/// Collects located problems while an importer walks a document.
pub(crate) struct Problems {
    file: String,
    list: Vec<Located>,
}

impl Problems {
    /// No problems yet, in `file`.
    pub(crate) fn new(file: &str) -> Self {
        Problems {
            file: file.to_owned(),
            list: Vec::new(),
        }
    }

    /// Record a problem at a parser location (an unknown one is shown as 1:1).
    pub(crate) fn at(&mut self, location: &Location, message: impl Into<String>) {
        self.list.push(Located {
            file: self.file.clone(),
            line: coordinate(location.line()).max(1),
            column: coordinate(location.column()).max(1),
            message: message.into(),
        });
    }

    /// Record a problem about something outside the file (a command-line value), named by
    /// `source`; it has no line or column (both 0).
    pub(crate) fn outside(&mut self, source: &str, message: impl Into<String>) {
        self.list.push(Located {
            file: source.to_owned(),
            line: 0,
            column: 0,
            message: message.into(),
        });
    }

    /// How many problems are recorded (to tell whether one part added any).
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// `Ok(value)` when nothing was recorded, otherwise every problem.
    pub(crate) fn finish<T>(self, value: T) -> Result<T, LoadError> {
        if self.list.is_empty() {
            Ok(value)
        } else {
            Err(LoadError { errors: self.list })
        }
    }

    /// Every problem recorded so far, as an error (for early exits).
    pub(crate) fn into_error(self) -> LoadError {
        LoadError { errors: self.list }
    }
}

/// A parser coordinate (1-based; 0 when unknown) as stored in [`Located`].
fn coordinate(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Parse `text` (YAML, or JSON which is YAML flow syntax) into `T`. An empty document is
/// `None`. A syntax or shape error becomes one located problem.
pub(crate) fn parse_document<T>(file: &str, text: &str) -> Result<Option<T>, LoadError>
where
    T: for<'de> Deserialize<'de>,
{
    let options = serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
    };
    serde_saphyr::from_str_with_options::<Option<T>>(text, options).map_err(|error| {
        let (line, column) = error.location().map_or((1, 1), |l| {
            (coordinate(l.line()).max(1), coordinate(l.column()).max(1))
        });
        let formatter = serde_saphyr::DefaultMessageFormatter;
        let message =
            serde_saphyr::MessageFormatter::format_message(&formatter, error.without_snippet());
        LoadError {
            errors: vec![Located {
                file: file.to_owned(),
                line,
                column,
                message: format!("{message}: fix the file here"),
            }],
        }
    })
}

/// A mapping read in document order, duplicates kept (the parser itself refuses literal
/// duplicate keys), for formats whose keys are data (domain names, secret names).
pub(crate) struct Ordered<K, V>(pub(crate) Vec<(K, V)>);

impl<'de, K, V> Deserialize<'de> for Ordered<K, V>
where
    K: Deserialize<'de>,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OrderedVisitor<K, V>(PhantomData<(K, V)>);

        impl<'de, K, V> Visitor<'de> for OrderedVisitor<K, V>
        where
            K: Deserialize<'de>,
            V: Deserialize<'de>,
        {
            type Value = Ordered<K, V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Ordered(entries))
            }
        }

        deserializer.deserialize_map(OrderedVisitor(PhantomData))
    }
}

/// The location of a spanned value (where it is used in the document).
pub(crate) fn at<T>(spanned: &Spanned<T>) -> &Location {
    &spanned.referenced
}

/// A destination-only rule (no methods, paths or regexes) with a placeholder id.
pub(crate) fn destination_rule(target: Target, ports: Option<Vec<u16>>) -> Rule {
    Rule {
        id: String::new(),
        target,
        methods: None,
        paths: Vec::new(),
        path_regex: Vec::new(),
        ports,
        json_deny: Vec::new(),
        process: None,
    }
}

/// A host-pattern rule with the given methods and regexes and the default ports.
pub(crate) fn host_rule(
    host: HostPattern,
    methods: Option<Vec<String>>,
    path_regex: Vec<String>,
) -> Rule {
    Rule {
        id: String::new(),
        target: Target::Host(host),
        methods,
        paths: Vec::new(),
        path_regex,
        ports: None,
        json_deny: Vec::new(),
        process: None,
    }
}

/// Give every rule its contract id (`network.allow[i]`, `network.deny[i]`, `mcp[i]`), in
/// the order the policy holds them: the ids the native loader gives the emitted YAML.
pub(crate) fn assign_ids(policy: &mut Policy) {
    for (index, rule) in policy.network.allow.iter_mut().enumerate() {
        rule.id = format!("network.allow[{index}]");
    }
    for (index, rule) in policy.network.deny.iter_mut().enumerate() {
        rule.id = format!("network.deny[{index}]");
    }
    for (index, rule) in policy.mcp.iter_mut().enumerate() {
        rule.id = format!("mcp[{index}]");
    }
}

/// `*.suffix` in the seeds that let it match `suffix` itself too (secrets-proxy, sandbox0):
/// both patterns airlock needs for that.
pub(crate) fn suffix_and_apex(suffix: String) -> [HostPattern; 2] {
    [
        HostPattern::Exact(suffix.clone()),
        HostPattern::Wildcard(suffix),
    ]
}

/// Whether two host patterns can match a common host.
pub(crate) fn hosts_overlap(a: &HostPattern, b: &HostPattern) -> bool {
    use HostPattern::{Any, Exact, Ip, Wildcard};
    let under = |name: &str, suffix: &str| {
        name.len() > suffix.len()
            && name.ends_with(suffix)
            && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
    };
    match (a, b) {
        (Any, Ip(_)) | (Ip(_), Any) => false,
        (Any, _) | (_, Any) => true,
        (Ip(x), Ip(y)) => x == y,
        (Ip(_), _) | (_, Ip(_)) => false,
        (Exact(x), Exact(y)) => x == y,
        (Exact(name), Wildcard(suffix)) | (Wildcard(suffix), Exact(name)) => under(name, suffix),
        (Wildcard(x), Wildcard(y)) => x == y || under(x, y) || under(y, x),
    }
}

/// Push `rule` unless an identical rule (ids aside) is already there.
pub(crate) fn push_unique(rules: &mut Vec<Rule>, rule: Rule) {
    if !rules.iter().any(|existing| existing == &rule) {
        rules.push(rule);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip_and_unknown_lists_valid_names() {
        for format in SeedFormat::ALL {
            assert_eq!(format.as_str().parse::<SeedFormat>(), Ok(format));
        }
        let error = "airlock".parse::<SeedFormat>().unwrap_err();
        let message = error.to_string();
        for format in SeedFormat::ALL {
            assert!(message.contains(format.as_str()), "{message}");
        }
    }

    #[test]
    fn parser_errors_are_located_without_snippet() {
        let error =
            parse_document::<Ordered<String, String>>("f.json", "{\"a\": \"b\",\n \"c\": [}")
                .err()
                .unwrap();
        assert_eq!(error.errors.len(), 1);
        let located = &error.errors[0];
        assert_eq!((located.file.as_str(), located.line), ("f.json", 2));
        assert!(!located.message.contains('\n'), "{}", located.message);
    }

    #[test]
    fn overlap_of_host_patterns() {
        let exact = |s: &str| HostPattern::Exact(s.to_owned());
        let wild = |s: &str| HostPattern::Wildcard(s.to_owned());
        assert!(hosts_overlap(&exact("a.b.c"), &wild("b.c")));
        assert!(!hosts_overlap(&exact("b.c"), &wild("b.c")));
        assert!(!hosts_overlap(&exact("xb.c"), &wild("b.c")));
        assert!(hosts_overlap(&wild("a.b.c"), &wild("b.c")));
        assert!(!hosts_overlap(&wild("ab.c"), &wild("b.c")));
        assert!(hosts_overlap(&HostPattern::Any, &exact("x")));
        let ip = HostPattern::Ip("10.0.0.1".parse().unwrap());
        assert!(!hosts_overlap(&HostPattern::Any, &ip));
        assert!(hosts_overlap(&ip, &ip.clone()));
    }
}
