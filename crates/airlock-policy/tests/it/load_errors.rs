//! Every validation error of the native loader: its exact `line:col` and a message that
//! names the problem and the fix. Multi-error documents report every error.

mod document;
mod mcp_routes;
mod network;
mod secrets;

use airlock_policy::load::{LoadError, load_str};

/// Load `text` and return its errors as `(line, column, message)`.
fn errors(text: &str) -> Vec<(u32, u32, String)> {
    match load_str("p.yaml", text) {
        Ok(policy) => panic!("expected errors, loaded {policy:?}"),
        Err(LoadError { errors }) => {
            assert!(!errors.is_empty(), "LoadError must never be empty");
            errors
                .into_iter()
                .map(|e| {
                    assert_eq!(e.file, "p.yaml");
                    assert!(!e.message.contains('\n'), "one line: {}", e.message);
                    (e.line, e.column, e.message)
                })
                .collect()
        }
    }
}

/// Assert that `text` has exactly one error, at `line:column`, whose message contains
/// every one of `needles`.
#[track_caller]
fn one_error(text: &str, line: u32, column: u32, needles: &[&str]) {
    let found = errors(text);
    assert_eq!(found.len(), 1, "expected one error, got {found:#?}");
    let (found_line, found_column, message) = &found[0];
    assert_eq!(
        (*found_line, *found_column),
        (line, column),
        "wrong location for: {message}"
    );
    for needle in needles {
        assert!(message.contains(needle), "`{needle}` not in: {message}");
    }
}

/// A policy with one allow rule whose body is `rule` (each line indented under `- `).
fn allow(rule: &str) -> String {
    format!("version: 1\nnetwork:\n  allow:\n    - {rule}\n")
}
