//! The invariants the wire targets of `fuzz/` check, on examples and generated inputs.

use std::sync::Arc;

use proptest::prelude::*;
use rustls::pki_types::ServerName;

use super::*;

/// The first flight of a real rustls client connecting to `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("default versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let server = ServerName::try_from(name.to_owned()).expect("a valid name");
    let mut client = rustls::ClientConnection::new(Arc::new(config), server).expect("client");
    let mut hello = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut hello).expect("write to a Vec");
    }
    hello
}

/// Feeds `bytes` in pieces of `sizes` (cycled, each at least 1) and returns the first
/// answer, or what the end of input means.
fn sniff_in_pieces(bytes: &[u8], sizes: &[usize]) -> Sniffed {
    let mut sniffer = Sniffer::default();
    let mut end = 0;
    for size in sizes.iter().cycle().take(bytes.len() + 1) {
        end = (end + size.max(&1)).min(bytes.len());
        if let Some(answer) = sniffer.classify(&bytes[..end]) {
            return answer;
        }
        if end == bytes.len() {
            break;
        }
    }
    sniffer.at_end()
}

#[test]
fn a_client_hello_names_its_server_canonically() {
    let hello = client_hello("API.Example.com");
    let expected = Sniffed::Tls(Some(Ok(Host::Name("api.example.com".to_owned()))));
    assert_eq!(sniff_in_pieces(&hello, &[hello.len()]), expected);
    assert_eq!(sniff_in_pieces(&hello, &[1]), expected);
}

#[test]
fn a_cut_off_client_hello_is_closed_not_other() {
    let hello = client_hello("api.example.com");
    let mut sniffer = Sniffer::default();
    assert_eq!(sniffer.classify(&hello[..hello.len() / 2]), None);
    assert_eq!(sniffer.at_end(), Sniffed::Closed);
}

#[test]
fn a_handshake_byte_followed_by_garbage_is_other() {
    assert_eq!(
        sniff_in_pieces(b"\x16\x03\x01\x00\x05hello", &[3]),
        Sniffed::Other
    );
    // A record longer than a ClientHello may be never completes: refused at the bound.
    let mut huge = vec![0x16, 0x03, 0x01, 0xff, 0xff];
    huge.resize(MAX_HELLO_BYTES + 10, 0x01);
    assert_eq!(sniff_in_pieces(&huge, &[4096]), Sniffed::Other);
}

#[test]
fn request_lines_are_told_from_other_bytes() {
    assert_eq!(sniff_in_pieces(b"GET / HTTP/1.1\r\n", &[1]), Sniffed::Http);
    assert_eq!(
        sniff_in_pieces(b"M-SEARCH * HTTP/1.1\r\n", &[5]),
        Sniffed::Http
    );
    assert_eq!(sniff_in_pieces(b"get / HTTP/1.1\r\n", &[1]), Sniffed::Other);
    assert_eq!(sniff_in_pieces(b" GET", &[1]), Sniffed::Other);
    assert_eq!(
        sniff_in_pieces(b"SSH-2.0-OpenSSH_9.2\r\n", &[64]),
        Sniffed::Other
    );
    assert_eq!(
        sniff_in_pieces(&[b'A'; MAX_METHOD_LEN + 1], &[64]),
        Sniffed::Other
    );
    assert_eq!(sniff_in_pieces(b"GET", &[64]), Sniffed::Other);
    assert_eq!(Sniffer::default().classify(b""), None);
}

#[test]
fn method_tokens_are_recognised_within_their_bound() {
    assert_eq!(looks_like_http(b"GET / HTTP/1.1\r\n"), Some(true));
    assert_eq!(looks_like_http(b"M-SEARCH * HTTP/1.1"), Some(true));
    assert_eq!(looks_like_http(b"GE"), None);
    assert_eq!(looks_like_http(b"SSH-2.0-OpenSSH"), Some(false));
    assert_eq!(looks_like_http(b" GET"), Some(false));
    assert_eq!(looks_like_http(b"\x00\x01"), Some(false));
    assert_eq!(looks_like_http(&[b'A'; 40]), Some(false));
}

