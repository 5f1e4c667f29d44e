//! The body step in memory: bodies built from frames (no socket), guards from a policy's
//! YAML, a budget of its own; every outcome of reading a body whole and checking it.

use std::convert::Infallible;
use std::io::Write as _;

use airlock_policy::load::load_str;
use bytes::Bytes;
use http::HeaderValue;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
use http_body::Frame;
use http_body_util::{Full, StreamBody};

use super::*;

const POLICY: &str = r#"
version: 1
network:
  allow:
    - host: api.example
      json_deny:
        - path: /tools/*/type
          values: ["web_search*"]
    - host: other.example
      json_deny: [{path: /stream}]
"#;

/// The allow rules of [`POLICY`], both guarded.
fn rules() -> Vec<Rule> {
    load_str("p.yaml", POLICY).unwrap().network.allow
}

fn budget() -> Budget {
    Budget::new(64 * 1024 * 1024, Duration::from_millis(100))
}

/// Reads `body` with the guards of `rules` (all of them), the request allowed by
/// `allow.0`, from `budget` within 2 s.
async fn read<B: http_body::Body<Data = Bytes> + Unpin>(
    headers: &mut HeaderMap,
    mut body: B,
    rules: &[&Rule],
    budget: &Budget,
) -> Result<(Bytes, Held), Unsent> {
    let timeout = Duration::from_secs(2);
    read_and_check(
        headers,
        &mut body,
        rules,
        Some("allow.0"),
        (budget, timeout),
    )
    .await
}

fn full(text: &str) -> Full<Bytes> {
    Full::new(Bytes::from(text.to_owned()))
}

fn denied(reason: Reason, rule: &str) -> Unsent {
    Unsent::Refused(Decision::deny(reason, Some(rule.to_owned())))
}

#[tokio::test]
async fn a_body_no_guard_matches_passes_whole_and_is_held_from_the_budget() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let budget = budget();
    let text = r#"{"tools":[{"type":"function"}],"model":"m"}"#;
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_LENGTH, HeaderValue::from(text.len()));
    let (bytes, held) = read(&mut headers, full(text), &guards, &budget)
        .await
        .expect("passes");
    assert_eq!(bytes, text.as_bytes());
    assert_eq!(held.bytes(), text.len(), "the declared length is held");
    assert_eq!(headers[CONTENT_LENGTH], text.len().to_string().as_str());
}

#[tokio::test]
async fn a_matching_guard_refuses_by_its_own_rule() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let (first, second) = (rules[0].id.clone(), rules[1].id.clone());
    assert_ne!(first, second);
    let budget = budget();
    let search = r#"{"tools":[{"type":"function"},{"type":"web_search_preview"}]}"#;
    let refused = read(&mut HeaderMap::new(), full(search), &guards, &budget).await;
    assert_eq!(refused.err(), Some(denied(Reason::DeniedByRule, &first)));
    let streaming = r#"{"stream":true}"#;
    let refused = read(&mut HeaderMap::new(), full(streaming), &guards, &budget).await;
    assert_eq!(refused.err(), Some(denied(Reason::DeniedByRule, &second)));
}

#[tokio::test]
async fn a_body_that_is_not_strict_json_is_uninspectable_by_the_first_guard() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let first = rules[0].id.clone();
    let budget = budget();
    for body in ["not json", r#"{"a":1,"a":2}"#, "{\"a\":", "\u{feff}{}"] {
        let refused = read(&mut HeaderMap::new(), full(body), &guards, &budget).await;
        let expected = denied(Reason::BodyUninspectable, &first);
        assert_eq!(refused.err(), Some(expected), "{body:?}");
    }
}

#[tokio::test]
async fn an_empty_body_passes_the_guards() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let (bytes, held) = read(&mut HeaderMap::new(), full(""), &guards, &budget())
        .await
        .expect("nothing to match");
    assert!(bytes.is_empty());
    assert_eq!(held.bytes(), 0);
}

#[tokio::test]
async fn an_mcp_body_without_guards_must_still_be_strict_json() {
    let budget = budget();
    let (bytes, _held) = read(&mut HeaderMap::new(), full(r#"{"id":1}"#), &[], &budget)
        .await
        .expect("no guard: the MCP step decides");
    assert_eq!(bytes, r#"{"id":1}"#);
    // Not JSON: refused with no rule named (no guard matched), as the proxy does today.
    let refused = read(&mut HeaderMap::new(), full("anything"), &[], &budget).await;
    let expected = Unsent::Refused(Decision::deny(Reason::BodyUninspectable, None));
    assert_eq!(refused.err(), Some(expected));
    // A coding airlock cannot undo is refused before any check: by the allow rule.
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static("x-unknown"));
    let refused = read(&mut headers, full("x"), &[], &budget).await;
    assert_eq!(
        refused.err(),
        Some(denied(Reason::BodyUninspectable, "allow.0"))
    );
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_before_reading() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let budget = budget();
    let over = airlock_mcp::BODY_LIMIT + 1;
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_LENGTH, HeaderValue::from(over));
    // The body itself never ends: the refusal must not wait for it.
    let never = StreamBody::new(futures_util::stream::pending::<
        Result<Frame<Bytes>, Infallible>,
    >());
    let refused = read(&mut headers, never, &guards, &budget).await;
    assert_eq!(
        refused.err(),
        Some(denied(Reason::BodyUninspectable, &rules[0].id))
    );
    let mut at_limit = HeaderMap::new();
    at_limit.insert(CONTENT_LENGTH, HeaderValue::from(airlock_mcp::BODY_LIMIT));
    let body = format!("{{\"a\":\"{}\"}}", "x".repeat(airlock_mcp::BODY_LIMIT - 8));
    assert_eq!(body.len(), airlock_mcp::BODY_LIMIT);
    let read = read(&mut at_limit, full(&body), &guards, &budget).await;
    assert!(read.is_ok(), "a body of exactly the limit is read");
}

#[tokio::test]
async fn a_streamed_body_past_the_limit_is_refused_and_its_bytes_given_back() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    // Room for one body of the limit, and little more.
    let budget = Budget::new(
        airlock_mcp::BODY_LIMIT as u64 + 1024,
        Duration::from_millis(50),
    );
    let chunk = Bytes::from(vec![b' '; 64 * 1024]);
    let chunks = airlock_mcp::BODY_LIMIT / chunk.len() + 1;
    let frames = (0..chunks).map(move |_| Ok::<_, Infallible>(Frame::data(chunk.clone())));
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let refused = read(&mut HeaderMap::new(), body, &guards, &budget).await;
    assert_eq!(
        refused.err(),
        Some(denied(Reason::BodyUninspectable, &rules[0].id))
    );
    // What the refused body held is free again: a body of the limit fits.
    let body = format!("{{\"a\":\"{}\"}}", "x".repeat(airlock_mcp::BODY_LIMIT - 8));
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    let read = read(&mut headers, full(&body), &guards, &budget).await;
    assert!(read.is_ok(), "the refused body's bytes were given back");
}

#[tokio::test]
async fn a_body_cut_short_is_uninspectable() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let budget = budget();
    let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
        Ok(Frame::data(Bytes::from_static(b"{\"stream\""))),
        Err(std::io::Error::other("reset")),
    ];
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let refused = read(&mut HeaderMap::new(), body, &guards, &budget).await;
    assert_eq!(
        refused.err(),
        Some(denied(Reason::BodyUninspectable, &rules[0].id))
    );
}

#[tokio::test]
async fn a_body_larger_than_the_whole_budget_is_overloaded() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let small = Budget::new(16, Duration::from_millis(50));
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_LENGTH, HeaderValue::from(17));
    let refused = read(&mut headers, full(r#"{"a":"0123456789"}"#), &guards, &small).await;
    let expected = Decision::deny(Reason::Overloaded, Some(rules[0].id.clone()));
    assert_eq!(refused.err(), Some(Unsent::Overloaded(expected.clone())));
    // Undeclared, it is refused as soon as it outgrows the budget.
    let body = full(r#"{"a":"0123456789"}"#);
    let refused = read(&mut HeaderMap::new(), body, &guards, &small).await;
    assert_eq!(refused.err(), Some(Unsent::Overloaded(expected)));
}

#[tokio::test]
async fn a_body_not_complete_in_time_is_a_timeout_by_the_first_guard() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let budget = budget();
    let never = StreamBody::new(futures_util::stream::pending::<
        Result<Frame<Bytes>, Infallible>,
    >());
    let mut body = never;
    let timeout = Duration::from_millis(50);
    let started = std::time::Instant::now();
    let within = (&budget, timeout);
    let refused = read_and_check(&mut HeaderMap::new(), &mut body, &guards, None, within).await;
    assert_eq!(
        refused.err(),
        Some(Unsent::Timeout(Some(rules[0].id.clone())))
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // Without guards, the timeout is the allow rule's (an MCP call).
    let within = (&budget, timeout);
    let refused = read_and_check(&mut HeaderMap::new(), &mut body, &[], Some("r"), within).await;
    assert_eq!(refused.err(), Some(Unsent::Timeout(Some("r".to_owned()))));
}

fn gzip(text: &str) -> Bytes {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(text.as_bytes()).unwrap();
    Bytes::from(encoder.finish().unwrap())
}

#[tokio::test]
async fn a_coded_body_is_decoded_then_checked_and_goes_on_decoded() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let budget = budget();
    let coded = |text: &str| {
        let body = gzip(text);
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        (headers, Full::new(body))
    };
    let (mut headers, body) = coded(r#"{"stream":true}"#);
    let refused = read(&mut headers, body, &guards, &budget).await;
    assert_eq!(
        refused.err(),
        Some(denied(Reason::DeniedByRule, &rules[1].id))
    );
    let (mut headers, body) = coded(r#"{"model":"m"}"#);
    let (bytes, _held) = read(&mut headers, body, &guards, &budget)
        .await
        .expect("passes");
    assert_eq!(bytes, r#"{"model":"m"}"#);
    assert!(!headers.contains_key(CONTENT_ENCODING), "forwarded decoded");
    assert!(!headers.contains_key(CONTENT_LENGTH), "its length is gone");
}

#[tokio::test]
async fn a_coding_that_does_not_decode_is_uninspectable() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    let budget = budget();
    for (coding, body) in [
        ("gzip", Bytes::from_static(b"not gzip at all")),
        ("compress", Bytes::from_static(b"{}")),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding));
        let refused = read(&mut headers, Full::new(body), &guards, &budget).await;
        let expected = denied(Reason::BodyUninspectable, &rules[0].id);
        assert_eq!(refused.err(), Some(expected), "{coding}");
    }
    // A bomb: within the ratio bound of the decoder, past the body limit decoded.
    let bomb = gzip(&" ".repeat(airlock_mcp::BODY_LIMIT + 1));
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    let refused = read(&mut headers, Full::new(bomb), &guards, &budget).await;
    assert_eq!(
        refused.err(),
        Some(denied(Reason::BodyUninspectable, &rules[0].id))
    );
}

#[test]
fn only_a_guard_or_an_mcp_rule_makes_a_body_read_whole() {
    let rules = rules();
    let guards: Vec<&Rule> = rules.iter().collect();
    assert!(!reads_whole(false, &[]));
    assert!(reads_whole(true, &[]));
    assert!(reads_whole(false, &guards));
}
