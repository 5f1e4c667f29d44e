//! The policy engine of airlock: what a policy says, how it is read, and how a request is
//! decided against it. Everything here is pure (no I/O beyond what the caller hands in)
//! so that it can be unit-, property- and fuzz-tested in isolation.
//!
//! The pipeline is:
//!
//! 1. [`load`] turns a document (native YAML or JSON) into a validated [`model::Policy`],
//!    collecting *every* error with its `file:line:col` (the `airlock-import` crate does the
//!    same for the seed formats); [`rule`] parses the `--allow RULE` shorthand.
//! 2. [`model::Policy::combine`] unions several sources, prefixing rule ids by source.
//! 3. [`matcher::CompiledPolicy::compile`] builds the lookup structure once.
//! 4. [`canonical`] turns what a client sent into one [`canonical::CanonicalRequest`].
//! 5. [`matcher::CompiledPolicy::decide`] answers with a [`decision::Decision`];
//!    [`matcher::CompiledPolicy::route`] maps a request to [`route::ROUTE_HOST`] onto its
//!    route's upstream.
//! 6. [`mode::Mode`] applies `--mode report` to a decision; [`suggest`] turns audit lines
//!    of refusals into the `network.allow` entries that would have allowed them; [`ask`]
//!    keeps the pending asks of `--mode ask` and [`edit`] adds an answered ask's rule to
//!    a policy file's text.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod ask;
pub mod canonical;
pub mod credential_files;
pub mod decision;
pub mod edit;
pub mod emit;
pub mod enforce;
pub mod filesystem;
pub mod gitconfig;
pub mod json_deny;
pub mod limits;
pub mod load;
pub mod loopback;
pub mod matcher;
pub mod mcp_args;
pub mod mcp_path;
pub mod mode;
pub mod model;
pub mod net;
pub mod presets;
pub mod profiles;
pub mod programs;
pub mod providers;
pub mod route;
pub mod rule;
pub mod size;
pub mod suggest;

pub use canonical::{CanonicalRequest, Host};
pub use decision::{Decision, Explanation, Reason, Verdict};
pub use load::{LoadError, Located};
pub use matcher::CompiledPolicy;
pub use model::Policy;
