//! The pure responder: one DNS message in, one out, and what to log about it.
//!
//! See [`answer`] for the rules.

use std::net::{IpAddr, Ipv4Addr};

use airlock_audit::{AuditEvent, Decision, Kind};
use airlock_policy::canonical::{Host, HostError, canonical_host};
use hickory_proto::op::{Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::map::NameMap;

/// TTL of every answer, in seconds: short, so that clients ask again (and keep their
/// mapping fresh) well before a busy session could recycle its address.
pub const ANSWER_TTL: u32 = 60;

/// What a query asked and how it was answered, for the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryInfo {
    /// The name asked for: canonical (`github.com`, `1.2.3.4`) when accepted, the
    /// presentation form of the wire name otherwise (`a\032b.test.`); `None` when the
    /// message had no single question.
    pub name: Option<String>,
    /// The query type (`A`, `AAAA`, `TXT`, or `TYPE65280` for unnamed ones); `None` when
    /// the message had no single question.
    pub qtype: Option<String>,
    /// How it was answered.
    pub outcome: Outcome,
}

/// How a query was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `NOERROR` with one `A` record: a pool address, or the queried IPv4 literal itself.
    Address(Ipv4Addr),
    /// `NOERROR` with no records (every type but `A`, every class but `IN`).
    NoRecords,
    /// `REFUSED`: the name is not a valid host name.
    RefusedName(HostError),
    /// `FORMERR`: the message did not parse, or did not hold exactly one question.
    Malformed,
    /// `NOTIMP`: the opcode is not `QUERY`.
    NotImplemented,
}

impl QueryInfo {
    /// The audit line for this query: `kind: dns` with `name` and `qtype`. Answered
    /// queries are `allow`; refused names are `deny` with reason `host_not_allowed` (no
    /// rule can name them); malformed and unsupported messages are `deny` with a message.
    pub fn audit_event(&self) -> AuditEvent {
        let (decision, reason, message) = match &self.outcome {
            Outcome::Address(_) | Outcome::NoRecords => (Decision::Allow, None, None),
            Outcome::RefusedName(error) => (
                Decision::Deny,
                Some("host_not_allowed"),
                Some(format!("invalid DNS name: {error}")),
            ),
            Outcome::Malformed => (
                Decision::Deny,
                None,
                Some("malformed DNS message".to_owned()),
            ),
            Outcome::NotImplemented => (
                Decision::Deny,
                None,
                Some("DNS opcode not supported".to_owned()),
            ),
        };
        AuditEvent {
            kind: Kind::Dns,
            decision,
            reason,
            name: self.name.clone(),
            qtype: self.qtype.clone(),
            message,
            ..AuditEvent::default()
        }
    }
}

