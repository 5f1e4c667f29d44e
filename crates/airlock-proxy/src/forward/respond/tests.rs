//! The response step in memory: heads built with `http` (no socket), a scrubber from a
//! `Credentials` store, body reports tripped by hand, upstream errors as chains of
//! `std::error::Error`; every decision the step takes on its way back.

use std::fmt;
use std::io::Write as _;

use airlock_credentials::{Credentials, Finding, Form};
use airlock_policy::model::{Secret, SecretSource};
use http::HeaderValue;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::ext::ReasonPhrase;

use super::*;

const REAL: &str = "sk-unit-REAL-0123456789abcdef";
/// As long as [`REAL`]: scrubbing keeps lengths.
const SAME_LENGTH: &str = "surrogate-unit-0123456789abcd";
/// Shorter than [`REAL`]: scrubbing changes lengths.
const SHORTER: &str = "surrogate-unit-short";

fn scrubber(surrogate: &str) -> Scrubber {
    let secret = Secret {
        surrogate: Some(surrogate.to_owned()),
        ..Secret::new("KEY", SecretSource::Env("KEY".to_owned()))
    };
    Credentials::new(vec![(secret, REAL.to_owned())])
        .expect("credentials")
        .scrubber()
}

fn head(status: u16, headers: &[(&str, &str)]) -> Parts {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(()).unwrap().into_parts().0
}

