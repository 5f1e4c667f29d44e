//! The request canonicaliser: one name, one port, one path for every request, whatever
//! spelling the client used.
//!
//! This module owns three conversions, all pure and total (bad input is an error value,
//! never a panic):
//!
//! * [`canonical_host`]: a host as written in a URL, a `Host` header, a CONNECT target or
//!   an SNI name becomes one [`Host`]. Names are lower-cased, IDNA (UTS 46) mapped to
//!   ASCII and lose one trailing dot; every IPv4 spelling a browser (WHATWG URL) or
//!   `inet_aton` accepts (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`) becomes
//!   [`Host::Ip`], so a rule about an address cannot be sidestepped by spelling it
//!   differently. Nothing is trimmed silently: whitespace, control characters and URL
//!   delimiters are errors.
//! * [`parse_authority`]: `host`, `host:port`, `[v6]:port`.
//! * [`canonical_path`]: the path the policy's globs and regexes see (see its doc for the
//!   exact algorithm and the choices made for `//`, `*` and double encoding).

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The reserved host name a route is addressed to (plain HTTP only; see [`crate::route`]).
/// Kept here, with the other facts about host names, so that the decision and the route
/// modules can both use it without importing each other.
pub const ROUTE_HOST: &str = "airlock.internal";

/// A destination host after canonicalisation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name: lower-case ASCII (IDNA applied), no trailing dot.
    Name(String),
    /// An IP address, whatever literal form the client wrote it in.
    Ip(IpAddr),
}

impl fmt::Display for Host {
    /// A name as is, an IPv4 address dotted-decimal, an IPv6 address in brackets
    /// (the form [`canonical_host`] reads back to the same value).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(addr)) => write!(f, "{addr}"),
            Host::Ip(IpAddr::V6(addr)) => write!(f, "[{addr}]"),
        }
    }
}

/// The one canonical form of a request that the policy decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CanonicalRequest {
    /// Upper-case method (`CONNECT` for a tunnel decision).
    pub method: String,
    /// Destination host.
    pub host: Host,
    /// Destination port.
    pub port: u16,
    /// The canonical path (starts with `/`), or why it is unsafe.
    pub path: Result<String, PathUnsafe>,
    /// The raw query (without `?`), if any.
    pub query: Option<String>,
}

impl CanonicalRequest {
    /// Canonicalise a request: the method is upper-cased (ASCII), the path and query are
    /// split and canonicalised by [`canonical_path`].
    pub fn new(method: &str, host: Host, port: u16, path_and_query: &str) -> Self {
        let (path, query) = canonical_path(path_and_query);
        CanonicalRequest {
            method: method.to_ascii_uppercase(),
            host,
            port,
            path,
            query,
        }
    }
}

/// Why a path was judged unsafe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathUnsafe {
    /// A `..` segment survived canonicalisation (e.g. double-encoded, `..;` with a path
    /// parameter, or a `..` right after an empty segment whose meaning depends on whether
    /// the server merges slashes).
    DotDot,
    /// A backslash (raw or encoded).
    Backslash,
    /// A NUL byte.
    Nul,
    /// An encoded slash (`%2F`).
    EncodedSlash,
    /// The percent-decoded path is not valid UTF-8 (e.g. the overlong `%C0%AE`).
    InvalidUtf8,
    /// The path neither starts with `/` nor is the asterisk form `*` (e.g. an
    /// absolute-form URL the caller did not split, or a relative path).
    NotAbsolute,
}

impl fmt::Display for PathUnsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathUnsafe::DotDot => "the path hides a `..` segment",
            PathUnsafe::Backslash => "the path contains a backslash",
            PathUnsafe::Nul => "the path contains a NUL byte",
            PathUnsafe::EncodedSlash => "the path contains an encoded slash",
            PathUnsafe::InvalidUtf8 => "the decoded path is not valid UTF-8",
            PathUnsafe::NotAbsolute => "the path does not start with `/`",
        })
    }
}

/// Why a host or authority was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Nothing was given.
    #[error("the host is empty")]
    Empty,
    /// A character that has no place in a host name (whitespace, control, `/ \ @ ? #`...).
    #[error("the host contains the character {0:?}, which no host name may contain")]
    ForbiddenCharacter(char),
    /// IDNA (UTS 46) processing refused the name.
    #[error("the host is not a valid internationalised domain name")]
    Idna,
    /// A label between dots is empty (`a..b`, `.a`, or more than one trailing dot).
    #[error("the host has an empty label")]
    EmptyLabel,
    /// A label is longer than 63 octets.
    #[error("a label of the host is longer than 63 characters")]
    LabelTooLong,
    /// The name is longer than 253 octets.
    #[error("the host is longer than 253 characters")]
    TooLong,
    /// The last label looks numeric but the whole is not a valid IPv4 address.
    #[error("the host looks like an IPv4 address but is not a valid one")]
    InvalidIpv4,
    /// A bracketed literal is not a valid IPv6 address.
    #[error("the host is not a valid bracketed IPv6 address")]
    InvalidIpv6,
    /// A bracketed IPv6 literal carries a zone id (`[fe80::1%eth0]`).
    #[error("IPv6 zone ids are not accepted")]
    ZoneId,
    /// The port is not 1 to 65535 written in digits.
    #[error("the port must be a number from 1 to 65535")]
    InvalidPort,
}

