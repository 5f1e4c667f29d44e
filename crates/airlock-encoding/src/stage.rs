//! One content coding being undone in bounded steps: a step consumes what input it can
//! and writes at most the [`Room`] it is given; what does not fit stays inside the
//! decoder (at most one internal buffer) for the next step, so a caller decides how many
//! decoded bytes exist at once. The memory a stage holds besides its output is bounded
//! and estimated by [`state_bytes`] and [`window_cap`] (docs/reliability.md, "Compressed
//! bodies").

use std::io::{self, Write};

use brotli::enc::StandardAlloc;
use zstd::stream::raw::{DParameter, InBuffer, Operation as _, OutBuffer};

use crate::Coding;

/// The largest zstd window accepted: 8 MiB, the limit RFC 9659 sets for the `zstd`
/// content coding. A frame asking for more is refused (corrupt), never allocated.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 23;

/// The largest brotli window: 16 MiB, RFC 7932's largest. The large-window extension
/// (up to 1 GiB) is refused.
pub const BROTLI_WINDOW_MAX: usize = 1 << 24;

/// How much a decoder writes per call into its output at most.
const CHUNK: usize = 64 * 1024;

/// The memory a stage holds besides its window: inflate state and dictionary plus
/// flate2's 32 KiB buffer; zstd's context, input block and output block; brotli's
/// Huffman tables at their largest (256 trees of each kind).
pub(crate) fn state_bytes(coding: Coding) -> usize {
    match coding {
        Coding::Gzip | Coding::Deflate => 128 * 1024,
        Coding::Zstd => 512 * 1024,
        Coding::Brotli => 2 * 1024 * 1024,
    }
}

/// The most window memory a stage may fill (each decoded byte passes through it).
pub(crate) fn window_cap(coding: Coding) -> usize {
    match coding {
        Coding::Gzip | Coding::Deflate => 0,
        Coding::Zstd => 1 << ZSTD_WINDOW_LOG_MAX,
        Coding::Brotli => BROTLI_WINDOW_MAX,
    }
}

/// How much one step may write: `step` bytes now (then it pauses), `limit` bytes before
/// the body is over its decoding limits (then it fails).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Room {
    pub(crate) step: usize,
    pub(crate) limit: u64,
}

impl Room {
    /// The size of the next write: `None` when the step is used up; one byte past the
    /// limit is allowed so that going over is seen.
    fn next_chunk(self, written: usize) -> Option<usize> {
        let step = self.step.saturating_sub(written);
        let limit = self.limit.saturating_sub(written as u64).saturating_add(1);
        let chunk = step
            .min(CHUNK)
            .min(usize::try_from(limit).unwrap_or(usize::MAX));
        (chunk > 0).then_some(chunk)
    }

    fn check(self, written: usize) -> io::Result<()> {
        if written as u64 > self.limit {
            return Err(io::Error::other(OverLimit));
        }
        Ok(())
    }
}

/// Where a flate2 decoder writes: memory, pausing (`Full`) when the step's room is used
/// and failing ([`OverLimit`]) past the limits.
pub(crate) struct Sink {
    buf: Vec<u8>,
    room: Room,
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        if self.room.limit == 0 {
            return Err(io::Error::other(OverLimit));
        }
        if self.room.step == 0 {
            return Err(io::Error::other(Full));
        }
        let by_limit = usize::try_from(self.room.limit).unwrap_or(usize::MAX);
        let n = data.len().min(self.room.step).min(by_limit);
        self.room.step -= n;
        self.room.limit -= n as u64;
        self.buf.extend_from_slice(&data[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The marker error of a write past the decoding limits.
#[derive(Debug)]
pub(crate) struct OverLimit;

impl std::fmt::Display for OverLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("over the decoding limit")
    }
}

impl std::error::Error for OverLimit {}

/// The marker error of a [`Sink`] whose step is used up (not a failure: the step ends).
#[derive(Debug)]
struct Full;

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the step's room is used up")
    }
}

impl std::error::Error for Full {}

fn is_full(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<Full>().is_some())
}

/// Whether `error` is a write past the decoding limits.
pub(crate) fn is_over_limit(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.downcast_ref::<OverLimit>().is_some())
}

type BrotliState = brotli::BrotliState<StandardAlloc, StandardAlloc, StandardAlloc>;

/// brotli through its streaming call, which writes into a buffer the caller sizes.
pub(crate) struct Brotli {
    state: BrotliState,
    total_out: usize,
    done: bool,
}

