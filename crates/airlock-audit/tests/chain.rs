//! The audit chain end to end in the library: a signed, rotated log verifies; every kind
//! of tampering is found at its line (crates/airlock-audit/src/verify.rs).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock_audit::checkpoint::{Every, Signing};
use airlock_audit::ocsf::Format;
use airlock_audit::signing::{PublicKey, Signer, public_path};
use airlock_audit::verify::{Failure, Options, Report, verify};
use airlock_audit::{AuditEvent, AuditLog, Decision, Kind, LogOptions};
use proptest::prelude::*;

fn event(n: usize) -> AuditEvent {
    AuditEvent {
        kind: Kind::Dns,
        decision: Decision::Allow,
        name: Some(format!("n{n}.example")),
        qtype: Some("A".into()),
        ..AuditEvent::default()
    }
}

struct Log {
    dir: tempfile::TempDir,
    key: PublicKey,
}

impl Log {
    /// A log of `lines` lines, rotated beyond `max_size`, a checkpoint every `every` lines.
    fn write(lines: usize, max_size: Option<u64>, every: u64) -> Log {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Log::open(dir.path(), max_size, every);
        for n in 0..lines {
            log.record(event(n));
        }
        drop(log);
        let key = PublicKey::read(&public_path(dir.path())).expect("public key");
        Log { dir, key }
    }

    fn open(dir: &Path, max_size: Option<u64>, every: u64) -> AuditLog {
        let signer = Signer::load_or_create(dir).expect("key");
        let signing = Signing {
            signer: Arc::new(signer),
            every: Every {
                lines: every,
                interval: Duration::from_secs(3600),
            },
        };
        let path = dir.join("audit.jsonl");
        let options = LogOptions { max_size };
        AuditLog::open_signed(
            path.to_str().expect("utf-8"),
            options,
            signing,
            Format::Airlock,
        )
        .expect("open")
    }

    fn path(&self, suffix: &str) -> PathBuf {
        self.dir.path().join(format!("audit.jsonl{suffix}"))
    }

    /// The files that exist, oldest first.
    fn files(&self) -> Vec<(String, Vec<u8>)> {
        ["5", "4", "3", "2", "1", ""]
            .iter()
            .map(|n| {
                if n.is_empty() {
                    String::new()
                } else {
                    format!(".{n}")
                }
            })
            .filter(|suffix| self.path(suffix).exists())
            .map(|suffix| {
                let name = format!("audit.jsonl{suffix}");
                (name, std::fs::read(self.path(&suffix)).expect("read"))
            })
            .collect()
    }

    fn verify(&self, files: &[(String, Vec<u8>)]) -> Result<Report, Failure> {
        let options = Options {
            key: self.key.clone(),
            live: false,
        };
        verify(files, &options)
    }
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn join(lines: &[String]) -> Vec<u8> {
    lines
        .iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

#[test]
fn an_untouched_rotated_chain_verifies() {
    let log = Log::write(300, Some(4096), 50);
    let files = log.files();
    assert_eq!(files.len(), 6, "five rotated files and the current one");
    let report = log.verify(&files).expect("verifies");
    // The oldest files rotated away: the chain starts at the checkpoint that tops a file.
    assert!(!report.from_start);
    assert!(report.checkpoints >= 6, "{report:?}");
    // Each rotated file starts with a checkpoint; the last line closes the log.
    for (name, bytes) in &files {
        let first: serde_json::Value = serde_json::from_str(&lines(bytes)[0]).expect("json");
        assert_eq!(first["kind"], "checkpoint", "{name}");
    }
    let last = lines(&files[5].1).pop().expect("a line");
    let last: serde_json::Value = serde_json::from_str(&last).expect("json");
    assert_eq!(
        (last["kind"].as_str(), last["close"].as_bool()),
        (Some("checkpoint"), Some(true))
    );
    // Any suffix of the files verifies too (older ones removed).
    assert!(log.verify(&files[3..]).is_ok());
}

#[test]
fn a_log_reopened_goes_on_with_its_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    for round in 0..3 {
        let log = Log::open(dir.path(), None, 1000);
        for n in 0..10 {
            log.record(event(round * 10 + n));
        }
    }
    let key = PublicKey::read(&public_path(dir.path())).expect("key");
    let bytes = std::fs::read(dir.path().join("audit.jsonl")).expect("read");
    let report = verify(
        &[("audit.jsonl".into(), bytes)],
        &Options { key, live: false },
    )
    .expect("verifies");
    assert!(report.from_start);
    assert_eq!((report.lines, report.checkpoints), (33, 3));
}

#[test]
fn checkpoints_come_every_n_lines() {
    let log = Log::write(25, None, 10);
    let text = lines(&log.files()[0].1);
    let kinds: Vec<usize> = text
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("\"kind\":\"checkpoint\""))
        .map(|(i, _)| i + 1)
        .collect();
    // Lines 1-10, checkpoint (11), 12-21, checkpoint (22), 23-27, closing checkpoint (28).
    assert_eq!(kinds, [11, 22, 28]);
}

