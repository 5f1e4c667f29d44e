//! The integration tests of the importers, one module per seed format (one binary links
//! the dependencies once). Run a part with a name filter, for example
//! `cargo test -p airlock-import --test it -- import_sandbox0::`.

mod import_airut;
mod import_airut_fnmatch;
mod import_sandbox0;
mod import_secrets_proxy;
mod import_support;
mod import_trustyclaw;
mod providers;
