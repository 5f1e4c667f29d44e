//! `airlock policy suggest`: from audit lines (docs/contract.md §5) to the smallest
//! readable `network.allow` entries that would have allowed what was refused for its host,
//! method or path, or let through with `"would":"deny"` in report mode.
//!
//! Pure: [`parse_line`] reads one line of text, [`suggest`] groups what was seen by host
//! against the `--base` policy, [`Suggestion::render`] writes the YAML. Reading the files
//! is the caller's job.
//!
//! - One entry per host; `ports` only when a port other than 80 and 443 was seen.
//! - `methods`: those seen. `paths`: exact paths, except that [`MIN_SHARED`] or more paths
//!   sharing a first segment become one `PREFIX/**` glob (PREFIX their longest common
//!   leading segments); more than [`MAX_PATHS`] patterns for a host become every path.
//! - A tunnel or raw TCP connection refused for its host (no method or path known) makes
//!   the entry destination-only (no `methods`, no `paths`).
//! - Never suggested: an IP literal that is not a global address, a host refused as
//!   `private_address` anywhere in the input, `airlock.internal` (routes are configured
//!   under `routes`). Each is named in a comment (hosts refused as `private_address` too,
//!   even when nothing else was seen of them).
//! - What the base policy already allows is left out (decided by its compiled matcher).
//! - By program ([`suggest_by`], `--by-process`): one entry per host *and* executable
//!   (the line's `process.exe`), with `process: [EXE]`; lines without a usable `exe`
//!   (none, `null`, escaped or cut) are grouped apart, without `process`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::canonical::{CanonicalRequest, Host, ROUTE_HOST, canonical_host};
use crate::decision::Reason;
use crate::matcher::CompiledPolicy;
use crate::mode::relaxable;
use crate::net;

/// Distinct paths under one first segment from which they are generalised to a glob.
pub const MIN_SHARED: usize = 3;
/// The most path patterns one entry lists; beyond that it allows every path.
pub const MAX_PATHS: usize = 8;
/// Examples given in each entry's comment.
const EXAMPLES: usize = 2;

/// One request (or tunnel) that was refused, or would have been, for host, method or path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The request method; `None` for a tunnel or raw TCP connection (a `CONNECT` line
    /// or a `tcp` line).
    pub method: Option<String>,
    /// The canonical host.
    pub host: Host,
    /// The destination port.
    pub port: u16,
    /// The canonical path without query; `None` with `method`.
    pub path: Option<String>,
    /// The refusal (or would-be refusal).
    pub reason: Reason,
    /// The executable that made it (`process.exe` of a line from a jail), when it is a
    /// plain absolute path (nothing escaped or cut, docs/contract.md §5).
    pub program: Option<String>,
}

/// What one audit line contributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// A refusal (or would-be refusal) for host, method or path.
    Refused(Observed),
    /// A refusal for a private address: the host is never suggested.
    Private(Host),
    /// Any other line.
    Other,
}

