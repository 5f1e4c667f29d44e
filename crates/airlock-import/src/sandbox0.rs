//! sandbox0's `SandboxNetworkPolicy` (template `spec.network`, claim `config.network`,
//! `PUT /api/v1/sandboxes/{id}/network`), YAML or JSON:
//!
//! ```yaml
//! mode: block-all                     # fallback for traffic no rule matches
//! egress:
//!   trafficRules:                     # ordered; the first matching rule wins
//!     - name: allow-docs-mcp
//!       action: allow
//!       domains: [mcp.example.com]
//!       ports: [{port: 443, protocol: tcp}]
//!   protocolRules:
//!     - name: docs-mcp-tools
//!       protocol: mcp
//!       domains: [mcp.example.com]
//!       ports: [{port: 443, protocol: tcp}]
//!       tlsMode: terminate-reoriginate
//!       httpMatch: {methods: [POST], paths: [/mcp]}
//!       mcp: {tools: {allowed: [read_file], denied: [write_file, run_command]}}
//! ```
//!
//! How sandbox0 decides, and the translation:
//!
//! * `mode` is `block-all` or `allow-all`; sandbox0 treats a missing mode as `allow-all`,
//!   and so does the importer (an empty file, though, is airlock's empty policy and allows
//!   nothing). `allow-all` becomes an allow rule for every host name (`*`, ports 80 and
//!   443).
//! * A traffic rule matches when every matcher it names matches (any listed domain, any
//!   listed CIDR, any listed port); `*.example.com` matches `example.com` too, so it becomes
//!   both patterns. Allow rules become allow rules, one per domain or CIDR (a rule with only
//!   ports allows every host name on them).
//! * First match wins in sandbox0; in airlock any deny beats every allow. A deny rule is
//!   therefore kept only where it changes a decision (in `allow-all`, always; in
//!   `block-all`, when a later allow rule overlaps it) and then it must not overlap an
//!   earlier allow rule; otherwise the import fails naming both rules. Overlap is judged
//!   conservatively: a name and a CIDR always may overlap, since a name can resolve
//!   anywhere. A deny without ports covers every port the overlapping allows open; a deny
//!   with only ports becomes a deny of `0.0.0.0/0` and `::/0` on them (a deny CIDR also
//!   applies to the address a name resolves to).
//! * `protocol: mcp` rules become `mcp` rules, one per domain and path: `httpMatch.paths`
//!   are exact, `pathPrefixes` become globs, neither means every path; `denied` is checked
//!   before `allowed` and an empty `allowed` allows every tool not denied, as in airlock.
//!   A rule whose `httpMatch.methods` leave out POST never sees a `tools/call` and is
//!   dropped.
//!
//! Refused, with the rule named: `appProtocols` (airlock does not classify protocols), a
//! rule naming both domains and CIDRs, `protocol: http` rules, `httpMatch` query or header
//! matchers, MCP rules without domains, `credentialRules`, `proxy` and the deprecated
//! `allowed*`/`denied*` lists. Stricter than sandbox0, never looser: airlock has no UDP
//! (UDP-only rules are dropped), opens ports 80 and 443 when a rule names none, keeps its
//! private-address guard, applies MCP tool rules on every port and also filters
//! `tools/list`.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::{Location, Spanned};
use std::collections::BTreeSet;

use super::{
    Problems, at, destination_rule, hosts_overlap, parse_document, push_unique, suffix_and_apex,
};
use airlock_policy::load::LoadError;
use airlock_policy::model::{DEFAULT_PORTS, HostPattern, Policy, Target};
use airlock_policy::rule::parse_host_pattern;

mod mcp;

use mcp::translate_protocol_rule;

/// The most TCP ports one rule may expand to (airlock lists ports one by one).
const MAX_PORTS_PER_RULE: usize = 1024;

/// The whole policy.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkPolicy {
    mode: Option<Spanned<String>>,
    egress: Option<Egress>,
}

