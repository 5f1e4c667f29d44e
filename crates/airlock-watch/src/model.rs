//! What the view shows, without I/O: the recent decisions (audit lines from the admin
//! API's event stream, the backlog first), the asks waiting for an answer, the cursor, the
//! detail view, the filter being typed, and what each key does. The terminal loop
//! ([`crate::app`]) feeds it lines, pending lists and keys; [`crate::view`] draws it.
//!
//! The cursor moves over one list: the asks (oldest first), then the decisions (newest
//! first). Answer keys always act on the selected ask; Enter opens the detail of what the
//! cursor is on.

mod row;

use std::collections::VecDeque;

pub use airlock_policy::ask::Scope;
pub use row::{Ask, Row, value_text};

/// The most decisions kept (older ones scroll away).
pub const MAX_ROWS: usize = 5000;
/// The most characters a filter may have.
const MAX_FILTER: usize = 200;

/// A key the view reacts to (the terminal loop maps real key events to these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
}

/// What a key asks the terminal loop to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond redrawing.
    None,
    /// Leave.
    Quit,
    /// Answer an ask: `POST /v1/pending/{id}`.
    Answer {
        /// The ask.
        id: String,
        /// `true` to allow, `false` to deny.
        allow: bool,
        /// How long an allow holds (a deny is always once).
        scope: Scope,
    },
}