/// The single-file log of 40 lines (checkpoints every 10) and its lines.
fn small() -> (Log, Vec<String>) {
    let log = Log::write(40, None, 10);
    let text = lines(&log.files()[0].1);
    (log, text)
}

fn failure_of(log: &Log, text: &[String]) -> Failure {
    log.verify(&[("audit.jsonl".into(), join(text))])
        .expect_err("tampering is found")
}

#[test]
fn an_edited_line_is_found() {
    let (log, mut text) = small();
    text[4] = text[4].replace("n4.example", "n4.elsewhere");
    let failure = failure_of(&log, &text);
    assert_eq!(failure.line, 5, "{failure}");
    assert!(failure.what.contains("does not follow line 4"), "{failure}");
}

#[test]
fn a_removed_line_is_found() {
    let (log, mut text) = small();
    text.remove(6);
    assert_eq!(failure_of(&log, &text).line, 7);
    // The first line removed: the chain no longer starts.
    let (log, mut text) = small();
    text.remove(0);
    let failure = failure_of(&log, &text);
    assert_eq!(failure.line, 1);
    assert!(failure.what.contains("does not start here"), "{failure}");
}

#[test]
fn reordered_lines_are_found() {
    let (log, mut text) = small();
    text.swap(2, 3);
    assert_eq!(failure_of(&log, &text).line, 3);
}

#[test]
fn a_truncated_log_is_found() {
    // Cut after a whole line: the closing checkpoint is gone.
    let (log, mut text) = small();
    text.truncate(30);
    let failure = failure_of(&log, &text);
    assert_eq!(failure.line, 30);
    assert!(
        failure.what.contains("without its closing checkpoint"),
        "{failure}"
    );
    // Cut back to an interval checkpoint: not the closing one either.
    let (log, mut text) = small();
    text.truncate(22);
    assert!(failure_of(&log, &text).what.contains("closing checkpoint"));
    // Cut inside a line.
    let (log, text) = small();
    let mut bytes = join(&text);
    bytes.truncate(bytes.len() - 20);
    let failure = log
        .verify(&[("audit.jsonl".into(), bytes)])
        .expect_err("cut short");
    assert!(failure.what.contains("cut short"), "{failure}");
}

#[test]
fn a_line_from_another_log_is_found() {
    let (log, mut text) = small();
    let (_, other) = small();
    text[7] = other[7].clone();
    assert_eq!(failure_of(&log, &text).line, 8);
    // Another log's signed checkpoint is refused for its key.
    let (log, mut text) = small();
    text[10] = other[10].clone();
    let failure = failure_of(&log, &text);
    assert_eq!(failure.line, 11);
}

#[test]
fn a_rechained_log_is_found_at_its_next_checkpoint() {
    let (log, mut text) = small();
    // Remove a line and re-chain everything after it (what an attacker without the key can
    // do): the next checkpoint no longer signs the line before it.
    text.remove(3);
    let rechained = rechain(&text);
    let failure = failure_of(&log, &rechained);
    assert_eq!(failure.line, 10, "{failure}");
    assert!(
        failure.what.contains("does not sign the line before it"),
        "{failure}"
    );
}

