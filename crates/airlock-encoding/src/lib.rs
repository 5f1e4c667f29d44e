//! HTTP content codings (docs/policy.md, "Compressed bodies"): a `Content-Encoding`
//! header read into the list of codings applied, and a [`Decoder`] that undoes them all,
//! chunk by chunk, as a body streams. Decoding is bounded: the output may not exceed
//! [`Limits::max_output`] bytes, nor [`Limits::max_ratio`] times the input once past
//! [`Limits::ratio_floor`]; past either the decoder stops with an error and holds no more
//! than one internal buffer. Pure: no I/O (the decoders write into memory).
//!
//! gzip and deflate are decoded by flate2, br by brotli, zstd by zstd; `deflate` accepts
//! the zlib wrapping RFC 9110 names and, as browsers do, a raw deflate stream.

#![forbid(unsafe_code)]

use std::io::{self, Write};

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

/// Where a decoder writes: memory, refusing to grow past what the limits allow.
struct Sink {
    buf: Vec<u8>,
    /// How many more bytes may be written now.
    room: u64,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.len() as u64 > self.room {
            return Err(io::Error::other(OverLimit));
        }
        self.room -= data.len() as u64;
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The marker error a [`Sink`] fails with.
#[derive(Debug)]
struct OverLimit;

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("over the decoding limit")
    }
}

impl std::error::Error for OverLimit {}

/// One coding being undone.
enum Stage {
    Gzip(flate2::write::GzDecoder<Sink>),
    Zlib(flate2::write::ZlibDecoder<Sink>),
    RawDeflate(flate2::write::DeflateDecoder<Sink>),
    /// `deflate` before its first two bytes say whether it is zlib-wrapped.
    DeflateUndecided(Vec<u8>),
    Brotli(Box<brotli::DecompressorWriter<Sink>>),
    Zstd(zstd::stream::write::Decoder<'static, Sink>),
}

fn sink() -> Sink {
    Sink {
        buf: Vec::new(),
        room: 0,
    }
}

impl Stage {
    fn new(coding: Coding) -> Result<Stage, DecodeError> {
        Ok(match coding {
            Coding::Gzip => Stage::Gzip(flate2::write::GzDecoder::new(sink())),
            Coding::Deflate => Stage::DeflateUndecided(Vec::new()),
            Coding::Brotli => {
                Stage::Brotli(Box::new(brotli::DecompressorWriter::new(sink(), 8192)))
            }
            Coding::Zstd => Stage::Zstd(
                zstd::stream::write::Decoder::new(sink())
                    .map_err(|e| DecodeError::Corrupt(coding, e.to_string()))?,
            ),
        })
    }

    fn sink_mut(&mut self) -> Option<&mut Sink> {
        Some(match self {
            Stage::Gzip(d) => d.get_mut(),
            Stage::Zlib(d) => d.get_mut(),
            Stage::RawDeflate(d) => d.get_mut(),
            Stage::DeflateUndecided(_) => return None,
            Stage::Brotli(d) => d.get_mut(),
            Stage::Zstd(d) => d.get_mut(),
        })
    }

