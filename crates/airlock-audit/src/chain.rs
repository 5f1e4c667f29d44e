//! The hash chain that makes the audit log tamper-evident (docs/operations.md, "What the
//! audit record proves").
//!
//! Every line ends with `"chain":"<64 hex>"`: the SHA-256 of the previous line's chain (32
//! bytes; [`GENESIS`], all zeros, before the first line of a chain) followed by the line's
//! *content*, which is the line as written with its `,"chain":"..."` suffix taken out (the
//! JSON object up to that key, then its closing `}`). A line cannot be altered, removed,
//! inserted or moved without breaking the link of the line after it
//! ([`crate::verify`]).
//!
//! The chain goes on across rotation and across restarts: a log opened on an existing file
//! resumes from that file's last line ([`resume`]), or from the last line of `PATH.1` when
//! the file at the path is empty or absent.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use aws_lc_rs::digest;

/// The chain value a chain starts from.
pub const GENESIS: [u8; 32] = [0; 32];

/// The key every line ends with, before its value.
const KEY: &[u8] = b",\"chain\":\"";

/// Bytes the chain adds to a line's content: `,"chain":"` + 64 hex digits + `"`.
pub const SUFFIX_LEN: usize = KEY.len() + 64 + 1;

/// `SHA-256(prev || content)`.
pub fn link(prev: &[u8; 32], content: &[u8]) -> [u8; 32] {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(prev);
    context.update(content);
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// Lower-case hex of a chain value.
pub fn to_hex(value: &[u8; 32]) -> String {
    let mut text = String::with_capacity(64);
    push_hex(&mut text, value);
    text
}

fn push_hex(text: &mut String, value: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in value {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 15)]));
    }
}

/// The chain value written as 64 lower-case hex digits; `None` for anything else.
pub fn from_hex(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (index, pair) in bytes.chunks_exact(2).enumerate() {
        out[index] = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// The head of a chain being written: the chain value of the last line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The last line's chain value ([`GENESIS`] before the first line).
    pub value: [u8; 32],
    /// Lines since the last checkpoint line (checkpoints not counted).
    pub unsigned: u64,
}

impl Default for Head {
    fn default() -> Self {
        Head {
            value: GENESIS,
            unsigned: 0,
        }
    }
}

impl Head {
    /// Appends to `out` the line for `content` (a JSON object, `{...}`) with its chain, and
    /// moves the head to it. `checkpoint` lines reset the count of unsigned lines.
    pub fn seal(&mut self, content: &[u8], checkpoint: bool, out: &mut Vec<u8>) {
        let value = link(&self.value, content);
        let body = content.strip_suffix(b"}").unwrap_or(content);
        out.extend_from_slice(body);
        out.extend_from_slice(KEY);
        let mut hex = String::with_capacity(64);
        push_hex(&mut hex, &value);
        out.extend_from_slice(hex.as_bytes());
        out.extend_from_slice(b"\"}");
        self.value = value;
        self.unsigned = if checkpoint { 0 } else { self.unsigned + 1 };
    }
}

/// Splits a written line into its content (the bytes that were hashed) and its chain
/// value; `None` when it does not end with a well-formed `"chain"` key.
pub fn split(line: &str) -> Option<(String, [u8; 32])> {
    let bytes = line.as_bytes();
    let body_len = bytes.len().checked_sub(SUFFIX_LEN + 1)?;
    let (body, suffix) = line.split_at(body_len);
    let hex = suffix.strip_prefix(",\"chain\":\"")?.strip_suffix("\"}")?;
    let value = from_hex(hex)?;
    if !body.starts_with('{') {
        return None;
    }
    Some((format!("{body}}}"), value))
}

/// Whether a line's content is a checkpoint line's (`"kind":"checkpoint"` as its second key).
pub fn is_checkpoint(content: &str) -> bool {
    content
        .split_once(",\"kind\":")
        .is_some_and(|(_, rest)| rest.starts_with("\"checkpoint\""))
}

/// The head a log at `path` goes on from: its last line's chain, or when the file is empty
/// or absent that of `rotated` (the newest rotated file), else a new chain. A last line
/// without a chain (a log written before chains) starts a new chain.
pub fn resume(path: &Path, rotated: Option<&Path>) -> io::Result<Head> {
    if let Some(head) = scan(path)? {
        return Ok(head);
    }
    match rotated {
        Some(rotated) => Ok(scan(rotated)?.unwrap_or_default()),
        None => Ok(Head::default()),
    }
}

/// The head after the last line of the file (`None`: no regular file, or no line).
fn scan(path: &Path) -> io::Result<Option<Head>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    // A device (`/dev/full`, a pipe) holds no chain to go on from.
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut head: Option<Head> = None;
    let mut line = Vec::new();
    let mut reader = BufReader::new(file);
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(head);
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\n');
        if text.is_empty() {
            continue;
        }
        head = Some(match split(text) {
            Some((content, value)) => Head {
                value,
                unsigned: if is_checkpoint(&content) {
                    0
                } else {
                    head.map_or(0, |h| h.unsigned) + 1
                },
            },
            None => Head::default(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_line_splits_back_into_its_content_and_chain() {
        let mut head = Head::default();
        let mut out = Vec::new();
        head.seal(br#"{"ts":"t","kind":"http"}"#, false, &mut out);
        let line = String::from_utf8(out).unwrap();
        let value: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(value["chain"], to_hex(&head.value));
        let (content, chain) = split(&line).expect("a chained line");
        assert_eq!(content, r#"{"ts":"t","kind":"http"}"#);
        assert_eq!(chain, link(&GENESIS, content.as_bytes()));
        assert_eq!(head.unsigned, 1);
        assert_eq!(line.len(), content.len() + SUFFIX_LEN);
    }

    #[test]
    fn malformed_chains_do_not_split() {
        let good = format!("{{\"a\":1,\"chain\":\"{}\"}}", "ab".repeat(32));
        assert!(split(&good).is_some());
        for bad in [
            format!("{{\"a\":1,\"chain\":\"{}\"}}", "AB".repeat(32)),
            format!("{{\"a\":1,\"chain\":\"{}\"}}", "ab".repeat(31)),
            format!("{{\"a\":1,\"chain\":\"{}\"}} ", "ab".repeat(32)),
            format!("[\"a\",\"chain\":\"{}\"}}", "ab".repeat(32)),
            "{}".to_owned(),
        ] {
            assert!(split(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn checkpoints_are_told_by_their_kind() {
        assert!(is_checkpoint(
            r#"{"ts":"t","kind":"checkpoint","head":"x"}"#
        ));
        assert!(!is_checkpoint(
            r#"{"ts":"t","kind":"http","message":",\"kind\":\"checkpoint\""}"#
        ));
    }

    #[test]
    fn a_log_resumes_from_its_last_line_or_the_rotated_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, rotated) = (dir.path().join("a.jsonl"), dir.path().join("a.jsonl.1"));
        assert_eq!(resume(&path, Some(&rotated)).unwrap(), Head::default());
        let mut head = Head::default();
        let mut out = Vec::new();
        for n in 0..3 {
            head.seal(format!("{{\"n\":{n}}}").as_bytes(), false, &mut out);
            out.push(b'\n');
        }
        std::fs::write(&rotated, &out).unwrap();
        assert_eq!(resume(&path, Some(&rotated)).unwrap(), head);
        std::fs::write(&path, b"{\"old\":true}\n").unwrap();
        assert_eq!(resume(&path, Some(&rotated)).unwrap(), Head::default());
    }
}
