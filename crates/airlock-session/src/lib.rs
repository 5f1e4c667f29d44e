//! airlock sessions: everything between a typed configuration and a running proxy.
//!
//! `airlock run`, `airlock mcp` and the sandbox daemon prepare a [`Session`] from a
//! [`SessionConfig`]; `airlock proxy` prepares its proxy from a
//! [`standalone::StandaloneConfig`]. Preparing reads and checks everything before anything
//! starts (policies, secrets, the CA, the audit log, upstream pins and trust) and returns
//! every error found. The rest is what serving a prepared session needs: the jail's
//! filesystem plan and its end-of-run check ([`fs_confine`], [`quarantine`],
//! [`host_sockets`]), the handed sockets of a jail or a
//! container ([`serve`], [`gateway`]), the admin API and policy reloads ([`admin`],
//! [`policy_reload`], [`run_socket`]) and the proxy's hooks ([`rotation`],
//! [`panic_redaction`]). Command-line parsing is not here: the CLI turns its flags into
//! these configurations.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub mod admin;
pub mod config;
pub mod credential_files;
pub mod credential_writeback;
pub mod env;
pub mod fs_confine;
mod fs_walk;
pub mod gateway;
#[cfg(target_os = "linux")]
pub mod git_source;
pub mod host_sockets;
mod log;
pub mod panic_redaction;
pub mod policy_reload;
#[cfg(target_os = "linux")]
pub mod private_copy_back;
#[cfg(target_os = "linux")]
pub mod private_parents;
#[cfg(target_os = "linux")]
pub mod process_lookup;
pub mod program_paths;
pub mod quarantine;
#[cfg(target_os = "linux")]
pub mod replace_watch;
pub mod rotation;
mod run_dirs;
pub mod run_socket;
pub mod secret_sources;
pub mod serve;
pub mod session;
pub mod sources;
pub mod standalone;
#[cfg(target_os = "linux")]
mod store_links;

pub use config::{JailMode, SessionConfig, Upstream};
pub use session::Session;
