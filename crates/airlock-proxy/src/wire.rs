//! What the proxy reads from a client's raw bytes before HTTP takes over, without I/O:
//! a tunnel's first bytes (a TLS ClientHello and its server name, an HTTP/1 request line,
//! or anything else), the `Host` of a plain request head on a captured connection, and
//! the target of a `CONNECT`.
//!
//! Every input here is written by the sandboxed command, so each reader is bounded in
//! what it looks at and never panics; `fuzz/` fuzzes them (docs/fuzzing.md) and the
//! tests below hold the invariants the fuzz targets check.

use airlock_policy::canonical::{Host, canonical_host, parse_authority};
use rustls::server::Acceptor;

/// The most a ClientHello may take (a TLS record is at most 16 KiB plus its header; a
/// hello split over several records is refused beyond this).
pub const MAX_HELLO_BYTES: usize = 16 * 1024 + 5;
/// The longest HTTP method token looked for when sniffing plain HTTP.
pub const MAX_METHOD_LEN: usize = 20;
/// The most bytes read while looking for a plain-HTTP `Host` header.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The most header fields a plain request head may have for its `Host` to be read.
const MAX_HOST_FIELDS: usize = 64;

/// What the first bytes of a tunnel are.
#[derive(Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// A TLS ClientHello, with its server name if it has one (`Err` for an SNI that is
    /// not a valid host name).
    Tls(Option<Result<Host, ()>>),
    /// An HTTP/1 request line.
    Http,
    /// Something else.
    Other,
    /// The client went away or stalled before its first message was complete.
    Closed,
}

/// Reads a tunnel's first bytes as they arrive and says what they are.
#[derive(Default)]
pub struct Sniffer {
    /// The ClientHello parser, once the first byte said TLS handshake.
    hello: Option<Acceptor>,
    /// How many of the buffer's bytes the hello parser has been given.
    fed: usize,
}

impl Sniffer {
    /// Looks at `buffer`, every byte received so far (each call's buffer starts with the
    /// previous call's): `None` while more bytes are needed to tell.
    pub fn classify(&mut self, buffer: &[u8]) -> Option<Sniffed> {
        if self.hello.is_none() && buffer.first() == Some(&0x16) {
            self.hello = Some(Acceptor::default());
        }
        let Some(acceptor) = self.hello.as_mut() else {
            return looks_like_http(buffer)
                .map(|http| if http { Sniffed::Http } else { Sniffed::Other });
        };
        let mut unfed = buffer.get(self.fed..).unwrap_or_default();
        self.fed = buffer.len();
        // Asked after every read, so bytes after a complete hello cannot change the answer.
        while !unfed.is_empty() {
            if !matches!(acceptor.read_tls(&mut unfed), Ok(read) if read > 0) {
                return Some(Sniffed::Other);
            }
            match acceptor.accept() {
                Ok(Some(accepted)) => return Some(Sniffed::Tls(server_name(&accepted))),
                Ok(None) => {}
                Err(_) => return Some(Sniffed::Other),
            }
        }
        (buffer.len() >= MAX_HELLO_BYTES).then_some(Sniffed::Other)
    }

    /// What the bytes were when the client stops sending before they could be told apart:
    /// a cut-off ClientHello is [`Sniffed::Closed`], anything else [`Sniffed::Other`].
    pub fn at_end(&self) -> Sniffed {
        if self.hello.is_some() {
            Sniffed::Closed
        } else {
            Sniffed::Other
        }
    }
}

/// The server name a ClientHello asks for: `None` without one, `Err` when it is no valid
/// host name.
fn server_name(accepted: &rustls::server::Accepted) -> Option<Result<Host, ()>> {
    let hello = accepted.client_hello();
    let name = hello.server_name()?;
    Some(canonical_host(name).map_err(|_| ()))
}

/// `Some(true)` for `TOKEN SP` with an upper-case method token, `Some(false)` for
/// anything that cannot become one, `None` while undecided.
pub fn looks_like_http(buffer: &[u8]) -> Option<bool> {
    for (index, byte) in buffer.iter().enumerate().take(MAX_METHOD_LEN + 1) {
        match byte {
            b'A'..=b'Z' | b'-' | b'_' => {}
            b' ' => return Some(index > 0),
            _ => return Some(false),
        }
    }
    if buffer.len() > MAX_METHOD_LEN {
        Some(false)
    } else {
        None
    }
}

/// The `Host` of a plain request head: `None` while incomplete (and shorter than
/// [`MAX_HEAD_BYTES`]), `Some(None)` when complete, too long or malformed without exactly
/// one valid `Host` (its port dropped).
pub fn request_host(head: &[u8]) -> Option<Option<Host>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HOST_FIELDS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Partial) if head.len() < MAX_HEAD_BYTES => None,
        Ok(httparse::Status::Partial) | Err(_) => Some(None),
        Ok(httparse::Status::Complete(_)) => {
            let mut hosts = request
                .headers
                .iter()
                .filter(|header| header.name.eq_ignore_ascii_case("host"));
            let (Some(host), None) = (hosts.next(), hosts.next()) else {
                return Some(None);
            };
            Some(host_value(host.value))
        }
    }
}

/// A `Host` field's value as a canonical host, its port dropped.
fn host_value(value: &[u8]) -> Option<Host> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let authority = http::uri::Authority::try_from(value).ok()?;
    canonical_host(authority.host()).ok()
}

/// Why a `CONNECT` target is refused (400, `malformed_request`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadTarget {
    /// No `host:port` authority at all.
    Missing,
    /// The authority carries `user@`.
    UserInfo,
    /// Not a valid host with a port.
    Invalid,
}

impl BadTarget {
    /// The message given to the client and the audit log.
    pub fn message(self) -> &'static str {
        match self {
            BadTarget::Missing => "CONNECT needs a host:port target",
            BadTarget::UserInfo => "CONNECT target carries user information",
            BadTarget::Invalid => "CONNECT target is not a valid host:port",
        }
    }
}

/// The canonical host and port a `CONNECT` asks for, from its request target's authority.
pub fn connect_target(authority: Option<&str>) -> Result<(Host, u16), BadTarget> {
    let authority = authority.ok_or(BadTarget::Missing)?;
    if authority.contains('@') {
        return Err(BadTarget::UserInfo);
    }
    parse_authority(authority, 0).map_err(|_| BadTarget::Invalid)
}

#[cfg(test)]
mod tests;
