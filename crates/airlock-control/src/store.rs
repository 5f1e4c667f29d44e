//! The policy in force and how it changes: every change (admin API, SIGHUP, file or git
//! reload) goes through [`PolicyStore::replace`], which checks, compiles and swaps the new
//! policy whole or changes nothing, bumps the version, and writes a `kind: policy` audit
//! line for every change and every refused change.

use std::sync::{Arc, Mutex, PoisonError};

use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};
use airlock_policy::model::SecretSource;
use airlock_policy::{CompiledPolicy, Policy, emit};
use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

/// Where a policy change came from (written in its audit line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `PUT /v1/policy` or `PUT /v1/network/policy`.
    Api,
    /// SIGHUP.
    Sighup,
    /// A policy file changed on disk.
    File,
    /// A new commit on a `git:` source's branch.
    Git,
}

impl Source {
    /// The name used in audit lines and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::Sighup => "sighup",
            Source::File => "file",
            Source::Git => "git",
        }
    }
}

/// One reason a policy was refused.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Where: `body:LINE:COL`, `FILE:LINE:COL`, or a section name (`secrets`).
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// Why a change was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The policy is invalid.
    #[error("invalid policy: {}", .0.iter().map(|p| format!("{}: {}", p.location, p.message)).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<Problem>),
    /// `If-Match` named another version than the one in force.
    #[error("the policy changed since etag {given} (now {current})")]
    Stale {
        /// The etag the caller had.
        given: String,
        /// The etag in force.
        current: String,
    },
}

/// The version and etag in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Starts at 1, +1 per change.
    pub version: u64,
    /// A hash of the canonical (redacted) policy.
    pub etag: String,
}

/// The policy in force, shared with the data plane.
pub struct PolicyStore {
    live: Arc<ArcSwap<CompiledPolicy>>,
    /// Held for the whole of a change so that changes are serialised.
    stamp: Mutex<Stamp>,
    audit: AuditLog,
}

impl PolicyStore {
    /// Wraps the policy the proxy started with as version 1.
    pub fn new(live: Arc<ArcSwap<CompiledPolicy>>, audit: AuditLog) -> Self {
        let etag = etag_of(live.load().policy());
        PolicyStore {
            live,
            stamp: Mutex::new(Stamp { version: 1, etag }),
            audit,
        }
    }

    /// The version, etag and policy in force, read together.
    pub fn current(&self) -> (Stamp, Arc<CompiledPolicy>) {
        let stamp = self.lock();
        (stamp.clone(), self.live.load_full())
    }

    /// Checks `candidate`, compiles it and swaps it in, or changes nothing. The `secrets`
    /// section may not change at runtime (surrogates were already handed out). With
    /// `if_match`, the change happens only if that etag is the one in force.
    pub fn replace(
        &self,
        candidate: Policy,
        source: Source,
        if_match: Option<&str>,
    ) -> Result<Stamp, ApplyError> {
        let mut stamp = self.lock();
        let result = self.check_and_swap(&mut stamp, candidate, if_match);
        match &result {
            Ok(new) => self.log(source, Decision::Allow, format!("version {}", new.version)),
            Err(error) => self.log(
                source,
                Decision::Deny,
                format!("refused (version {} kept): {error}", stamp.version),
            ),
        }
        result
    }

    /// The audit log policy changes are written to (the proxy's own).
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// Records a change that was refused before it reached [`PolicyStore::replace`] (a file
    /// that does not parse): audit line and nothing else.
    pub fn refused(&self, source: Source, why: &str) {
        let version = self.lock().version;
        self.log(
            source,
            Decision::Deny,
            format!("refused (version {version} kept): {why}"),
        );
    }

