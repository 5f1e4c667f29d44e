//! What the view shows, without I/O: the recent decisions (audit lines from the admin
//! API's event stream), the asks waiting for an answer, the filter being typed, and what
//! each key does. The terminal loop ([`crate::app`]) feeds it lines, pending lists and
//! keys; [`crate::view`] draws it.

use std::collections::VecDeque;

pub use airlock_policy::ask::Scope;
use serde::Deserialize;

/// The most decisions kept (older ones scroll away).
pub const MAX_ROWS: usize = 5000;
/// The most characters a filter may have.
const MAX_FILTER: usize = 200;

/// One decision, as the view shows it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Row {
    /// RFC 3339 time.
    #[serde(default)]
    pub ts: String,
    /// `http`, `tcp`, `dns`, `mcp`, `ws`, `policy`.
    #[serde(default)]
    pub kind: String,
    /// `allow` or `deny`.
    #[serde(default)]
    pub decision: String,
    /// `deny` on a report-mode line that passed.
    #[serde(default)]
    pub would: Option<String>,
    /// Why it was refused.
    #[serde(default)]
    pub reason: Option<String>,
    /// HTTP method.
    #[serde(default)]
    pub method: Option<String>,
    /// Destination host (or DNS name).
    #[serde(default)]
    pub host: Option<String>,
    /// DNS name asked for.
    #[serde(default)]
    pub name: Option<String>,
    /// Canonical path.
    #[serde(default)]
    pub path: Option<String>,
    /// MCP tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// Response status.
    #[serde(default)]
    pub status: Option<u16>,
    /// Bytes sent up.
    #[serde(default)]
    pub bytes_up: Option<u64>,
    /// Bytes received.
    #[serde(default)]
    pub bytes_down: Option<u64>,
    /// Duration in milliseconds.
    #[serde(default)]
    pub ms: Option<f64>,
    /// Secrets swapped or injected.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Whether an ask went unanswered or was denied.
    #[serde(default)]
    pub asked: Option<bool>,
}

impl Row {
    /// An audit line read as a row; `None` for a line that is not a JSON object.
    pub fn from_line(line: &str) -> Option<Row> {
        serde_json::from_str(line).ok()
    }

    /// Whether the line is a refusal (or a report-mode would-be refusal).
    pub fn refused(&self) -> bool {
        self.decision == "deny" || self.would.is_some()
    }

    /// `hh:mm:ss` of its time.
    pub fn clock(&self) -> &str {
        self.ts.get(11..19).unwrap_or("")
    }

    /// The destination: host, DNS name, or nothing.
    pub fn target(&self) -> &str {
        self.host.as_deref().or(self.name.as_deref()).unwrap_or("")
    }

    /// The path, or the MCP tool, or nothing.
    pub fn detail(&self) -> String {
        match (&self.path, &self.tool) {
            (Some(path), Some(tool)) => format!("{path} {tool}"),
            (Some(path), None) => path.clone(),
            (None, Some(tool)) => tool.clone(),
            (None, None) => String::new(),
        }
    }

    /// Every text field joined, for the filter.
    fn haystack(&self) -> String {
        let parts = [
            Some(self.kind.as_str()),
            Some(self.decision.as_str()),
            self.reason.as_deref(),
            self.method.as_deref(),
            self.host.as_deref(),
            self.name.as_deref(),
            self.path.as_deref(),
            self.tool.as_deref(),
        ];
        let mut text: Vec<&str> = parts.into_iter().flatten().collect();
        text.extend(self.secrets.iter().map(String::as_str));
        text.join(" ").to_lowercase()
    }
}

/// One held request, as `GET /v1/pending` lists it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Ask {
    /// The ask's id (used to answer it).
    pub id: String,
    /// HTTP method (`CONNECT` for a tunnel).
    #[serde(default)]
    pub method: String,
    /// Destination host.
    #[serde(default)]
    pub host: String,
    /// Canonical path.
    #[serde(default)]
    pub path: Option<String>,
    /// The refusal it would get.
    #[serde(default)]
    pub reason: String,
    /// The rule that would allow it.
    #[serde(default)]
    pub suggestion: Option<serde_json::Value>,
    /// When it was first held.
    #[serde(default)]
    pub since: Option<serde_json::Value>,
}

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

/// The whole state of the view.
#[derive(Debug, Default)]
pub struct Model {
    rows: VecDeque<Row>,
    pending: Vec<Ask>,
    selected: usize,
    filter: String,
    typing: bool,
    /// One line of news for the status bar (an answer sent, an error).
    pub status: String,
    /// Where the view is attached.
    pub source: String,
    /// Lines that were not audit lines.
    pub skipped: u64,
}

impl Model {
    /// A view attached to `source` (shown in its title).
    pub fn new(source: impl Into<String>) -> Model {
        Model {
            source: source.into(),
            ..Model::default()
        }
    }

    /// Takes one audit line from the event stream.
    pub fn push_line(&mut self, line: &str) {
        let Some(row) = Row::from_line(line) else {
            self.skipped += 1;
            return;
        };
        if self.rows.len() == MAX_ROWS {
            self.rows.pop_front();
        }
        self.rows.push_back(row);
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

    /// The filter, and whether it is being typed.
    pub fn filter(&self) -> (&str, bool) {
        (&self.filter, self.typing)
    }

    /// The rows the filter lets through, newest last.
    pub fn visible(&self) -> Vec<&Row> {
        let needle = self.filter.to_lowercase();
        self.rows
            .iter()
            .filter(|row| needle.is_empty() || row.haystack().contains(&needle))
            .collect()
    }

    /// How many decisions are held, and how many of them are refusals.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.rows.len(),
            self.rows.iter().filter(|r| r.refused()).count(),
        )
    }

    /// Reacts to one key.
    pub fn on_key(&mut self, key: Key) -> Action {
        if self.typing {
            self.edit_filter(key);
            return Action::None;
        }
        match key {
            Key::Char('q') => Action::Quit,
            Key::Char('/') => {
                self.typing = true;
                Action::None
            }
            Key::Esc => {
                self.filter.clear();
                Action::None
            }
            Key::Up | Key::Char('k') => {
                self.selected = self.selected.saturating_sub(1);
                Action::None
            }
            Key::Down | Key::Char('j') => {
                self.selected = (self.selected + 1).min(self.pending.len().saturating_sub(1));
                Action::None
            }
            Key::Char('a') => self.answer(true, Scope::Once),
            Key::Char('r') => self.answer(true, Scope::Run),
            Key::Char('s') => self.answer(true, Scope::Save),
            Key::Char('d') => self.answer(false, Scope::Once),
            _ => Action::None,
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

#[cfg(test)]
mod tests;