/// Recomputes every line's chain, as someone without the key could.
fn rechain(text: &[String]) -> Vec<String> {
    let mut head = airlock_audit::chain::Head::default();
    text.iter()
        .map(|line| {
            let (content, _) = airlock_audit::chain::split(line).expect("chained");
            let mut out = Vec::new();
            head.seal(content.as_bytes(), false, &mut out);
            String::from_utf8(out).expect("utf-8")
        })
        .collect()
}

#[test]
fn the_wrong_key_is_refused_and_live_logs_may_end_unsigned() {
    let (log, mut text) = small();
    let other = tempfile::tempdir().expect("tempdir");
    Signer::load_or_create(other.path()).expect("key");
    let stranger = PublicKey::read(&public_path(other.path())).expect("key");
    let options = Options {
        key: stranger,
        live: false,
    };
    let failure = verify(&[("audit.jsonl".into(), join(&text))], &options).expect_err("key");
    assert!(failure.what.contains("not with the key given"), "{failure}");
    text.truncate(35);
    let options = Options {
        key: log.key.clone(),
        live: true,
    };
    let report = verify(&[("audit.jsonl".into(), join(&text))], &options).expect("live");
    assert_eq!(report.unsigned, 2);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever one line is edited, removed or swapped with the next, the failure is
    /// reported at that line or at the one just after it.
    #[test]
    fn any_single_tampering_is_found_where_it_is(at in 0usize..43, how in 0u8..3) {
        let (log, mut text) = small();
        prop_assume!(at + 1 < text.len());
        let expected = match how {
            0 => {
                text[at] = text[at].replacen("\"ts\":\"", "\"ts\":\"1", 1);
                at + 1
            }
            1 => {
                text.remove(at);
                at + 1
            }
            _ => {
                text.swap(at, at + 1);
                at + 1
            }
        };
        let failure = failure_of(&log, &text);
        prop_assert!(
            failure.line as usize == expected || failure.line as usize == expected + 1,
            "{how} at {at}: {failure}"
        );
    }
}

/// The chain's cost per line against the writer's whole cost per line (docs/benchmarks.md,
/// "The audit chain"): `cargo test --release -p airlock-audit --test chain -- --ignored
/// --nocapture cost`.
#[test]
#[ignore = "a measurement, run in release by hand"]
fn cost_per_line() {
    const LINES: usize = 200_000;
    let event = |n: usize| AuditEvent {
        kind: Kind::Http,
        decision: Decision::Allow,
        rule: Some("network.allow[0]".into()),
        method: Some("GET".into()),
        scheme: Some("https"),
        host: Some("api.github.com".into()),
        port: Some(443),
        path: Some(format!("/repos/acme/app/issues/{n}")),
        status: Some(200),
        bytes_up: Some(0),
        bytes_down: Some(5123),
        ms: Some(41.2),
        secrets: vec!["GH_TOKEN".into()],
        conn: Some(n as u64),
        ..AuditEvent::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), None, 1000);
    let started = std::time::Instant::now();
    for n in 0..LINES {
        log.record(event(n));
    }
    log.flush();
    let writer = started.elapsed().as_secs_f64() / LINES as f64;
    drop(log);
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("read");
    let contents: Vec<String> = text
        .lines()
        .map(|l| airlock_audit::chain::split(l).expect("chained").0)
        .collect();
    let mean = contents.iter().map(String::len).sum::<usize>() / contents.len();
    let mut head = airlock_audit::chain::Head::default();
    let mut out = Vec::with_capacity(1024);
    let started = std::time::Instant::now();
    for content in &contents {
        out.clear();
        head.seal(content.as_bytes(), false, &mut out);
    }
    let seal = started.elapsed().as_secs_f64() / contents.len() as f64;
    let signer = Signer::load_or_create(dir.path()).expect("key");
    let started = std::time::Instant::now();
    for _ in 0..1000 {
        std::hint::black_box(signer.sign(b"airlock-audit-checkpoint-v1"));
    }
    let sign = started.elapsed().as_secs_f64() / 1000.0;
    println!(
        "lines of {mean} bytes: writer {:.3} us/line (queue, fold, serialise, chain, write), \
         chain alone {:.3} us/line, one Ed25519 signature {:.1} us (once per 1000 lines)",
        writer * 1e6,
        seal * 1e6,
        sign * 1e6
    );
}
