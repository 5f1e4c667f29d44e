//! airlock's DNS responder for sandboxes: every query is answered here and **never
//! forwarded** (docs/contract.md §4 "DNS" and §5).
//!
//! * An `A` query for a name gets an address from a private pool, one stable address per
//!   name for the session ([`NameMap`]), so that the proxy can map a connection to that
//!   address back to the name (`github.com:22`) and so that HTTP(S) to a refused name still
//!   reaches the proxy and gets the explaining 403. The default pool is `198.18.0.0/16`
//!   ([`default_pool`]); a full pool recycles the least recently used mapping.
//! * Every other type gets `NOERROR` with no records; names that are not valid host names
//!   get `REFUSED`; malformed messages get `FORMERR` or nothing ([`answer`] has the table).
//! * Every answered query yields a [`QueryInfo`], logged by the servers as one `kind: dns`
//!   audit line ([`QueryInfo::audit_event`]).
//!
//! [`answer`] is the pure core; [`serve_udp`] and [`serve_tcp`] run it on ordinary tokio
//! sockets, and (Linux) [`serve_handed_udp`] on the wildcard UDP socket handed over by
//! `airlock-jail`, replying from the address each query was sent to.
//!
//! Wiring inside `airlock run`: give each handed UDP socket (port 53, IPv4 and IPv6) to
//! [`serve_handed_udp`] and a handed TCP port-53 listener (after `set_nonblocking(true)`
//! and `TcpListener::from_std`) to [`serve_tcp`], all with clones of one [`NameMap`] and
//! the session's audit log. For a transparent connection whose original destination lies
//! in [`NameMap::pool`], the proxy takes the destination name from [`NameMap::name_for`]
//! (`None`: an address never handed out or since recycled, to be refused). For HTTP(S)
//! that name can be compared with SNI and `Host`.
//!
//! Fail closed: while the audit log is unhealthy ([`airlock_audit::AuditLog::healthy`]), queries are
//! dropped unanswered, since they could no longer be logged. Errors concerning one client
//! (a reply that cannot be sent, a TCP connection that misbehaves) end that exchange only;
//! a server returns an error only when its socket itself fails.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

mod answer;
mod map;
mod serve;

pub use answer::{ANSWER_TTL, Outcome, QueryInfo, answer};
pub use map::{MAX_MAPPINGS, NameMap, default_pool};
#[cfg(target_os = "linux")]
pub use serve::serve_handed_udp;
pub use serve::{
    MAX_TCP_CONNECTIONS, MAX_TCP_QUERIES, MAX_TCP_QUERY_LEN, MAX_UDP_QUERY_LEN,
    TCP_CONNECTION_LIFETIME, TCP_IDLE_TIMEOUT, serve_tcp, serve_udp,
};