/// What the detail view shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shown<'a> {
    /// A pending ask.
    Ask(&'a Ask),
    /// A decision (or ask event).
    Row(&'a Row),
}

/// The whole state of the view.
#[derive(Debug, Default)]
pub struct Model {
    rows: VecDeque<(u64, Row)>,
    next_seq: u64,
    pending: Vec<Ask>,
    selected: usize,
    /// The decision the cursor is on (its sequence number); `None`: on the asks.
    cursor: Option<u64>,
    detail: bool,
    filter: String,
    typing: bool,
    /// One line of news for the status bar (an answer sent, an error), shown whole.
    pub status: String,
    /// Where the view is attached.
    pub source: String,
    /// Lines that were not audit lines.
    pub skipped: u64,
    /// Whether colours are drawn (`NO_COLOR` unset).
    pub color: bool,
}

impl Model {
    /// A view attached to `source` (shown in its title), in colour.
    pub fn new(source: impl Into<String>) -> Model {
        Model {
            source: source.into(),
            color: true,
            ..Model::default()
        }
    }

    /// Takes one audit line (or ask event) from the event stream.
    pub fn push_line(&mut self, line: &str) {
        let Some(row) = Row::from_line(line) else {
            self.skipped += 1;
            return;
        };
        if self.rows.len() == MAX_ROWS
            && let Some((gone, _)) = self.rows.pop_front()
            && self.cursor == Some(gone)
        {
            self.cursor = self.rows.front().map(|(seq, _)| *seq);
        }
        self.rows.push_back((self.next_seq, row));
        self.next_seq += 1;
    }

    /// Replaces the list of pending asks (keeps the selection on the same ask if it is
    /// still there).
    pub fn set_pending(&mut self, pending: Vec<Ask>) {
        let current = self.pending.get(self.selected).map(|ask| ask.id.clone());
        self.pending = pending;
        self.selected = current
            .and_then(|id| self.pending.iter().position(|ask| ask.id == id))
            .unwrap_or(0)
            .min(self.pending.len().saturating_sub(1));
    }

    /// The asks waiting, oldest first.
    pub fn pending(&self) -> &[Ask] {
        &self.pending
    }

    /// The selected ask's index.
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// Whether the cursor is on the asks (not on a decision).
    pub fn on_asks(&self) -> bool {
        self.cursor.is_none()
    }

    /// The filter, and whether it is being typed.
    pub fn filter(&self) -> (&str, bool) {
        (&self.filter, self.typing)
    }

    /// The rows the filter lets through, oldest first.
    pub fn visible(&self) -> Vec<&Row> {
        self.visible_rows()
            .into_iter()
            .map(|(_, row)| row)
            .collect()
    }

    /// The rows the filter lets through with their sequence numbers, oldest first.
    pub fn visible_rows(&self) -> Vec<(u64, &Row)> {
        let terms = filter_terms(&self.filter);
        self.rows
            .iter()
            .filter(|(_, row)| terms.iter().all(|term| term.matches(row)))
            .map(|(seq, row)| (*seq, row))
            .collect()
    }

    /// The sequence number of the decision the cursor is on.
    pub fn cursor(&self) -> Option<u64> {
        self.cursor
    }

    /// How many decisions are held, and how many of them are refusals (ask events are
    /// not decisions).
    pub fn counts(&self) -> (usize, usize) {
        let decisions = self.rows.iter().filter(|(_, r)| !r.is_ask_event());
        let refused = decisions.clone().filter(|(_, r)| r.refused()).count();
        (decisions.count(), refused)
    }

    /// The ask event `id` opened (to name what an `answered` event answered).
    pub fn ask_event(&self, id: &str) -> Option<&Row> {
        self.rows
            .iter()
            .rev()
            .map(|(_, row)| row)
            .find(|row| row.kind == "ask" && row.id_text().as_deref() == Some(id))
    }

    /// What the detail view shows, when it is open.
    pub fn shown(&self) -> Option<Shown<'_>> {
        if !self.detail {
            return None;
        }
        match self.cursor {
            Some(seq) => self
                .rows
                .iter()
                .find(|(s, _)| *s == seq)
                .map(|(_, row)| Shown::Row(row)),
            None => self.pending.get(self.selected).map(Shown::Ask),
        }
    }

    /// Reacts to one key.
    pub fn on_key(&mut self, key: Key) -> Action {
        if self.typing {
            self.edit_filter(key);
            return Action::None;
        }
        if self.detail && matches!(key, Key::Esc | Key::Enter | Key::Backspace | Key::Char('q')) {
            self.detail = false;
            return Action::None;
        }
        match key {
            Key::Char('q') => Action::Quit,
            Key::Char('/' | 'f') => {
                self.typing = true;
                Action::None
            }
            Key::Esc => {
                self.filter.clear();
                Action::None
            }
            Key::Enter => {
                self.open_detail();
                Action::None
            }
            Key::Up | Key::Char('k') => {
                self.up();
                Action::None
            }
            Key::Down | Key::Char('j') => {
                self.down();
                Action::None
            }
            Key::Char('a') => self.answer(true, Scope::Once),
            Key::Char('r') => self.answer(true, Scope::Run),
            Key::Char('s') => self.answer(true, Scope::Save),
            Key::Char('d') => self.answer(false, Scope::Once),
            _ => Action::None,
        }
    }

    /// Opens the detail of what the cursor is on; with the cursor on no ask (none
    /// pending), of the newest decision shown.
    fn open_detail(&mut self) {
        if self.cursor.is_none() && self.pending.is_empty() {
            self.cursor = self.visible_rows().last().map(|(seq, _)| *seq);
        }
        self.detail = self.cursor.is_some() || !self.pending.is_empty();
    }

    /// Towards the top: newer decisions, then the asks.
    fn up(&mut self) {
        let Some(seq) = self.cursor else {
            self.selected = self.selected.saturating_sub(1);
            return;
        };
        let newer = self
            .visible_rows()
            .into_iter()
            .map(|(s, _)| s)
            .find(|s| *s > seq);
        self.cursor = newer;
        if newer.is_none() {
            self.selected = self.pending.len().saturating_sub(1);
            if self.detail && self.pending.is_empty() {
                self.cursor = Some(seq);
            }
        }
    }

    /// Towards the bottom: the next ask, then newer to older decisions.
    fn down(&mut self) {
        let visible = self.visible_rows();
        match self.cursor {
            None if self.selected + 1 < self.pending.len() => self.selected += 1,
            None => {
                if let Some((newest, _)) = visible.last() {
                    self.cursor = Some(*newest);
                }
            }
            Some(seq) => {
                if let Some((older, _)) = visible.iter().rev().find(|(s, _)| *s < seq) {
                    self.cursor = Some(*older);
                }
            }
        }
    }

    fn edit_filter(&mut self, key: Key) {
        match key {
            Key::Enter => self.typing = false,
            Key::Esc => {
                self.typing = false;
                self.filter.clear();
            }
            Key::Backspace => {
                self.filter.pop();
            }
            Key::Char(c) if !c.is_control() && self.filter.chars().count() < MAX_FILTER => {
                self.filter.push(c);
            }
            _ => {}
        }
    }

    fn answer(&mut self, allow: bool, scope: Scope) -> Action {
        let Some(ask) = self.pending.get(self.selected) else {
            self.status = "no request is waiting".to_owned();
            return Action::None;
        };
        Action::Answer {
            id: ask.id.clone(),
            allow,
            scope,
        }
    }
}

/// One word of the filter: `field:value` or a bare word matched against every field.
struct Term {
    field: Option<String>,
    needle: String,
}

impl Term {
    fn matches(&self, row: &Row) -> bool {
        let named = self
            .field
            .as_deref()
            .and_then(|field| row.field_matches(field, &self.needle));
        named.unwrap_or_else(|| row.haystack().contains(&self.needle))
    }
}

/// The filter's words (every one must match): `decision:deny`, `host:x`, `program:git`,
/// `kind:`, `reason:`, `method:`, `path:`, or a bare word; case-insensitive. A word
/// whose field is unknown is matched whole against every field.
fn filter_terms(filter: &str) -> Vec<Term> {
    filter
        .split_whitespace()
        .map(|word| {
            let word = word.to_lowercase();
            match word.split_once(':') {
                Some((field, needle)) if !field.is_empty() && !needle.is_empty() => {
                    let known = Row::default().field_matches(field, needle).is_some();
                    Term {
                        field: known.then(|| field.to_owned()),
                        needle: if known {
                            needle.to_owned()
                        } else {
                            word.clone()
                        },
                    }
                }
                _ => Term {
                    field: None,
                    needle: word,
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
