//! The integration tests of this crate, one module per former test binary (one
//! binary links the dependencies once). Run a part with a name filter, for example
//! `cargo test -p airlock --test it -- ask_mode::`.

mod ask_mode;
mod ca_cli;
mod gateway_namespaces;
mod mcp_stdio;
mod proxy_addresses;
mod proxy_admin;
mod proxy_allow;
mod proxy_audit;
mod proxy_git;
mod proxy_git_auth;
mod proxy_harness;
mod proxy_identity;
mod proxy_json_deny;
mod proxy_leak;
mod proxy_lifecycle;
mod proxy_limits;
mod proxy_malformed;
mod proxy_mcp;
mod proxy_outbound_guard;
mod proxy_paths;
mod proxy_presets;
mod proxy_providers;
mod proxy_refusals;
mod proxy_routes;
mod proxy_scrub;
mod proxy_secrets;
mod proxy_websocket;
mod report_mode;
mod run_basics;
mod run_escape_canaries;
mod run_filesystem;
mod run_network;
mod run_outbound_guard;
mod run_provider_sdks;
mod run_tty;
mod sandbox_docker;
mod sandbox_library;
mod sandbox_local;
mod support;
mod watch;
