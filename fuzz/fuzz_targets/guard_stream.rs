//! Fuzz target for the outbound guard's body search (`GuardStream`): arbitrary bytes, with
//! the configured real value or a checksummed GitHub token spliced in at a fuzzed place,
//! pushed in fuzzed chunk sizes. Checks: no panic; the stream refuses exactly when the
//! search of the whole body does; a clean body is released unchanged and whole; a refused
//! one never released a byte of the value.

#![no_main]

mod common;

use airlock_credentials::{GuardScope, ValueScope};
use airlock_policy::model::DlpMode;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, u16, Vec<u8>, Vec<u8>)| {
    let (what, at, sizes, mut data) = input;
    let at = usize::from(at).min(data.len());
    match what % 3 {
        0 => data.splice(at..at, common::REAL.bytes()).for_each(drop),
        1 => data.splice(at..at, b"ghp_k9Jq2mZx7Vb4Nc1Lp8Ws3Df6Gh0TyA1MeWl4 ".iter().copied()).for_each(drop),
        _ => {}
    }
    let guard = common::credentials().guard();
    let scope = GuardScope {
        values: vec![ValueScope::Foreign],
        formats: DlpMode::Refuse,
        allowed_kinds: Some(Vec::new()),
    };
    let whole = guard.check_message(&scope, &data);
    let mut stream = guard.stream(scope);
    let mut released = Vec::new();
    let mut refused = false;
    for chunk in common::chunks(&data, &sizes) {
        match stream.push(Bytes::copy_from_slice(chunk)) {
            Ok(out) => {
                released.extend_from_slice(&out.first);
                released.extend_from_slice(&out.second);
            }
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    if !refused {
        match stream.finish() {
            Ok(rest) => released.extend_from_slice(&rest),
            Err(_) => refused = true,
        }
    }
    assert_eq!(refused, whole.is_err(), "the stream and the whole body disagree");
    if refused {
        let value = common::REAL.as_bytes();
        assert!(!released.windows(value.len()).any(|w| w == value), "the value was released");
    } else {
        assert_eq!(released, data, "a clean body must pass unchanged");
    }
});
