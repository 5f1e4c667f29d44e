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
//! Every line is sealed with its `"chain"` ([`crate::chain`]) after the filter; the chain
//! head moves with the lines of the batch and goes back to the last batch written when a
//! batch is lost. With a key ([`crate::checkpoint::Signing`]) the writer adds a signed
//! checkpoint every N lines or T seconds, at the top of each file a rotation starts and
//! when the log is closed ([`crate::checkpoint`]).
//!
//! [`fold`]: crate::fold

use std::borrow::Cow;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use crate::ack::Acker;
use crate::chain::{Head, SUFFIX_LEN};
use crate::checkpoint::{self, Signing};
use crate::fold::{Folds, Pending};
use crate::ocsf::Format;
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
    /// Reused for each sealed line.
    sealed: Vec<u8>,
    /// The chain's head after the last line added to the batch.
    head: Head,
    /// The chain's head after the last batch written.
    committed: Head,
    /// The checkpoint key, if checkpoints are written.
    signing: Option<Signing>,
    /// Since when lines are waiting for a checkpoint.
    unsigned_since: Option<Instant>,
    /// Whether this writer wrote any line (a closed log ends with a checkpoint then).
    wrote: bool,
    /// When lines not exported were last noted ([`crate::otlp`]).
    noted_at: Option<Instant>,
}

impl Writer {
    pub(crate) fn new(mut output: Output, state: Arc<Health>) -> Self {
        let head = output.take_resume();
        let signing = output.take_signing();
        Writer {
            output,
            folds: Folds::default(),
            state,
            outage: None,
            retry_at: Instant::now(),
            acks: Vec::new(),
            buffer: Vec::with_capacity(512),
            sealed: Vec::with_capacity(600),
            head,
            committed: head,
            signing,
            unsigned_since: None,
            wrote: false,
            noted_at: None,
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
        self.note_export_drops(true);
        self.close_chain();
    }

    /// The next message; `Some(None)` when a fold window or a retry is due first, `None`
    /// when every handle is gone.
    fn next_message(&mut self, receiver: &Receiver<Message>) -> Option<Option<Message>> {
        let retry = self.outage.map(|_| self.retry_at);
        let deadline = [self.folds.next_deadline(), retry, self.checkpoint_due()]
            .into_iter()
            .flatten()
            .min();
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
        let dropped = self.drop_batch();
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
            } else if let Err(err) = self.sign_if_due().and_then(|()| self.flush()) {
                self.fail(&err.to_string());
            } else {
                self.note_reopened();
                self.note_export_drops(false);
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
            .and_then(|()| self.flush());
        if let Err(err) = result {
            self.fail(&err.to_string());
        }
    }

    /// After a batch went out: a line saying how many lines were not exported
    /// (`--audit-otlp`), at most once per [`crate::otlp::NOTE_INTERVAL`] (at once when
    /// `closing`).
    fn note_export_drops(&mut self, closing: bool) {
        let Some(export) = self.output.export() else {
            return;
        };
        let interval = crate::otlp::NOTE_INTERVAL;
        if self.outage.is_some()
            || (!closing && self.noted_at.is_some_and(|at| at.elapsed() < interval))
        {
            return;
        }
        let dropped = export.take_unnoted();
        if dropped == 0 {
            return;
        }
        self.noted_at = Some(Instant::now());
        let ts = format_timestamp(SystemTime::now());
        let event = crate::otlp::dropped_event(dropped);
        if let Err(err) = self
            .write_line(&ts, &event, None)
            .and_then(|()| self.flush())
        {
            if let Some(export) = self.output.export() {
                export.restore_unnoted(dropped);
            }
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
            .and_then(|()| self.flush());
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
                self.drop_batch();
                self.retry_at = Instant::now() + RETRY_INTERVAL;
            }
        }
    }

