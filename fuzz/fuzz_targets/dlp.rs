//! Fuzz target for the credential-format table (`airlock_dlp`) and the guard's automaton:
//! arbitrary text. Checks: no panic; the guard refuses a text for a format exactly when the
//! slow reference (`find_all`) finds a token in it; `redact` leaves no token behind.

#![no_main]

use airlock_credentials::{Credentials, GuardScope};
use airlock_policy::model::DlpMode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static GUARD: std::sync::OnceLock<airlock_credentials::OutboundGuard> = std::sync::OnceLock::new();
    let guard = GUARD.get_or_init(|| Credentials::new(Vec::new()).expect("no secrets").guard());
    let scope = GuardScope {
        values: Vec::new(),
        formats: DlpMode::Refuse,
        allowed_kinds: Some(Vec::new()),
    };
    let found = airlock_dlp::find_all(data);
    assert_eq!(guard.check_message(&scope, data).is_err(), !found.is_empty());
    if let Ok(text) = std::str::from_utf8(data) {
        let redacted = airlock_dlp::redact(text);
        assert!(airlock_dlp::find_all(redacted.as_bytes()).is_empty(), "{redacted}");
    }
});