/// Reads one audit line. Blank lines are [`Seen::Other`]; text that is not a JSON object
/// with `kind` and `decision` is an error, as is a relevant line without a valid host.
pub fn parse_line(text: &str) -> Result<Seen, String> {
    if text.trim().is_empty() {
        return Ok(Seen::Other);
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON audit line: {e}"))?;
    let Some(object) = value.as_object() else {
        return Err("not a JSON audit line: not an object".to_owned());
    };
    // A signed checkpoint of the log's chain (docs/contract.md §5) decides nothing.
    if string(object, "kind") == Some("checkpoint") {
        return Ok(Seen::Other);
    }
    let (Some(kind), Some(decision)) = (string(object, "kind"), string(object, "decision")) else {
        return Err("not an audit line: `kind` and `decision` are missing".to_owned());
    };
    let reason = string(object, "reason").and_then(reason_named);
    let would = string(object, "would") == Some("deny");
    if !matches!(kind, "http" | "ws" | "tcp") {
        return Ok(Seen::Other);
    }
    match reason {
        Some(Reason::PrivateAddress) => Ok(Seen::Private(host_of(object)?)),
        Some(reason) if relaxable(reason) && (decision == "deny" || would) => {
            observed(object, kind, reason).map(Seen::Refused)
        }
        _ => Ok(Seen::Other),
    }
}

fn string<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

fn reason_named(name: &str) -> Option<Reason> {
    Reason::ALL
        .into_iter()
        .find(|reason| reason.as_str() == name)
}

fn host_of(object: &Map<String, Value>) -> Result<Host, String> {
    let text = string(object, "host").ok_or("a refused line without `host`")?;
    canonical_host(text).map_err(|e| format!("host {text:?}: {e}"))
}

fn observed(object: &Map<String, Value>, kind: &str, reason: Reason) -> Result<Observed, String> {
    let host = host_of(object)?;
    let port = match object.get("port").map(Value::as_u64) {
        Some(Some(port)) => u16::try_from(port).map_err(|_| format!("port {port} out of range"))?,
        Some(None) => return Err("`port` is not a number".to_owned()),
        None if string(object, "scheme") == Some("http") => 80,
        None => 443,
    };
    let method = string(object, "method").filter(|m| kind != "tcp" && *m != "CONNECT");
    let path = string(object, "path").filter(|_| method.is_some());
    if method.is_some() && path.is_none_or(|path| !path.starts_with('/')) {
        return Err("a refused request without an absolute `path`".to_owned());
    }
    let program = object
        .get("process")
        .and_then(|process| process.get("exe"))
        .and_then(Value::as_str)
        .filter(|exe| plain_exe(exe))
        .map(str::to_owned);
    Ok(Observed {
        method: method.map(str::to_ascii_uppercase),
        host,
        port,
        path: path.map(str::to_owned),
        reason,
        program,
    })
}

/// Whether an audit line's `exe` is a path a rule can name as it is: absolute, nothing
/// escaped (`\`), not cut (`…`), not a deleted file, no control character.
fn plain_exe(exe: &str) -> bool {
    exe.starts_with('/')
        && !exe.contains(['\\', '…'])
        && !exe.ends_with(" (deleted)")
        && !exe.chars().any(char::is_control)
        && crate::programs::check_program(exe).is_ok()
}

/// The suggested entries and what was left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Suggestion {
    /// One entry per host, in host order.
    pub entries: Vec<Entry>,
    /// Hosts never suggested, with why.
    pub skipped: Vec<(String, &'static str)>,
    /// Refusals the base policy already allows.
    pub already_allowed: usize,
    /// Refusals considered (the entries' counts plus what was skipped or already allowed).
    pub considered: usize,
}

/// One suggested `network.allow` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The canonical host, as a policy writes it.
    pub host: String,
    /// `None` for the default ports (80 and 443).
    pub ports: Option<Vec<u16>>,
    /// `None` for every method (a tunnel was refused as such).
    pub methods: Option<Vec<String>>,
    /// `None` for every path.
    pub paths: Option<Vec<String>>,
    /// Refusals per reason.
    pub reasons: BTreeMap<&'static str, usize>,
    /// A few of the requests, as `METHOD /path` (or `CONNECT host:port`).
    pub examples: Vec<String>,
    /// Requests whose path was not canonical (see [`generalise`]): no pattern was made
    /// for them.
    pub unsafe_paths: usize,
    /// The program it is for ([`suggest_by`]); `None`: every program.
    pub process: Option<String>,
}

impl Entry {
    /// How many refusals the entry stands for.
    pub fn count(&self) -> usize {
        self.reasons.values().sum()
    }
}

/// What one host gathered.
#[derive(Default)]
struct Group {
    ports: BTreeSet<u16>,
    methods: BTreeSet<String>,
    paths: BTreeSet<String>,
    destination_only: bool,
    /// Paths left out because a path rule would refuse them as `path_unsafe` anyway.
    unsafe_paths: usize,
    reasons: BTreeMap<&'static str, usize>,
    examples: Vec<String>,
    program: Option<String>,
}

/// Groups `seen` by host into entries, leaving out what `base` already allows and the
/// hosts that must never be suggested.
pub fn suggest(seen: &[Seen], base: &CompiledPolicy) -> Suggestion {
    suggest_by(seen, base, false)
}

/// [`suggest`], grouping by host and program when `by_process` (one entry per executable
/// seen, with `process: [EXE]`).
pub fn suggest_by(seen: &[Seen], base: &CompiledPolicy, by_process: bool) -> Suggestion {
    let private: HashSet<&Host> = seen
        .iter()
        .filter_map(|seen| match seen {
            Seen::Private(host) => Some(host),
            _ => None,
        })
        .collect();
    let mut out = Suggestion::default();
    let mut groups: BTreeMap<(String, Option<String>), Group> = BTreeMap::new();
    let mut skipped: BTreeMap<String, &'static str> = BTreeMap::new();
    for host in &private {
        if let Some(why) = never_suggested(host, true) {
            skipped.insert(host.to_string(), why);
        }
    }
    for observed in seen.iter().filter_map(|seen| match seen {
        Seen::Refused(observed) => Some(observed),
        _ => None,
    }) {
        out.considered += 1;
        let host = observed.host.to_string();
        if let Some(why) = never_suggested(&observed.host, private.contains(&observed.host)) {
            skipped.insert(host, why);
        } else if allowed_by(base, observed) {
            out.already_allowed += 1;
        } else {
            let program = observed.program.clone().filter(|_| by_process);
            let group = groups.entry((host, program.clone())).or_default();
            group.program = program;
            add(group, observed);
        }
    }
    out.entries = groups
        .into_iter()
        .map(|((host, _), group)| entry(host, group))
        .collect();
    out.skipped = skipped.into_iter().collect();
    out
}

