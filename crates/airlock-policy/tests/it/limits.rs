//! The `limits` section: values, defaults, located errors and how sources combine.

use crate::section_support::{error, load};
use std::time::Duration;

use airlock_policy::model::Policy;

#[test]
fn defaults_apply_when_absent_and_values_load() {
    let limits = load("version: 1\n").limits;
    assert_eq!(limits.body_timeout(), Duration::from_secs(30));
    assert_eq!(limits.idle_timeout(), Duration::from_secs(90));
    assert_eq!(limits.buffer_memory(), 256 << 20);
    assert_eq!(limits.connections_per_client(), 512);
    assert_eq!(limits.connections(), 2048);
    let limits = load(
        "version: 1\nlimits:\n  body_timeout: 5s\n  idle_timeout: 2m\n  buffer_memory: 64MiB\n  connections_per_client: 8\n  connections: 20000\n",
    )
    .limits;
    assert_eq!(limits.body_timeout(), Duration::from_secs(5));
    assert_eq!(limits.idle_timeout(), Duration::from_secs(120));
    assert_eq!(limits.buffer_memory(), 64 << 20);
    assert_eq!(limits.connections_per_client(), 8);
    assert_eq!(limits.connections(), 20000);
}

#[test]
fn bad_values_are_located() {
    let (line, column, message) = error("version: 1\nlimits:\n  body_timeout: 30\n");
    assert_eq!((line, column), (3, 17), "{message}");
    assert!(message.contains("limits.body_timeout"), "{message}");
    let (line, column, message) = error("version: 1\nlimits:\n  body_timeout: 30x\n");
    assert_eq!((line, column), (3, 17), "{message}");
    assert!(message.contains("unit"), "{message}");
    let (line, _, message) = error("version: 1\nlimits:\n  buffer_memory: lots\n");
    assert_eq!(line, 3);
    assert!(message.contains("64MiB"), "{message}");
    let (line, _, message) = error("version: 1\nlimits:\n  connections_per_client: 0\n");
    assert_eq!(line, 3);
    assert!(message.contains("out of range"), "{message}");
    let (line, _, message) = error("version: 1\nlimits:\n  connections: 2000000\n");
    assert_eq!(line, 3);
    assert!(
        message.contains("limits.connections 2000000 is out of range"),
        "{message}"
    );
    let (line, _, message) = error("version: 1\nlimits:\n  connections: many\n");
    assert_eq!(line, 3);
    assert!(message.contains("limits.connections"), "{message}");
    let (line, column, message) =
        error("version: 1\nlimits:\n  connections: 12\n  connections_per_client: 6\n");
    assert_eq!((line, column), (4, 27), "{message}");
    assert!(
        message.contains("limits.connections_per_client 6 is more than a quarter")
            && message.contains("at most 3")
            && message.contains("at least 24"),
        "{message}"
    );
    let (line, _, message) = error("version: 1\nlimits:\n  connections_per_client: 600\n");
    assert_eq!(line, 3);
    assert!(message.contains("limits.connections (2048)"), "{message}");
    let (line, _, message) = error("version: 1\nlimits:\n  idle_timeot: 1s\n");
    assert_eq!(line, 3);
    assert!(message.contains("idle_timeout"), "{message}");
}

#[test]
fn combined_sources_keep_the_strictest() {
    let a = load("version: 1\nlimits: {buffer_memory: 64MiB, body_timeout: 10s, connections: 9}\n");
    let b = load("version: 1\nlimits: {buffer_memory: 1GiB, idle_timeout: 5s, connections: 100}\n");
    let combined =
        Policy::combine(vec![(Some("a.yaml".into()), a), (Some("b.yaml".into()), b)]).unwrap();
    assert_eq!(combined.limits.buffer_memory(), 64 << 20);
    assert_eq!(combined.limits.body_timeout(), Duration::from_secs(10));
    assert_eq!(combined.limits.idle_timeout(), Duration::from_secs(5));
    assert_eq!(combined.limits.connections(), 9);
}