    fn check_and_swap(
        &self,
        stamp: &mut Stamp,
        candidate: Policy,
        if_match: Option<&str>,
    ) -> Result<Stamp, ApplyError> {
        if let Some(given) = if_match {
            let given = given.trim().trim_matches('"');
            if given != "*" && given != stamp.etag {
                return Err(ApplyError::Stale {
                    given: given.to_owned(),
                    current: stamp.etag.clone(),
                });
            }
        }
        let in_force = self.live.load_full();
        let mut candidate = candidate;
        // Secrets of projected credential files are the session's, not the policy
        // sources': they stay (docs/secrets.md, "Credential files").
        candidate.secrets.extend(
            in_force
                .policy()
                .secrets
                .iter()
                .filter(|secret| secret.name.starts_with("file:"))
                .filter(|secret| !candidate.secrets.iter().any(|s| s.name == secret.name))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let mut problems = Vec::new();
        if candidate.secrets != in_force.policy().secrets {
            problems.push(Problem {
                location: "secrets".to_owned(),
                message: "the secrets section cannot change while the proxy runs (surrogates \
                          were already handed out); restart the proxy to change it"
                    .to_owned(),
            });
        }
        if !problems.is_empty() {
            return Err(ApplyError::Invalid(problems));
        }
        let compiled = CompiledPolicy::compile(&candidate).map_err(|e| {
            ApplyError::Invalid(vec![Problem {
                location: "policy".to_owned(),
                message: e.to_string(),
            }])
        })?;
        // One atomic pointer swap: each request has loaded either the old or the new one.
        self.live.store(Arc::new(compiled));
        stamp.version += 1;
        stamp.etag = etag_of(&candidate);
        Ok(stamp.clone())
    }

    fn log(&self, source: Source, decision: Decision, what: String) {
        self.audit.record(AuditEvent {
            kind: Kind::Policy,
            decision,
            message: Some(format!("source={} {what}", source.as_str())),
            ..AuditEvent::default()
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stamp> {
        // The stamp is replaced whole; a panicking holder cannot leave it half-written.
        self.stamp.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `policy` with every literal secret value replaced by `REDACTED` (sources stay: env
/// variable names, file paths, commands).
pub fn redacted(policy: &Policy) -> Policy {
    let mut copy = policy.clone();
    for secret in &mut copy.secrets {
        if let SecretSource::Value(value) = &mut secret.source {
            *value = airlock_audit::REDACTED.to_owned();
        }
    }
    copy
}

/// The policy as JSON (the native document's structure), real values redacted.
pub fn to_json(policy: &Policy) -> serde_json::Value {
    let yaml = emit::to_yaml(&redacted(policy));
    serde_saphyr::from_str::<serde_json::Value>(&yaml).unwrap_or(serde_json::Value::Null)
}

/// A hash of the canonical redacted policy (16 bytes of SHA-256, hex).
pub fn etag_of(policy: &Policy) -> String {
    let digest = Sha256::digest(emit::to_yaml(&redacted(policy)).as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_policy::load::load_str;

    fn store(text: &str) -> PolicyStore {
        let policy = load_str("start", text).unwrap();
        let live = Arc::new(ArcSwap::from_pointee(
            CompiledPolicy::compile(&policy).unwrap(),
        ));
        PolicyStore::new(live, AuditLog::disabled())
    }

    #[test]
    fn replace_bumps_version_and_stale_etag_is_refused() {
        let store = store("version: 1\nnetwork:\n  allow: [{host: a.example}]\n");
        let (first, _) = store.current();
        let next = load_str("b", "version: 1\nnetwork:\n  allow: [{host: b.example}]\n").unwrap();
        let stamp = store
            .replace(next.clone(), Source::Api, Some(&first.etag))
            .unwrap();
        assert_eq!(stamp.version, 2);
        assert_ne!(stamp.etag, first.etag);
        let refused = store.replace(next, Source::Api, Some(&first.etag));
        assert!(matches!(refused, Err(ApplyError::Stale { .. })));
        assert_eq!(store.current().0, stamp);
    }

    #[test]
    fn secrets_may_not_change() {
        let store = store("version: 1\n");
        let next = load_str(
            "b",
            "version: 1\nsecrets:\n  T:\n    value: hunter2hunter2\n    hosts: [a.example]\n",
        )
        .unwrap();
        let Err(ApplyError::Invalid(problems)) = store.replace(next, Source::Api, None) else {
            panic!("secrets change accepted");
        };
        assert_eq!(problems[0].location, "secrets");
        assert_eq!(store.current().0.version, 1);
    }

    #[test]
    fn json_form_redacts_literal_values() {
        let policy = load_str(
            "p",
            "version: 1\nsecrets:\n  T:\n    value: hunter2hunter2\n    hosts: [a.example]\n",
        )
        .unwrap();
        let text = to_json(&policy).to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("REDACTED"), "{text}");
    }
}
