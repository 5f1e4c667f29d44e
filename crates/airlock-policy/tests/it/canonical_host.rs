//! Host and authority canonicalisation: every spelling of a name or an address becomes
//! one `Host`, and nothing suspicious is silently accepted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use airlock_policy::Host;
use airlock_policy::canonical::{HostError, canonical_host, parse_authority};

fn name(text: &str) -> Host {
    Host::Name(text.to_owned())
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> Host {
    Host::Ip(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
}

#[test]
fn names_are_lower_cased_and_lose_one_trailing_dot() {
    assert_eq!(canonical_host("API.GitHub.com"), Ok(name("api.github.com")));
    assert_eq!(
        canonical_host("api.github.com."),
        Ok(name("api.github.com"))
    );
    assert_eq!(canonical_host("localhost"), Ok(name("localhost")));
    assert_eq!(
        canonical_host("_dmarc.example.com"),
        Ok(name("_dmarc.example.com"))
    );
    assert_eq!(
        canonical_host("api.github.com.."),
        Err(HostError::EmptyLabel)
    );
    assert_eq!(canonical_host("a..b"), Err(HostError::EmptyLabel));
    assert_eq!(canonical_host(".a"), Err(HostError::EmptyLabel));
    assert_eq!(canonical_host("."), Err(HostError::Empty));
    assert_eq!(canonical_host(""), Err(HostError::Empty));
}

#[test]
fn idna_maps_to_ascii() {
    assert_eq!(canonical_host("bücher.de"), Ok(name("xn--bcher-kva.de")));
    assert_eq!(canonical_host("BÜCHER.de"), Ok(name("xn--bcher-kva.de")));
    assert_eq!(
        canonical_host("xn--bcher-kva.de"),
        Ok(name("xn--bcher-kva.de"))
    );
    // Full-width dots are label separators after mapping.
    assert_eq!(
        canonical_host("example\u{3002}com"),
        Ok(name("example.com"))
    );
    // Full-width digits become an IPv4 address, never a name.
    assert_eq!(canonical_host("１２７.０.０.１"), Ok(v4(127, 0, 0, 1)));
    // A full-width solidus maps to '/', which is refused.
    assert!(canonical_host("evil.com\u{ff0f}x").is_err());
    assert!(canonical_host("xn--a.com").is_err(), "invalid punycode");
}

#[test]
fn delimiters_whitespace_and_controls_are_errors() {
    for bad in [
        " example.com",
        "example.com ",
        "exa mple.com",
        "example.com\t",
        "example.com\n",
        "example.com\r",
        "ex\0ample.com",
        "ex\u{7f}ample.com",
        "evil.com/x",
        "evil.com\\x",
        "user@evil.com",
        "evil.com?x",
        "evil.com#x",
        "evil.com:80",
        "ex%61mple.com",
        "[::1",
        "::1",
        "a<b",
        "a>b",
        "a|b",
        "a^b",
        "a*b",
        "*.example.com",
    ] {
        assert!(canonical_host(bad).is_err(), "{bad:?} must be refused");
    }
}

#[test]
fn length_limits_follow_dns() {
    let label63 = "a".repeat(63);
    let label64 = "a".repeat(64);
    assert!(canonical_host(&format!("{label63}.com")).is_ok());
    assert_eq!(
        canonical_host(&format!("{label64}.com")),
        Err(HostError::LabelTooLong)
    );
    let long = [label63.as_str(); 4].join(".");
    assert_eq!(long.len(), 255);
    assert_eq!(canonical_host(&long), Err(HostError::TooLong));
    let fits = format!("{}.{}", [label63.as_str(); 3].join("."), "a".repeat(61));
    assert_eq!(fits.len(), 253);
    assert!(canonical_host(&fits).is_ok());
    assert!(canonical_host(&format!("{fits}.")).is_ok());
}

#[test]
fn every_ipv4_spelling_is_the_address() {
    let loopback = v4(127, 0, 0, 1);
    for spelling in [
        "127.0.0.1",
        "127.0.0.1.",
        "2130706433",
        "0x7f000001",
        "0X7F000001",
        "0x7f.1",
        "0177.0.0.1",
        "0177.0.0.01",
        "127.1",
        "127.0.1",
        "0x7f.0.0.0x1",
        "017700000001",
        "0x7f.0x0.0.1",
        "00000177.0.0.1",
    ] {
        assert_eq!(canonical_host(spelling), Ok(loopback.clone()), "{spelling}");
    }
    assert_eq!(canonical_host("0"), Ok(v4(0, 0, 0, 0)));
    assert_eq!(canonical_host("4294967295"), Ok(v4(255, 255, 255, 255)));
    assert_eq!(canonical_host("169.254.43518"), Ok(v4(169, 254, 169, 254)));
    assert_eq!(
        canonical_host("0xa9.0xfe.0xa9.0xfe"),
        Ok(v4(169, 254, 169, 254))
    );
    assert_eq!(canonical_host("10.0x140005"), Ok(v4(10, 20, 0, 5)));
}

#[test]
fn numeric_looking_names_that_are_not_addresses_are_errors() {
    for bad in [
        "1.2.3.256",
        "0x",
        "4294967296",
        "1.2.3.4.5",
        "256.1",
        "1.16777216",
        "08.0.0.1",
        "09",
        "foo.123",
        "foo.0x1",
        "1..1",
        "0x100000000",
        "99999999999999999999999",
        "1.2.3.0x",
    ] {
        assert!(canonical_host(bad).is_err(), "{bad:?} must be refused");
    }
    // Not numeric-looking last label: a name.
    assert_eq!(canonical_host("1.2.3.a"), Ok(name("1.2.3.a")));
    assert_eq!(canonical_host("123.example"), Ok(name("123.example")));
    assert_eq!(canonical_host("0xg"), Ok(name("0xg")));
}

#[test]
fn bracketed_ipv6() {
    assert_eq!(
        canonical_host("[::1]"),
        Ok(Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)))
    );
    assert_eq!(
        canonical_host("[::FFFF:127.0.0.1]"),
        Ok(Host::Ip(IpAddr::V6(
            Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped()
        )))
    );
    assert_eq!(canonical_host("[fe80::1%eth0]"), Err(HostError::ZoneId));
    assert_eq!(canonical_host("[fe80::1%25eth0]"), Err(HostError::ZoneId));
    assert_eq!(canonical_host("[not-v6]"), Err(HostError::InvalidIpv6));
    assert_eq!(canonical_host("[127.0.0.1]"), Err(HostError::InvalidIpv6));
    assert_eq!(canonical_host("[::1]x"), Err(HostError::InvalidIpv6));
}

