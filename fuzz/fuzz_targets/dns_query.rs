//! Fuzz target for the sandbox's DNS responder (`airlock_dns::answer`): arbitrary bytes as
//! a query. Checks: no panic; a reply parses as a DNS response with the query's id, at
//! most one answer, and an `A` record only inside the name pool or equal to the IPv4
//! literal that was asked for.

#![no_main]

use std::net::Ipv4Addr;

use airlock_dns::{NameMap, answer, default_pool};
use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::RData;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let map = NameMap::new(default_pool());
    let Some((reply, _info)) = answer(data, &map) else {
        return;
    };
    let reply = Message::from_vec(&reply).expect("every reply parses");
    assert_eq!(reply.message_type(), MessageType::Response);
    assert_eq!(Some(reply.id()), data.get(..2).map(|id| u16::from_be_bytes([id[0], id[1]])));
    assert!(reply.answers().len() <= 1, "more than one answer");
    for record in reply.answers() {
        let RData::A(address) = record.data() else {
            panic!("a record other than A: {record:?}");
        };
        let address = address.0;
        let asked = record.name().to_ascii();
        let literal = asked.trim_end_matches('.').parse::<Ipv4Addr>().ok();
        assert!(
            map.pool().contains(&address) || literal.is_some() || is_literal(&asked),
            "{asked} answered with {address}, outside the pool"
        );
    }
});

/// Whether `name` is an IPv4 literal in a form `canonical_host` reads (`0x7f.1`, ...).
fn is_literal(name: &str) -> bool {
    matches!(
        airlock_policy::canonical::canonical_host(name),
        Ok(airlock_policy::canonical::Host::Ip(_))
    )
}