/// Answers one DNS message; `None` means: send nothing. Never forwards anything, never
/// panics on any input.
///
/// The rules (docs/contract.md §4 "DNS"), in the order they are applied:
///
/// | query | reply |
/// | --- | --- |
/// | shorter than a header, or a response (QR set) | none (dropped) |
/// | a header followed by something that does not parse | `FORMERR`, no question |
/// | opcode other than `QUERY` | `NOTIMP` |
/// | zero or several questions | `FORMERR`, no question |
/// | a name [`canonical_host`] refuses (`\032`, `a..b`, over-long, ...) | `REFUSED` |
/// | `A`, class `IN`, of a name | the name's pool address ([`NameMap::address_for`]) |
/// | `A`, class `IN`, of an IPv4 literal (`1.2.3.4`, `0x7f.1`) | that address itself |
/// | anything else (`AAAA`, `TXT`, `MX`, `ANY`, other classes, ...) | `NOERROR`, no records |
///
/// An IPv4 literal is answered with itself, as a stub resolver would do without asking:
/// the command could dial that address directly anyway, and the proxy decides on it as an
/// address. Refused names get `REFUSED` rather than `NXDOMAIN`: nothing is claimed about
/// the name's existence, and nothing is cached negatively under it.
///
/// Replies keep the query's id, opcode, `RD` bit and question (with the client's own
/// letter case, for resolvers that randomise it), set `RA`, carry answers with a TTL of
/// [`ANSWER_TTL`] seconds, and never carry EDNS (a plain RFC 1035 responder: replies are
/// always far below 512 bytes).
pub fn answer(query: &[u8], map: &NameMap) -> Option<(Vec<u8>, QueryInfo)> {
    let header = Header::read(&mut BinDecoder::new(query)).ok()?;
    if header.message_type() != MessageType::Query {
        return None;
    }
    let Ok(request) = Message::from_vec(query) else {
        return reply_error(&header, ResponseCode::FormErr, None, Outcome::Malformed);
    };
    let question = match request.queries() {
        [question] => question,
        _ => return reply_error(&header, ResponseCode::FormErr, None, Outcome::Malformed),
    };
    if header.op_code() != OpCode::Query {
        return reply_error(
            &header,
            ResponseCode::NotImp,
            Some(question),
            Outcome::NotImplemented,
        );
    }
    let qtype = Some(type_name(question.query_type()));
    let wire_name = question.name().to_ascii();
    let host = match canonical_host(&wire_name) {
        Ok(host) => host,
        Err(error) => {
            let info = QueryInfo {
                name: Some(wire_name),
                qtype,
                outcome: Outcome::RefusedName(error),
            };
            return reply(&header, ResponseCode::Refused, question, None, info);
        }
    };
    let wants_address =
        question.query_type() == RecordType::A && question.query_class() == DNSClass::IN;
    let address = match &host {
        _ if !wants_address => None,
        Host::Name(name) => Some(map.address_for(name)),
        Host::Ip(IpAddr::V4(literal)) => Some(*literal),
        Host::Ip(IpAddr::V6(_)) => None,
    };
    let info = QueryInfo {
        name: Some(host.to_string()),
        qtype,
        outcome: address.map_or(Outcome::NoRecords, Outcome::Address),
    };
    reply(&header, ResponseCode::NoError, question, address, info)
}

/// The reply to a well-formed single-question query.
fn reply(
    header: &Header,
    code: ResponseCode,
    question: &Query,
    address: Option<Ipv4Addr>,
    info: QueryInfo,
) -> Option<(Vec<u8>, QueryInfo)> {
    let mut message = response_to(header, code);
    message.add_query(question.clone());
    if let Some(address) = address {
        message.add_answer(Record::from_rdata(
            question.name().clone(),
            ANSWER_TTL,
            RData::A(A(address)),
        ));
    }
    Some((message.to_vec().ok()?, info))
}

/// An error reply (`FORMERR`, `NOTIMP`), echoing the question when there is exactly one.
fn reply_error(
    header: &Header,
    code: ResponseCode,
    question: Option<&Query>,
    outcome: Outcome,
) -> Option<(Vec<u8>, QueryInfo)> {
    let mut message = response_to(header, code);
    if let Some(question) = question {
        message.add_query(question.clone());
    }
    let info = QueryInfo {
        name: question.map(|question| question.name().to_ascii()),
        qtype: question.map(|question| type_name(question.query_type())),
        outcome,
    };
    Some((message.to_vec().ok()?, info))
}

fn response_to(header: &Header, code: ResponseCode) -> Message {
    let mut message = Message::new();
    message
        .set_id(header.id())
        .set_message_type(MessageType::Response)
        .set_op_code(header.op_code())
        .set_recursion_desired(header.recursion_desired())
        .set_recursion_available(true)
        .set_response_code(code);
    message
}