    /// Settles a `deflate` stage once two bytes are known: zlib when they form a valid
    /// zlib header (RFC 1950), raw deflate otherwise.
    fn settle(&mut self, data: &[u8], at_end: bool) -> Vec<u8> {
        let Stage::DeflateUndecided(held) = self else {
            return data.to_vec();
        };
        held.extend_from_slice(data);
        if held.len() < 2 && !at_end {
            return Vec::new();
        }
        let held = std::mem::take(held);
        let zlib = held.len() >= 2
            && held[0] & 0x0f == 8
            && (u16::from(held[0]) << 8 | u16::from(held[1])) % 31 == 0;
        *self = if zlib {
            Stage::Zlib(flate2::write::ZlibDecoder::new(sink()))
        } else {
            Stage::RawDeflate(flate2::write::DeflateDecoder::new(sink()))
        };
        held
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Stage::Gzip(d) => d.write_all(data),
            Stage::Zlib(d) => d.write_all(data),
            Stage::RawDeflate(d) => d.write_all(data),
            Stage::DeflateUndecided(_) => Ok(()),
            Stage::Brotli(d) => d.write_all(data),
            Stage::Zstd(d) => d.write_all(data),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        match self {
            Stage::Gzip(d) => d.try_finish(),
            Stage::Zlib(d) => d.try_finish(),
            Stage::RawDeflate(d) => d.try_finish(),
            Stage::DeflateUndecided(_) => Ok(()),
            Stage::Brotli(d) => d.flush().and_then(|()| d.close()),
            Stage::Zstd(d) => d.flush(),
        }
    }
}

/// Feeds `data` through one stage (at most `room` bytes out); returns what came out.
fn step(stage: &mut Stage, data: &[u8], at_end: bool, room: u64) -> io::Result<Vec<u8>> {
    let input = stage.settle(data, at_end);
    let Some(sink) = stage.sink_mut() else {
        return Ok(Vec::new());
    };
    sink.room = room;
    stage.write(&input)?;
    if at_end {
        stage.finish()?;
    }
    Ok(stage
        .sink_mut()
        .map(|sink| std::mem::take(&mut sink.buf))
        .unwrap_or_default())
}

/// Undoes the codings of one body as it streams.
pub struct Decoder {
    /// In decoding order (the last coding applied first).
    stages: Vec<(Coding, Stage)>,
    limits: Limits,
    input: u64,
    output: u64,
}

impl Decoder {
    /// A decoder for a body coded with `codings` (in the order applied, as [`codings`]
    /// returns them).
    pub fn new(codings: &[Coding], limits: Limits) -> Result<Decoder, DecodeError> {
        if codings.len() > MAX_LAYERS {
            return Err(DecodeError::TooManyLayers);
        }
        let stages = codings
            .iter()
            .rev()
            .map(|&coding| Stage::new(coding).map(|stage| (coding, stage)))
            .collect::<Result<_, _>>()?;
        Ok(Decoder {
            stages,
            limits,
            input: 0,
            output: 0,
        })
    }

    /// Decodes the next chunk of the coded body; returns the decoded bytes it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<u8>, DecodeError> {
        self.input += chunk.len() as u64;
        self.run(chunk, false)
    }

    /// Ends the body: flushes every stage; an unfinished coded stream is an error.
    pub fn finish(&mut self) -> Result<Vec<u8>, DecodeError> {
        self.run(&[], true)
    }

    fn run(&mut self, chunk: &[u8], at_end: bool) -> Result<Vec<u8>, DecodeError> {
        let room = self.room();
        let mut data = chunk.to_vec();
        for index in 0..self.stages.len() {
            let (coding, stage) = &mut self.stages[index];
            let coding = *coding;
            data = match step(stage, &data, at_end, room) {
                Ok(out) => out,
                Err(error) => {
                    return Err(self
                        .limit_error(&error)
                        .unwrap_or_else(|| DecodeError::Corrupt(coding, error.to_string())));
                }
            };
        }
        self.output += data.len() as u64;
        if at_end {
            self.check_complete()?;
        }
        Ok(data)
    }

    /// How many decoded bytes the limits still allow.
    fn room(&self) -> u64 {
        let by_size = self.limits.max_output.saturating_sub(self.output);
        let by_ratio = self
            .input
            .saturating_mul(self.limits.max_ratio)
            .max(self.limits.ratio_floor)
            .saturating_sub(self.output);
        by_size.min(by_ratio)
    }

    fn limit_error(&self, error: &io::Error) -> Option<DecodeError> {
        let over = error
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<OverLimit>().is_some());
        if !over {
            return None;
        }
        let by_size = self.limits.max_output.saturating_sub(self.output);
        Some(if by_size <= self.room() {
            DecodeError::TooLarge(self.limits.max_output)
        } else {
            DecodeError::Ratio(self.limits.max_ratio)
        })
    }

    fn check_complete(&self) -> Result<(), DecodeError> {
        for (coding, stage) in &self.stages {
            let truncated = match stage {
                Stage::DeflateUndecided(held) => !held.is_empty(),
                _ => false,
            };
            if truncated {
                return Err(DecodeError::Truncated(*coding));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
