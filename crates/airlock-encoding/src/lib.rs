//! HTTP content codings (docs/policy.md, "Compressed bodies"): a `Content-Encoding`
//! header read into the list of codings applied, and a [`Decoder`] that undoes them all,
//! chunk by chunk, as a body streams. Decoding is bounded: the output may not exceed
//! [`Limits::max_output`] bytes, nor [`Limits::max_ratio`] times the input once past
//! [`Limits::ratio_floor`]; past either the decoder stops with an error. Output is taken
//! in steps of a size the caller chooses ([`Decoder::pull`]), and the memory a decoder
//! holds besides its output is bounded and estimated ([`Decoder::memory`]): the caller can
//! take both from a memory budget before they exist. A zstd frame asking for a window over
//! 8 MiB and a brotli stream with the large-window extension are refused as corrupt.
//! Pure: no I/O (the decoders write into memory).
//!
//! gzip and deflate are decoded by flate2, br by brotli, zstd by zstd; `deflate` accepts
//! the zlib wrapping RFC 9110 names and, as browsers do, a raw deflate stream.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

use std::io;

use stage::Stage;
pub use stage::{BROTLI_WINDOW_MAX, ZSTD_WINDOW_LOG_MAX};

mod stage;

/// One content coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// `gzip` (also `x-gzip`).
    Gzip,
    /// `deflate`.
    Deflate,
    /// `br`.
    Brotli,
    /// `zstd`.
    Zstd,
}

impl Coding {
    /// The coding named `token` (case-insensitive); `None` for `identity` and unknown
    /// names (told apart by [`codings`]).
    fn from_token(token: &str) -> Option<Coding> {
        match token.to_ascii_lowercase().as_str() {
            "gzip" | "x-gzip" => Some(Coding::Gzip),
            "deflate" => Some(Coding::Deflate),
            "br" => Some(Coding::Brotli),
            "zstd" => Some(Coding::Zstd),
            _ => None,
        }
    }
}

/// Why a body cannot be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A coding airlock does not know.
    #[error("unknown content coding `{0}`")]
    Unknown(String),
    /// More codings stacked than [`MAX_LAYERS`].
    #[error("more than {MAX_LAYERS} content codings stacked")]
    TooManyLayers,
    /// The data is not what its coding says.
    #[error("the {0:?} data is corrupt: {1}")]
    Corrupt(Coding, String),
    /// The decoded body would pass [`Limits::max_output`].
    #[error("the decoded body is larger than {0} bytes")]
    TooLarge(u64),
    /// The decoded body grows faster than [`Limits::max_ratio`] times its input.
    #[error("the body decodes to more than {0} times its size")]
    Ratio(u64),
    /// The body ended in the middle of a coded stream.
    #[error("the {0:?} data ends early")]
    Truncated(Coding),
    /// A `br` or `zstd` layer under another coding: its window would have to be reserved
    /// whole from the first byte (megabytes for a few bytes of input), so it is refused.
    #[error("a {0:?} layer under another content coding")]
    InnerWindow(Coding),
}

/// The most codings one body may stack.
pub const MAX_LAYERS: usize = 4;

/// The codings of a `Content-Encoding` header (all its values, comma-separated), in the
/// order they were applied; `identity` is skipped. An unknown coding is an error.
pub fn codings<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<Coding>, DecodeError> {
    let mut out = Vec::new();
    for value in values {
        let text = String::from_utf8_lossy(value);
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match Coding::from_token(token) {
                Some(coding) => out.push(coding),
                None if token.eq_ignore_ascii_case("identity") => {}
                None => return Err(DecodeError::Unknown(token.to_owned())),
            }
            if out.len() > MAX_LAYERS {
                return Err(DecodeError::TooManyLayers);
            }
        }
    }
    Ok(out)
}

/// How far decoding may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most decoded bytes of one body.
    pub max_output: u64,
    /// The most decoded bytes per coded byte, once the output passes `ratio_floor`.
    pub max_ratio: u64,
    /// Output below this many bytes is never refused for its ratio.
    pub ratio_floor: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_output: 256 * 1024 * 1024,
            max_ratio: 200,
            ratio_floor: 1024 * 1024,
        }
    }
}

/// Decoded bytes that pass between two stacked codings are held up to this many at once.
const BETWEEN_STAGES: usize = 64 * 1024;

