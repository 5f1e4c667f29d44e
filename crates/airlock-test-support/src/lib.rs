//! Skips that fail in CI: a test that cannot run what it tests (the kernel refuses
//! namespaces, no Docker engine answers, port 443 cannot be bound, no writable cgroup) calls
//! [`skip_or_fail`] naming what is missing and how to provide it. Normally that prints
//! `skipping: ...` and the test returns; with `AIRLOCK_TEST_REQUIRE=1` in the environment
//! (`.ci/run` sets it for every test run) it panics instead, so CI never reports a test as
//! passed that checked nothing (docs/security.md, "Escape tests").
//!
//! The only skips CI allows are the variants of [`Exemption`], each with why it cannot run
//! there; a test takes one with [`skip_exempt`]. Every test crate with skips uses this crate
//! as a dev-dependency, through its own test support (`AIRLOCK_TEST_REQUIRE` means the same
//! everywhere).

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

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

/// The skips CI allows, because what the test needs cannot exist there: the whole list.
/// A skip outside it fails under `AIRLOCK_TEST_REQUIRE`.
#[derive(Clone, Copy, Debug)]
pub enum Exemption {
    /// Resource limits (cgroups) while `airlock` runs as the ordinary test user.
    CgroupAsTestUser,
}

impl Exemption {
    /// Why the requirement cannot be met in CI, and where the same check does run.
    pub fn why(self) -> &'static str {
        match self {
            Exemption::CgroupAsTestUser => {
                "sandboxes make their groups under /sys/fs/cgroup, which only root may write \
                 (an ordinary user gets a delegated subtree only from a systemd login session, \
                 which CI has not); .ci/run runs the same test as root, where it must pass"
            }
        }
    }
}

/// A skip covered by `exemption` (the caller checked that it applies): prints why and
/// returns `false`, also under `AIRLOCK_TEST_REQUIRE`.
pub fn skip_exempt(exemption: Exemption, what: &str) -> bool {
    eprintln!(
        "skipping (exempt, {exemption:?}: {}): {what}",
        exemption.why()
    );
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_prints_and_returns_false_when_not_required() {
        assert!(!skip_or_fail_when(false, "nothing is missing"));
    }

    #[test]
    #[should_panic(expected = "AIRLOCK_TEST_REQUIRE=1 makes a test that cannot run")]
    fn a_skip_panics_naming_what_is_missing_when_required() {
        skip_or_fail_when(true, "no Docker engine answers here");
    }

    #[test]
    fn an_exempt_skip_only_prints() {
        assert!(!skip_exempt(
            Exemption::CgroupAsTestUser,
            "no writable cgroup"
        ));
    }
}
