//! The MCP stdio transport (pure, no I/O): newline-delimited JSON-RPC messages, each on
//! one line, framed with a bound ([`Framer`]) and decided one line at a time for
//! `airlock mcp` (docs/mcp.md).
//!
//! Client to server ([`client_line`]): the line goes through [`crate::inspect_request`]
//! (the HTTP path's decisions): denied `tools/call`s and calls refused by an argument
//! guard are not forwarded and are answered by airlock with the same JSON-RPC error; a
//! partly denied batch is forwarded smaller and its local errors answered at once as one
//! batch of their own. A line that is not strict JSON-RPC (not JSON, duplicate or
//! case-folded twin keys, a `tools/call` without a name) is never forwarded: it is answered
//! with a JSON-RPC error for each id it carries ([`invalid_request`]), or dropped when it
//! carries none. Server to client ([`server_line`]): every `tools/list` result is filtered
//! ([`crate::filter_response`]); a line that is not strict JSON is dropped, the client
//! getting an error for each response in it whose id can be read.
//!
//! Lines end at `\n` only, but peers do not all agree: the official Python SDK's server
//! reads its input with universal newlines (a bare `\r` ends a line too), JavaScript's
//! `readline` and Java's `readLine` split at `\r`, and Python's `str.splitlines` also at
//! U+2028, U+2029, U+0085 and a few control characters. One line airlock judged as an
//! allowed notification could then be read as several messages, a denied `tools/call`
//! among them. So a line carrying any of [`LINE_BREAKS`] raw is refused whole, in both
//! directions ([`Uninspectable::LineBreak`]); only one `\r` right before the newline
//! (a CRLF line end) is accepted, and removed before the line is decided and relayed.
//! JSON text never needs these characters raw (`\r`, `\u2028` escapes say the same).
//!
//! A line longer than [`LINE_LIMIT`] (the HTTP path's [`BODY_LIMIT`]) is never held
//! whole: the framer reports it once as [`Frame::TooLong`] and skips it up to its newline.

use std::collections::HashSet;

use airlock_policy::model::ToolRules;
use serde_json::value::RawValue;

use crate::json::{self, Object};
use crate::{Action, BODY_LIMIT, Call, Inspection, Slot, Uninspectable};

/// The longest line relayed in either direction, newline excluded: 1 MiB.
pub const LINE_LIMIT: usize = BODY_LIMIT;

/// JSON-RPC "Invalid Request", the code of airlock's answer to a refused line.
const INVALID_REQUEST: i32 = -32600;

/// The characters a stdio line may not carry raw (the newline that ends it is not part
/// of the line; one `\r` right before it is removed first): every character at which
/// Python's `str.splitlines` breaks a line (`\r`, VT, FF, FS, GS, RS, NEL, U+2028,
/// U+2029), a superset of what the peers in use split at (see the module documentation).
pub const LINE_BREAKS: [char; 9] = [
    '\r', '\u{0b}', '\u{0c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}', '\u{2029}',
];

/// One framed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, without its newline.
    Line(Vec<u8>),
    /// A line longer than the bound: its bytes were dropped, up to its newline.
    TooLong,
}

/// Splits a byte stream into lines of at most `limit` bytes, holding at most `limit`
/// bytes at any time.
#[derive(Debug)]
pub struct Framer {
    limit: usize,
    line: Vec<u8>,
    /// Inside a line already reported as too long: bytes are dropped up to its newline.
    skipping: bool,
}

impl Framer {
    /// A framer with the bound `limit` (use [`LINE_LIMIT`]).
    pub fn new(limit: usize) -> Self {
        Framer {
            limit,
            line: Vec::new(),
            skipping: false,
        }
    }

    /// Feeds bytes; returns the lines they complete, in order.
    pub fn push(&mut self, data: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        for piece in data.split_inclusive(|&byte| byte == b'\n') {
            let (body, ended) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            if !self.skipping {
                if self.line.len() + body.len() > self.limit {
                    self.line = Vec::new();
                    self.skipping = true;
                    frames.push(Frame::TooLong);
                } else {
                    self.line.extend_from_slice(body);
                }
            }
            if ended {
                if !self.skipping {
                    frames.push(Frame::Line(std::mem::take(&mut self.line)));
                }
                self.skipping = false;
            }
        }
        frames
    }

    /// At the end of the stream: the last line if it had no newline (a line already
    /// reported as too long gives nothing more).
    pub fn finish(&mut self) -> Option<Frame> {
        let skipping = std::mem::replace(&mut self.skipping, false);
        let line = std::mem::take(&mut self.line);
        (!skipping && !line.is_empty()).then_some(Frame::Line(line))
    }

    /// Bytes currently held (at most the bound).
    pub fn held(&self) -> usize {
        self.line.len()
    }
}

/// What to do with one line from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientDecision {
    /// The line to send to the server (newline not included), if any.
    pub forward: Option<String>,
    /// airlock's own answer to send back to the client (one line), if any.
    pub answer: Option<String>,
    /// Every `tools/call` of the line, in order (for the audit).
    pub calls: Vec<Call>,
    /// Why the line was refused whole (audited as `body_uninspectable`).
    pub refused: Option<Uninspectable>,
}