#[test]
fn the_host_header_names_the_host_without_its_port() {
    let head = b"GET / HTTP/1.1\r\nHost: Allowed.Test:8080\r\n\r\n";
    let allowed = Host::Name("allowed.test".to_owned());
    assert_eq!(request_host(head), Some(Some(allowed)));
    assert_eq!(request_host(b"GET / HTTP/1.1\r\nHost: a"), None);
    assert_eq!(request_host(b"GET / HTTP/1.1\r\n\r\n"), Some(None));
    let twice = b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n";
    assert_eq!(request_host(twice), Some(None));
}

#[test]
fn a_complete_head_with_a_bad_host_is_answered_not_waited_on() {
    // Before: a non-UTF-8 or unparsable Host read as "incomplete" and the reader waited
    // for more bytes that could not change the answer.
    assert_eq!(
        request_host(b"GET / HTTP/1.1\r\nHost: \xff\xfe\r\n\r\n"),
        Some(None)
    );
    assert_eq!(
        request_host(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"),
        Some(None)
    );
}

#[test]
fn an_endless_head_is_cut_at_the_bound() {
    let mut head = b"GET / HTTP/1.1\r\nX: ".to_vec();
    head.resize(MAX_HEAD_BYTES, b'a');
    assert_eq!(request_host(&head), Some(None));
    assert_eq!(request_host(&head[..MAX_HEAD_BYTES - 1]), None);
}

#[test]
fn connect_targets_need_a_plain_host_and_port() {
    let target = connect_target(Some("API.example.com:443"));
    assert_eq!(target, Ok((Host::Name("api.example.com".to_owned()), 443)));
    assert!(matches!(
        connect_target(Some("[::1]:8443")),
        Ok((Host::Ip(_), 8443))
    ));
    assert_eq!(connect_target(None), Err(BadTarget::Missing));
    assert_eq!(
        connect_target(Some("user@h.test:443")),
        Err(BadTarget::UserInfo)
    );
    for bad in [
        "h.test",
        "h.test:0",
        "h.test:65536",
        "h.test:44x",
        "[::1",
        ":443",
        "a b:1",
    ] {
        assert_eq!(connect_target(Some(bad)), Err(BadTarget::Invalid), "{bad}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_are_sniffed_the_same_in_any_pieces(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        sizes in proptest::collection::vec(1usize..40, 1..8),
    ) {
        prop_assert_eq!(sniff_in_pieces(&bytes, &sizes), sniff_in_pieces(&bytes, &[bytes.len()]));
    }

    #[test]
    fn mutated_hellos_are_sniffed_the_same_in_any_pieces(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        sizes in proptest::collection::vec(1usize..200, 1..6),
    ) {
        let mut hello = client_hello("api.example.com");
        for (at, byte) in flips {
            let index = at.index(hello.len());
            hello[index] = byte;
        }
        let whole = sniff_in_pieces(&hello, &[hello.len()]);
        prop_assert_eq!(sniff_in_pieces(&hello, &sizes), whole);
    }

    #[test]
    fn sniffed_server_names_are_canonical(name in "[a-zA-Z0-9-]{1,20}(\\.[a-zA-Z0-9-]{1,20}){0,3}") {
        prop_assume!(ServerName::try_from(name.clone()).is_ok());
        if let Sniffed::Tls(Some(Ok(host))) = sniff_in_pieces(&client_hello(&name), &[7]) {
            prop_assert_eq!(canonical_host(&host.to_string()), Ok(host));
        }
    }

    #[test]
    fn accepted_connect_targets_round_trip(text in "\\PC{0,40}") {
        if let Ok((host, port)) = connect_target(Some(&text)) {
            let again = format!("{host}:{port}");
            prop_assert_eq!(connect_target(Some(&again)), Ok((host, port)));
        }
    }

    #[test]
    fn arbitrary_heads_never_wait_past_the_bound(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let answer = request_host(&bytes);
        prop_assert!(answer.is_some() || bytes.len() < MAX_HEAD_BYTES);
        if let Some(Some(host)) = answer {
            prop_assert_eq!(canonical_host(&host.to_string()), Ok(host));
        }
    }
}
