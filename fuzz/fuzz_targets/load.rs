//! Fuzz target: arbitrary UTF-8 into `airlock_policy::load::load_str`. It must never
//! panic, and a refusal must always carry at least one located, one-line error.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    match airlock_policy::load::load_str("fuzz.yaml", text) {
        Ok(_) => {}
        Err(error) => {
            assert!(!error.errors.is_empty(), "LoadError without errors");
            for located in &error.errors {
                assert!(located.line >= 1 && located.column >= 1, "{located}");
                assert!(!located.message.contains('\n'), "{located}");
                assert_eq!(located.file, "fuzz.yaml");
            }
        }
    }
});