/// The mnemonic of a type, or `TYPEnnn` (RFC 3597) for one without a name.
fn type_name(record_type: RecordType) -> String {
    match record_type {
        RecordType::Unknown(code) => format!("TYPE{code}"),
        known => known.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::rr::Name;

    use super::*;
    use crate::map::default_pool;

    fn query_bytes(id: u16, name: &str, record_type: RecordType) -> Vec<u8> {
        let mut message = Message::new();
        message
            .set_id(id)
            .set_recursion_desired(true)
            .add_query(Query::query(
                Name::from_ascii(name).expect("name"),
                record_type,
            ));
        message.to_vec().expect("encode")
    }

    fn ask(map: &NameMap, id: u16, name: &str, record_type: RecordType) -> (Message, QueryInfo) {
        let (reply, info) = answer(&query_bytes(id, name, record_type), map).expect("a reply");
        (Message::from_vec(&reply).expect("reply parses"), info)
    }

    fn answered_address(reply: &Message) -> Ipv4Addr {
        match reply.answers() {
            [record] => match record.data() {
                RData::A(A(address)) => *address,
                other => panic!("not an A record: {other:?}"),
            },
            other => panic!("expected one answer, got {other:?}"),
        }
    }

    #[test]
    fn a_queries_get_stable_pool_addresses() {
        let map = NameMap::new(default_pool());
        let (reply, info) = ask(&map, 0x1234, "GitHub.com.", RecordType::A);
        assert_eq!(reply.id(), 0x1234);
        assert_eq!(reply.message_type(), MessageType::Response);
        assert_eq!(reply.response_code(), ResponseCode::NoError);
        assert!(reply.recursion_desired() && reply.recursion_available());
        assert_eq!(reply.queries().len(), 1);
        assert_eq!(reply.queries()[0].name().to_ascii(), "GitHub.com.");
        let github = answered_address(&reply);
        assert!(default_pool().contains(&github));
        assert_eq!(reply.answers()[0].ttl(), ANSWER_TTL);
        assert_eq!(reply.answers()[0].name().to_ascii(), "GitHub.com.");
        assert_eq!(info.name.as_deref(), Some("github.com"));
        assert_eq!(info.qtype.as_deref(), Some("A"));
        assert_eq!(info.outcome, Outcome::Address(github));

        let (again, _) = ask(&map, 7, "github.com", RecordType::A);
        assert_eq!(answered_address(&again), github);
        let (other, _) = ask(&map, 8, "example.com.", RecordType::A);
        assert_ne!(answered_address(&other), github);
        assert_eq!(map.name_for(github).as_deref(), Some("github.com"));
    }

    #[test]
    fn other_types_get_noerror_without_records() {
        let map = NameMap::new(default_pool());
        for (id, record_type) in [
            (1, RecordType::AAAA),
            (2, RecordType::TXT),
            (3, RecordType::MX),
            (4, RecordType::ANY),
            (5, RecordType::CNAME),
            (6, RecordType::Unknown(65280)),
        ] {
            let (reply, info) = ask(&map, id, "api.github.com.", record_type);
            assert_eq!(reply.id(), id);
            assert_eq!(reply.response_code(), ResponseCode::NoError);
            assert!(reply.answers().is_empty() && reply.name_servers().is_empty());
            assert_eq!(reply.queries()[0].query_type(), record_type);
            assert_eq!(reply.queries()[0].name().to_ascii(), "api.github.com.");
            assert_eq!(info.outcome, Outcome::NoRecords);
            assert_eq!(info.name.as_deref(), Some("api.github.com"));
        }
        let (_, unknown) = ask(&map, 9, "x.test", RecordType::Unknown(65280));
        assert_eq!(unknown.qtype.as_deref(), Some("TYPE65280"));
        // None of those handed out an address.
        assert_eq!(map.address_for("first.test"), Ipv4Addr::new(198, 18, 0, 1));
    }

    #[test]
    fn a_queries_in_other_classes_get_no_records() {
        let map = NameMap::new(default_pool());
        let mut query = Query::query(
            Name::from_ascii("version.bind.").expect("name"),
            RecordType::A,
        );
        query.set_query_class(DNSClass::CH);
        let mut message = Message::new();
        message.set_id(3).add_query(query);
        let (reply, info) = answer(&message.to_vec().expect("encode"), &map).expect("reply");
        let reply = Message::from_vec(&reply).expect("parse");
        assert!(reply.answers().is_empty());
        assert_eq!(info.outcome, Outcome::NoRecords);
    }

    #[test]
    fn ipv4_literals_are_answered_with_themselves() {
        let map = NameMap::new(default_pool());
        let (reply, info) = ask(&map, 1, "93.184.216.34.", RecordType::A);
        assert_eq!(answered_address(&reply), Ipv4Addr::new(93, 184, 216, 34));
        assert_eq!(info.name.as_deref(), Some("93.184.216.34"));
        let (reply, info) = ask(&map, 2, "0x7f.1", RecordType::A);
        assert_eq!(answered_address(&reply), Ipv4Addr::LOCALHOST);
        assert_eq!(info.name.as_deref(), Some("127.0.0.1"));
        let (reply, _) = ask(&map, 3, "1.2.3.4", RecordType::AAAA);
        assert!(reply.answers().is_empty());
        // Nothing was mapped.
        assert_eq!(map.name_for(Ipv4Addr::new(198, 18, 0, 1)), None);
    }

    #[test]
    fn invalid_names_are_refused() {
        let map = NameMap::new(default_pool());
        let raw_names: [&[&[u8]]; 6] = [
            &[b"a b", b"test"],
            &[b"under.dot", b"test"],
            &[b"1", b"2", b"3", b"999"],
            &[],
            &[b"a@b", b"test"],
            &[b"caf\xc3\xa9", b"test"],
        ];
        for labels in raw_names {
            let name = Name::from_labels(labels.iter().copied()).expect("labels");
            let mut message = Message::new();
            message
                .set_id(11)
                .add_query(Query::query(name.clone(), RecordType::A));
            let (reply, info) = answer(&message.to_vec().expect("encode"), &map).expect("reply");
            let reply = Message::from_vec(&reply).expect("parse");
            assert_eq!(reply.response_code(), ResponseCode::Refused, "{name}");
            assert_eq!(reply.id(), 11);
            assert!(reply.answers().is_empty());
            assert_eq!(reply.queries().len(), 1);
            assert!(matches!(info.outcome, Outcome::RefusedName(_)), "{name}");
            assert_eq!(info.name, Some(name.to_ascii()));
            let event = info.audit_event();
            assert_eq!(event.decision, Decision::Deny);
            assert_eq!(event.reason, Some("host_not_allowed"));
        }
        assert_eq!(map.name_for(Ipv4Addr::new(198, 18, 0, 1)), None);
    }

    #[test]
    fn exfiltration_names_are_answered_locally() {
        let map = NameMap::new(default_pool());
        let secret_labels = ["c2VjcmV0LXRva2VuLXZhbHVlLWdocF9BQUFBQUFBQUFBQUFBQUFBQUFBQUFB"; 3];
        let name = format!("{}.attacker.example.", secret_labels.join("."));
        let (reply, info) = ask(&map, 99, &name, RecordType::A);
        let address = answered_address(&reply);
        assert!(default_pool().contains(&address));
        assert_eq!(
            info.name.as_deref(),
            Some(name.trim_end_matches('.').to_ascii_lowercase()).as_deref()
        );
        let (reply, info) = ask(&map, 100, &name, RecordType::TXT);
        assert!(reply.answers().is_empty());
        assert_eq!(info.outcome, Outcome::NoRecords);
        assert_eq!(info.audit_event().qtype.as_deref(), Some("TXT"));
    }

    #[test]
    fn malformed_messages_get_formerr_or_nothing() {
        let map = NameMap::new(default_pool());
        // Too short for a header, or empty: dropped.
        assert!(answer(&[], &map).is_none());
        assert!(answer(&[0x12, 0x34, 0x01], &map).is_none());
        // A response: dropped (no reflection loops).
        let mut response = query_bytes(5, "a.test", RecordType::A);
        response[2] |= 0x80;
        assert!(answer(&response, &map).is_none());
        // A header announcing a question that is not there: FORMERR with the id.
        let truncated = [
            0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0x03, b'a',
        ];
        let (reply, info) = answer(&truncated, &map).expect("formerr");
        let reply = Message::from_vec(&reply).expect("parse");
        assert_eq!(reply.id(), 0xabcd);
        assert_eq!(reply.response_code(), ResponseCode::FormErr);
        assert_eq!(info.outcome, Outcome::Malformed);
        assert_eq!(info.audit_event().decision, Decision::Deny);
        // A compression pointer loop.
        let looped = [0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1];
        let (reply, _) = answer(&looped, &map).expect("formerr");
        assert_eq!(
            Message::from_vec(&reply).expect("parse").response_code(),
            ResponseCode::FormErr
        );
    }

    #[test]
    fn zero_or_several_questions_get_formerr() {
        let map = NameMap::new(default_pool());
        let mut two = Message::new();
        two.set_id(77)
            .add_query(Query::query(
                Name::from_ascii("a.test.").expect("name"),
                RecordType::A,
            ))
            .add_query(Query::query(
                Name::from_ascii("b.test.").expect("name"),
                RecordType::A,
            ));
        let mut none = Message::new();
        none.set_id(78);
        for (id, message) in [(77, two), (78, none)] {
            let (reply, info) = answer(&message.to_vec().expect("encode"), &map).expect("reply");
            let reply = Message::from_vec(&reply).expect("parse");
            assert_eq!(reply.id(), id);
            assert_eq!(reply.response_code(), ResponseCode::FormErr);
            assert!(reply.queries().is_empty() && reply.answers().is_empty());
            assert_eq!(info.outcome, Outcome::Malformed);
            assert_eq!(info.name, None);
        }
        assert_eq!(map.name_for(Ipv4Addr::new(198, 18, 0, 1)), None);
    }

    #[test]
    fn other_opcodes_get_notimp() {
        let map = NameMap::new(default_pool());
        let mut message = Message::new();
        message
            .set_id(5)
            .set_op_code(OpCode::Update)
            .add_query(Query::query(
                Name::from_ascii("a.test.").expect("name"),
                RecordType::SOA,
            ));
        let (reply, info) = answer(&message.to_vec().expect("encode"), &map).expect("reply");
        let reply = Message::from_vec(&reply).expect("parse");
        assert_eq!(reply.response_code(), ResponseCode::NotImp);
        assert_eq!(reply.op_code(), OpCode::Update);
        assert_eq!(info.outcome, Outcome::NotImplemented);
        assert_eq!(info.qtype.as_deref(), Some("SOA"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let map = NameMap::new("10.0.0.0/29".parse().expect("pool"));
        let seed = query_bytes(1, "some.name.test", RecordType::A);
        // Deterministic mutations: every single-byte value at every position, and every
        // truncation.
        for position in 0..seed.len() {
            for value in [0_u8, 1, 0x3f, 0x40, 0x80, 0xc0, 0xff] {
                let mut mutated = seed.clone();
                mutated[position] = value;
                let _ = answer(&mutated, &map);
            }
            let _ = answer(&seed[..position], &map);
        }
    }

    #[test]
    fn answered_queries_are_allowed_dns_audit_events() {
        let map = NameMap::new(default_pool());
        let (_, info) = ask(&map, 1, "pypi.org.", RecordType::AAAA);
        let event = info.audit_event();
        assert_eq!(event.kind, Kind::Dns);
        assert_eq!(event.decision, Decision::Allow);
        assert_eq!(event.name.as_deref(), Some("pypi.org"));
        assert_eq!(event.qtype.as_deref(), Some("AAAA"));
        assert_eq!(event.reason, None);
    }
}