/// One coding of the body and the input it has not consumed yet.
struct Layer {
    coding: Coding,
    stage: Stage,
    /// Input not consumed yet: `pending[start..]`.
    pending: Vec<u8>,
    start: usize,
    /// Bytes this layer has written.
    produced: u64,
    /// Its coded stream has ended and everything it held has been written.
    done: bool,
}

impl Layer {
    fn input(&self) -> &[u8] {
        &self.pending[self.start..]
    }

    fn waiting(&self) -> usize {
        self.pending.len() - self.start
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.pending.len() {
            self.pending.clear();
            self.start = 0;
        }
    }

    fn append(&mut self, data: &[u8]) {
        if self.start > 0 {
            self.pending.drain(..self.start);
            self.start = 0;
        }
        self.pending.extend_from_slice(data);
    }
}

/// Undoes the codings of one body as it streams. Input is given with [`Decoder::feed`]
/// and output taken in bounded steps with [`Decoder::pull`] (so a caller decides how many
/// decoded bytes exist at once, and can account for them: [`Decoder::memory`]), or both at
/// once with [`Decoder::push`] and [`Decoder::finish`].
pub struct Decoder {
    /// In decoding order (the last coding applied first).
    layers: Vec<Layer>,
    limits: Limits,
    input: u64,
    output: u64,
    /// No more input comes.
    ended: bool,
}

impl Decoder {
    /// A decoder for a body coded with `codings` (in the order applied, as [`codings`]
    /// returns them).
    pub fn new(codings: &[Coding], limits: Limits) -> Result<Decoder, DecodeError> {
        if codings.len() > MAX_LAYERS {
            return Err(DecodeError::TooManyLayers);
        }
        // Only the coding applied last (decoded first) may keep a large window: its memory
        // is charged as it fills; an inner one's would be charged whole.
        let inner = &codings[..codings.len().saturating_sub(1)];
        if let Some(&coding) = inner
            .iter()
            .find(|c| matches!(c, Coding::Brotli | Coding::Zstd))
        {
            return Err(DecodeError::InnerWindow(coding));
        }
        let layers = codings
            .iter()
            .rev()
            .map(|&coding| {
                let stage =
                    Stage::new(coding).map_err(|e| DecodeError::Corrupt(coding, e.to_string()))?;
                Ok(Layer {
                    coding,
                    stage,
                    pending: Vec::new(),
                    start: 0,
                    produced: 0,
                    done: false,
                })
            })
            .collect::<Result<_, DecodeError>>()?;
        Ok(Decoder {
            layers,
            limits,
            input: 0,
            output: 0,
            ended: false,
        })
    }

