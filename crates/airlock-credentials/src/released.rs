//! [`Released`]: what a streaming scanner lets go of for one chunk, as two pieces so that
//! a large chunk passes without being copied.

use bytes::Bytes;

/// What a streaming scanner ([`crate::GuardStream`], [`crate::ScrubStream`]) releases for
/// one chunk: `first`, then `second` (either may be empty).
#[derive(Debug, Default)]
pub struct Released {
    /// The bytes held back from before, now cleared.
    pub first: Bytes,
    /// The new chunk but its tail (a slice of it, not a copy, where nothing was replaced).
    pub second: Bytes,
}
