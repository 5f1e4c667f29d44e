//! The head clock over an in-memory stream (real time, deadlines of a fraction of a
//! second).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;

const DEADLINE: Duration = Duration::from_millis(200);

fn clocked() -> (DuplexStream, HeadClock<DuplexStream>, Arc<Activity>) {
    let (client, server) = tokio::io::duplex(4096);
    let activity = Activity::new();
    let clock = HeadClock::new(server, activity.clone(), DEADLINE);
    (client, clock, activity)
}

/// Reads from `clock` once; `None` when nothing came within a second.
async fn read_once(clock: &mut HeadClock<DuplexStream>) -> Option<usize> {
    let mut buffer = [0u8; 256];
    let read = clock.read(&mut buffer);
    tokio::time::timeout(Duration::from_secs(1), read)
        .await
        .ok()
        .map(|read| read.expect("reads do not fail"))
}

#[tokio::test]
async fn a_stalled_head_is_answered_408_and_closed() {
    let (mut client, mut clock, _activity) = clocked();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a")
        .await
        .unwrap();
    assert_eq!(read_once(&mut clock).await, Some(23));
    assert_eq!(
        read_once(&mut clock).await,
        Some(0),
        "the read ends at the deadline"
    );
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, ANSWER);
}

#[tokio::test]
async fn a_head_that_became_a_request_is_not_timed() {
    let (mut client, mut clock, activity) = clocked();
    client
        .write_all(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")
        .await
        .unwrap();
    assert!(read_once(&mut clock).await.is_some_and(|n| n > 0));
    let busy = activity.busy();
    // The body is slow: that is body_timeout's business elsewhere, not the head's.
    assert_eq!(read_once(&mut clock).await, None);
    client.write_all(b"12345").await.unwrap();
    assert_eq!(read_once(&mut clock).await, Some(5));
    drop(busy);
    // Idle between requests: not timed either (the idle timeout is).
    assert_eq!(read_once(&mut clock).await, None);
    // The next head's first bytes start the clock again.
    client.write_all(b"GET /next HTTP/1.1\r\n").await.unwrap();
    assert_eq!(read_once(&mut clock).await, Some(20));
    assert_eq!(read_once(&mut clock).await, Some(0));
}

#[tokio::test]
async fn a_silent_connection_is_left_to_the_idle_timeout() {
    let (_client, mut clock, _activity) = clocked();
    assert_eq!(read_once(&mut clock).await, None);
}

#[test]
fn the_answer_is_a_well_formed_408_with_the_refusal_body() {
    let mut fields = [httparse::EMPTY_HEADER; 8];
    let mut head = httparse::Response::new(&mut fields);
    let Ok(httparse::Status::Complete(end)) = head.parse(ANSWER) else {
        panic!("the answer's head does not parse");
    };
    assert_eq!(head.code, Some(408));
    let length = head
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| {
            std::str::from_utf8(h.value)
                .unwrap()
                .parse::<usize>()
                .unwrap()
        });
    let body = &ANSWER[end..];
    assert_eq!(length, Some(body.len()));
    let body: serde_json::Value = serde_json::from_slice(body).expect("a JSON body");
    assert_eq!(body["error"], "request_timeout");
}