    fn write_line(&mut self, ts: &str, event: &AuditEvent, count: Option<u64>) -> io::Result<()> {
        let line = Line::new(ts, event, count);
        self.buffer.clear();
        serde_json::to_writer(&mut self.buffer, &line).map_err(io::Error::other)?;
        let (filter, tap) = (
            self.state.filter.get().cloned(),
            self.state.tap.get().cloned(),
        );
        let content = std::mem::take(&mut self.buffer);
        let result = match (filter, tap) {
            (None, None) if self.output.format() == Format::Airlock => self.append(&content, false),
            (filter, tap) => {
                // serde_json writes UTF-8: this borrows.
                let raw = String::from_utf8_lossy(&content);
                let text = match filter {
                    Some(filter) => filter(&raw),
                    None => Cow::Borrowed(raw.as_ref()),
                };
                let result = match self.output.format() {
                    Format::Airlock => self.append(text.as_bytes(), false),
                    Format::Ocsf => ocsf_line(&text).and_then(|line| self.append(&line, false)),
                };
                if let (Ok(()), Some(tap)) = (&result, tap) {
                    tap(&crate::Written {
                        text: &text,
                        event,
                        count,
                    });
                }
                result
            }
        };
        self.buffer = content;
        result
    }

    /// Seals `content` (a JSON object) with its chain and adds it to the batch: rotating
    /// first when due, and adding a checkpoint after it when `N` lines are unsigned.
    fn append(&mut self, content: &[u8], checkpoint: bool) -> io::Result<()> {
        if self.output.rotation_due(content.len() + SUFFIX_LEN) {
            self.rotate()?;
        }
        self.sealed.clear();
        self.head.seal(content, checkpoint, &mut self.sealed);
        self.output.write_line(&self.sealed)?;
        self.wrote = true;
        if checkpoint {
            self.unsigned_since = None;
            return Ok(());
        }
        self.unsigned_since.get_or_insert_with(Instant::now);
        match &self.signing {
            Some(signing) if self.head.unsigned >= signing.every.lines => self.checkpoint(false),
            _ => Ok(()),
        }
    }

    /// Writes the batch, then starts a new file; with a key, the new file starts with a
    /// checkpoint of the chain so far (the end of the file before).
    fn rotate(&mut self) -> io::Result<()> {
        self.flush()?;
        self.output.rotate()?;
        if self.signing.is_some() {
            self.checkpoint(false)?;
            self.output.mark_floor();
        }
        Ok(())
    }

    /// Adds a checkpoint of the chain's head to the batch (none without a key).
    fn checkpoint(&mut self, close: bool) -> io::Result<()> {
        let Some(signing) = &self.signing else {
            return Ok(());
        };
        let ts = format_timestamp(SystemTime::now());
        let head = crate::chain::to_hex(&self.head.value);
        let content = checkpoint::content(&signing.signer, &ts, &head, self.head.unsigned, close);
        self.append(&content, true)
    }

    /// When the interval of unsigned lines ends (`None`: no key, or none waiting).
    fn checkpoint_due(&self) -> Option<Instant> {
        let signing = self.signing.as_ref()?;
        let since = self.unsigned_since.filter(|_| self.outage.is_none())?;
        Some(since + signing.every.interval)
    }

    /// Adds a checkpoint when lines waited for one longer than the interval.
    fn sign_if_due(&mut self) -> io::Result<()> {
        match self.checkpoint_due() {
            Some(due) if Instant::now() >= due => self.checkpoint(false),
            _ => Ok(()),
        }
    }

    /// At close: a last checkpoint, when this writer wrote anything and can write.
    fn close_chain(&mut self) {
        if self.signing.is_none() || !self.wrote || self.outage.is_some() {
            return;
        }
        if self.checkpoint(true).and_then(|()| self.flush()).is_err() {
            self.drop_batch();
        }
    }

    /// Writes the batch; the chain's head written so far is then the committed one.
    fn flush(&mut self) -> io::Result<()> {
        self.output.flush()?;
        self.committed = self.head;
        Ok(())
    }

    /// Drops the batch that could not be written (its lines leave the chain); returns how
    /// many lines it had.
    fn drop_batch(&mut self) -> u64 {
        self.head = self.committed;
        self.output.dropped()
    }
}

/// The OCSF event of one of airlock's lines ([`crate::ocsf`]).
fn ocsf_line(text: &str) -> io::Result<Vec<u8>> {
    let line: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(io::Error::other)?;
    serde_json::to_vec(&crate::ocsf::event(&line)).map_err(io::Error::other)
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