/// `egress`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Egress {
    traffic_rules: Option<Vec<Spanned<TrafficRule>>>,
    protocol_rules: Option<Vec<Spanned<ProtocolRule>>>,
    credential_rules: Option<Spanned<Vec<IgnoredAny>>>,
    proxy: Option<Spanned<IgnoredAny>>,
    allowed_domains: Option<Spanned<Vec<IgnoredAny>>>,
    allowed_cidrs: Option<Spanned<Vec<IgnoredAny>>>,
    allowed_ports: Option<Spanned<Vec<IgnoredAny>>>,
    denied_domains: Option<Spanned<Vec<IgnoredAny>>>,
    denied_cidrs: Option<Spanned<Vec<IgnoredAny>>>,
    denied_ports: Option<Spanned<Vec<IgnoredAny>>>,
}

/// One `trafficRules` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TrafficRule {
    name: Option<String>,
    action: Option<Spanned<String>>,
    cidrs: Option<Vec<Spanned<String>>>,
    domains: Option<Vec<Spanned<String>>>,
    ports: Option<Vec<Spanned<PortSpec>>>,
    app_protocols: Option<Vec<Spanned<String>>>,
}

/// One `ports` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PortSpec {
    port: i64,
    protocol: Option<String>,
    end_port: Option<i64>,
}

/// One `protocolRules` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ProtocolRule {
    name: Option<String>,
    protocol: Option<Spanned<String>>,
    domains: Option<Vec<Spanned<String>>>,
    ports: Option<Vec<Spanned<PortSpec>>>,
    tls_mode: Option<Spanned<String>>,
    http_match: Option<Spanned<HttpMatch>>,
    mcp: Option<Spanned<McpSpec>>,
    http: Option<Spanned<IgnoredAny>>,
}

/// `httpMatch`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HttpMatch {
    methods: Option<Vec<Spanned<String>>>,
    paths: Option<Vec<Spanned<String>>>,
    path_prefixes: Option<Vec<Spanned<String>>>,
    query: Option<Spanned<Vec<IgnoredAny>>>,
    headers: Option<Spanned<Vec<IgnoredAny>>>,
}

/// `mcp`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpSpec {
    tools: Option<Tools>,
}

/// `mcp.tools`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Tools {
    allowed: Option<Vec<Spanned<String>>>,
    denied: Option<Vec<Spanned<String>>>,
}

/// Allow or deny.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Allow,
    Deny,
}

/// What destinations a traffic rule names.
enum Destination {
    /// No domain and no CIDR: every destination (on the rule's ports).
    Everything,
    /// Host patterns (`*.x` already split into `x` and `*.x`).
    Hosts(Vec<HostPattern>),
    /// Address ranges.
    Cidrs(Vec<IpNet>),
}

/// A validated traffic rule.
struct Source {
    label: String,
    location: Location,
    action: Action,
    destination: Destination,
    /// TCP ports; `None` = every port.
    ports: Option<BTreeSet<u16>>,
}

/// Import a sandbox0 network policy.
pub fn import(file: &str, text: &str) -> Result<Policy, LoadError> {
    let mut problems = Problems::new(file);
    let Some(document) = parse_document::<NetworkPolicy>(file, text)? else {
        // sandbox0 reads an absent policy as allow-all, but an empty file is airlock's
        // empty policy, which allows nothing (docs/contract.md §3, nothing passes by
        // default).
        return Ok(Policy::default());
    };
    let allow_all = match &document.mode {
        None => true,
        Some(mode) => match mode.value.as_str() {
            "allow-all" | "" => true,
            "block-all" => false,
            other => {
                problems.at(
                    at(mode),
                    format!("mode {other:?} is not a sandbox0 mode: use block-all or allow-all"),
                );
                false
            }
        },
    };
    let mut sources = Vec::new();
    let mut protocol_rules: &[Spanned<ProtocolRule>] = &[];
    if let Some(egress) = &document.egress {
        refuse_unsupported(egress, &mut problems);
        let mut names: Vec<(&str, usize)> = Vec::new();
        for (index, rule) in egress.traffic_rules.iter().flatten().enumerate() {
            let label = rule_label("egress.trafficRules", index, rule.value.name.as_deref());
            if let Some(name) = rule
                .value
                .name
                .as_deref()
                .map(str::trim)
                .filter(|n| !n.is_empty())
            {
                if let Some((_, first)) = names.iter().find(|(n, _)| *n == name) {
                    problems.at(
                        at(rule),
                        format!("{label} repeats the name of egress.trafficRules[{first}]"),
                    );
                }
                names.push((name, index));
            }
            if let Some(source) = read_traffic_rule(label, rule, &mut problems) {
                sources.push(source);
            }
        }
        protocol_rules = egress.protocol_rules.as_deref().unwrap_or_default();
    }
    let mut policy = Policy::default();
    translate_traffic(&sources, allow_all, &mut policy, &mut problems);
    for (index, rule) in protocol_rules.iter().enumerate() {
        translate_protocol_rule(index, rule, &mut policy, &mut problems);
    }
    super::assign_ids(&mut policy);
    problems.finish(policy)
}