/// Why `host` is never suggested, if it is not.
fn never_suggested(host: &Host, refused_private: bool) -> Option<&'static str> {
    match host {
        Host::Ip(ip) if !net::is_global(*ip) => Some(
            "a private, loopback or link-local address (name it with a `cidr` rule or \
             `--resolve` if it is meant)",
        ),
        Host::Name(name) if name == ROUTE_HOST => Some("airlock's own route host (use `routes`)"),
        _ if refused_private => Some(
            "it resolved to a private address (refused as private_address; name the address \
             with `--resolve` or a `cidr` rule if it is meant)",
        ),
        _ => None,
    }
}

/// The program of an audit line as `process:` rules see it: its executable, matched
/// literally (a rule naming it by its path).
struct Literal<'a>(&'a str);

impl crate::programs::ProgramCheck for Literal<'_> {
    fn is(&self, entry: &str) -> bool {
        entry == self.0
    }
}

/// Whether `base` already allows what was observed (by the program that did it, named
/// by its path).
pub fn allowed_by(base: &CompiledPolicy, observed: &Observed) -> bool {
    let literal = observed.program.as_deref().map(Literal);
    let caller = literal
        .as_ref()
        .map(|check| check as &dyn crate::programs::ProgramCheck);
    match (&observed.method, &observed.path) {
        (Some(method), Some(path)) => base
            .decide_as(
                &CanonicalRequest {
                    method: method.clone(),
                    host: observed.host.clone(),
                    port: observed.port,
                    path: Ok(path.clone()),
                    query: None,
                },
                caller,
            )
            .is_allow(),
        _ => {
            let tunnel = base.decide_tunnel_as(&observed.host, observed.port, caller);
            tunnel.decision.is_allow() && tunnel.raw_tcp_allowed
        }
    }
}

fn add(group: &mut Group, observed: &Observed) {
    group.ports.insert(observed.port);
    *group.reasons.entry(observed.reason.as_str()).or_default() += 1;
    let example = match (&observed.method, &observed.path) {
        (Some(method), Some(path)) => {
            group.methods.insert(method.clone());
            if looks_unsafe(path) {
                group.unsafe_paths += 1;
            } else {
                group.paths.insert(path.clone());
            }
            format!("{method} {path}")
        }
        _ => {
            group.destination_only = true;
            format!("CONNECT {}:{}", observed.host, observed.port)
        }
    };
    let example: String = example
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if group.examples.len() < EXAMPLES && !group.examples.contains(&example) {
        group.examples.push(example);
    }
}

fn entry(host: String, group: Group) -> Entry {
    let ports = group
        .ports
        .iter()
        .any(|port| !crate::model::DEFAULT_PORTS.contains(port))
        .then(|| group.ports.iter().copied().collect());
    let (methods, paths) = if group.destination_only {
        (None, None)
    } else {
        let paths = if group.paths.is_empty() {
            None
        } else {
            generalise(&group.paths)
        };
        (Some(group.methods.into_iter().collect()), paths)
    };
    Entry {
        host,
        ports,
        methods,
        paths,
        reasons: group.reasons,
        examples: group.examples,
        unsafe_paths: group.unsafe_paths,
        process: group.program,
    }
}

/// Path patterns covering every path of `paths`: exact paths, or, where [`MIN_SHARED`] or
/// more share a first segment, `PREFIX/**` (plus `PREFIX` itself when it is one of them,
/// since `/**` does not match its parent); `None` (every path) beyond [`MAX_PATHS`].
pub fn generalise(paths: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut by_first: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for path in paths {
        let first = path[1..].split('/').next().unwrap_or_default();
        by_first.entry(first).or_default().push(path);
    }
    let mut patterns = Vec::new();
    for group in by_first.into_values() {
        if group.len() < MIN_SHARED {
            patterns.extend(group.iter().map(|path| escape(path)));
            continue;
        }
        let (prefix, is_path) = common_prefix(&group);
        if is_path {
            patterns.push(escape(&prefix));
        }
        patterns.push(format!("{}/**", escape(&prefix)));
    }
    (patterns.len() <= MAX_PATHS).then_some(patterns)
}

