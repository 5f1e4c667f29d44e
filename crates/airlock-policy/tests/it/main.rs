//! The integration tests of this crate, one module per former test binary (one
//! binary links the dependencies once). Run a part with a name filter, for example
//! `cargo test -p airlock-policy --test it -- canonical_host::`.

mod canonical_host;
mod canonical_path;
mod dlp;
mod import_emit_round_trip;
mod json_deny;
mod limits;
mod load_errors;
mod load_example;
mod load_fuzz_smoke;
mod load_json;
mod load_stdio_mcp;
mod matcher_decide;
mod process_rules;
mod providers;
mod rule_shorthand;
mod secret_presets;
mod section_support;
mod suggest;
