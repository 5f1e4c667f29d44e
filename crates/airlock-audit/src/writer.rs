//! The writer thread: takes the queued events in batches, folds repeated ones ([`fold`]),
//! serialises and filters each line, writes the batch at once and then acknowledges every
//! line of it ([`crate::ack`]).
//!
//! When a batch cannot be written (a full disk, a read-only file system, a rotation that
//! cannot be done) or the queue overflowed, the log is *unavailable*: nothing is written,
//! every acknowledgement fails and the proxy refuses requests (fail closed). The writer
//! then tries again every [`RETRY_INTERVAL`] (or at once on [`crate::AuditLog::retry_now`]):
//! the first line written again is a `kind: audit` line saying since when the log was
//! unavailable, for how long, how many requests were refused and how many lines were lost
//! meanwhile (docs/contract.md §5), and from then on requests are served again.
//!
//! [`fold`]: crate::fold

use std::borrow::Cow;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use crate::ack::Acker;
use crate::fold::{Folds, Pending};
use crate::output::Output;
use crate::{AuditEvent, Decision, Health, Kind, Line, Message, format_timestamp};

/// How often an unavailable log is tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(1);

/// The most messages taken into one batch, so that acknowledgements are never held back
/// long by a busy queue.
const BATCH_MESSAGES: usize = 1024;

/// The reason written on the `kind: audit` line that ends an outage.
pub const UNAVAILABLE: &str = "audit_log_unavailable";

/// The writer thread's state.
pub(crate) struct Writer {
    output: Output,
    folds: Folds,
    state: Arc<Health>,
    /// Since when lines cannot be written (`None`: they can).
    outage: Option<Instant>,
    /// When to try again during an outage.
    retry_at: Instant,
    /// The acknowledgements of the batch being assembled.
    acks: Vec<Acker>,
    /// Reused for each serialised line.
    buffer: Vec<u8>,
}

impl Writer {
    pub(crate) fn new(output: Output, state: Arc<Health>) -> Self {
        Writer {
            output,
            folds: Folds::default(),
            state,
            outage: None,
            retry_at: Instant::now(),
            acks: Vec::new(),
            buffer: Vec::with_capacity(512),
        }
    }

    /// Writes until every handle is gone, then writes what is still folded.
    pub(crate) fn run(mut self, receiver: &Receiver<Message>) {
        while let Some(first) = self.next_message(receiver) {
            let mut next = first;
            let mut taken = 0;
            while let Some(message) = next {
                self.handle(message);
                taken += 1;
                next = if taken < BATCH_MESSAGES {
                    receiver.try_recv().ok()
                } else {
                    None
                };
            }
            self.close_folds(false);
            self.end_batch();
        }
        self.close_folds(true);
        self.end_batch();
    }