/// Decides one line from the client (newline excluded) under `rule`. Blank lines are
/// dropped without a word; a line ending in `\r` is decided (and forwarded) without it.
pub fn client_line(line: &[u8], rule: &(impl ToolRules + ?Sized)) -> ClientDecision {
    let mut decision = ClientDecision {
        forward: None,
        answer: None,
        calls: Vec::new(),
        refused: None,
    };
    let line = without_cr(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return decision;
    }
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(_) => {
            decision.refused = Some(Uninspectable::NotUtf8);
            return decision;
        }
    };
    if let Some(problem) = line_break(text) {
        decision.answer = invalid_request(text, &problem);
        decision.refused = Some(problem);
        return decision;
    }
    match crate::inspect_request(line, rule) {
        Ok(Inspection { calls, action }) => {
            decision.calls = calls;
            match action {
                Action::Forward => decision.forward = Some(text.to_owned()),
                Action::Answer(answer) => decision.answer = answer,
                Action::ForwardPart { body, plan } => {
                    decision.forward = Some(body);
                    let locals: Vec<&str> = plan
                        .iter()
                        .filter_map(|slot| match slot {
                            Slot::Local(error) => Some(error.as_str()),
                            Slot::Upstream(_) => None,
                        })
                        .collect();
                    decision.answer =
                        (!locals.is_empty()).then(|| format!("[{}]", locals.join(",")));
                }
            }
        }
        Err(problem) => {
            decision.answer = invalid_request(text, &problem);
            decision.refused = Some(problem);
        }
    }
    decision
}

/// The answer to a refused line: one JSON-RPC error per id found in it (a batch's
/// answers as a batch), `None` when no id can be read (the line is dropped). A line
/// carrying raw [`LINE_BREAKS`] is also read as the pieces a peer splitting there would
/// see, so that a request hidden after a `\r` gets its error too.
pub fn invalid_request(text: &str, problem: &Uninspectable) -> Option<String> {
    errors_for(text, problem, Refused::Request)
}

/// Which side's line is refused: the client's (every id is answered) or the server's
/// (only responses are: the client gets an error in place of the answer it waits for).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refused {
    Request,
    Response,
}

/// See [`invalid_request`]; `side` says which messages are answered.
fn errors_for(text: &str, problem: &Uninspectable, side: Refused) -> Option<String> {
    let mut ids: Vec<&RawValue> = ids_of(text, side);
    if text.contains(LINE_BREAKS) {
        let mut seen: HashSet<&str> = ids.iter().map(|id| id.get()).collect();
        for piece in text.split(LINE_BREAKS) {
            for id in ids_of(piece, side) {
                if seen.insert(id.get()) {
                    ids.push(id);
                }
            }
        }
    }
    let batch = text.trim_start().starts_with('[');
    let errors: Vec<String> = ids.iter().map(|id| refusal(id, side, problem)).collect();
    match (batch, errors.as_slice()) {
        (_, []) => None,
        (false, [one]) => Some(one.clone()),
        (_, many) => Some(format!("[{}]", many.join(","))),
    }
}

/// The ids of the messages of `text` (one message or a batch) that `side` answers, none
/// if it is not JSON.
fn ids_of(text: &str, side: Refused) -> Vec<&RawValue> {
    match json::split_batch(text) {
        Ok((_, messages)) => messages
            .into_iter()
            .filter_map(|message| message_id(message, side))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// `line` without one `\r` at its end (a CRLF line end).
fn without_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The refusal of a line carrying one of [`LINE_BREAKS`] raw, if it does.
fn line_break(text: &str) -> Option<Uninspectable> {
    text.chars()
        .find(|c| LINE_BREAKS.contains(c))
        .map(|c| Uninspectable::LineBreak(u32::from(c)))
}

/// The id of a message: an object (with unique keys) whose `id` is not `null` (and,
/// for [`Refused::Response`], without a `method`: a response, not a request).
fn message_id(raw: &RawValue, side: Refused) -> Option<&RawValue> {
    let object = Object::parse(raw).ok()?;
    if side == Refused::Response && object.get("method").is_some() {
        return None;
    }
    let id = object.get("id")?;
    (id.get() != "null").then_some(id)
}

fn refusal(id: &RawValue, side: Refused, problem: &Uninspectable) -> String {
    let what = match side {
        Refused::Request => "request",
        Refused::Response => "the server's response",
    };
    let message = format!("{what} refused by airlock: {problem}");
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":{INVALID_REQUEST},\"message\":{},\
         \"data\":{{\"reason\":\"body_uninspectable\"}}}}}}",
        id.get(),
        json::quote(&message)
    )
}

/// What to do with one line from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerDecision {
    /// Send this line to the client (filtered if it held a `tools/list` result).
    Relay(String),
    /// Drop the line: it is not strict JSON-RPC (or carries a raw line break), so it
    /// cannot be filtered.
    Refuse(Uninspectable),
    /// Drop the line as [`ServerDecision::Refuse`], and send the client `answer` in its
    /// place: a JSON-RPC error for each response the line carried (so the client does
    /// not wait for an answer that never comes).
    Answer {
        /// Why the line was refused.
        problem: Uninspectable,
        /// The errors for the client (one line).
        answer: String,
    },
    /// A blank line: dropped without a word.
    Skip,
}

/// Decides one line from the server (newline excluded) under `rule`, without a final
/// `\r`. A line carrying raw [`LINE_BREAKS`] is refused like one that is not JSON; a
/// refused line's responses whose ids can be read are answered to the client with an
/// error ([`ServerDecision::Answer`]).
pub fn server_line(line: &[u8], rule: &(impl ToolRules + ?Sized)) -> ServerDecision {
    let line = without_cr(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return ServerDecision::Skip;
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return ServerDecision::Refuse(Uninspectable::NotUtf8);
    };
    let filtered = match line_break(text) {
        Some(problem) => Err(problem),
        None => crate::filter_response(line, rule),
    };
    match filtered {
        Ok(Some(filtered)) => ServerDecision::Relay(filtered),
        Ok(None) => ServerDecision::Relay(text.to_owned()),
        Err(problem) => match errors_for(text, &problem, Refused::Response) {
            Some(answer) => ServerDecision::Answer { problem, answer },
            None => ServerDecision::Refuse(problem),
        },
    }
}
