//! The book of pending asks of `--mode ask` (docs/policy.md "Ask mode"): pure bookkeeping,
//! no clock and no waiting (the proxy passes the time in and does the waiting).
//!
//! - A request refused only for host, method or path opens an ask keyed by
//!   [`AskKey`] (method, host, port, path; a tunnel has no path). Concurrent requests with
//!   the same key share one ask ([`Opened::Joined`]).
//! - At most [`AskBook::capacity`] asks are pending; one more is refused at once
//!   ([`Opened::Full`]).
//! - An ask not answered by its deadline is gone ([`AskBook::purge`]), like a denied one.
//! - An `allow` for the `run` (or `save`) scope adds the key to the run's allow list, so
//!   that later identical requests pass without asking ([`Opened::Allowed`]); a raw
//!   connection's key (no path, [`AskKey::is_raw`]) admits later raw connections to its host
//!   and port only, never an HTTP request (docs/policy.md "Ask mode").
//! - Ids count up from 1 and are never reused: an id below the next one that is no longer
//!   pending was answered or timed out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use crate::decision::Reason;

/// The most asks pending at once by default.
pub const DEFAULT_CAPACITY: usize = 64;
/// The most keys the run's allow list holds; answers beyond it allow once only.
pub const MAX_RUN_RULES: usize = 4096;

/// What is asked about: the request (or tunnel) in canonical form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AskKey {
    /// The method (`CONNECT` for a tunnel).
    pub method: String,
    /// The canonical host.
    pub host: String,
    /// The destination port.
    pub port: u16,
    /// The canonical path without query; `None` for a raw connection (bytes that are
    /// neither TLS nor HTTP, silence, or a `tls_passthrough` host), asked as
    /// `CONNECT host:port`.
    pub path: Option<String>,
}

impl AskKey {
    /// Whether this is a raw connection's key (no path): an answer to it covers raw
    /// connections only, never an HTTP request.
    pub fn is_raw(&self) -> bool {
        self.path.is_none()
    }

    /// Whether a run rule made from `self` admits `other`: the same key, or, for a raw
    /// connection's key, another raw connection to the same host and port (never an HTTP
    /// request: a client could otherwise pick the path-less ask by staying silent and
    /// have one answer cover every later request to the host).
    pub fn admits(&self, other: &AskKey) -> bool {
        if self.is_raw() {
            other.is_raw() && self.host == other.host && self.port == other.port
        } else {
            self == other
        }
    }

    /// The `--allow` shorthand that admits this key (`GET host:8443/path`, or `host:port`
    /// for a tunnel); the port is left out when it is 80 or 443.
    pub fn shorthand(&self) -> String {
        let port = if matches!(self.port, 80 | 443) {
            String::new()
        } else {
            format!(":{}", self.port)
        };
        match &self.path {
            None => format!("{}{port}", self.host),
            Some(path) => format!("{} {}{port}{path}", self.method, self.host),
        }
    }

    /// The `network.allow` entry that admits this key, as YAML lines (the first starting
    /// with `- `, the others indented by two), strings quoted as JSON (valid YAML).
    pub fn yaml_lines(&self) -> Vec<String> {
        let quote = |text: &str| serde_json::Value::from(text).to_string();
        let mut lines = vec![format!("- host: {}", quote(&self.host))];
        if !matches!(self.port, 80 | 443) {
            lines.push(format!("  ports: [{}]", self.port));
        }
        if let Some(path) = &self.path {
            lines.push(format!("  methods: [{}]", quote(&self.method)));
            if path.contains('*') {
                // `*` is a glob character: match the path literally (any query) instead.
                let regex = format!("^{}(?:\\?.*)?$", regex::escape(path));
                lines.push(format!("  path_regex: [{}]", quote(&regex)));
            } else {
                lines.push(format!("  paths: [{}]", quote(path)));
            }
        }
        lines
    }
}

/// How far an `allow` answer reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This request only (identical requests that joined its ask are asked again).
    Once,
    /// Every identical request for the rest of the run.
    Run,
    /// As `Run`, and the rule was appended to the policy file.
    Save,
}

impl Scope {
    /// `once`, `run` or `save`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Run => "run",
            Scope::Save => "save",
        }
    }

    /// Parses `once`, `run` or `save`.
    pub fn parse(text: &str) -> Option<Scope> {
        [Scope::Once, Scope::Run, Scope::Save]
            .into_iter()
            .find(|scope| scope.as_str() == text)
    }
}

/// The answer to an ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Let it through, for this scope.
    Allow(Scope),
    /// Refuse it.
    Deny,
}

/// One pending ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Its id.
    pub id: u64,
    /// What is asked about.
    pub key: AskKey,
    /// Why the policy refuses it.
    pub reason: Reason,
    /// When it was opened.
    pub since: Instant,
    /// When it times out.
    pub deadline: Instant,
}

/// What [`AskBook::open`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// An earlier `run`/`save` answer admits it: no ask.
    Allowed,
    /// A new ask with this id (tell the watchers).
    New(u64),
    /// An ask for the same key was pending: this request waits on it.
    Joined(u64),
    /// As many asks as allowed are pending: refused at once.
    Full,
}