    /// The next message; `Some(None)` when a fold window or a retry is due first, `None`
    /// when every handle is gone.
    fn next_message(&mut self, receiver: &Receiver<Message>) -> Option<Option<Message>> {
        let retry = self.outage.map(|_| self.retry_at);
        let deadline = match (self.folds.next_deadline(), retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(deadline) = deadline else {
            return receiver.recv().ok().map(Some);
        };
        match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(message) => Some(Some(message)),
            Err(RecvTimeoutError::Timeout) => Some(None),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    fn handle(&mut self, message: Message) {
        match message {
            Message::Event { ts, event, ack } => {
                self.close_folds(false);
                if let Some(line) = self.folds.take(ts, event, Instant::now()) {
                    self.write(&line);
                }
                // A folded event is counted in its window: taken, acknowledged with the batch.
                self.acks.extend(ack);
            }
            Message::Flush(ack) => {
                self.close_folds(true);
                self.end_batch();
                // The flusher may have stopped waiting: nothing to do then.
                let _ = ack.send(());
            }
            Message::Retry => {
                if self.outage.is_some() {
                    self.retry_at = Instant::now();
                }
            }
        }
    }

    /// Writes the summary lines of the windows that ended (every window when `all`).
    fn close_folds(&mut self, all: bool) {
        for line in self.folds.close(Instant::now(), all) {
            self.write(&line);
        }
    }

    fn write(&mut self, (ts, event, count): &Pending) {
        if self.outage.is_some() {
            self.state.lost.fetch_add(1, Ordering::SeqCst);
            return;
        }
        if let Err(err) = self.write_line(ts, event, *count) {
            self.fail(&err.to_string());
        }
    }

    /// Starts an outage (or goes on with one): the batch is lost, the next try is due in
    /// [`RETRY_INTERVAL`].
    fn fail(&mut self, why: &str) {
        let dropped = self.output.dropped();
        self.state.lost.fetch_add(dropped, Ordering::SeqCst);
        self.outage.get_or_insert_with(Instant::now);
        self.retry_at = Instant::now() + RETRY_INTERVAL;
        self.state.fail(why);
    }

    /// Writes the batch, then acknowledges its lines (all written, or none); during an
    /// outage, tries again when due.
    fn end_batch(&mut self) {
        if self.outage.is_none() {
            if !self.state.healthy.load(Ordering::SeqCst) {
                // The queue overflowed: events were lost before reaching the writer.
                self.fail("the queue overflowed");
            } else if let Err(err) = self.output.flush() {
                self.fail(&err.to_string());
            } else {
                self.note_reopened();
            }
        }
        let written = self.outage.is_none();
        for ack in self.acks.drain(..) {
            if !written {
                self.state.refuse();
            }
            ack.resolve(written);
        }
        if self.outage.is_some() && Instant::now() >= self.retry_at {
            self.try_again();
        }
    }

    /// After a batch went out: a line saying the file was reopened, if it was.
    fn note_reopened(&mut self) {
        if !self.output.take_reopened() {
            return;
        }
        let path = self.output.path().map(|p| p.display().to_string());
        let event = AuditEvent {
            kind: Kind::Audit,
            decision: Decision::Allow,
            message: Some(format!(
                "the audit log file {} was removed or replaced while open; reopened at its path",
                path.unwrap_or_default()
            )),
            ..AuditEvent::default()
        };
        let ts = format_timestamp(SystemTime::now());
        let result = self
            .write_line(&ts, &event, None)
            .and_then(|()| self.output.flush());
        if let Err(err) = result {
            self.fail(&err.to_string());
        }
    }

    /// Tries to write the line that ends the outage; on success the log is available again.
    fn try_again(&mut self) {
        let Some(started) = self.outage else {
            return;
        };
        let refused = self.state.refused.load(Ordering::SeqCst);
        let lost = self.state.lost.load(Ordering::SeqCst);
        let since = self.state.since();
        let elapsed = started.elapsed();
        let event = gap_event(&since, elapsed, refused, lost);
        let ts = format_timestamp(SystemTime::now());
        let result = self
            .write_line(&ts, &event, None)
            .and_then(|()| self.output.flush());
        match result {
            Ok(()) => {
                self.outage = None;
                self.state.refused.fetch_sub(refused, Ordering::SeqCst);
                self.state.lost.fetch_sub(lost, Ordering::SeqCst);
                self.state.recover(elapsed, refused);
                self.note_reopened();
            }
            Err(_) => {
                // The gap line itself is not an event: it is not counted as lost.
                self.output.dropped();
                self.retry_at = Instant::now() + RETRY_INTERVAL;
            }
        }
    }

    fn write_line(&mut self, ts: &str, event: &AuditEvent, count: Option<u64>) -> io::Result<()> {
        let line = Line::new(ts, event, count);
        self.buffer.clear();
        serde_json::to_writer(&mut self.buffer, &line).map_err(io::Error::other)?;
        let (filter, tap) = (self.state.filter.get(), self.state.tap.get());
        if filter.is_none() && tap.is_none() {
            return self.output.write_line(&self.buffer);
        }
        // serde_json writes UTF-8: this borrows.
        let raw = String::from_utf8_lossy(&self.buffer);
        let text = match filter {
            Some(filter) => filter(&raw),
            None => Cow::Borrowed(raw.as_ref()),
        };
        self.output.write_line(text.as_bytes())?;
        if let Some(tap) = tap {
            tap(&text);
        }
        Ok(())
    }
}

/// The `kind: audit` line that ends an outage begun at `since`.
fn gap_event(since: &str, elapsed: Duration, refused: u64, lost: u64) -> AuditEvent {
    AuditEvent {
        kind: Kind::Audit,
        decision: Decision::Deny,
        reason: Some(UNAVAILABLE),
        ms: Some(elapsed.as_secs_f64() * 1000.0),
        message: Some(format!(
            "the audit log could not be written from {since} for {:.1} s: {refused} \
             request(s) refused, {lost} line(s) lost; writing again",
            elapsed.as_secs_f64()
        )),
        refused: Some(refused),
        lost: Some(lost),
        ..AuditEvent::default()
    }
}