/// zstd through its streaming call, its window bounded by [`ZSTD_WINDOW_LOG_MAX`].
pub(crate) struct Zstd {
    decoder: zstd::stream::raw::Decoder<'static>,
    /// A frame has begun and not ended.
    open: bool,
}

/// One coding being undone.
pub(crate) enum Stage {
    Gzip(flate2::write::GzDecoder<Sink>),
    Zlib(flate2::write::ZlibDecoder<Sink>),
    RawDeflate(flate2::write::DeflateDecoder<Sink>),
    /// `deflate` before its first two bytes say whether it is zlib-wrapped.
    DeflateUndecided,
    Brotli(Box<Brotli>),
    Zstd(Box<Zstd>),
}

fn sink() -> Sink {
    Sink {
        buf: Vec::new(),
        room: Room { step: 0, limit: 0 },
    }
}

impl Stage {
    pub(crate) fn new(coding: Coding) -> io::Result<Stage> {
        Ok(match coding {
            Coding::Gzip => Stage::Gzip(flate2::write::GzDecoder::new(sink())),
            Coding::Deflate => Stage::DeflateUndecided,
            Coding::Brotli => {
                let mut state = BrotliState::new(
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                    StandardAlloc::default(),
                );
                state.large_window = false;
                Stage::Brotli(Box::new(Brotli {
                    state,
                    total_out: 0,
                    done: false,
                }))
            }
            Coding::Zstd => {
                let mut decoder = zstd::stream::raw::Decoder::new()?;
                decoder.set_parameter(DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))?;
                Stage::Zstd(Box::new(Zstd {
                    decoder,
                    open: false,
                }))
            }
        })
    }

    /// Whether this is a `deflate` stage still waiting for its first two bytes.
    pub(crate) fn undecided(&self) -> bool {
        matches!(self, Stage::DeflateUndecided)
    }

    /// Settles a `deflate` stage from the first bytes of its input (`head`, two unless the
    /// body is shorter): zlib when they form a valid zlib header (RFC 1950), raw deflate
    /// otherwise. The bytes are not consumed.
    pub(crate) fn decide(&mut self, head: &[u8]) {
        let zlib = head.len() >= 2
            && head[0] & 0x0f == 8
            && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0;
        *self = if zlib {
            Stage::Zlib(flate2::write::ZlibDecoder::new(sink()))
        } else {
            Stage::RawDeflate(flate2::write::DeflateDecoder::new(sink()))
        };
    }

    /// One step over `input`: how much of it was consumed, and the output (at most
    /// `room.step` bytes). An empty `input` drains what the decoder holds.
    pub(crate) fn run(&mut self, input: &[u8], room: Room) -> io::Result<(usize, Vec<u8>)> {
        match self {
            Stage::Gzip(d) => flate_run(d, input, room),
            Stage::Zlib(d) => flate_run(d, input, room),
            Stage::RawDeflate(d) => flate_run(d, input, room),
            Stage::DeflateUndecided => Ok((0, Vec::new())),
            Stage::Brotli(b) => b.run(input, room),
            Stage::Zstd(z) => z.run(input, room),
        }
    }

    /// Ends the stage once its input has ended: the output still held, and whether the
    /// stage is done (`false` when the step's room ran out first). A coded stream cut
    /// short is an error.
    pub(crate) fn finish(&mut self, room: Room) -> io::Result<(Vec<u8>, bool)> {
        match self {
            Stage::Gzip(d) => flate_finish(d, room, |d| d.try_finish()),
            Stage::Zlib(d) => flate_finish(d, room, |d| d.try_finish()),
            Stage::RawDeflate(d) => flate_finish(d, room, |d| d.try_finish()),
            Stage::DeflateUndecided => Ok((Vec::new(), true)),
            Stage::Brotli(b) => b.finish(room),
            Stage::Zstd(z) => z.finish(room),
        }
    }
}

/// A flate2 writer that writes into a [`Sink`].
trait FlateWriter: Write {
    fn sink(&mut self) -> &mut Sink;
}

impl FlateWriter for flate2::write::GzDecoder<Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}

impl FlateWriter for flate2::write::ZlibDecoder<Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}

impl FlateWriter for flate2::write::DeflateDecoder<Sink> {
    fn sink(&mut self) -> &mut Sink {
        self.get_mut()
    }
}

