//! The audit log written to real files: line format, failure handling, ordering, threads.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};
use serde_json::{Map, Value};

mod support;

/// One parsed line, with its raw text (serde_json's map does not keep key order).
struct Line {
    raw: String,
    map: Map<String, Value>,
}

impl std::ops::Index<&str> for Line {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        &self.map[key]
    }
}

fn read_lines(path: &Path) -> Vec<Line> {
    fs::read_to_string(path)
        .expect("read log")
        .lines()
        .map(|line| match serde_json::from_str(line) {
            Ok(Value::Object(map)) => Line {
                raw: line.to_owned(),
                map,
            },
            other => panic!("not a JSON object line: {line} ({other:?})"),
        })
        .collect()
}

/// The line's keys in the order they were written.
fn keys(line: &Line) -> Vec<&str> {
    let mut keys: Vec<&str> = line.map.keys().map(String::as_str).collect();
    keys.sort_by_key(|key| line.raw.find(&format!("\"{key}\":")));
    keys
}

fn example_http_event() -> AuditEvent {
    AuditEvent {
        kind: Kind::Http,
        decision: Decision::Allow,
        rule: Some("network.allow[0]".into()),
        method: Some("GET".into()),
        scheme: Some("https"),
        host: Some("api.github.com".into()),
        port: Some(443),
        path: Some("/repos/acme/app".into()),
        status: Some(200),
        bytes_up: Some(0),
        bytes_down: Some(5123),
        ms: Some(41.2),
        secrets: vec!["GH_TOKEN".into()],
        conn: Some(7),
        ..AuditEvent::default()
    }
}

#[test]
fn http_line_has_the_contract_keys_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    log.record(example_http_event());
    log.flush();
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(
        keys(line),
        [
            "ts",
            "id",
            "kind",
            "decision",
            "rule",
            "method",
            "scheme",
            "host",
            "port",
            "path",
            "status",
            "bytes_up",
            "bytes_down",
            "ms",
            "secrets",
            "conn",
            "chain"
        ]
    );
    assert_eq!(line["kind"], "http");
    assert_eq!(line["decision"], "allow");
    assert_eq!(line["rule"], "network.allow[0]");
    assert_eq!(line["port"], 443);
    assert_eq!(line["ms"], 41.2);
    assert_eq!(line["secrets"], serde_json::json!(["GH_TOKEN"]));
    let ts = line["ts"].as_str().expect("ts is a string");
    let bytes = ts.as_bytes();
    assert_eq!(ts.len(), "2026-11-22T10:00:00.123456Z".len(), "{ts}");
    for (index, expected) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (26, b'Z'),
    ] {
        assert_eq!(bytes[index], expected, "{ts}");
    }
    assert!(
        bytes
            .iter()
            .enumerate()
            .filter(|(index, _)| ![4, 7, 10, 13, 16, 19, 26].contains(index))
            .all(|(_, byte)| byte.is_ascii_digit()),
        "{ts}"
    );
    let mode = fs::metadata(&path).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn a_report_mode_line_says_would_deny_after_the_decision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    log.record(AuditEvent {
        would: Some("deny"),
        rule: None,
        reason: Some("host_not_allowed"),
        ..example_http_event()
    });
    log.record(example_http_event());
    log.flush();
    let lines = read_lines(&path);
    assert_eq!(
        &keys(&lines[0])[..6],
        ["ts", "id", "kind", "decision", "would", "rule"]
    );
    assert!(
        lines[0].raw.contains(
            r#""decision":"allow","would":"deny","rule":null,"reason":"host_not_allowed""#
        ),
        "{}",
        lines[0].raw
    );
    assert!(!lines[1].raw.contains("would"), "{}", lines[1].raw);
}

#[test]
fn deny_line_carries_reason_null_rule_and_redacted_query() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    log.record(AuditEvent {
        kind: Kind::Http,
        decision: Decision::Deny,
        reason: Some("host_not_allowed"),
        method: Some("GET".into()),
        host: Some("evil.example".into()),
        path: Some("/x".into()),
        query: Some("token=ghp_abc&a=1&a=2&flag&q=%22%26x%3D".into()),
        status: Some(403),
        ..AuditEvent::default()
    });
    log.flush();
    let lines = read_lines(&path);
    let line = &lines[0];
    assert_eq!(line["decision"], "deny");
    assert_eq!(line["reason"], "host_not_allowed");
    assert_eq!(line["rule"], Value::Null);
    assert_eq!(line["secrets"], serde_json::json!([]));
    assert_eq!(
        line["query"],
        "token=REDACTED&a=REDACTED&a=REDACTED&flag&q=REDACTED"
    );
    let raw = fs::read_to_string(&path).expect("read");
    assert!(!raw.contains("ghp_abc"));
}

