//! Skips that fail in CI ([`airlock_test_support`]): a test that cannot run what it tests
//! calls [`skip_or_fail`] naming what is missing and how to provide it; under
//! `AIRLOCK_TEST_REQUIRE=1` (set by `.ci/run`) that is a failure, not a skip, unless an
//! [`Exemption`] covers it ([`skip_exempt`]).

pub use airlock_test_support::{Exemption, skip_exempt, skip_or_fail};