/// Longest DNS name in presentation form without the trailing dot.
const MAX_NAME_LEN: usize = 253;
/// Longest DNS label.
const MAX_LABEL_LEN: usize = 63;

/// Canonicalise a host as written by a client (URL host, `Host` header without port,
/// CONNECT target without port, SNI).
///
/// * `[v6]` (brackets required) becomes [`Host::Ip`]; zone ids are refused; an
///   IPv4-mapped address stays IPv6 (address classification treats it as embedding IPv4).
/// * Otherwise the input is IDNA-mapped to lower-case ASCII (UTS 46, non-transitional);
///   one trailing dot is dropped; if the last label is numeric (`123`, `0x1f`, `0x`) the
///   whole is parsed as IPv4 the way WHATWG URL and `inet_aton` do (1 to 4 parts, each
///   decimal, `0`-prefixed octal or `0x`-prefixed hex, the last part filling the remaining
///   bytes) and a failure is an error, never a name. `0x` alone is refused (WHATWG would
///   read it as 0, `inet_aton` varies: refusing is the safe side).
/// * A name may contain only `a-z 0-9 - _` and dots, labels of 1 to 63 octets, 253 in all.
pub fn canonical_host(input: &str) -> Result<Host, HostError> {
    if input.is_empty() {
        return Err(HostError::Empty);
    }
    if let Some(rest) = input.strip_prefix('[') {
        let inner = rest.strip_suffix(']').ok_or(HostError::InvalidIpv6)?;
        if inner.contains('%') {
            return Err(HostError::ZoneId);
        }
        return inner
            .parse::<Ipv6Addr>()
            .map(|addr| Host::Ip(IpAddr::V6(addr)))
            .map_err(|_| HostError::InvalidIpv6);
    }
    check_raw_characters(input)?;
    let ascii = to_ascii_name(input)?;
    // The mapping may turn full-width or compatibility characters into ASCII delimiters:
    // check again on what DNS would see.
    check_ascii_name_characters(&ascii)?;
    let name = ascii.strip_suffix('.').unwrap_or(&ascii);
    if name.is_empty() {
        return Err(HostError::Empty);
    }
    let last_label = name.rsplit('.').next().unwrap_or(name);
    if looks_numeric(last_label) {
        return parse_ipv4(name)
            .map(|addr| Host::Ip(IpAddr::V4(addr)))
            .ok_or(HostError::InvalidIpv4);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(HostError::TooLong);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(HostError::LabelTooLong);
        }
    }
    Ok(Host::Name(name.to_owned()))
}

/// IDNA (UTS 46) to ASCII. Plain ASCII without a punycode (`xn--`) label only needs
/// lower-casing (UTS 46 maps nothing else in ASCII once the forbidden characters are
/// refused), so it skips the full processing.
fn to_ascii_name(input: &str) -> Result<Cow<'_, str>, HostError> {
    if input.is_ascii() {
        let lower = input.to_ascii_lowercase();
        if !lower.split('.').any(|label| label.starts_with("xn--")) {
            return Ok(Cow::Owned(lower));
        }
    }
    idna::domain_to_ascii_cow(input.as_bytes(), idna::AsciiDenyList::URL)
        .map_err(|_| HostError::Idna)
}

/// Parse `host`, `host:port` or `[v6]` / `[v6]:port`; without a port, `default_port` is
/// used. The port is 1 to 5 ASCII digits with a value from 1 to 65535; an empty port
/// (`host:`) and an unbracketed IPv6 address are refused, and so is a missing port when
/// `default_port` is 0.
pub fn parse_authority(input: &str, default_port: u16) -> Result<(Host, u16), HostError> {
    let (host_part, port_part) = if input.starts_with('[') {
        let close = input.find(']').ok_or(HostError::InvalidIpv6)?;
        let (host, rest) = input.split_at(close + 1);
        match rest.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if rest.is_empty() => (host, None),
            None => return Err(HostError::InvalidIpv6),
        }
    } else {
        match input.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (input, None),
        }
    };
    let port = match port_part {
        Some(text) => parse_port(text)?,
        None if default_port == 0 => return Err(HostError::InvalidPort),
        None => default_port,
    };
    Ok((canonical_host(host_part)?, port))
}

