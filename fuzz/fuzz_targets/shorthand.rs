//! Fuzz target: arbitrary UTF-8 into the command-line shorthands `parse_allow` and
//! `parse_secret`. They must never panic, and a `--secret NAME=SURROGATE=VALUE@HOSTS`
//! error must not depend on (so can never repeat) the literal VALUE: masking the value
//! gives the very same outcome.

#![no_main]

use airlock_policy::rule::{parse_allow, parse_secret};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = parse_allow(text, 0);
    let outcome = parse_secret(text).map(|_| ()).map_err(|e| e.to_string());
    let Some((definition, hosts)) = text.rsplit_once('@') else {
        return;
    };
    let mut parts = definition.splitn(3, '=');
    let (Some(name), Some(surrogate), Some(value)) = (parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let mask_char = if surrogate.chars().all(|c| c == 'Z') {
        'Y'
    } else {
        'Z'
    };
    let mask: String = value.chars().map(|_| mask_char).collect();
    let masked_surrogate = if surrogate == value {
        mask.as_str()
    } else {
        surrogate
    };
    let masked = format!("{name}={masked_surrogate}={mask}@{hosts}");
    let masked_outcome = parse_secret(&masked).map(|_| ()).map_err(|e| e.to_string());
    assert_eq!(outcome, masked_outcome, "the outcome depends on the value");
});
