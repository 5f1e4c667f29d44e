//! The event-stream reader.

use super::*;

#[test]
fn events_are_taken_whole_and_comments_dropped() {
    let mut pending = BytesMut::from(&b": airlock events\n\ndata: {\"a\":1}\n\ndata: {\"b\""[..]);
    let lines = take_events(&mut pending).expect("short events");
    assert_eq!(lines, vec![r#"{"a":1}"#.to_owned()]);
    pending.extend_from_slice(b":2}\n\n");
    assert_eq!(
        take_events(&mut pending).expect("ok"),
        vec![r#"{"b":2}"#.to_owned()]
    );
    assert!(pending.is_empty());
}

#[test]
fn an_endless_event_is_an_error_not_a_growing_buffer() {
    let mut pending = BytesMut::from(&vec![b'x'; MAX_EVENT + 1][..]);
    assert!(take_events(&mut pending).is_err());
}