    /// Decodes the next chunk of the coded body; returns the decoded bytes it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<u8>, DecodeError> {
        self.feed(chunk);
        self.pull(usize::MAX)
    }

    /// Ends the body: flushes every stage; an unfinished coded stream is an error.
    pub fn finish(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.end_input();
        let out = self.pull(usize::MAX)?;
        match self.layers.iter().find(|layer| !layer.done) {
            Some(layer) => Err(DecodeError::Truncated(layer.coding)),
            None => Ok(out),
        }
    }

    /// Gives the next chunk of the coded body (decoded by the next [`Decoder::pull`]).
    pub fn feed(&mut self, chunk: &[u8]) {
        self.input += chunk.len() as u64;
        if let Some(first) = self.layers.first_mut() {
            first.append(chunk);
        }
    }

    /// Says that the coded body has ended.
    pub fn end_input(&mut self) {
        self.ended = true;
    }

    /// Whether every coded byte given has been decoded and written (more input is needed
    /// to go on, or the body has ended).
    pub fn wants_input(&self) -> bool {
        !self.ended && self.layers.iter().all(|layer| layer.waiting() == 0)
    }

    /// Whether the body has ended and every stage has written all it held.
    pub fn is_finished(&self) -> bool {
        self.ended && self.layers.iter().all(|layer| layer.done)
    }

    /// The most memory the decoder may hold, besides its output, after a
    /// [`Decoder::pull`] of `step` bytes: its stages' state, the bytes between stacked
    /// codings, and the window of zstd and brotli (as much of it as the decoded bytes
    /// could have filled, for the outermost coding; all of it for the others).
    pub fn memory(&self, step: usize) -> usize {
        let last = self.layers.len().saturating_sub(1);
        self.layers
            .iter()
            .enumerate()
            .map(|(index, layer)| {
                let cap = stage::window_cap(layer.coding);
                let window = if index == last {
                    let filled = usize::try_from(layer.produced).unwrap_or(usize::MAX);
                    cap.min(filled.saturating_add(step))
                } else {
                    cap
                };
                let between = if index > 0 { BETWEEN_STAGES } else { 0 };
                stage::state_bytes(layer.coding) + window + between
            })
            .sum()
    }

    /// Decodes what it can of the input given, writing at most `max` bytes (fewer when
    /// it needs more input or the body is done); the rest stays for the next pull.
    pub fn pull(&mut self, max: usize) -> Result<Vec<u8>, DecodeError> {
        let mut out = Vec::new();
        loop {
            let before = (out.len(), self.progress());
            for index in 0..self.layers.len() {
                self.step_layer(index, max, &mut out)?;
            }
            if out.len() >= max || before == (out.len(), self.progress()) {
                break;
            }
        }
        self.output += out.len() as u64;
        Ok(out)
    }

    /// A measure that grows with every byte consumed or written by any layer.
    fn progress(&self) -> (u64, usize, usize) {
        let produced = self.layers.iter().map(|layer| layer.produced).sum();
        let waiting = self.layers.iter().map(Layer::waiting).sum();
        let done = self.layers.iter().filter(|layer| layer.done).count();
        (produced, waiting, done)
    }

    /// Runs layer `index` once; its output goes to the next layer or to `out`.
    fn step_layer(
        &mut self,
        index: usize,
        max: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        let last = index + 1 == self.layers.len();
        let step = if last {
            max.saturating_sub(out.len())
        } else {
            BETWEEN_STAGES.saturating_sub(self.layers[index + 1].waiting())
        };
        let upstream_done = self.ended && self.layers[..index].iter().all(|layer| layer.done);
        let limit = self.room(self.layers[index].produced);
        let room = stage::Room { step, limit };
        let layer = &mut self.layers[index];
        if layer.done || step == 0 {
            return Ok(());
        }
        if layer.stage.undecided() {
            if upstream_done && layer.waiting() == 0 {
                // An empty `deflate` body.
                layer.done = true;
                return Ok(());
            }
            if layer.waiting() < 2 && !upstream_done {
                return Ok(());
            }
            let head = layer.input()[..layer.waiting().min(2)].to_vec();
            layer.stage.decide(&head);
        }
        let coding = layer.coding;
        let fail = |error: io::Error, decoder: &Decoder| {
            decoder
                .limit_error(&error, index)
                .unwrap_or_else(|| DecodeError::Corrupt(coding, error.to_string()))
        };
        let (written, finished) = if upstream_done && layer.waiting() == 0 {
            match layer.stage.finish(room) {
                Ok((written, done)) => (written, done),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Err(DecodeError::Truncated(coding));
                }
                Err(e) => return Err(fail(e, self)),
            }
        } else {
            match layer.stage.run(&layer.pending[layer.start..], room) {
                Ok((used, written)) => {
                    layer.consume(used);
                    (written, false)
                }
                Err(e) => return Err(fail(e, self)),
            }
        };
        let layer = &mut self.layers[index];
        layer.produced += written.len() as u64;
        layer.done = finished;
        match self.layers.get_mut(index + 1) {
            Some(next) => next.append(&written),
            None => out.extend_from_slice(&written),
        }
        Ok(())
    }

    /// How many more bytes a layer that has written `produced` may write within the
    /// limits.
    fn room(&self, produced: u64) -> u64 {
        let by_size = self.limits.max_output.saturating_sub(produced);
        let by_ratio = self
            .input
            .saturating_mul(self.limits.max_ratio)
            .max(self.limits.ratio_floor)
            .saturating_sub(produced);
        by_size.min(by_ratio)
    }

    fn limit_error(&self, error: &io::Error, index: usize) -> Option<DecodeError> {
        if !stage::is_over_limit(error) {
            return None;
        }
        let produced = self.layers[index].produced;
        let by_size = self.limits.max_output.saturating_sub(produced);
        Some(if by_size <= self.room(produced) {
            DecodeError::TooLarge(self.limits.max_output)
        } else {
            DecodeError::Ratio(self.limits.max_ratio)
        })
    }
}

#[cfg(test)]
mod tests;