/// Writes `input` until it is consumed or the step's room is used, then drains flate2's
/// buffer into the room left. A flate2 writer keeps what its sink refused and consumes
/// no input in a call that fails, so a paused step loses nothing.
fn flate_run<W: FlateWriter>(w: &mut W, input: &[u8], room: Room) -> io::Result<(usize, Vec<u8>)> {
    w.sink().room = room;
    let mut used = 0;
    let mut paused = false;
    while used < input.len() {
        match w.write(&input[used..]) {
            // Data after the end of the coded stream.
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => used += n,
            Err(e) if is_full(&e) => {
                paused = true;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    if !paused {
        match w.flush() {
            Err(e) if !is_full(&e) => return Err(e),
            _ => {}
        }
    }
    Ok((used, std::mem::take(&mut w.sink().buf)))
}

fn flate_finish<W: FlateWriter>(
    w: &mut W,
    room: Room,
    finish: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<(Vec<u8>, bool)> {
    w.sink().room = room;
    let done = match finish(w) {
        Ok(()) => true,
        Err(e) if is_full(&e) => false,
        Err(e) => return Err(e),
    };
    Ok((std::mem::take(&mut w.sink().buf), done))
}

impl Brotli {
    fn call(
        &mut self,
        input: &[u8],
        used: &mut usize,
        out: &mut Vec<u8>,
        chunk: usize,
    ) -> brotli::BrotliResult {
        let start = out.len();
        out.resize(start + chunk, 0);
        let mut available_in = input.len() - *used;
        let mut available_out = chunk;
        let mut written = 0;
        let result = brotli::BrotliDecompressStream(
            &mut available_in,
            used,
            input,
            &mut available_out,
            &mut written,
            &mut out[start..],
            &mut self.total_out,
            &mut self.state,
        );
        out.truncate(start + written);
        result
    }

    fn run(&mut self, input: &[u8], room: Room) -> io::Result<(usize, Vec<u8>)> {
        let mut used = 0;
        let mut out = Vec::new();
        while let Some(chunk) = room.next_chunk(out.len()) {
            if self.done {
                if used < input.len() {
                    return Err(corrupt("data after the end of the brotli stream"));
                }
                break;
            }
            let before = (used, out.len());
            match self.call(input, &mut used, &mut out, chunk) {
                brotli::BrotliResult::ResultSuccess => self.done = true,
                brotli::BrotliResult::NeedsMoreInput => {
                    room.check(out.len())?;
                    break;
                }
                brotli::BrotliResult::NeedsMoreOutput => {}
                brotli::BrotliResult::ResultFailure => {
                    return Err(corrupt("the brotli stream is corrupt"));
                }
            }
            room.check(out.len())?;
            if before == (used, out.len()) && !self.done {
                break;
            }
        }
        Ok((used, out))
    }

    fn finish(&mut self, room: Room) -> io::Result<(Vec<u8>, bool)> {
        let (_, out) = self.run(&[], room)?;
        if self.done {
            return Ok((out, true));
        }
        if room.next_chunk(out.len()).is_none() {
            return Ok((out, false));
        }
        Err(io::ErrorKind::UnexpectedEof.into())
    }
}

impl Zstd {
    fn run(&mut self, input: &[u8], room: Room) -> io::Result<(usize, Vec<u8>)> {
        let mut used = 0;
        let mut out = Vec::new();
        while let Some(chunk) = room.next_chunk(out.len()) {
            let start = out.len();
            out.resize(start + chunk, 0);
            let mut source = InBuffer::around(&input[used..]);
            let mut target = OutBuffer::around(&mut out[start..]);
            let hint = self.decoder.run(&mut source, &mut target)?;
            let (consumed, written) = (source.pos(), target.pos());
            out.truncate(start + written);
            used += consumed;
            if consumed > 0 || written > 0 {
                self.open = hint != 0;
            }
            room.check(out.len())?;
            // An output buffer left unfilled means zstd holds nothing more to write.
            if written < chunk && used == input.len() || consumed == 0 && written == 0 {
                break;
            }
        }
        Ok((used, out))
    }

    fn finish(&mut self, room: Room) -> io::Result<(Vec<u8>, bool)> {
        let (_, out) = self.run(&[], room)?;
        if room.next_chunk(out.len()).is_none() {
            return Ok((out, false));
        }
        if self.open {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok((out, true))
    }
}

fn corrupt(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}
