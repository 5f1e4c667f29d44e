//! Holding requests in `--mode ask` (docs/policy.md "Ask mode"): a request (or a CONNECT)
//! refused only for host, method or path waits here until the admin API answers its ask or
//! the ask times out (`--ask-timeout`). The bookkeeping (ids, the bound, sharing one ask
//! between identical requests, the run's allow list) is [`airlock_policy::ask::AskBook`];
//! this module adds the clock, the waiting (one `watch` channel per ask) and the events
//! the admin API streams (`ask` when one opens, `answered` when it closes).
//!
//! An `allow once` lets through only the request that opened the ask; identical requests
//! that joined it open a new ask (each asked once more), while `run`, `save` and `deny`
//! answer every waiter.
//!
//! Nothing here blocks the accept loop: only the held request's own task waits, and the
//! lock is never held across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use airlock_policy::Reason;
use airlock_policy::ask::{Answer, AnswerError, AskBook, AskKey, Opened, Pending, Scope};
use tokio::sync::watch;

/// The default `--ask-timeout`.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(60);

/// Receives each event (one JSON object as text) for the admin API's stream.
pub type AskListener = Arc<dyn Fn(String) + Send + Sync>;

/// How an ask ended, as its waiters see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Answered(Answer),
    TimedOut,
}

/// What a held request is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Let it through; the rule id its audit line names (`ask.once`, `ask.run`,
    /// `ask.save`); `asked` is false when an earlier answer admitted it without asking.
    Allowed { rule: &'static str, asked: bool },
    /// Refuse it as usual (denied, timed out, or too many asks pending).
    Refused,
}

/// A pending ask as the admin API lists it.
#[derive(Clone, Debug)]
pub struct PendingAsk {
    /// The ask's bookkeeping.
    pub pending: Pending,
    /// When it was opened (wall clock).
    pub since: SystemTime,
    /// The process that opened it, when known (as its audit line would show it).
    pub process: Option<serde_json::Value>,
}

impl PendingAsk {
    /// `{"id","method","host","port","path","raw","reason","suggestion","since"}` (`path`
    /// is null and `raw` true for a raw connection, whose answer covers raw connections
    /// only; `suggestion` is the `--allow` shorthand that admits it), and `"process"` last
    /// when the process that opened it is known.
    pub fn to_json(&self) -> serde_json::Value {
        let key = &self.pending.key;
        let mut json = serde_json::json!({
            "id": self.pending.id.to_string(),
            "method": key.method,
            "host": key.host,
            "port": key.port,
            "path": key.path,
            "raw": key.is_raw(),
            "reason": self.pending.reason.as_str(),
            "suggestion": key.shorthand(),
            "since": airlock_audit::format_timestamp(self.since),
        });
        if let Some(process) = &self.process {
            json["process"] = process.clone();
        }
        json
    }
}

/// What a waiting ask keeps beside its bookkeeping.
struct Wait {
    sender: watch::Sender<Option<Outcome>>,
    since: SystemTime,
    process: Option<serde_json::Value>,
}

struct Inner {
    book: AskBook,
    waits: HashMap<u64, Wait>,
}

/// The asks of one proxy, shared with the admin API.
pub struct Asks {
    inner: Mutex<Inner>,
    timeout: Duration,
    listener: OnceLock<AskListener>,
}

impl Asks {
    /// No asks yet; each times out after `timeout`; at most `capacity` pending at once.
    pub fn new(timeout: Duration, capacity: usize) -> Self {
        Asks {
            inner: Mutex::new(Inner {
                book: AskBook::new(capacity),
                waits: HashMap::new(),
            }),
            timeout,
            listener: OnceLock::new(),
        }
    }

    /// Sets the receiver of `ask` and `answered` events (the first call wins).
    pub fn on_event(&self, listener: AskListener) {
        let _ = self.listener.set(listener);
    }

