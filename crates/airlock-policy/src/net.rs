//! Address classification: which IP addresses are global and which are private,
//! loopback, link-local, CGNAT, unique-local, multicast, metadata or IPv4-embedding IPv6.
//!
//! The private-address guard (docs/contract.md §3) refuses every destination whose class is
//! not [`AddressClass::Global`] unless the operator named it. The classification therefore
//! errs on the side of "not global": an IPv6 address outside the global unicast block
//! `2000::/3` is [`AddressClass::Reserved`], and every IPv6 form that carries an IPv4
//! address (mapped, compatible, NAT64, 6to4, Teredo) is [`AddressClass::Ipv4Embedding`],
//! whatever the IPv4 address inside, because what it reaches depends on translators the
//! policy cannot see. [`embedded_ipv4`] extracts the IPv4 address where its position is
//! fixed, so that deny rules on IPv4 blocks can also be applied to such forms.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The class of an IP address. Exhaustive: every address has exactly one class, and only
/// [`AddressClass::Global`] may be dialled without the operator naming the address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Globally routable unicast.
    Global,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`) and the deprecated IPv6 site-local
    /// block `fec0::/10`.
    Private,
    /// `169.254.0.0/16` and `fe80::/10` (apart from the metadata addresses).
    LinkLocal,
    /// Carrier-grade NAT shared space `100.64.0.0/10` (RFC 6598).
    Cgnat,
    /// IPv6 unique-local `fc00::/7` (apart from the metadata addresses).
    UniqueLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// A cloud instance-metadata endpoint: `169.254.169.254`, `169.254.170.2` (ECS),
    /// `100.100.100.200` (Alibaba), `192.0.0.192` (Oracle), `fd00:ec2::254` (AWS IPv6).
    Metadata,
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// The limited broadcast address `255.255.255.255`.
    Broadcast,
    /// Special-purpose or unassigned space: `0.0.0.0/8` ("this network"),
    /// `192.0.0.0/24` (IETF protocol assignments), `192.88.99.0/24` (6to4 relay anycast),
    /// `240.0.0.0/4`, the IPv6 discard prefix `100::/64`, the rest of `2001::/23`, and every
    /// IPv6 address outside `2000::/3`.
    Reserved,
    /// Documentation ranges: `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`,
    /// `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// Benchmarking ranges: `198.18.0.0/15`, `2001:2::/48`.
    Benchmarking,
    /// IPv6 that carries an IPv4 address: IPv4-mapped `::ffff:0:0/96`, IPv4-compatible
    /// `::/96`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo
    /// `2001::/32`.
    Ipv4Embedding,
}

impl AddressClass {
    /// A short lower-case name (`loopback`, `ipv4_embedding`) for messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Global => "global",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::LinkLocal => "link_local",
            AddressClass::Cgnat => "cgnat",
            AddressClass::UniqueLocal => "unique_local",
            AddressClass::Multicast => "multicast",
            AddressClass::Metadata => "metadata",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Reserved => "reserved",
            AddressClass::Documentation => "documentation",
            AddressClass::Benchmarking => "benchmarking",
            AddressClass::Ipv4Embedding => "ipv4_embedding",
        }
    }
}

/// The class of `ip`.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether `ip` is globally routable unicast, i.e. may be dialled without the operator
/// naming it.
pub fn is_global(ip: IpAddr) -> bool {
    classify(ip) == AddressClass::Global
}

/// Whether `addr` lies in `base/len` (`len` ≤ 32).
fn in_v4(addr: Ipv4Addr, base: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(addr) & mask == u32::from(Ipv4Addr::from(base)) & mask
}

/// Whether `addr` lies in `base/len` (`len` ≤ 128).
fn in_v6(addr: Ipv6Addr, base: [u16; 8], len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    u128::from(addr) & mask == u128::from(Ipv6Addr::from(base)) & mask
}

/// IPv4 metadata endpoints.
const METADATA_V4: [[u8; 4]; 4] = [
    [169, 254, 169, 254],
    [169, 254, 170, 2],
    [100, 100, 100, 200],
    [192, 0, 0, 192],
];

/// IPv6 metadata endpoints.
const METADATA_V6: [[u16; 8]; 1] = [[0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254]];

