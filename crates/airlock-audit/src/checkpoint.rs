//! Signed checkpoints of the audit chain ([`crate::chain`]).
//!
//! A checkpoint is a line of its own, chained like any other:
//!
//! `{"ts":"...","kind":"checkpoint","head":"<hex>","lines":N,"close":true,
//! "key":"<key id>","sig":"<base64>","chain":"<hex>"}`
//!
//! `head` is the chain value of the line before it, `lines` how many lines (checkpoints not
//! counted) came since the checkpoint before it, `close` (written only when true) marks the
//! last checkpoint of a log closed cleanly, `key` names the signing key ([`crate::signing`])
//! and `sig` is its Ed25519 signature over [`message`]. The writer adds one every
//! [`Every::lines`] lines or [`Every::interval`], at the top of each file a rotation starts
//! (covering the end of the file before) and when the log is closed. It has no
//! `decision`: it decides nothing.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use crate::signing::Signer;

/// The key a log's checkpoints are signed with, and how often.
#[derive(Clone, Debug)]
pub struct Signing {
    /// The signing key.
    pub signer: Arc<Signer>,
    /// How often.
    pub every: Every,
}

/// The environment variable that sets how often checkpoints are written:
/// `LINES[,SECONDS]` (`1000,60`; docs/operations.md).
pub const EVERY_VAR: &str = "AIRLOCK_AUDIT_CHECKPOINT";

impl Signing {
    /// The key in `dir` (the CA's directory; created on first use,
    /// [`Signer::load_or_create`]), every [`EVERY_VAR`] or else [`Every::default`].
    pub fn beside(dir: &std::path::Path) -> Result<Signing, String> {
        let every = match std::env::var(EVERY_VAR) {
            Ok(text) if !text.trim().is_empty() => {
                Every::parse(&text).map_err(|e| format!("{EVERY_VAR}={text:?}: {e}"))?
            }
            _ => Every::default(),
        };
        Ok(Signing {
            signer: Arc::new(Signer::load_or_create(dir)?),
            every,
        })
    }
}

impl Every {
    /// `LINES` or `LINES,SECONDS` (a trailing `s` allowed), each above zero; seconds
    /// default to 60.
    pub fn parse(text: &str) -> Result<Every, String> {
        let (lines, seconds) = match text.split_once(',') {
            Some((lines, seconds)) => (lines, Some(seconds)),
            None => (text, None),
        };
        let positive = |field: &str, what: &str| -> Result<u64, String> {
            match field.trim().trim_end_matches('s').parse::<u64>() {
                Ok(0) | Err(_) => Err(format!("{what} must be a whole number above zero")),
                Ok(n) => Ok(n),
            }
        };
        let lines = positive(lines, "the number of lines")?;
        let interval = match seconds {
            Some(seconds) => Duration::from_secs(positive(seconds, "the seconds")?),
            None => Every::default().interval,
        };
        Ok(Every { lines, interval })
    }
}

/// How often the writer signs the chain's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Every {
    /// At most this many lines go unsigned.
    pub lines: u64,
    /// A line goes unsigned at most this long.
    pub interval: Duration,
}

impl Default for Every {
    /// Every 1000 lines or 60 seconds.
    fn default() -> Self {
        Every {
            lines: 1000,
            interval: Duration::from_secs(60),
        }
    }
}

/// The bytes a checkpoint's signature covers.
pub fn message(ts: &str, head: &str, lines: u64, close: bool, key: &str) -> Vec<u8> {
    format!("airlock-audit-checkpoint-v1\n{ts}\n{head}\n{lines}\n{close}\n{key}\n").into_bytes()
}

#[derive(Serialize)]
struct Line<'a> {
    ts: &'a str,
    kind: &'static str,
    head: &'a str,
    lines: u64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    close: bool,
    key: &'a str,
    sig: &'a str,
}

/// The content (without its chain) of a checkpoint signing `head` after `lines` lines.
pub fn content(signer: &Signer, ts: &str, head: &str, lines: u64, close: bool) -> Vec<u8> {
    let signature = signer.sign(&message(ts, head, lines, close, signer.id()));
    let sig = STANDARD.encode(signature);
    let line = Line {
        ts,
        kind: "checkpoint",
        head,
        lines,
        close,
        key: signer.id(),
        sig: &sig,
    };
    // Strings and numbers only: serialising cannot fail.
    serde_json::to_vec(&line).unwrap_or_default()
}

/// A checkpoint as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// When it was written.
    pub ts: String,
    /// The chain value it signs.
    pub head: String,
    /// Lines since the checkpoint before.
    pub lines: u64,
    /// The last checkpoint of a log closed cleanly.
    pub close: bool,
    /// The signing key's id.
    pub key: String,
    /// The signature.
    pub sig: Vec<u8>,
}

impl Parsed {
    /// Reads a checkpoint line's content; `None` when a field is missing or malformed.
    pub fn read(content: &str) -> Option<Parsed> {
        let value: serde_json::Value = serde_json::from_str(content).ok()?;
        let text = |key: &str| value.get(key)?.as_str().map(str::to_owned);
        Some(Parsed {
            ts: text("ts")?,
            head: text("head")?,
            lines: value.get("lines")?.as_u64()?,
            close: match value.get("close") {
                None => false,
                Some(close) => close.as_bool()?,
            },
            key: text("key")?,
            sig: STANDARD.decode(text("sig")?).ok()?,
        })
    }

    /// The bytes its signature covers.
    pub fn message(&self) -> Vec<u8> {
        message(&self.ts, &self.head, self.lines, self.close, &self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_as_lines_and_seconds() {
        let every = |lines, secs| Every {
            lines,
            interval: Duration::from_secs(secs),
        };
        assert_eq!(Every::parse("500"), Ok(every(500, 60)));
        assert_eq!(Every::parse("10,5"), Ok(every(10, 5)));
        assert_eq!(Every::parse(" 10 , 5s "), Ok(every(10, 5)));
        for bad in ["", "0", "x", "10,0", "10,", "-1,5", "1.5"] {
            assert!(Every::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_checkpoint_reads_back_and_its_signature_covers_its_fields() {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::load_or_create(dir.path()).unwrap();
        let head = "ab".repeat(32);
        let content = content(&signer, "t", &head, 7, true);
        let parsed = Parsed::read(std::str::from_utf8(&content).unwrap()).expect("parsed");
        assert_eq!((parsed.lines, parsed.close), (7, true));
        let key =
            crate::signing::PublicKey::read(&crate::signing::public_path(dir.path())).unwrap();
        assert!(key.verify(&parsed.message(), &parsed.sig));
        let changed = Parsed { lines: 8, ..parsed };
        assert!(!key.verify(&changed.message(), &changed.sig));
    }
}