/// `egress.trafficRules[3] ("allow-github")`.
fn rule_label(list: &str, index: usize, name: Option<&str>) -> String {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        Some(name) => format!("{list}[{index}] ({name:?})"),
        None => format!("{list}[{index}]"),
    }
}

/// Refuse the parts of `egress` the importer does not translate.
fn refuse_unsupported(egress: &Egress, problems: &mut Problems) {
    if let Some(rules) = egress
        .credential_rules
        .as_ref()
        .filter(|r| !r.value.is_empty())
    {
        problems.at(
            at(rules),
            "egress.credentialRules are not imported: declare the credentials as airlock secrets (`secrets:` with their hosts and `inject`)",
        );
    }
    if let Some(proxy) = &egress.proxy {
        problems.at(
            at(proxy),
            "egress.proxy (a SOCKS5 upstream) has no airlock equivalent: remove it",
        );
    }
    let legacy = [
        ("allowedDomains", &egress.allowed_domains),
        ("allowedCidrs", &egress.allowed_cidrs),
        ("allowedPorts", &egress.allowed_ports),
        ("deniedDomains", &egress.denied_domains),
        ("deniedCidrs", &egress.denied_cidrs),
        ("deniedPorts", &egress.denied_ports),
    ];
    for (key, list) in legacy {
        if let Some(list) = list.as_ref().filter(|l| !l.value.is_empty()) {
            problems.at(
                at(list),
                format!("egress.{key} is deprecated in sandbox0 and not imported: write it as trafficRules"),
            );
        }
    }
}

/// Validate one traffic rule. `None` when it is invalid or concerns only UDP (which
/// airlock never allows, so neither its allow nor its deny changes a decision).
fn read_traffic_rule(
    label: String,
    rule: &Spanned<TrafficRule>,
    problems: &mut Problems,
) -> Option<Source> {
    let before = problems.len();
    let spec = &rule.value;
    let action = match spec.action.as_ref().map(|a| a.value.as_str()) {
        Some("allow") => Some(Action::Allow),
        Some("deny") => Some(Action::Deny),
        Some(other) => {
            problems.at(
                at(rule),
                format!("{label}: action {other:?} is not allow or deny"),
            );
            None
        }
        None => {
            problems.at(
                at(rule),
                format!("{label}: `action` (allow or deny) is required"),
            );
            None
        }
    };
    let hosts = read_domains(
        &label,
        spec.domains.as_deref().unwrap_or_default(),
        problems,
    );
    let mut cidrs = Vec::new();
    for cidr in spec.cidrs.iter().flatten() {
        let text = cidr.value.trim();
        if text.is_empty() {
            continue;
        }
        match text.parse::<IpNet>() {
            Ok(net) => cidrs.push(net.trunc()),
            Err(_) => problems.at(
                at(cidr),
                format!("{label}: {text:?} is not a CIDR such as 10.0.0.0/8"),
            ),
        }
    }
    let listed_ports = spec.ports.as_deref().unwrap_or_default();
    let ports = read_ports(&label, listed_ports, true, problems);
    let app_protocols: Vec<&Spanned<String>> = spec
        .app_protocols
        .iter()
        .flatten()
        .filter(|p| !p.value.trim().is_empty())
        .collect();
    if let Some(first) = app_protocols.first() {
        problems.at(
            at(first),
            format!(
                "{label}: appProtocols match classified protocols, which airlock rules cannot express: use ports (and, for HTTP, airlock's methods and paths) instead"
            ),
        );
    }
    if hosts.is_empty() && cidrs.is_empty() && listed_ports.is_empty() && app_protocols.is_empty() {
        problems.at(
            at(rule),
            format!("{label} must name at least one of domains, cidrs, ports"),
        );
    }
    if !hosts.is_empty() && !cidrs.is_empty() {
        problems.at(
            at(rule),
            format!(
                "{label} names both domains and CIDRs, which airlock cannot express as one rule: split it into a rule for the domains and a rule for the CIDRs"
            ),
        );
    }
    if problems.len() != before {
        return None;
    }
    let ports = ports?;
    if ports.as_ref().is_some_and(BTreeSet::is_empty) {
        return None;
    }
    let destination = if !hosts.is_empty() {
        Destination::Hosts(hosts)
    } else if !cidrs.is_empty() {
        Destination::Cidrs(cidrs)
    } else {
        Destination::Everything
    };
    Some(Source {
        label,
        location: *at(rule),
        action: action?,
        destination,
        ports,
    })
}