#[test]
fn dns_and_tcp_lines_carry_only_what_they_know() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    log.record(AuditEvent {
        kind: Kind::Dns,
        decision: Decision::Allow,
        name: Some("pypi.org".into()),
        qtype: Some("AAAA".into()),
        ..AuditEvent::default()
    });
    log.record(AuditEvent {
        kind: Kind::Tcp,
        decision: Decision::Deny,
        reason: Some("host_not_allowed"),
        host: Some("10.0.0.1".into()),
        port: Some(5432),
        ..AuditEvent::default()
    });
    log.flush();
    let lines = read_lines(&path);
    assert_eq!(
        keys(&lines[0]),
        [
            "ts", "id", "kind", "decision", "rule", "name", "qtype", "chain"
        ]
    );
    assert_eq!(lines[0]["kind"], "dns");
    assert_eq!(
        keys(&lines[1]),
        [
            "ts", "id", "kind", "decision", "rule", "reason", "host", "port", "chain"
        ]
    );
    assert_eq!(lines[1]["kind"], "tcp");
}

#[test]
fn special_characters_are_escaped_by_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    let nasty = "/a\"b\\c\nd\u{0}e\u{2028}é";
    log.record(AuditEvent {
        path: Some(nasty.into()),
        ..example_http_event()
    });
    log.flush();
    let raw = fs::read_to_string(&path).expect("read");
    assert_eq!(
        raw.lines().count(),
        1,
        "one line even with a newline in a field"
    );
    assert_eq!(read_lines(&path)[0]["path"], nasty);
}

#[test]
fn appends_to_an_existing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    fs::write(&path, "{\"earlier\":true}\n").expect("seed");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    log.record(example_http_event());
    log.flush();
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["earlier"], true);
}

#[test]
fn unopenable_destination_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no/such/dir/audit.jsonl");
    let err = AuditLog::open(missing.to_str().expect("utf-8 path")).expect_err("must fail");
    assert!(err.to_string().contains("audit.jsonl"), "{err}");
}

#[test]
fn a_failed_write_makes_the_log_unavailable_while_writes_fail() {
    let Ok(log) = AuditLog::open("/dev/full") else {
        crate::support::skip_or_fail("/dev/full cannot be opened here (a Linux /dev)");
        return;
    };
    assert!(log.healthy());
    log.record(example_http_event());
    log.flush();
    assert!(!log.healthy());
    log.record(example_http_event());
    log.flush();
    assert!(!log.healthy());
    // A retry that fails too changes nothing (recovery: crates/airlock-audit/src/lib.rs).
    log.retry_now();
    log.flush();
    assert!(!log.healthy() && !log.admit());
}

#[test]
fn disabled_log_is_always_healthy() {
    let log = AuditLog::disabled();
    log.record(example_http_event());
    log.flush();
    assert!(log.healthy());
}

#[test]
fn lines_keep_the_order_they_were_recorded_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    for round in 0..3u64 {
        for conn in 0..500u64 {
            log.record(AuditEvent {
                conn: Some(round * 500 + conn),
                ..example_http_event()
            });
        }
        // Everything recorded so far is on disk when flush returns.
        log.flush();
        let lines = read_lines(&path);
        assert_eq!(lines.len() as u64, (round + 1) * 500);
        for (index, line) in lines.iter().enumerate() {
            assert_eq!(line["conn"], index as u64);
        }
    }
    assert!(log.healthy());
}

#[test]
fn many_threads_record_whole_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 2_000;
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let log = log.clone();
            scope.spawn(move || {
                for index in 0..PER_THREAD {
                    log.record(AuditEvent {
                        conn: Some(thread * PER_THREAD + index),
                        ..example_http_event()
                    });
                }
            });
        }
    });
    log.flush();
    assert!(log.healthy());
    let mut seen: Vec<u64> = read_lines(&path)
        .iter()
        .map(|line| line["conn"].as_u64().expect("conn"))
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..THREADS * PER_THREAD).collect::<Vec<_>>());
}

#[test]
fn dropping_the_last_handle_writes_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    let clone = log.clone();
    for _ in 0..100 {
        clone.record(example_http_event());
    }
    drop(clone);
    drop(log);
    // Identical events fold (the first, then one line for the other 99): none is lost.
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 2);
    assert_eq!(total(&lines), 100);
}

/// The number of events the lines stand for (`count`, 1 where absent).
fn total(lines: &[Line]) -> u64 {
    lines
        .iter()
        .map(|line| {
            line.map
                .get("count")
                .map_or(1, |c| c.as_u64().expect("count"))
        })
        .sum()
}

fn dns_event(name: &str) -> AuditEvent {
    AuditEvent {
        kind: Kind::Dns,
        decision: Decision::Deny,
        reason: Some("host_not_allowed"),
        name: Some(name.into()),
        qtype: Some("TXT".into()),
        ..AuditEvent::default()
    }
}

