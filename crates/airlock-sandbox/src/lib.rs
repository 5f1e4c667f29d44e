//! airlock sandboxes for agent orchestrators: a named, long-lived sandbox per task whose
//! only way out is an airlock proxy holding the real keys, many commands run in it with
//! their output streamed, and its work brought back as a git branch.
//!
//! Work in progress: the provider interface lands first.

#![warn(missing_docs)]

pub mod docker;
