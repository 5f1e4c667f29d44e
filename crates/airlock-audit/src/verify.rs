//! Checks an audit log's chain and checkpoints (`airlock audit verify`, docs/operations.md
//! "What the audit record proves").
//!
//! The files are read in the order given (oldest first: `audit.jsonl.5` ... `audit.jsonl`)
//! as one chain. The chain must start at its first line (a line chained from
//! [`GENESIS`]) or at a checkpoint (the top of a file a rotation started: the files before
//! it were rotated away). Every line must link to the line before it ([`chain::link`]);
//! every checkpoint must name the head before it, count the lines since the checkpoint
//! before it and carry a valid signature of the key given; and, unless the log is still
//! being written ([`Options::live`]), the last line must be the checkpoint written at
//! close. The first line that breaks any of these is reported ([`Failure`]).

use crate::chain::{self, GENESIS};
use crate::checkpoint::Parsed;
use crate::signing::PublicKey;

/// How to verify.
#[derive(Clone, Debug)]
pub struct Options {
    /// The public key checkpoints must be signed with.
    pub key: PublicKey,
    /// The log may still be written: lines after the last checkpoint are accepted.
    pub live: bool,
}

/// A chain that verified.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Lines read (checkpoints included).
    pub lines: u64,
    /// Checkpoints verified.
    pub checkpoints: u64,
    /// Whether the chain starts at its first line (`false`: at a checkpoint, the files
    /// before it rotated away).
    pub from_start: bool,
    /// Lines after the last checkpoint (only with [`Options::live`]).
    pub unsigned: u64,
}

/// The first line that breaks the chain.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: line {line}: {what}")]
pub struct Failure {
    /// The file, as given.
    pub file: String,
    /// The line number in it (1-based).
    pub line: u64,
    /// What is wrong.
    pub what: String,
}

/// Where the walk is.
struct Walk<'a> {
    options: &'a Options,
    report: Report,
    /// The chain value of the last line read (`None` before the first).
    prev: Option<[u8; 32]>,
    /// Lines since the last checkpoint; `None` while unknown (before the first checkpoint
    /// of a chain that did not start at its first line).
    since: Option<u64>,
    /// The last line read was a closing checkpoint.
    closed: bool,
    /// Where the last line was: file, line number.
    last: (String, u64),
}

/// Verifies `files` (name, contents), oldest first, as one chain.
pub fn verify(files: &[(String, Vec<u8>)], options: &Options) -> Result<Report, Failure> {
    let mut walk = Walk {
        options,
        report: Report::default(),
        prev: None,
        since: None,
        closed: false,
        last: (String::new(), 0),
    };
    for (name, bytes) in files {
        walk.file(name, bytes)?;
    }
    walk.finish()
}

impl Walk<'_> {
    fn file(&mut self, name: &str, bytes: &[u8]) -> Result<(), Failure> {
        let fail = |line: u64, what: String| Failure {
            file: name.to_owned(),
            line,
            what,
        };
        let mut rest = bytes;
        let mut number = 0;
        while !rest.is_empty() {
            number += 1;
            let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                return Err(fail(
                    number,
                    "cut short (no newline at the end of the file): the file was truncated \
                     inside this line, or it is still being written"
                        .to_owned(),
                ));
            };
            let text = std::str::from_utf8(&rest[..end])
                .map_err(|_| fail(number, "not UTF-8: the line was altered".to_owned()))?;
            rest = &rest[end + 1..];
            self.line(text, number).map_err(|what| fail(number, what))?;
            self.last = (name.to_owned(), number);
        }
        Ok(())
    }

    /// Checks one line against the chain so far; `Err` says what is wrong.
    fn line(&mut self, text: &str, number: u64) -> Result<(), String> {
        let (content, value) = chain::split(text).ok_or(
            "no well-formed \"chain\" at its end: the line was altered, or written without \
             a chain",
        )?;
        let checkpoint = chain::is_checkpoint(&content);
        let prev = match self.prev {
            Some(prev) => prev,
            None if chain::link(&GENESIS, content.as_bytes()) == value => {
                self.report.from_start = true;
                self.since = Some(0);
                GENESIS
            }
            None if checkpoint => {
                let parsed = Parsed::read(&content).ok_or("a malformed checkpoint")?;
                chain::from_hex(&parsed.head).ok_or("a checkpoint with a malformed head")?
            }
            None => {
                return Err(
                    "the chain does not start here and this is not a checkpoint: \
                            lines before it were removed, or an earlier file is missing or \
                            given out of order (give the files oldest first)"
                        .to_owned(),
                );
            }
        };
        if chain::link(&prev, content.as_bytes()) != value {
            let place = if number == 1 {
                "the last line of the file before".to_owned()
            } else {
                format!("line {}", number - 1)
            };
            return Err(format!(
                "does not follow {place} (its chain does not match): this line was altered, \
                 or lines were removed, inserted or reordered just before it, or it comes \
                 from another log"
            ));
        }
        self.report.lines += 1;
        self.closed = false;
        if checkpoint {
            self.checkpoint(&content, &prev)?;
        } else {
            self.since = self.since.map(|n| n + 1);
        }
        self.prev = Some(value);
        Ok(())
    }

    fn checkpoint(&mut self, content: &str, prev: &[u8; 32]) -> Result<(), String> {
        let parsed = Parsed::read(content).ok_or("a malformed checkpoint")?;
        let key = &self.options.key;
        if parsed.key != key.id() {
            return Err(format!(
                "a checkpoint signed with key {}, not with the key given ({})",
                parsed.key,
                key.id()
            ));
        }
        if !key.verify(&parsed.message(), &parsed.sig) {
            return Err("a checkpoint whose signature does not verify: it was altered".to_owned());
        }
        if parsed.head != chain::to_hex(prev) {
            return Err("a checkpoint that does not sign the line before it".to_owned());
        }
        if let Some(since) = self.since
            && since != parsed.lines
        {
            return Err(format!(
                "a checkpoint that signs {} line(s) since the checkpoint before, but {since} \
                 are there: lines were removed or inserted",
                parsed.lines
            ));
        }
        self.since = Some(0);
        self.closed = parsed.close;
        self.report.checkpoints += 1;
        Ok(())
    }

    fn finish(self) -> Result<Report, Failure> {
        let (file, line) = self.last;
        if self.report.lines == 0 {
            return Err(Failure {
                file,
                line: 0,
                what: "no lines: nothing to verify".to_owned(),
            });
        }
        let mut report = self.report;
        if !self.closed {
            let unsigned = self.since.unwrap_or(0);
            if !self.options.live {
                return Err(Failure {
                    file,
                    line,
                    what: format!(
                        "the log ends here without its closing checkpoint ({unsigned} line(s) \
                         after the last checkpoint): lines after it were cut off, or the \
                         writer did not close (still running: --live; or it crashed)"
                    ),
                });
            }
            report.unsigned = unsigned;
        }
        Ok(report)
    }
}