    /// How long an ask waits for its answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn emit(&self, event: serde_json::Value) {
        if let Some(listener) = self.listener.get() {
            listener(event.to_string());
        }
    }

    /// Closes every ask past its deadline (their waiters are refused) and says so.
    fn expire(&self, now: Instant) {
        let expired = {
            let mut inner = self.lock();
            let expired = inner.book.purge(now);
            for pending in &expired {
                if let Some(wait) = inner.waits.remove(&pending.id) {
                    wait.sender.send_replace(Some(Outcome::TimedOut));
                }
            }
            expired
        };
        for pending in expired {
            self.emit(answered_event(pending.id, None));
        }
    }

    /// The pending asks, oldest first.
    pub fn pending(&self) -> Vec<PendingAsk> {
        self.expire(Instant::now());
        let mut inner = self.lock();
        let listed = inner.book.list(Instant::now());
        listed
            .into_iter()
            .map(|pending| {
                let wait = inner.waits.get(&pending.id);
                PendingAsk {
                    since: wait.map_or_else(SystemTime::now, |wait| wait.since),
                    process: wait.and_then(|wait| wait.process.clone()),
                    pending,
                }
            })
            .collect()
    }

    /// What ask `id` is about, if it is pending.
    pub fn key(&self, id: u64) -> Result<AskKey, AnswerError> {
        self.expire(Instant::now());
        self.lock().book.get(id).map(|pending| pending.key.clone())
    }

    /// Answers ask `id`: its waiters get the answer; `run` and `save` allow identical
    /// requests from now on.
    pub fn answer(&self, id: u64, answer: Answer) -> Result<(), AnswerError> {
        self.expire(Instant::now());
        {
            let mut inner = self.lock();
            inner.book.answer(id, answer)?;
            if let Some(wait) = inner.waits.remove(&id) {
                wait.sender.send_replace(Some(Outcome::Answered(answer)));
            }
        }
        self.emit(answered_event(id, Some(answer)));
        Ok(())
    }

    /// Holds a request refused for `reason` until its ask is answered or times out (the
    /// tests' shorthand for [`Asks::hold_from`] without a process).
    #[cfg(test)]
    pub(crate) async fn hold(&self, key: AskKey, reason: Reason) -> Asked {
        self.hold_from(key, reason, None).await
    }

    /// Holds a request refused for `reason` until its ask is answered or times out, naming
    /// the process that made the request (shown with the ask when it opens one; identical
    /// requests of other processes share it). A request that joined
    /// an ask answered `allow once` asks again: `once` is the opener's request only.
    pub(crate) async fn hold_from(
        &self,
        key: AskKey,
        reason: Reason,
        process: Option<serde_json::Value>,
    ) -> Asked {
        // Bounded: each round needs another `once` answer (or ends at the timeout).
        loop {
            let held = self.hold_once(key.clone(), reason, process.clone());
            if let Some(asked) = Box::pin(held).await {
                return asked;
            }
        }
    }

    /// One round of [`Asks::hold_from`]: `None` when the ask this request joined was
    /// answered `allow once` (for its opener only).
    async fn hold_once(
        &self,
        key: AskKey,
        reason: Reason,
        process: Option<serde_json::Value>,
    ) -> Option<Asked> {
        let now = Instant::now();
        self.expire(now);
        let (mut receiver, deadline, opened) = {
            let mut inner = self.lock();
            let opened = inner.book.open(key, reason, now, now + self.timeout);
            let id = match opened {
                Opened::Allowed => {
                    return Some(Asked::Allowed {
                        rule: "ask.run",
                        asked: false,
                    });
                }
                Opened::Full => return Some(Asked::Refused),
                Opened::New(id) | Opened::Joined(id) => id,
            };
            let Ok(deadline) = inner.book.get(id).map(|pending| pending.deadline) else {
                return Some(Asked::Refused);
            };
            let wait = inner.waits.entry(id).or_insert_with(|| Wait {
                sender: watch::channel(None).0,
                since: SystemTime::now(),
                process,
            });
            (wait.sender.subscribe(), deadline, opened)
        };
        if let Opened::New(id) = opened
            && let Some(ask) = self.pending().into_iter().find(|ask| ask.pending.id == id)
        {
            let mut event = ask.to_json();
            event["kind"] = "ask".into();
            self.emit(event);
        }
        let waited = tokio::time::timeout_at(
            deadline.into(),
            receiver.wait_for(|outcome| outcome.is_some()),
        )
        .await;
        let outcome = match waited {
            Ok(Ok(outcome)) => *outcome,
            // Timed out (or the sender is gone): close what is past its deadline.
            _ => {
                self.expire(deadline);
                None
            }
        };
        let opener = matches!(opened, Opened::New(_));
        Some(match outcome {
            Some(Outcome::Answered(Answer::Allow(Scope::Once))) if !opener => return None,
            Some(Outcome::Answered(Answer::Allow(scope))) => Asked::Allowed {
                rule: match scope {
                    Scope::Once => "ask.once",
                    Scope::Run => "ask.run",
                    Scope::Save => "ask.save",
                },
                asked: true,
            },
            _ => Asked::Refused,
        })
    }
}

