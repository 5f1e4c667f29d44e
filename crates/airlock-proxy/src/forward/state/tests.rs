//! The request's one snapshot in memory: a reload of the policy or of the credentials
//! between the steps of one request reaches none of them, and the state after *decide*
//! carries the request as its audit line shows it.

use std::time::Instant;

use airlock_policy::load::load_str;
use airlock_policy::mode::Mode;
use airlock_policy::{CanonicalRequest, Host};
use http::HeaderValue;
use http::header::{AUTHORIZATION, HeaderMap};

use super::*;
use crate::forward::answer::kept;
use crate::forward::credentials::swap_credentials;
use crate::forward::decide::decide;
use crate::forward::identify::Identified;

const SURROGATE: &str = "sk-unit-SURR-0123456789abcdef";
const REAL_BEFORE: &str = "sk-unit-BEFORE-0123456789abcd";
const REAL_AFTER: &str = "sk-unit-AFTER-0123456789abcde";

/// Allows `host` (GET) with a secret for it, and an `mcp` rule on `/mcp`.
fn policy(host: &str) -> CompiledPolicy {
    let yaml = format!(
        "version: 1\nnetwork:\n  allow:\n    - host: {host}\n      methods: [GET, POST]\n\
         secrets:\n  KEY:\n    env: KEY\n    hosts: [{host}]\n    surrogate: {SURROGATE}\n\
         mcp:\n  - host: {host}\n    path: /mcp\n    tools: {{deny: [run]}}\n"
    );
    CompiledPolicy::compile(&load_str("p.yaml", &yaml).unwrap()).unwrap()
}

fn credentials(policy: &CompiledPolicy, real: &str) -> Credentials {
    let secrets = policy
        .policy()
        .secrets
        .iter()
        .map(|secret| (secret.clone(), real.to_owned()))
        .collect();
    Credentials::new(secrets).unwrap()
}

fn identified(method: &str, host: &str, target: &str) -> Identified {
    let host = Host::Name(host.to_owned());
    Identified {
        destination: Destination {
            scheme: "https",
            host: host.clone(),
            port: 443,
        },
        canonical: CanonicalRequest::new(method, host, 443, target),
        path_and_query: target.to_owned(),
    }
}

#[test]
fn a_reload_between_steps_reaches_no_step_of_the_request() {
    let before = policy("api.example");
    let store = ArcSwap::from_pointee(credentials(&before, REAL_BEFORE));
    let live = ArcSwap::from_pointee(before);
    let snapshot = Snapshot::take(&live, &store);
    // Reloaded right after the snapshot: another host, another real value.
    let after = policy("other.example");
    store.store(Arc::new(credentials(&after, REAL_AFTER)));
    live.store(Arc::new(after));
    let request = || identified("GET", "api.example", "/v1/x");
    let current = live.load_full();
    let now = decide(&current, Mode::Enforce, request(), "/v1/x", None);
    assert!(!now.decision.is_allow(), "the reloaded policy refuses it");

    let decided = decide(&snapshot.policy, Mode::Enforce, request(), "/v1/x", None);
    assert!(
        decided.decision.is_allow(),
        "the request's snapshot allows it"
    );
    let (log, _kept) = kept::log();
    let auditor = Auditor::new(&log, 1, None);
    let (mut state, verdict) = RequestState::new(&snapshot, auditor, decided, Instant::now());
    assert!(Arc::ptr_eq(state.policy, &snapshot.policy));
    assert!(Arc::ptr_eq(state.credentials, &snapshot.credentials));
    assert!(!Arc::ptr_eq(state.policy, &live.load_full()));

    let mut headers = HeaderMap::new();
    let bearer = format!("Bearer {SURROGATE}");
    headers.insert(AUTHORIZATION, HeaderValue::from_str(&bearer).unwrap());
    let swapped = swap_credentials(
        state.credentials,
        state.policy,
        &state.destination,
        &verdict.scope,
        &mut state.path_and_query,
        &mut headers,
    );
    assert_eq!(swapped.expect("swapped").secrets, ["KEY"]);
    let sent = headers[AUTHORIZATION].to_str().unwrap();
    assert_eq!(
        sent,
        format!("Bearer {REAL_BEFORE}"),
        "the snapshot's value"
    );
    let scrubbed = state
        .credentials
        .scrubber()
        .scrub(REAL_BEFORE.as_bytes())
        .into_owned();
    assert_eq!(
        scrubbed,
        SURROGATE.as_bytes(),
        "the response is scrubbed of it too"
    );
}

#[test]
fn the_state_shows_the_request_as_its_line_does_and_finds_its_mcp_rule() {
    let allowed = policy("api.example");
    let snapshot = Snapshot {
        credentials: Arc::new(credentials(&allowed, REAL_BEFORE)),
        policy: Arc::new(allowed),
    };
    let (log, kept) = kept::log();
    let auditor = Auditor::new(&log, 9, None);
    let request = identified("post", "api.example", "/mcp?session=1");
    let decided = decide(&snapshot.policy, Mode::Enforce, request, "/mcp", None);
    let (state, verdict) = RequestState::new(&snapshot, auditor, decided, Instant::now());
    assert!(verdict.decision.is_allow(), "{:?}", verdict.decision);
    assert!(verdict.would.is_none() && verdict.ask.is_none());
    assert_eq!((state.method(), state.path()), ("POST", "/mcp"));
    assert_eq!(state.line.host, "api.example");
    assert_eq!(state.line.query.as_deref(), Some("session=1"));
    assert_eq!(state.line.conn, 9);
    assert_eq!(state.path_and_query, "/mcp?session=1");
    assert_eq!(
        state.mcp_rule.as_ref().map(|rule| rule.id.as_str()),
        Some("mcp[0]")
    );
    assert!(
        kept::written(&log, &kept).is_empty(),
        "nothing is written before a step ends the request"
    );
}