/// IPv4 classes, most specific first.
fn classify_v4(addr: Ipv4Addr) -> AddressClass {
    if METADATA_V4.iter().any(|m| addr.octets() == *m) {
        return AddressClass::Metadata;
    }
    if addr == Ipv4Addr::BROADCAST {
        return AddressClass::Broadcast;
    }
    if addr == Ipv4Addr::UNSPECIFIED {
        return AddressClass::Unspecified;
    }
    const TABLE: [([u8; 4], u32, AddressClass); 15] = [
        ([0, 0, 0, 0], 8, AddressClass::Reserved),
        ([10, 0, 0, 0], 8, AddressClass::Private),
        ([100, 64, 0, 0], 10, AddressClass::Cgnat),
        ([127, 0, 0, 0], 8, AddressClass::Loopback),
        ([169, 254, 0, 0], 16, AddressClass::LinkLocal),
        ([172, 16, 0, 0], 12, AddressClass::Private),
        ([192, 0, 0, 0], 24, AddressClass::Reserved),
        ([192, 0, 2, 0], 24, AddressClass::Documentation),
        ([192, 88, 99, 0], 24, AddressClass::Reserved),
        ([192, 168, 0, 0], 16, AddressClass::Private),
        ([198, 18, 0, 0], 15, AddressClass::Benchmarking),
        ([198, 51, 100, 0], 24, AddressClass::Documentation),
        ([203, 0, 113, 0], 24, AddressClass::Documentation),
        ([224, 0, 0, 0], 4, AddressClass::Multicast),
        ([240, 0, 0, 0], 4, AddressClass::Reserved),
    ];
    TABLE
        .iter()
        .find(|(base, len, _)| in_v4(addr, *base, *len))
        .map_or(AddressClass::Global, |(_, _, class)| *class)
}

/// IPv6 classes, most specific first.
fn classify_v6(addr: Ipv6Addr) -> AddressClass {
    if addr == Ipv6Addr::UNSPECIFIED {
        return AddressClass::Unspecified;
    }
    if addr == Ipv6Addr::LOCALHOST {
        return AddressClass::Loopback;
    }
    if METADATA_V6.iter().any(|m| addr == Ipv6Addr::from(*m)) {
        return AddressClass::Metadata;
    }
    const TABLE: [([u16; 8], u32, AddressClass); 16] = [
        (
            [0, 0, 0, 0, 0, 0xffff, 0, 0],
            96,
            AddressClass::Ipv4Embedding,
        ),
        ([0, 0, 0, 0, 0, 0, 0, 0], 96, AddressClass::Ipv4Embedding),
        (
            [0x64, 0xff9b, 0, 0, 0, 0, 0, 0],
            96,
            AddressClass::Ipv4Embedding,
        ),
        (
            [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
            48,
            AddressClass::Ipv4Embedding,
        ),
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, AddressClass::Reserved),
        (
            [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
            32,
            AddressClass::Documentation,
        ),
        (
            [0x3fff, 0, 0, 0, 0, 0, 0, 0],
            20,
            AddressClass::Documentation,
        ),
        (
            [0x2001, 0x2, 0, 0, 0, 0, 0, 0],
            48,
            AddressClass::Benchmarking,
        ),
        (
            [0x2001, 0, 0, 0, 0, 0, 0, 0],
            32,
            AddressClass::Ipv4Embedding,
        ),
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, AddressClass::Reserved),
        (
            [0x2002, 0, 0, 0, 0, 0, 0, 0],
            16,
            AddressClass::Ipv4Embedding,
        ),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, AddressClass::UniqueLocal),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, AddressClass::LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, AddressClass::Private),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, AddressClass::Multicast),
        ([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, AddressClass::Global),
    ];
    TABLE
        .iter()
        .find(|(base, len, _)| in_v6(addr, *base, *len))
        .map_or(AddressClass::Reserved, |(_, _, class)| *class)
}

