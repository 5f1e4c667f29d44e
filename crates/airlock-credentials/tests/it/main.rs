//! The integration tests of this crate, one module per former test binary (one
//! binary links the dependencies once). Run a part with a name filter, for example
//! `cargo test -p airlock-credentials --test it -- body_swap::`.

mod body_swap;
mod swap;
