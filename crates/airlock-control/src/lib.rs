//! airlock's control plane: the policy store that swaps a new policy in atomically (with
//! its version, etag and `policy` audit line), the fan-out of audit lines to the admin API
//! (live events, recent denials, metrics), the answers to `--mode ask`'s pending asks,
//! and the admin API server itself.
//!
//! The data plane never waits on anything here: it reads the policy through one
//! `ArcSwap` snapshot per request, and audit lines reach the fan-out through the audit
//! writer thread's non-blocking tap.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod events;
pub mod metrics;
pub mod pending;
pub mod server;
pub mod store;
mod summary;

pub use events::Hub;
pub use server::{Admin, AdminError, Listen};
pub use store::{ApplyError, PolicyStore, Source};