/// The IPv4 address an IPv6 address carries at a fixed position: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, not `::` or `::1`), NAT64
/// `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::/48` and Teredo (the client address,
/// stored inverted in the last 32 bits). `None` for anything else (including the
/// local-use NAT64 block `64:ff9b:1::/48`, whose embedding position is not fixed).
pub fn embedded_ipv4(addr: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(addr);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if in_v6(addr, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96)
        || in_v6(addr, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96)
    {
        return Some(low32);
    }
    if in_v6(addr, [0; 8], 96) {
        return (addr != Ipv6Addr::UNSPECIFIED && addr != Ipv6Addr::LOCALHOST).then_some(low32);
    }
    if in_v6(addr, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    if in_v6(addr, [0x2001, 0, 0, 0, 0, 0, 0, 0], 32) {
        return Some(Ipv4Addr::from(!((bits & 0xffff_ffff) as u32)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> AddressClass {
        classify(text.parse().expect("test address"))
    }

    #[test]
    fn ipv4_classes() {
        let cases = [
            ("0.0.0.0", AddressClass::Unspecified),
            ("0.1.2.3", AddressClass::Reserved),
            ("10.0.0.1", AddressClass::Private),
            ("10.255.255.255", AddressClass::Private),
            ("100.64.0.1", AddressClass::Cgnat),
            ("100.127.255.255", AddressClass::Cgnat),
            ("100.128.0.0", AddressClass::Global),
            ("100.63.255.255", AddressClass::Global),
            ("100.100.100.200", AddressClass::Metadata),
            ("127.0.0.1", AddressClass::Loopback),
            ("127.255.0.9", AddressClass::Loopback),
            ("169.254.1.1", AddressClass::LinkLocal),
            ("169.254.169.254", AddressClass::Metadata),
            ("169.254.170.2", AddressClass::Metadata),
            ("172.15.255.255", AddressClass::Global),
            ("172.16.0.1", AddressClass::Private),
            ("172.31.255.255", AddressClass::Private),
            ("172.32.0.0", AddressClass::Global),
            ("192.0.0.8", AddressClass::Reserved),
            ("192.0.0.192", AddressClass::Metadata),
            ("192.0.2.1", AddressClass::Documentation),
            ("192.88.99.1", AddressClass::Reserved),
            ("192.168.1.1", AddressClass::Private),
            ("198.18.0.1", AddressClass::Benchmarking),
            ("198.19.255.255", AddressClass::Benchmarking),
            ("198.20.0.0", AddressClass::Global),
            ("198.51.100.7", AddressClass::Documentation),
            ("203.0.113.9", AddressClass::Documentation),
            ("224.0.0.1", AddressClass::Multicast),
            ("239.255.255.255", AddressClass::Multicast),
            ("240.0.0.1", AddressClass::Reserved),
            ("255.255.255.254", AddressClass::Reserved),
            ("255.255.255.255", AddressClass::Broadcast),
            ("8.8.8.8", AddressClass::Global),
            ("1.1.1.1", AddressClass::Global),
            ("140.82.112.3", AddressClass::Global),
        ];
        for (text, expected) in cases {
            assert_eq!(class(text), expected, "{text}");
        }
    }

    #[test]
    fn ipv6_classes() {
        let cases = [
            ("::", AddressClass::Unspecified),
            ("::1", AddressClass::Loopback),
            ("::ffff:127.0.0.1", AddressClass::Ipv4Embedding),
            ("::ffff:8.8.8.8", AddressClass::Ipv4Embedding),
            ("::127.0.0.1", AddressClass::Ipv4Embedding),
            ("::0.0.0.2", AddressClass::Ipv4Embedding),
            ("64:ff9b::10.0.0.1", AddressClass::Ipv4Embedding),
            ("64:ff9b:1::1", AddressClass::Ipv4Embedding),
            ("2002:7f00:1::1", AddressClass::Ipv4Embedding),
            ("2001:0:4136:e378::1", AddressClass::Ipv4Embedding),
            ("2001:db8::1", AddressClass::Documentation),
            ("3fff::1", AddressClass::Documentation),
            ("2001:2::1", AddressClass::Benchmarking),
            ("2001:10::1", AddressClass::Reserved),
            ("100::1", AddressClass::Reserved),
            ("100:0:0:1::1", AddressClass::Reserved),
            ("fc00::1", AddressClass::UniqueLocal),
            ("fd12:3456::1", AddressClass::UniqueLocal),
            ("fd00:ec2::254", AddressClass::Metadata),
            ("fe80::1", AddressClass::LinkLocal),
            ("febf::1", AddressClass::LinkLocal),
            ("fec0::1", AddressClass::Private),
            ("ff02::1", AddressClass::Multicast),
            ("::1:0:0:0", AddressClass::Reserved),
            ("4000::1", AddressClass::Reserved),
            ("2606:4700::1111", AddressClass::Global),
            ("2a00:1450:4001::200e", AddressClass::Global),
        ];
        for (text, expected) in cases {
            assert_eq!(class(text), expected, "{text}");
        }
    }

    #[test]
    fn only_global_is_global() {
        assert!(is_global("8.8.8.8".parse().expect("addr")));
        assert!(is_global("2606:4700::1111".parse().expect("addr")));
        for text in [
            "127.0.0.1",
            "169.254.169.254",
            "::ffff:8.8.8.8",
            "10.1.2.3",
            "::",
        ] {
            assert!(!is_global(text.parse().expect("addr")), "{text}");
        }
    }

    #[test]
    fn embedded_addresses() {
        let v6 = |text: &str| text.parse::<Ipv6Addr>().expect("addr");
        let v4 = |text: &str| Some(text.parse::<Ipv4Addr>().expect("addr"));
        assert_eq!(embedded_ipv4(v6("::ffff:10.0.0.1")), v4("10.0.0.1"));
        assert_eq!(
            embedded_ipv4(v6("::169.254.169.254")),
            v4("169.254.169.254")
        );
        assert_eq!(embedded_ipv4(v6("64:ff9b::127.0.0.1")), v4("127.0.0.1"));
        assert_eq!(
            embedded_ipv4(v6("2002:a9fe:a9fe::1")),
            v4("169.254.169.254")
        );
        assert_eq!(
            embedded_ipv4(v6("2001:0:4136:e378:8000:63bf:3fff:fdd2")),
            v4("192.0.2.45")
        );
        assert_eq!(embedded_ipv4(v6("::")), None);
        assert_eq!(embedded_ipv4(v6("::1")), None);
        assert_eq!(embedded_ipv4(v6("2606:4700::1111")), None);
    }

    #[test]
    fn class_names() {
        assert_eq!(AddressClass::Ipv4Embedding.as_str(), "ipv4_embedding");
        assert_eq!(AddressClass::Global.as_str(), "global");
    }
}