/// The longest run of leading segments all `paths` share, and whether it is itself one of
/// them; when it is not, it stops before each path's last segment (`/simple/a/`,
/// `/simple/b/` → `/simple`), so that `PREFIX/**` covers every path.
fn common_prefix(paths: &[&str]) -> (String, bool) {
    let segments: Vec<Vec<&str>> = paths
        .iter()
        .map(|path| path[1..].split('/').collect())
        .collect();
    let mut common = segments[0].clone();
    for other in &segments[1..] {
        let shared = common.iter().zip(other).take_while(|(a, b)| a == b).count();
        common.truncate(shared);
    }
    let is_path = segments.contains(&common);
    if !is_path {
        let shortest_parent = segments
            .iter()
            .map(|path| path.len() - 1)
            .min()
            .unwrap_or(0);
        common.truncate(shortest_parent);
    }
    (format!("/{}", common.join("/")), is_path)
}

/// Whether `path` is not a canonical path (the proxy logs an unsafe path as sent): a
/// backslash, a NUL, a `.` or `..` segment or a percent escape. Such a path can never be
/// allowed by a path rule (docs/policy.md, "Canonical path"), so no glob is made for it.
fn looks_unsafe(path: &str) -> bool {
    let escaped = path
        .as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1].is_ascii_hexdigit() && w[2].is_ascii_hexdigit());
    escaped
        || path.contains(['\\', '\0'])
        || path
            .split('/')
            .any(|segment| segment == "." || segment == "..")
}

/// A path as a glob matching exactly it: glob metacharacters in brackets.
fn escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}') {
            out.push('[');
            out.push(c);
            out.push(']');
        } else {
            out.push(c);
        }
    }
    out
}

impl Suggestion {
    /// The suggestion as a complete native policy (`version: 1`), with a comment naming
    /// counts and examples above each entry, and the hosts left out at the top.
    pub fn render(&self) -> String {
        let mut out = format!(
            "# airlock policy suggest: {} refused or would-deny request(s) considered, {} \
             already allowed by --base\n",
            self.considered, self.already_allowed
        );
        for (host, why) in &self.skipped {
            let _ = writeln!(out, "# not suggested: {host}: {why}");
        }
        if self.entries.is_empty() {
            out.push_str("# nothing to suggest\nversion: 1\n");
            return out;
        }
        out.push_str("version: 1\nnetwork:\n  allow:\n");
        for entry in &self.entries {
            render_entry(&mut out, entry);
        }
        out
    }
}

fn render_entry(out: &mut String, entry: &Entry) {
    let reasons: Vec<String> = entry
        .reasons
        .iter()
        .map(|(reason, count)| format!("{reason} {count}"))
        .collect();
    let _ = writeln!(
        out,
        "    # {} request(s): {}; e.g. {}",
        entry.count(),
        reasons.join(", "),
        entry.examples.join(", ")
    );
    if entry.unsafe_paths > 0 {
        let _ = writeln!(
            out,
            "    # {} request(s) with an unsafe path left out (refused as path_unsafe under path rules)",
            entry.unsafe_paths
        );
    }
    let _ = writeln!(out, "    - host: {}", quoted(&entry.host));
    if let Some(program) = &entry.process {
        let _ = writeln!(out, "      process: [{}]", quoted(program));
    }
    if let Some(ports) = &entry.ports {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let _ = writeln!(out, "      ports: [{}]", ports.join(", "));
    }
    if let Some(methods) = &entry.methods {
        let _ = writeln!(out, "      methods: [{}]", list(methods));
    }
    if let Some(paths) = &entry.paths {
        let _ = writeln!(out, "      paths: [{}]", list(paths));
    }
}

/// A YAML double-quoted scalar (a JSON string is one).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

fn list(items: &[String]) -> String {
    items
        .iter()
        .map(|item| quoted(item))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_stops_before_the_last_segment() {
        let prefix = |paths: &[&str]| common_prefix(paths);
        assert_eq!(
            prefix(&["/simple/a/", "/simple/b/"]),
            ("/simple".to_owned(), false)
        );
        assert_eq!(
            prefix(&["/r/a/x", "/r/a/y", "/r/a/z"]),
            ("/r/a".to_owned(), false)
        );
        assert_eq!(prefix(&["/r/x", "/r/a/y"]), ("/r".to_owned(), false));
        assert_eq!(prefix(&["/r/a", "/r/a/y"]), ("/r/a".to_owned(), true));
        assert_eq!(prefix(&["/r/a/", "/r/a/b"]), ("/r/a".to_owned(), false));
    }

    #[test]
    fn unsafe_looking_paths_and_escapes() {
        assert!(looks_unsafe("/a/%2F/b") && looks_unsafe("/a/../b") && looks_unsafe("/a\\b"));
        assert!(!looks_unsafe("/a/100%/b") && !looks_unsafe("/a/.well-known"));
        assert_eq!(escape("/a*b?[c]{d}"), "/a[*]b[?][[]c[]][{]d[}]");
    }
}