/// Domains as host patterns (`*.x` gives `x` and `*.x`); empty entries are skipped, as in
/// sandbox0.
fn read_domains(
    label: &str,
    domains: &[Spanned<String>],
    problems: &mut Problems,
) -> Vec<HostPattern> {
    let mut hosts = Vec::new();
    for domain in domains {
        let text = domain.value.trim().to_lowercase();
        if text.is_empty() {
            continue;
        }
        let parsed = match parse_host_pattern(&text) {
            Ok(HostPattern::Wildcard(suffix)) => Ok(suffix_and_apex(suffix).to_vec()),
            Ok(other) => Ok(vec![other]),
            Err(error) => Err(error.to_string()),
        };
        match parsed {
            Ok(patterns) => {
                for pattern in patterns {
                    if !hosts.contains(&pattern) {
                        hosts.push(pattern);
                    }
                }
            }
            Err(message) => problems.at(
                at(domain),
                format!("{label}: domain {:?}: {message}", domain.value),
            ),
        }
    }
    hosts
}

/// The TCP ports of a `ports` list: `Some(None)` for an empty list (every port),
/// `Some(Some(set))` otherwise (empty when only UDP is named); `None` after a problem.
/// `udp_allowed` is false for protocol rules, which sandbox0 limits to TCP.
fn read_ports(
    label: &str,
    ports: &[Spanned<PortSpec>],
    udp_allowed: bool,
    problems: &mut Problems,
) -> Option<Option<BTreeSet<u16>>> {
    if ports.is_empty() {
        return Some(None);
    }
    let before = problems.len();
    let mut tcp = BTreeSet::new();
    for spec in ports {
        let port = &spec.value;
        let start = u16::try_from(port.port).ok().filter(|p| *p != 0);
        let end = match port.end_port {
            None => start,
            Some(end) => u16::try_from(end)
                .ok()
                .filter(|e| start.is_some_and(|s| *e >= s)),
        };
        let (Some(start), Some(end)) = (start, end) else {
            problems.at(
                at(spec),
                format!("{label}: ports are 1 to 65535, with endPort not below port"),
            );
            continue;
        };
        let protocol = port
            .protocol
            .as_deref()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match protocol.as_str() {
            "" | "tcp" => {
                if usize::from(end - start) >= MAX_PORTS_PER_RULE
                    || tcp.len() + usize::from(end - start) >= MAX_PORTS_PER_RULE
                {
                    problems.at(
                        at(spec),
                        format!(
                            "{label}: more than {MAX_PORTS_PER_RULE} TCP ports; airlock rules list their ports one by one: narrow the range"
                        ),
                    );
                    continue;
                }
                tcp.extend(start..=end);
            }
            "udp" if udp_allowed => {}
            other => problems.at(
                at(spec),
                format!(
                    "{label}: protocol {other:?} is not {}",
                    if udp_allowed { "tcp or udp" } else { "tcp" }
                ),
            ),
        }
    }
    (problems.len() == before).then_some(Some(tcp))
}

/// Whether two traffic rules can match a common connection.
fn overlap(a: &Source, b: &Source) -> bool {
    let ports = match (&a.ports, &b.ports) {
        (Some(x), Some(y)) => !x.is_disjoint(y),
        _ => true,
    };
    ports && destinations_overlap(&a.destination, &b.destination)
}

