//! Skips that fail in CI ([`airlock_test_support`]): a test that cannot run what it tests
//! calls [`skip_or_fail`] naming what is missing and how to provide it; under
//! `AIRLOCK_TEST_REQUIRE=1` (set by `.ci/run`) that is a failure, not a skip.

pub use airlock_test_support::skip_or_fail;
