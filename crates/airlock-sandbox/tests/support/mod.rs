//! Skips that fail in CI: a test that cannot run what it tests calls [`skip_or_fail`]
//! naming what is missing and how to provide it. Normally that prints `skipping: ...` and
//! the test returns; with `AIRLOCK_TEST_REQUIRE=1` in the environment (`.ci/run` sets it for
//! every test run) it panics instead, so CI never reports a test as passed that checked
//! nothing (docs/security.md, "Escape tests"). The same helper, with the same
//! meaning of the variable, is in every test crate's support (`crates/airlock/tests/it/
//! support/require.rs` also keeps the list of the skips CI allows).

/// The environment variable that turns every skip into a failure.
pub const REQUIRE_VARIABLE: &str = "AIRLOCK_TEST_REQUIRE";

/// Whether skips fail: `AIRLOCK_TEST_REQUIRE` is set to anything but empty or `0`.
pub fn required() -> bool {
    std::env::var_os(REQUIRE_VARIABLE).is_some_and(|value| !value.is_empty() && value != "0")
}

/// A test that cannot run what it tests: prints `skipping: {what}` and returns `false`
/// (the caller returns), or panics with `what` when [`required`]. `what` names what is
/// missing and how to provide it.
pub fn skip_or_fail(what: &str) -> bool {
    skip_or_fail_when(required(), what)
}

/// [`skip_or_fail`] with the decision given (unit-testable without the environment).
pub fn skip_or_fail_when(required: bool, what: &str) -> bool {
    assert!(
        !required,
        "this test cannot run here: {what}\n({REQUIRE_VARIABLE}=1 makes a test that cannot \
         run what it tests fail; provide what is missing, or unset {REQUIRE_VARIABLE} to skip)"
    );
    eprintln!("skipping: {what}");
    false
}

#[test]
fn a_skip_prints_and_returns_false_when_not_required() {
    assert!(!skip_or_fail_when(false, "nothing is missing"));
}

#[test]
#[should_panic(expected = "AIRLOCK_TEST_REQUIRE=1 makes a test that cannot run")]
fn a_skip_panics_naming_what_is_missing_when_required() {
    skip_or_fail_when(true, "the kernel refuses unprivileged namespaces");
}