/// Whether two destinations can share an address or name (names may resolve anywhere).
fn destinations_overlap(a: &Destination, b: &Destination) -> bool {
    use Destination::{Cidrs, Everything, Hosts};
    match (a, b) {
        (Everything, _) | (_, Everything) => true,
        (Hosts(x), Hosts(y)) => x.iter().any(|p| y.iter().any(|q| hosts_overlap(p, q))),
        (Cidrs(x), Cidrs(y)) => x.iter().any(|n| {
            y.iter()
                .any(|m| n.contains(&m.network()) || m.contains(&n.network()))
        }),
        (Hosts(hosts), Cidrs(nets)) | (Cidrs(nets), Hosts(hosts)) => {
            hosts.iter().any(|h| match h {
                HostPattern::Ip(ip) => nets.iter().any(|n| n.contains(ip)),
                _ => true,
            })
        }
    }
}

/// Traffic rules into allow and deny rules (see the module documentation).
fn translate_traffic(
    sources: &[Source],
    allow_all: bool,
    policy: &mut Policy,
    problems: &mut Problems,
) {
    if allow_all {
        push_unique(
            &mut policy.network.allow,
            destination_rule(Target::Host(HostPattern::Any), None),
        );
    }
    for source in sources.iter().filter(|s| s.action == Action::Allow) {
        let ports = source
            .ports
            .as_ref()
            .map(|set| set.iter().copied().collect::<Vec<_>>());
        let targets: Vec<Target> = match &source.destination {
            Destination::Everything => vec![Target::Host(HostPattern::Any)],
            Destination::Hosts(hosts) => hosts.iter().cloned().map(Target::Host).collect(),
            Destination::Cidrs(nets) => nets.iter().copied().map(Target::Cidr).collect(),
        };
        for target in targets {
            push_unique(
                &mut policy.network.allow,
                destination_rule(target, ports.clone()),
            );
        }
    }
    for (position, deny) in sources.iter().enumerate() {
        if deny.action != Action::Deny {
            continue;
        }
        let overlapping_allow = |s: &&Source| s.action == Action::Allow && overlap(s, deny);
        let later = sources[position + 1..].iter().find(overlapping_allow);
        if !allow_all && later.is_none() {
            // Nothing after it allows what it denies: the fallback (block) or an earlier
            // allow decides exactly as in sandbox0 without it.
            continue;
        }
        if let Some(earlier) = sources[..position].iter().find(overlapping_allow) {
            let because = match later {
                Some(later) if !allow_all => format!(" and the later {} allows again", later.label),
                _ => String::new(),
            };
            problems.at(
                &deny.location,
                format!(
                    "{} denies traffic that the earlier {} allows{because}; sandbox0 takes the first matching rule but an airlock deny always wins, so this order cannot be expressed: move the deny before the allow or make them disjoint",
                    deny.label, earlier.label
                ),
            );
            continue;
        }
        let ports = deny_ports(deny, sources);
        let targets: Vec<Target> = match &deny.destination {
            Destination::Everything => vec![
                Target::Cidr(IpNet::V4(Ipv4Net::default())),
                Target::Cidr(IpNet::V6(Ipv6Net::default())),
            ],
            Destination::Hosts(hosts) => hosts.iter().cloned().map(Target::Host).collect(),
            Destination::Cidrs(nets) => nets.iter().copied().map(Target::Cidr).collect(),
        };
        for target in targets {
            push_unique(
                &mut policy.network.deny,
                destination_rule(target, ports.clone()),
            );
        }
    }
}

/// The ports a deny rule needs: its own, or (when it names none, i.e. every port) every
/// port that an overlapping allow opens, which is all airlock could let through.
fn deny_ports(deny: &Source, sources: &[Source]) -> Option<Vec<u16>> {
    if let Some(own) = &deny.ports {
        return Some(own.iter().copied().collect());
    }
    let mut ports: BTreeSet<u16> = DEFAULT_PORTS.into_iter().collect();
    // The allow-all base rule opens the default ports, which are always included.
    for allow in sources
        .iter()
        .filter(|s| s.action == Action::Allow && overlap(s, deny))
    {
        match &allow.ports {
            Some(own) => ports.extend(own),
            None => ports.extend(DEFAULT_PORTS),
        }
    }
    let default: BTreeSet<u16> = DEFAULT_PORTS.into_iter().collect();
    (ports != default).then(|| ports.into_iter().collect())
}