/// A port: 1 to 5 ASCII digits, value 1..=65535.
fn parse_port(text: &str) -> Result<u16, HostError> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostError::InvalidPort);
    }
    match text.parse::<u16>() {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(HostError::InvalidPort),
    }
}

/// Refuse ASCII characters that have no place in a host name before any mapping: only
/// letters, digits, `-`, `_` and `.` pass (non-ASCII goes on to IDNA).
fn check_raw_characters(input: &str) -> Result<(), HostError> {
    match input
        .chars()
        .find(|c| c.is_ascii() && !is_name_character(*c) && *c != '.')
    {
        Some(c) => Err(HostError::ForbiddenCharacter(c)),
        None => Ok(()),
    }
}

/// After IDNA: only lower-case letters, digits, `-`, `_` and dots may remain.
fn check_ascii_name_characters(ascii: &str) -> Result<(), HostError> {
    match ascii
        .chars()
        .find(|c| (c.is_ascii_uppercase() || !is_name_character(*c)) && *c != '.')
    {
        Some(c) => Err(HostError::ForbiddenCharacter(c)),
        None => Ok(()),
    }
}

/// A character allowed inside a label.
fn is_name_character(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Whether a label is what WHATWG calls "ends in a number": all decimal digits, or a
/// `0x`/`0X` prefix followed by hex digits (possibly none).
fn looks_numeric(label: &str) -> bool {
    if !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match label
        .strip_prefix("0x")
        .or_else(|| label.strip_prefix("0X"))
    {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

/// Parse an IPv4 address in any WHATWG / `inet_aton` form (no trailing dot: the caller
/// dropped one). `None` when it is not a valid address.
fn parse_ipv4(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        numbers.push(parse_ipv4_number(part)?);
    }
    let (last, leading) = numbers.split_last()?;
    let mut value: u64 = 0;
    for (index, number) in leading.iter().enumerate() {
        if *number > 255 {
            return None;
        }
        value |= number << (8 * (3 - index));
    }
    let remaining_bits = 8 * (4 - leading.len());
    if *last >= 1u64 << remaining_bits {
        return None;
    }
    value |= last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// One part of an IPv4 address: decimal, `0`-prefixed octal or `0x`-prefixed hex.
/// Values above 2^32 - 1 are refused (so no overflow is possible).
fn parse_ipv4_number(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let trimmed = digits.trim_start_matches('0');
    if trimmed.len() > 11 {
        return None;
    }
    let value = u64::from_str_radix(if trimmed.is_empty() { "0" } else { trimmed }, radix).ok()?;
    (value <= u64::from(u32::MAX)).then_some(value)
}

/// Canonicalise a request target in origin form (`/path?query`, possibly with a
/// `#fragment`) into the path the policy matches and the raw query.
///
/// The steps, in order:
///
/// 1. A fragment (from the first `#`) is dropped; the query (after the first `?`) is
///    returned raw, `None` when there is no `?`.
/// 2. An empty path becomes `/`. The asterisk form `*` (server-wide `OPTIONS`) is kept as
///    `*`: it matches rules without path constraints and globs that match `*` only.
///    Anything else not starting with `/` is [`PathUnsafe::NotAbsolute`].
/// 3. A raw `%2F` (encoded slash) is [`PathUnsafe::EncodedSlash`].
/// 4. One percent-decode. A result that is not UTF-8 is [`PathUnsafe::InvalidUtf8`];
///    a backslash (raw or `%5C`) is [`PathUnsafe::Backslash`], a NUL is [`PathUnsafe::Nul`].
/// 5. Runs of `/` are collapsed into one, so that `//admin/x` is decided like
///    `/admin/x` (a deny on `/admin/**` must not be escapable by doubling a slash; most
///    servers merge slashes too). A `..` segment right after an empty segment (`/a//../b`)
///    is [`PathUnsafe::DotDot`], since servers that do and do not merge slashes resolve it
///    to different paths.
/// 6. Dot segments are removed as in RFC 3986 §5.2.4 (`.` dropped, `..` removes the
///    previous segment, never above the root; a final `.` or `..` leaves a trailing `/`).
/// 7. What still hides a traversal or delimiter is refused: a segment that is `.` or `..`
///    after a second percent-decode (double encoding, `%252e%252e`) or before a `;` path
///    parameter (`..;`, which servlet containers read as `..`) is [`PathUnsafe::DotDot`];
///    a second decode yielding `/`, `\` or NUL gives the matching variant.
/// 8. The result is written back with only `%`, `?` and `#` percent-encoded (as `%25`,
///    `%3F`, `%23`), so that it reads back as itself: canonicalising a canonical path
///    returns it unchanged.
pub fn canonical_path(path_and_query: &str) -> (Result<String, PathUnsafe>, Option<String>) {
    let without_fragment = path_and_query
        .split_once('#')
        .map_or(path_and_query, |(before, _)| before);
    let (raw_path, query) = match without_fragment.split_once('?') {
        Some((path, query)) => (path, Some(query.to_owned())),
        None => (without_fragment, None),
    };
    (canonical_path_only(raw_path), query)
}

/// Steps 2 to 8 of [`canonical_path`] on the path alone.
fn canonical_path_only(raw: &str) -> Result<String, PathUnsafe> {
    if raw.is_empty() {
        return Ok("/".to_owned());
    }
    if raw == "*" {
        return Ok("*".to_owned());
    }
    if !raw.starts_with('/') {
        return Err(PathUnsafe::NotAbsolute);
    }
    if contains_encoded(raw.as_bytes(), b'/') {
        return Err(PathUnsafe::EncodedSlash);
    }
    let decoded: Cow<'_, str> = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| PathUnsafe::InvalidUtf8)?;
    check_forbidden_bytes(&decoded)?;

    let relative = decoded.strip_prefix('/').ok_or(PathUnsafe::NotAbsolute)?;
    let segments: Vec<&str> = relative.split('/').collect();
    let count = segments.len();
    let mut kept: Vec<&str> = Vec::with_capacity(count);
    let mut trailing_slash = false;
    let mut previous_empty = false;
    for (index, segment) in segments.iter().enumerate() {
        let is_last = index + 1 == count;
        match *segment {
            "" => {
                trailing_slash = is_last;
                previous_empty = true;
                continue;
            }
            "." => trailing_slash = is_last,
            ".." => {
                if previous_empty {
                    return Err(PathUnsafe::DotDot);
                }
                kept.pop();
                trailing_slash = is_last;
            }
            other => {
                check_hidden(other)?;
                kept.push(other);
                trailing_slash = false;
            }
        }
        previous_empty = false;
    }

    let mut out = String::with_capacity(decoded.len() + 8);
    for segment in &kept {
        out.push('/');
        push_escaped(&mut out, segment);
    }
    if out.is_empty() || trailing_slash {
        out.push('/');
    }
    Ok(out)
}

/// Whether `raw` contains `%XX` encoding `byte` (either hex case).
fn contains_encoded(raw: &[u8], byte: u8) -> bool {
    raw.windows(3)
        .any(|w| w[0] == b'%' && hex_value(w[1], w[2]) == Some(byte))
}

/// The byte a pair of hex digits encodes.
fn hex_value(high: u8, low: u8) -> Option<u8> {
    let digit = |b: u8| (b as char).to_digit(16);
    let value = digit(high)? * 16 + digit(low)?;
    u8::try_from(value).ok()
}

/// Refuse a backslash or NUL in decoded text.
fn check_forbidden_bytes(text: &str) -> Result<(), PathUnsafe> {
    if text.contains('\\') {
        return Err(PathUnsafe::Backslash);
    }
    if text.contains('\0') {
        return Err(PathUnsafe::Nul);
    }
    Ok(())
}

/// Refuse a kept segment that still hides a traversal: `.`/`..` before a `;` parameter,
/// or `/`, `\`, NUL, `.`/`..` after a second percent-decode.
fn check_hidden(segment: &str) -> Result<(), PathUnsafe> {
    let is_dots = |text: &[u8]| text == b"." || text == b"..";
    let before_parameter = segment.split(';').next().unwrap_or(segment);
    if is_dots(before_parameter.as_bytes()) {
        return Err(PathUnsafe::DotDot);
    }
    if !segment.contains('%') {
        return Ok(());
    }
    let twice: Vec<u8> = percent_encoding::percent_decode_str(segment).collect();
    if twice.contains(&b'/') {
        return Err(PathUnsafe::EncodedSlash);
    }
    if twice.contains(&b'\\') {
        return Err(PathUnsafe::Backslash);
    }
    if twice.contains(&0) {
        return Err(PathUnsafe::Nul);
    }
    let twice_before_parameter = twice.split(|b| *b == b';').next().unwrap_or(&twice);
    if is_dots(twice_before_parameter) {
        return Err(PathUnsafe::DotDot);
    }
    Ok(())
}

/// Append `segment` with `%`, `?` and `#` percent-encoded.
fn push_escaped(out: &mut String, segment: &str) {
    for c in segment.chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3F"),
            '#' => out.push_str("%23"),
            other => out.push(other),
        }
    }
}
