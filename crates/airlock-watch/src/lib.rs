//! `airlock watch`: a live view of a proxy's decisions that answers `--mode ask`
//! prompts (docs/watch.md). [`model`] is the view's state without I/O, [`view`] draws
//! it, [`client`] talks to the admin API, [`app`] is the terminal loop and `--json`.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod app;
pub mod client;
pub mod model;
pub mod view;

pub use client::{Client, ClientError};

/// Why `airlock watch` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The admin API failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The terminal could not be drawn on.
    #[error("terminal: {0}")]
    Terminal(std::io::Error),
}