#[test]
fn a_head_loses_its_hop_by_hop_headers_with_or_without_a_scrubber() {
    let hops = [
        ("connection", "close, x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("proxy-authenticate", "Basic"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "h2c"),
        ("content-type", "text/plain"),
    ];
    for scrub in [None, Some(scrubber(SAME_LENGTH))] {
        let mut parts = head(200, &hops);
        clean_head(&mut parts, scrub.as_ref());
        let names: Vec<&str> = parts.headers.keys().map(|name| name.as_str()).collect();
        assert_eq!(names, ["content-type"], "scrubbing: {}", scrub.is_some());
    }
}

#[test]
fn a_head_from_a_secrets_host_is_scrubbed_values_and_reason_phrase() {
    let echo = format!("Bearer {REAL}");
    let mut parts = head(401, &[("www-authenticate", &echo), ("x-plain", "ok")]);
    let reason = ReasonPhrase::try_from(format!("Bad {REAL}")).unwrap();
    parts.extensions.insert(reason);
    clean_head(&mut parts, Some(&scrubber(SAME_LENGTH)));
    let expected = format!("Bearer {SAME_LENGTH}");
    assert_eq!(parts.headers["www-authenticate"], expected.as_str());
    assert_eq!(parts.headers["x-plain"], "ok");
    let reason = parts.extensions.get::<ReasonPhrase>().expect("kept");
    assert_eq!(reason.as_bytes(), format!("Bad {SAME_LENGTH}").as_bytes());
    assert_eq!(parts.status, StatusCode::UNAUTHORIZED);
}

#[test]
fn a_head_from_any_other_host_keeps_its_values() {
    let echo = format!("Bearer {REAL}");
    let mut parts = head(200, &[("x-echo", &echo)]);
    clean_head(&mut parts, None);
    assert_eq!(parts.headers["x-echo"], echo.as_str());
}

#[test]
fn an_identity_body_keeps_its_length_only_when_scrubbing_keeps_lengths() {
    let headers = || {
        let mut parts = head(200, &[("content-length", "42"), ("content-type", "a/b")]);
        std::mem::take(&mut parts.headers)
    };
    let mut kept = headers();
    let decoder = scrub_plan(&mut kept, &scrubber(SAME_LENGTH)).expect("identity");
    assert!(decoder.is_none(), "nothing to decode");
    assert_eq!(kept[CONTENT_LENGTH], "42");
    let mut dropped = headers();
    let decoder = scrub_plan(&mut dropped, &scrubber(SHORTER)).expect("identity");
    assert!(decoder.is_none());
    assert!(!dropped.contains_key(CONTENT_LENGTH), "the length changes");
    assert_eq!(dropped[CONTENT_TYPE], "a/b");
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

#[test]
fn a_coded_body_from_a_secrets_host_is_decoded_then_scrubbed() {
    let scrubber = scrubber(SAME_LENGTH);
    let coded = gzip(format!("token={REAL};").as_bytes());
    let length = coded.len().to_string();
    let mut headers = std::mem::take(
        &mut head(
            200,
            &[("content-encoding", "gzip"), ("content-length", &length)],
        )
        .headers,
    );
    let mut decoder = scrub_plan(&mut headers, &scrubber)
        .expect("gzip decodes")
        .expect("a decoder");
    assert!(!headers.contains_key(CONTENT_ENCODING), "passed on decoded");
    assert!(
        !headers.contains_key(CONTENT_LENGTH),
        "its coded length is gone"
    );
    // The body as the step streams it: decoded, then scrubbed.
    let mut stream = scrubber.stream();
    let (first, rest) = coded.split_at(coded.len() / 2);
    let mut out = stream.push(&decoder.push(first).unwrap());
    out.extend(stream.push(&decoder.push(rest).unwrap()));
    out.extend(stream.push(&decoder.finish().unwrap()));
    out.extend(stream.finish());
    assert_eq!(out, format!("token={SAME_LENGTH};").as_bytes());
}

#[test]
fn a_coding_airlock_cannot_undo_is_a_502_never_the_body() {
    for coding in ["compress", "x-unknown", "gzip, x-unknown"] {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("7"));
        let plan = scrub_plan(&mut headers, &scrubber(SAME_LENGTH));
        assert!(plan.is_err(), "{coding}");
    }
    let answer = refusal::bad_gateway(UNDECODABLE);
    assert_eq!(answer.status(), StatusCode::BAD_GATEWAY);
    assert!(UNDECODABLE.contains("content coding airlock cannot decode"));
}

#[test]
fn a_decoded_body_may_not_grow_past_the_response_ratio() {
    let scrubber = scrubber(SAME_LENGTH);
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip, gzip"));
    let mut decoder = scrub_plan(&mut headers, &scrubber).unwrap().unwrap();
    // 16 MiB of zeros coded twice: far past 1100:1 over the 1 MiB floor.
    let bomb = gzip(&gzip(&vec![0; 16 * 1024 * 1024]));
    let decoded = decoder.push(&bomb).and_then(|_| decoder.finish());
    assert!(decoded.is_err(), "a bomb stops decoding");
    // Coded once, the same zeros are within what deflate can yield: they pass.
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    let mut decoder = scrub_plan(&mut headers, &scrubber).unwrap().unwrap();
    let once = gzip(&vec![0; 16 * 1024 * 1024]);
    let mut out = decoder.push(&once).unwrap();
    out.extend(decoder.finish().unwrap());
    assert_eq!(out.len(), 16 * 1024 * 1024);
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    let mut decoder = scrub_plan(&mut headers, &scrubber).unwrap().unwrap();
    let text = vec![b'a'; 512 * 1024];
    let mut out = decoder.push(&gzip(&text)).unwrap();
    out.extend(decoder.finish().unwrap());
    assert_eq!(out.len(), text.len(), "under the floor, any ratio passes");
}

#[test]
fn only_an_asked_upgrade_answered_101_is_relayed() {
    assert!(switched(true, StatusCode::SWITCHING_PROTOCOLS));
    assert!(!switched(false, StatusCode::SWITCHING_PROTOCOLS));
    for status in [200, 100, 103, 400, 426] {
        let status = StatusCode::from_u16(status).unwrap();
        assert!(!switched(true, status), "{status}");
    }
}

#[test]
fn an_unoffered_websocket_extension_is_refused_only_when_messages_are_checked() {
    let mut headers = HeaderMap::new();
    assert!(!extension_unchecked(true, &headers));
    headers.insert(
        "sec-websocket-extensions",
        HeaderValue::from_static("permessage-deflate"),
    );
    assert!(extension_unchecked(true, &headers));
    assert!(!extension_unchecked(false, &headers));
}

#[test]
fn a_body_not_stopped_leaves_the_failure_to_the_upstream() {
    assert!(body_refusal(None).is_none());
    let report = BodyReport::default();
    assert!(body_refusal(Some(&report)).is_none());
}

#[test]
fn a_stopped_body_is_refused_for_its_trip() {
    let refusal = |trip: Trip| {
        let report = BodyReport::default();
        report.trip(trip);
        let (decision, cause) = body_refusal(Some(&report)).expect("refused");
        assert_eq!(decision.rule, None);
        assert!(!decision.is_allow());
        (
            decision.reason,
            cause.and_then(|cause| cause.finding().cloned()),
        )
    };
    assert_eq!(
        refusal(Trip::Surrogate),
        (Some(Reason::SecretOutOfScope), None)
    );
    assert_eq!(
        refusal(Trip::Undecodable),
        (Some(Reason::BodyUninspectable), None)
    );
    assert_eq!(refusal(Trip::Overloaded), (Some(Reason::Overloaded), None));
    let finding = Finding {
        reason: Reason::CredentialOutbound,
        form: Form::Format,
        secret: None,
        kind: Some("github_pat"),
    };
    let (reason, found) = refusal(Trip::Credential(finding));
    assert_eq!(reason, Some(Reason::CredentialOutbound));
    let found = found.expect("the finding goes to the audit line");
    assert_eq!(found.kind, Some("github_pat"));
}

/// An error with an optional cause, to build the client's error chains.
#[derive(Debug)]
struct Layer(&'static str, Option<Box<dyn StdError + Send + Sync>>);

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl StdError for Layer {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.1.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

fn wrapped(depth: usize, inner: Box<dyn StdError + Send + Sync>) -> Layer {
    let mut error = Layer("client", Some(inner));
    for _ in 1..depth {
        error = Layer("client", Some(Box::new(error)));
    }
    error
}

#[test]
fn an_address_the_guard_refused_is_the_guards_403() {
    let decision = Decision::deny(Reason::PrivateAddress, None);
    let error = wrapped(3, Box::new(DialError::Denied(decision.clone())));
    assert_eq!(failed(&error), Failed::Denied(decision));
}

#[test]
fn any_other_dial_failure_is_a_502_naming_it() {
    let resolve = DialError::Resolve {
        host: "api.example".into(),
        message: "no such name".into(),
    };
    let error = wrapped(2, Box::new(resolve));
    let expected = "cannot resolve api.example: no such name".to_owned();
    assert_eq!(failed(&error), Failed::BadGateway(expected));
}

#[test]
fn a_failure_without_a_dial_error_is_named_by_its_cause() {
    let error = wrapped(1, Box::new(Layer("connection reset", None)));
    let expected = "the upstream failed: connection reset".to_owned();
    assert_eq!(failed(&error), Failed::BadGateway(expected));
    let alone = Layer("closed", None);
    let expected = "the upstream failed: closed".to_owned();
    assert_eq!(failed(&alone), Failed::BadGateway(expected));
}

#[test]
fn a_dial_error_is_looked_for_sixteen_layers_deep_and_no_further() {
    let decision = Decision::deny(Reason::PrivateAddress, None);
    let found = wrapped(15, Box::new(DialError::Denied(decision.clone())));
    assert_eq!(failed(&found), Failed::Denied(decision.clone()));
    let buried = wrapped(16, Box::new(DialError::Denied(decision)));
    assert!(matches!(failed(&buried), Failed::BadGateway(_)));
}
