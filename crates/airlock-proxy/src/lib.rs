//! airlock's data plane: the proxy every packet of a sandbox goes through.
//!
//! One request travels in a straight line, each step owned by one module:
//!
//! accept ([`server`]) → identify the destination ([`connect`], [`tunnel`],
//! [`identity`]) → canonicalise and decide (`airlock_policy`, in [`forward`]) → inspect MCP
//! bodies ([`mcp`], `airlock_mcp`) → swap credentials (`airlock_credentials`) → resolve and guard the address ([`upstream`]) →
//! forward, pooled ([`forward`], [`websocket`], [`relay`]) → audit ([`record`]).
//!
//! Refusals are built by [`refusal`]; the interception CA is [`ca`]; [`config`] holds what
//! a [`Proxy`] is built from.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod ask;
pub mod body;
mod body_guard;
mod budget;
pub mod ca;
pub mod caller;
pub mod config;
mod connect;
mod context;
mod forward;
mod head_clock;
mod head_tap;
pub mod identity;
mod idle;
mod joint;
mod leg;
mod malformed;
mod mcp;
mod metered;
mod name_guard;
pub mod record;
pub mod refresh;
pub mod refusal;
pub mod relay;
pub mod rewind;
mod scrub;
mod server;
mod traceparent;
pub mod transparent;
mod tunnel;
pub mod upstream;
mod websocket;
pub mod wire;
mod write_through;

pub use caller::Identify;
pub use config::{Limits, ProxyConfig, TunnelRefusal};
pub use server::{Gauges, Proxy, SetupError};
pub use transparent::{Capture, NameLookup};