#[test]
fn display_reads_back() {
    for text in [
        "example.com",
        "127.0.0.1",
        "[::1]",
        "[::ffff:10.0.0.1]",
        "xn--bcher-kva.de",
    ] {
        let host = canonical_host(text).expect("valid");
        assert_eq!(canonical_host(&host.to_string()), Ok(host));
    }
}

#[test]
fn authorities() {
    assert_eq!(
        parse_authority("example.com", 443),
        Ok((name("example.com"), 443))
    );
    assert_eq!(
        parse_authority("Example.com:8443", 443),
        Ok((name("example.com"), 8443))
    );
    assert_eq!(
        parse_authority("[::1]:80", 443),
        Ok((Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)), 80))
    );
    assert_eq!(
        parse_authority("[::1]", 443),
        Ok((Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)), 443))
    );
    assert_eq!(
        parse_authority("2130706433:22", 443),
        Ok((v4(127, 0, 0, 1), 22))
    );
    assert_eq!(
        parse_authority("a.com:65535", 443),
        Ok((name("a.com"), 65535))
    );
    assert_eq!(parse_authority("a.com:00080", 443), Ok((name("a.com"), 80)));
    for bad in [
        "a.com:",
        "a.com:0",
        "a.com:65536",
        "a.com:+80",
        "a.com:-1",
        "a.com: 80",
        "a.com:80 ",
        "a.com:8o",
        "a.com:000080",
        "::1",
        "::1:80",
        "[::1]:",
        "[::1]x",
        "[::1]:x",
        "a.com:80:80",
        "user@a.com",
        ":80",
        "",
    ] {
        assert!(
            parse_authority(bad, 443).is_err(),
            "{bad:?} must be refused"
        );
    }
    assert_eq!(parse_authority("a.com", 0), Err(HostError::InvalidPort));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

    /// Whatever is accepted reads back as itself from its display form, and a name is
    /// lower-case LDH (plus `_`) within DNS limits.
    #[test]
    fn accepted_hosts_are_fixed_points(input in "[a-zA-Z0-9.\\-_:\\[\\]%xX]{0,24}|\\PC{0,12}") {
        if let Ok(host) = canonical_host(&input) {
            proptest::prop_assert_eq!(canonical_host(&host.to_string()), Ok(host.clone()));
            if let Host::Name(name) = &host {
                proptest::prop_assert!(name.len() <= 253 && !name.ends_with('.'));
                proptest::prop_assert!(name.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit() || b"-_.".contains(&b)));
            }
        }
        if let Ok((host, port)) = parse_authority(&input, 443) {
            proptest::prop_assert!(port != 0);
            proptest::prop_assert_eq!(canonical_host(&host.to_string()), Ok(host));
        }
    }
}