/// `{"kind":"answered","id","decision","scope"}`; a timeout is `"decision":"deny",
/// "scope":null,"timeout":true`.
fn answered_event(id: u64, answer: Option<Answer>) -> serde_json::Value {
    let (decision, scope) = match answer {
        Some(Answer::Allow(scope)) => ("allow", Some(scope.as_str())),
        Some(Answer::Deny) | None => ("deny", None),
    };
    serde_json::json!({
        "kind": "answered",
        "id": id.to_string(),
        "decision": decision,
        "scope": scope,
        "timeout": answer.is_none(),
    })
}

/// The ask key of a request: `None` when it has no canonical path (never asked about).
pub(crate) fn request_key(method: &str, host: String, port: u16, path: Option<&str>) -> AskKey {
    AskKey {
        method: method.to_owned(),
        host,
        port,
        path: path.map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &str) -> AskKey {
        request_key("GET", "new.example.test".to_owned(), 443, Some(path))
    }

    #[tokio::test]
    async fn an_ask_names_the_process_that_opened_it() {
        let asks = Arc::new(Asks::new(Duration::from_secs(5), 4));
        let process = serde_json::json!({"pid": 7, "exe": "/usr/bin/git"});
        let held = tokio::spawn({
            let asks = asks.clone();
            let process = Some(process.clone());
            async move {
                asks.hold_from(key("/p"), Reason::HostNotAllowed, process)
                    .await
            }
        });
        let mut pending = Vec::new();
        for _ in 0..200 {
            pending = asks.pending();
            if !pending.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pending[0].to_json()["process"], process);
        asks.answer(1, Answer::Deny).expect("answer");
        assert_eq!(held.await.unwrap(), Asked::Refused);
        let plain = Asks::new(Duration::from_millis(10), 4);
        assert_eq!(
            plain.hold(key("/q"), Reason::HostNotAllowed).await,
            Asked::Refused
        );
    }

    /// Waits (bounded) until ask `id` is pending; returns the pending asks.
    async fn pending_with(asks: &Asks, id: u64) -> Vec<PendingAsk> {
        for _ in 0..400 {
            let pending = asks.pending();
            if pending.iter().any(|ask| ask.pending.id == id) {
                return pending;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("ask {id} never opened: {:?}", asks.pending());
    }

    #[tokio::test]
    async fn once_releases_the_opener_only_and_a_joined_waiter_asks_again() {
        let asks = Arc::new(Asks::new(Duration::from_secs(5), 4));
        let hold = |path: &'static str| {
            let asks = asks.clone();
            tokio::spawn(async move { asks.hold(key(path), Reason::HostNotAllowed).await })
        };
        let first = hold("/a");
        assert_eq!(pending_with(&asks, 1).await.len(), 1);
        let second = hold("/a");
        // Let the second request join ask 1 before answering.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(asks.pending().len(), 1, "the second joined ask 1");
        asks.answer(1, Answer::Allow(Scope::Once)).expect("answer");
        let once = Asked::Allowed {
            rule: "ask.once",
            asked: true,
        };
        assert_eq!(first.await.unwrap(), once);
        // The joined request opened ask 2 instead of passing on the opener's answer.
        let pending = pending_with(&asks, 2).await;
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert!(!second.is_finished());
        asks.answer(2, Answer::Deny).expect("answer");
        assert_eq!(second.await.unwrap(), Asked::Refused);
        assert!(asks.pending().is_empty());
    }

    #[tokio::test]
    async fn a_raw_ask_says_so_and_its_run_answer_admits_no_request() {
        let asks = Arc::new(Asks::new(Duration::from_secs(5), 4));
        let raw = request_key("CONNECT", "new.example.test".to_owned(), 443, None);
        let held = tokio::spawn({
            let asks = asks.clone();
            let raw = raw.clone();
            async move { asks.hold(raw, Reason::HostNotAllowed).await }
        });
        let pending = pending_with(&asks, 1).await;
        assert_eq!(pending[0].to_json()["raw"], true);
        asks.answer(1, Answer::Allow(Scope::Run)).expect("answer");
        assert!(matches!(held.await.unwrap(), Asked::Allowed { .. }));
        let again = asks.hold(raw, Reason::HostNotAllowed).await;
        assert_eq!(
            again,
            Asked::Allowed {
                rule: "ask.run",
                asked: false
            }
        );
        // An HTTP request to the same host and port is asked about (and times out here).
        let request = tokio::spawn({
            let asks = asks.clone();
            async move { asks.hold(key("/x"), Reason::HostNotAllowed).await }
        });
        let pending = pending_with(&asks, 2).await;
        assert_eq!(pending[0].to_json()["raw"], false);
        asks.answer(2, Answer::Deny).expect("answer");
        assert_eq!(request.await.unwrap(), Asked::Refused);
    }

    #[tokio::test]
    async fn an_answer_releases_every_waiter_and_a_timeout_refuses() {
        let asks = Arc::new(Asks::new(Duration::from_secs(5), 4));
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        asks.on_event(Arc::new(move |line| seen.lock().unwrap().push(line)));
        let first = tokio::spawn({
            let asks = asks.clone();
            async move { asks.hold(key("/a"), Reason::HostNotAllowed).await }
        });
        let second = tokio::spawn({
            let asks = asks.clone();
            async move { asks.hold(key("/a"), Reason::HostNotAllowed).await }
        });
        let mut pending = Vec::new();
        for _ in 0..200 {
            pending = asks.pending();
            if !pending.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pending.len(), 1);
        // Let the second request join before answering.
        tokio::time::sleep(Duration::from_millis(50)).await;
        asks.answer(1, Answer::Allow(Scope::Run)).expect("answer");
        let allowed = Asked::Allowed {
            rule: "ask.run",
            asked: true,
        };
        assert_eq!(first.await.unwrap(), allowed);
        assert_eq!(second.await.unwrap(), allowed);
        let again = asks.hold(key("/a"), Reason::HostNotAllowed).await;
        assert_eq!(
            again,
            Asked::Allowed {
                rule: "ask.run",
                asked: false
            }
        );
        assert_eq!(asks.answer(1, Answer::Deny), Err(AnswerError::Closed));

        let quick = Asks::new(Duration::from_millis(50), 4);
        assert_eq!(
            quick.hold(key("/b"), Reason::PathNotAllowed).await,
            Asked::Refused
        );
        assert!(quick.pending().is_empty());
        let lines = events.lock().unwrap().clone();
        assert!(lines[0].contains(r#""kind":"ask""#), "{lines:?}");
        assert!(lines[1].contains(r#""kind":"answered""#), "{lines:?}");
    }
}
