//! Decoding inside the inspection budget (docs/reliability.md, "Compressed bodies"): a
//! request body's content codings are undone in steps of at most [`STEP`] decoded bytes,
//! and before each step the step's output and the decoder's own memory (its state, the
//! bytes between stacked codings, the zstd or brotli window as far as it can have filled)
//! are taken from the same [`Budget`] as every byte held for inspection. A streamed step's
//! bytes stay taken until the upstream connection has written them and dropped them
//! ([`Metered::poll_step`]); a body read whole keeps its decoded bytes taken with its raw
//! ones ([`decode_whole`]). No room within the back-pressure bound: [`Stopped::Overloaded`]
//! (503 `overloaded`), as for a body read whole.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use airlock_encoding::Decoder;
use bytes::Bytes;

use crate::budget::{Budget, Held, Overloaded};

/// The most decoded bytes one step writes.
pub(crate) const STEP: usize = 64 * 1024;

/// Why a metered decoding stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// The budget had no room for the next step in time.
    Overloaded,
    /// The body does not decode within the bounds.
    Undecodable,
}

impl From<Overloaded> for Stopped {
    fn from(_: Overloaded) -> Self {
        Stopped::Overloaded
    }
}

/// A wait for budget, kept between polls.
type Taking = Pin<Box<dyn Future<Output = Result<Held, Overloaded>> + Send>>;

/// A streamed body's decoder and the budget its memory is taken from.
pub(crate) struct Metered {
    decoder: Decoder,
    budget: Budget,
    /// Covers what the decoder may hold (`Decoder::memory`).
    state: Held,
    taking: Option<Taking>,
}

/// Decoded bytes and their share of the budget, given back when the bytes are dropped.
struct Charged {
    data: Vec<u8>,
    _held: Held,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Metered {
    /// Meters `decoder` against `budget`.
    pub(crate) fn new(decoder: Decoder, budget: Budget) -> Self {
        Metered {
            decoder,
            budget,
            state: Held::default(),
            taking: None,
        }
    }

    /// The decoder, to give it input.
    pub(crate) fn decoder(&mut self) -> &mut Decoder {
        &mut self.decoder
    }

    /// Whether the body has ended and everything decoded has been taken.
    pub(crate) fn is_finished(&self) -> bool {
        self.decoder.is_finished()
    }

    /// The next step's decoded bytes (empty when the decoder needs more input), once the
    /// budget has room for them and for the decoder's memory. The bytes carry their share
    /// of the budget until dropped.
    pub(crate) fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bytes, Stopped>> {
        let (out, share) = ready!(self.poll_pull(cx))?;
        Poll::Ready(Ok(if out.is_empty() {
            Bytes::new()
        } else {
            Bytes::from_owner(Charged {
                data: out,
                _held: share,
            })
        }))
    }

    /// The next step's decoded bytes and their share of the budget.
    fn poll_pull(&mut self, cx: &mut Context<'_>) -> Poll<Result<(Vec<u8>, Held), Stopped>> {
        let holding = self.state.bytes();
        let more = (self.decoder.memory(STEP) + STEP).saturating_sub(holding);
        if more > 0 {
            let budget = &self.budget;
            let taking = self
                .taking
                .get_or_insert_with(|| Box::pin(budget.clone().take_more(holding, more)));
            let taken = ready!(taking.as_mut().poll(cx));
            self.taking = None;
            self.state.merge(taken?);
        }
        let mut out = self.decoder.pull(STEP).map_err(|_| Stopped::Undecodable)?;
        out.shrink_to_fit();
        let share = self.state.split(out.len());
        self.give_back_unused();
        Poll::Ready(Ok((out, share)))
    }

    /// Keeps only what the decoder may still hold.
    fn give_back_unused(&mut self) {
        let keep = self.decoder.memory(0);
        let spare = self.state.bytes().saturating_sub(keep);
        drop(self.state.split(spare));
    }
}

/// Decodes a body read whole (`raw`) in metered steps; the decoded bytes are added to
/// `held` (the decoder's memory is given back at the end).
pub(crate) async fn decode_whole(
    decoder: Decoder,
    raw: &[u8],
    budget: &Budget,
    held: &mut Held,
) -> Result<Vec<u8>, Stopped> {
    let mut metered = Metered::new(decoder, budget.clone());
    metered.decoder.feed(raw);
    metered.decoder.end_input();
    let mut out = Vec::new();
    while !metered.is_finished() {
        let (step, share) = std::future::poll_fn(|cx| metered.poll_pull(cx)).await?;
        if step.is_empty() && !metered.is_finished() {
            // All input given and nothing more comes out: the coded stream is cut.
            return Err(Stopped::Undecodable);
        }
        out.reserve_exact(step.len());
        out.extend_from_slice(&step);
        held.merge(share);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_encoding::{Coding, Limits};
    use std::io::Write as _;
    use std::time::Duration;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn decoder() -> Decoder {
        Decoder::new(&[Coding::Gzip], Limits::default()).unwrap()
    }

    /// Every step's bytes and the decoder's memory are taken before they exist, and
    /// given back when the bytes are dropped.
    #[tokio::test]
    async fn steps_take_their_bytes_and_give_them_back_when_dropped() {
        let text = b"metered text ".repeat(100_000);
        let budget = Budget::new(1 << 20, Duration::from_millis(50));
        let mut metered = Metered::new(decoder(), budget.clone());
        metered.decoder().feed(&gzip(&text));
        metered.decoder().end_input();
        let first = std::future::poll_fn(|cx| metered.poll_step(cx))
            .await
            .unwrap();
        assert_eq!(first.len(), STEP);
        let mut probe = Held::default();
        let free = (1 << 20) - STEP - metered.decoder.memory(0);
        budget.take(&mut probe, free).await.unwrap();
        assert!(budget.take(&mut probe, 1).await.is_err(), "more was free");
        drop(first);
        budget.take(&mut probe, STEP).await.unwrap();
        // No room for the next step: it waits, then is refused.
        let next = std::future::poll_fn(|cx| metered.poll_step(cx)).await;
        assert_eq!(next.unwrap_err(), Stopped::Overloaded);
    }

    #[tokio::test]
    async fn a_body_read_whole_keeps_only_its_decoded_bytes_taken() {
        let text = b"whole ".repeat(50_000);
        let budget = Budget::new(1 << 20, Duration::from_millis(50));
        let mut held = Held::default();
        let out = decode_whole(decoder(), &gzip(&text), &budget, &mut held)
            .await
            .unwrap();
        assert!(out == text);
        assert_eq!(held.bytes(), text.len());
        let small = Budget::new(64 * 1024, Duration::from_millis(50));
        let refused = decode_whole(decoder(), &gzip(&text), &small, &mut Held::default()).await;
        assert_eq!(refused.unwrap_err(), Stopped::Overloaded);
    }
}