/// Why an answer was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// No ask ever had this id.
    #[error("no ask has this id")]
    Unknown,
    /// The ask was answered already or timed out.
    #[error("the ask was already answered or timed out")]
    Closed,
}

/// The pending asks and the run's allow list.
#[derive(Debug)]
pub struct AskBook {
    capacity: usize,
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    by_key: HashMap<AskKey, u64>,
    run_rules: HashSet<AskKey>,
}

impl Default for AskBook {
    fn default() -> Self {
        AskBook::new(DEFAULT_CAPACITY)
    }
}

impl AskBook {
    /// An empty book holding at most `capacity` pending asks.
    pub fn new(capacity: usize) -> Self {
        AskBook {
            capacity,
            next_id: 1,
            pending: BTreeMap::new(),
            by_key: HashMap::new(),
            run_rules: HashSet::new(),
        }
    }

    /// The most asks pending at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether an earlier `run`/`save` answer admits `key`.
    pub fn allowed_for_run(&self, key: &AskKey) -> bool {
        self.run_rules.contains(key) || self.run_rules.iter().any(|rule| rule.admits(key))
    }

    /// Opens (or joins) the ask for `key` at `now`, timing out at `deadline`; asks past
    /// their deadline are purged first.
    pub fn open(&mut self, key: AskKey, reason: Reason, now: Instant, deadline: Instant) -> Opened {
        self.purge(now);
        if self.allowed_for_run(&key) {
            return Opened::Allowed;
        }
        if let Some(id) = self.by_key.get(&key) {
            return Opened::Joined(*id);
        }
        if self.pending.len() >= self.capacity {
            return Opened::Full;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.by_key.insert(key.clone(), id);
        self.pending.insert(
            id,
            Pending {
                id,
                key,
                reason,
                since: now,
                deadline,
            },
        );
        Opened::New(id)
    }

    /// Removes every ask whose deadline is at or before `now`; returns them.
    pub fn purge(&mut self, now: Instant) -> Vec<Pending> {
        let expired: Vec<u64> = self
            .pending
            .values()
            .filter(|pending| pending.deadline <= now)
            .map(|pending| pending.id)
            .collect();
        expired
            .into_iter()
            .filter_map(|id| self.remove(id))
            .collect()
    }

    /// The ask `id`, if it is pending.
    pub fn get(&self, id: u64) -> Result<&Pending, AnswerError> {
        match self.pending.get(&id) {
            Some(pending) => Ok(pending),
            None if id == 0 || id >= self.next_id => Err(AnswerError::Unknown),
            None => Err(AnswerError::Closed),
        }
    }

    /// The pending asks, oldest first (purged at `now` first).
    pub fn list(&mut self, now: Instant) -> Vec<Pending> {
        self.purge(now);
        self.pending.values().cloned().collect()
    }

    /// Answers ask `id`: it is no longer pending, and an `allow` for the run or `save`
    /// scope admits its key from now on.
    pub fn answer(&mut self, id: u64, answer: Answer) -> Result<Pending, AnswerError> {
        self.get(id)?;
        let pending = self.remove(id).ok_or(AnswerError::Closed)?;
        if matches!(answer, Answer::Allow(Scope::Run | Scope::Save))
            && self.run_rules.len() < MAX_RUN_RULES
        {
            self.run_rules.insert(pending.key.clone());
        }
        Ok(pending)
    }

    fn remove(&mut self, id: u64) -> Option<Pending> {
        let pending = self.pending.remove(&id)?;
        self.by_key.remove(&pending.key);
        Some(pending)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(method: &str, path: Option<&str>) -> AskKey {
        AskKey {
            method: method.to_owned(),
            host: "new.example.test".to_owned(),
            port: 443,
            path: path.map(str::to_owned),
        }
    }

    fn times() -> (Instant, Instant) {
        let now = Instant::now();
        (now, now + Duration::from_secs(60))
    }

    #[test]
    fn ids_count_up_and_the_same_key_shares_one_ask() {
        let mut book = AskBook::default();
        let (now, deadline) = times();
        let reason = Reason::HostNotAllowed;
        assert_eq!(
            book.open(key("GET", Some("/a")), reason, now, deadline),
            Opened::New(1)
        );
        assert_eq!(
            book.open(key("GET", Some("/a")), reason, now, deadline),
            Opened::Joined(1)
        );
        assert_eq!(
            book.open(key("POST", Some("/a")), reason, now, deadline),
            Opened::New(2)
        );
        assert_eq!(
            book.open(key("GET", Some("/b")), reason, now, deadline),
            Opened::New(3)
        );
        let listed: Vec<u64> = book.list(now).iter().map(|p| p.id).collect();
        assert_eq!(listed, [1, 2, 3]);
    }

    #[test]
    fn the_book_is_bounded() {
        let mut book = AskBook::new(2);
        let (now, deadline) = times();
        let reason = Reason::PathNotAllowed;
        assert!(matches!(
            book.open(key("GET", Some("/1")), reason, now, deadline),
            Opened::New(_)
        ));
        assert!(matches!(
            book.open(key("GET", Some("/2")), reason, now, deadline),
            Opened::New(_)
        ));
        assert_eq!(
            book.open(key("GET", Some("/3")), reason, now, deadline),
            Opened::Full
        );
        // Joining a pending ask is not a new one.
        assert_eq!(
            book.open(key("GET", Some("/1")), reason, now, deadline),
            Opened::Joined(1)
        );
        book.answer(1, Answer::Deny).expect("answer");
        assert_eq!(
            book.open(key("GET", Some("/3")), reason, now, deadline),
            Opened::New(3)
        );
    }

    #[test]
    fn answers_close_the_ask_once() {
        let mut book = AskBook::default();
        let (now, deadline) = times();
        book.open(
            key("GET", Some("/a")),
            Reason::HostNotAllowed,
            now,
            deadline,
        );
        assert_eq!(book.answer(7, Answer::Deny), Err(AnswerError::Unknown));
        assert_eq!(book.answer(0, Answer::Deny), Err(AnswerError::Unknown));
        let answered = book.answer(1, Answer::Allow(Scope::Once)).expect("answer");
        assert_eq!(answered.key, key("GET", Some("/a")));
        assert_eq!(book.answer(1, Answer::Deny), Err(AnswerError::Closed));
        // Once: the next identical request asks again.
        assert_eq!(
            book.open(
                key("GET", Some("/a")),
                Reason::HostNotAllowed,
                now,
                deadline
            ),
            Opened::New(2)
        );
    }

    #[test]
    fn run_and_save_answers_admit_identical_requests_only() {
        for scope in [Scope::Run, Scope::Save] {
            let mut book = AskBook::default();
            let (now, deadline) = times();
            book.open(
                key("GET", Some("/a")),
                Reason::HostNotAllowed,
                now,
                deadline,
            );
            book.answer(1, Answer::Allow(scope)).expect("answer");
            let reason = Reason::HostNotAllowed;
            assert_eq!(
                book.open(key("GET", Some("/a")), reason, now, deadline),
                Opened::Allowed
            );
            assert_eq!(
                book.open(key("GET", Some("/b")), reason, now, deadline),
                Opened::New(2)
            );
            assert_eq!(
                book.open(key("PUT", Some("/a")), reason, now, deadline),
                Opened::New(3)
            );
        }
    }

    #[test]
    fn a_raw_answer_for_the_run_admits_raw_connections_to_its_host_and_port_only() {
        for scope in [Scope::Run, Scope::Save] {
            let mut book = AskBook::default();
            let (now, deadline) = times();
            book.open(key("CONNECT", None), Reason::HostNotAllowed, now, deadline);
            book.answer(1, Answer::Allow(scope)).expect("answer");
            let reason = Reason::HostNotAllowed;
            assert!(key("CONNECT", None).is_raw() && !key("GET", Some("/")).is_raw());
            assert_eq!(
                book.open(key("CONNECT", None), reason, now, deadline),
                Opened::Allowed
            );
            // No HTTP request to the same host and port is admitted by the raw answer.
            assert_eq!(
                book.open(key("GET", Some("/x")), reason, now, deadline),
                Opened::New(2)
            );
            assert_eq!(
                book.open(key("CONNECT", Some("/")), reason, now, deadline),
                Opened::New(3)
            );
            let other_port = AskKey {
                port: 8443,
                ..key("CONNECT", None)
            };
            assert_eq!(book.open(other_port, reason, now, deadline), Opened::New(4));
        }
    }

    #[test]
    fn unanswered_asks_time_out() {
        let mut book = AskBook::default();
        let now = Instant::now();
        let soon = now + Duration::from_secs(2);
        book.open(key("GET", Some("/a")), Reason::HostNotAllowed, now, soon);
        assert_eq!(book.purge(now).len(), 0);
        let expired = book.purge(soon);
        assert_eq!(expired.len(), 1);
        assert_eq!(
            book.answer(1, Answer::Allow(Scope::Once)),
            Err(AnswerError::Closed)
        );
        assert!(book.list(soon).is_empty());
    }

    #[test]
    fn shorthand_and_yaml_name_port_method_and_path() {
        let mut with_port = key("GET", Some("/simple/x"));
        assert_eq!(with_port.shorthand(), "GET new.example.test/simple/x");
        with_port.port = 8443;
        assert_eq!(with_port.shorthand(), "GET new.example.test:8443/simple/x");
        assert_eq!(
            with_port.yaml_lines(),
            [
                "- host: \"new.example.test\"",
                "  ports: [8443]",
                "  methods: [\"GET\"]",
                "  paths: [\"/simple/x\"]"
            ]
        );
        assert_eq!(key("CONNECT", None).shorthand(), "new.example.test");
        assert_eq!(
            key("CONNECT", None).yaml_lines(),
            ["- host: \"new.example.test\""]
        );
    }
}