#[test]
fn a_flood_of_identical_lines_folds_into_a_few_and_loses_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    let started = std::time::Instant::now();
    for _ in 0..20_000 {
        log.record(dns_event("x.exfil.example"));
    }
    log.record(dns_event("other.example"));
    log.record(AuditEvent {
        ms: Some(1.5),
        ..example_http_event()
    });
    log.record(example_http_event()); // differs only in `ms`: folds
    log.record(AuditEvent {
        conn: Some(8),
        ..example_http_event()
    }); // another connection: does not
    // Without a flush, the folded lines are on disk within about a second.
    std::thread::sleep(std::time::Duration::from_millis(1600));
    let lines = read_lines(&path);
    let seconds = started.elapsed().as_secs() + 1;
    let flood: Vec<&Line> = lines
        .iter()
        .filter(|l| l.map.get("name").is_some_and(|n| n == "x.exfil.example"))
        .collect();
    assert!(flood.len() as u64 <= 2 * seconds, "{} lines", flood.len());
    let flood_total: u64 = flood
        .iter()
        .map(|line| {
            line.map
                .get("count")
                .map_or(1, |c| c.as_u64().expect("count"))
        })
        .sum();
    assert_eq!(flood_total, 20_000);
    let folded = flood
        .iter()
        .find(|line| line.map.contains_key("count"))
        .expect("a count");
    // The chain (crates/airlock-audit/src/chain.rs) always ends a line.
    assert_eq!(
        keys(folded).iter().rev().nth(1).copied(),
        Some("count"),
        "count is the last key before the chain"
    );
    assert_eq!(lines.iter().filter(|l| l["kind"] == "http").count(), 3);
    assert_eq!(total(&lines), 20_004);
    assert!(log.healthy());
}

#[test]
fn the_log_rotates_beyond_its_maximum_size_and_keeps_five() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let options = airlock_audit::LogOptions {
        max_size: Some(2048),
    };
    let log = AuditLog::open_with(path.to_str().expect("utf-8 path"), options).expect("open");
    for index in 0..400 {
        log.record(dns_event(&format!("n{index}.example")));
    }
    log.flush();
    assert!(log.healthy());
    let mut names = Vec::new();
    for suffix in ["", ".1", ".2", ".3", ".4", ".5"] {
        let file = dir.path().join(format!("audit.jsonl{suffix}"));
        assert!(fs::metadata(&file).expect("rotated file").len() <= 2048);
        let mode = fs::metadata(&file).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{suffix}");
        names.splice(
            0..0,
            read_lines(&file).iter().map(|l| l["name"].to_string()),
        );
    }
    assert!(!dir.path().join("audit.jsonl.6").exists());
    // The newest lines are kept, in order, each whole.
    let last: Vec<String> = (400 - names.len()..400)
        .map(|index| format!("\"n{index}.example\""))
        .collect();
    assert_eq!(names, last);
}

#[test]
fn a_rotation_that_fails_makes_the_log_unhealthy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    // The oldest rotated name is a non-empty directory: rotation cannot remove it, as root too.
    fs::create_dir_all(dir.path().join("audit.jsonl.5/x")).expect("dir");
    let options = airlock_audit::LogOptions {
        max_size: Some(300),
    };
    let log = AuditLog::open_with(path.to_str().expect("utf-8 path"), options).expect("open");
    for index in 0..10 {
        log.record(dns_event(&format!("n{index}.example")));
    }
    log.flush();
    assert!(!log.healthy());
}

#[test]
fn the_line_filter_rewrites_every_line_before_it_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    log.redact_with(std::sync::Arc::new(|line: &str| {
        std::borrow::Cow::Owned(line.replace("sk-REAL-value", "[REDACTED:KEY]"))
    }));
    let mut event = example_http_event();
    event.path = Some("/leak/sk-REAL-value".to_owned());
    log.record(event);
    log.flush();
    let text = fs::read_to_string(&path).expect("read log");
    assert!(!text.contains("sk-REAL-value"), "{text}");
    assert!(text.contains("/leak/[REDACTED:KEY]"), "{text}");
}

#[test]
fn stdio_mcp_lines_name_the_server_and_the_refused_argument() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    log.record(AuditEvent {
        kind: Kind::Mcp,
        decision: Decision::Deny,
        rule: Some("mcp[0]".into()),
        reason: Some("mcp_argument_denied"),
        server: Some("fs".into()),
        tool: Some("read_file".into()),
        argument: Some("path".into()),
        ..AuditEvent::default()
    });
    log.flush();
    let lines = read_lines(&path);
    assert_eq!(
        keys(&lines[0]),
        [
            "ts", "id", "kind", "decision", "rule", "reason", "secrets", "server", "tool",
            "argument", "chain"
        ]
    );
    assert_eq!(lines[0]["server"], "fs");
    assert_eq!(lines[0]["argument"], "path");
}

#[test]
fn every_line_has_its_own_id_and_a_set_id_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(path.to_str().expect("utf-8 path")).expect("open");
    let chosen = airlock_audit::DecisionId::next();
    log.record(AuditEvent {
        id: Some(chosen),
        ..example_http_event()
    });
    for port in 0..5 {
        log.record(AuditEvent {
            port: Some(port),
            ..example_http_event()
        });
    }
    log.flush();
    let lines = read_lines(&path);
    assert_eq!(lines[0]["id"], chosen.to_string());
    let ids: std::collections::HashSet<&str> = lines
        .iter()
        .map(|line| line["id"].as_str().expect("an id on every line"))
        .collect();
    assert_eq!(ids.len(), lines.len(), "ids are unique");
    assert!(
        ids.iter()
            .all(|id| airlock_audit::DecisionId::parse(id).is_some())
    );
}
