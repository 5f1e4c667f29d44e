//! The integration tests of this crate, one module per former test binary (one
//! binary links the dependencies once). Run a part with a name filter, for example
//! `cargo test -p airlock-jail --test it -- capture::`.
// The escape tests open, leak and write raw file descriptors as an attacker would.
#![allow(unsafe_code)]

mod capture;
mod jail;
mod session;
mod support;
