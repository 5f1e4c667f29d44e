//! Draws a [`Model`] with ratatui: a title line, the pending asks pinned on top (when
//! there are any), the decisions newest first with refusals in red and their reason, and
//! a line of keys or the filter being typed. Host and path share one column and bytes,
//! time and secrets another, so that 80 columns show a typical line whole; long ones are
//! cut at the column's end.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row as TableRow, Table};

use crate::model::{Ask, Model, Row};

/// The most asks shown at once (the rest are counted).
const ASKS_SHOWN: usize = 5;

/// Draws the whole view into `frame`.
pub fn draw(frame: &mut Frame, model: &Model) {
    let asks = model.pending().len().min(ASKS_SHOWN);
    let ask_height = if asks == 0 { 0 } else { asks as u16 + 3 };
    let [title, pending, table, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(ask_height),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(title_line(model)), title);
    if asks > 0 {
        draw_pending(frame, pending, model);
    }
    draw_decisions(frame, table, model);
    frame.render_widget(Paragraph::new(footer_line(model)), footer);
}

fn title_line(model: &Model) -> Line<'static> {
    let (rows, refused) = model.counts();
    Line::from(vec![
        Span::styled(
            " airlock watch ",
            Style::new().add_modifier(Modifier::REVERSED),
        ),
        Span::raw(format!(
            " {}  {rows} decisions, {refused} refused",
            model.source
        )),
    ])
}

fn footer_line(model: &Model) -> Line<'static> {
    let (filter, typing) = model.filter();
    if typing {
        return Line::from(format!(" filter: {filter}_  (Enter keep, Esc clear)"));
    }
    let keys = if model.pending().is_empty() {
        "q quit  / filter"
    } else {
        "a allow once  r allow run  s save  d deny  ↑↓ select  / filter  q quit"
    };
    let mut spans = vec![Span::raw(format!(" {keys}"))];
    if !filter.is_empty() {
        spans.push(Span::styled(
            format!("  [{filter}]"),
            Style::new().fg(Color::Cyan),
        ));
    }
    if !model.status.is_empty() {
        spans.push(Span::styled(
            format!("  {}", model.status),
            Style::new().fg(Color::Yellow),
        ));
    }
    Line::from(spans)
}

fn draw_pending(frame: &mut Frame, area: Rect, model: &Model) {
    let total = model.pending().len();
    let first = model.selected().saturating_sub(ASKS_SHOWN - 1);
    let rows = model
        .pending()
        .iter()
        .enumerate()
        .skip(first)
        .take(ASKS_SHOWN)
        .map(|(index, ask)| ask_row(ask, index == model.selected()));
    let widths = [
        Constraint::Length(7),
        Constraint::Percentage(40),
        Constraint::Percentage(40),
        Constraint::Length(18),
    ];
    let title = format!(" {total} waiting for an answer ");
    let table = Table::new(rows, widths)
        .header(TableRow::new(["METHOD", "HOST", "PATH", "REASON"]).style(bold()))
        .block(Block::new().borders(Borders::ALL).title(title))
        .style(Style::new().fg(Color::Yellow));
    frame.render_widget(table, area);
}

fn ask_row(ask: &Ask, selected: bool) -> TableRow<'static> {
    let style = if selected {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new()
    };
    TableRow::new([
        ask.method.clone(),
        ask.host.clone(),
        ask.path.clone().unwrap_or_default(),
        ask.reason.clone(),
    ])
    .style(style)
}

fn draw_decisions(frame: &mut Frame, area: Rect, model: &Model) {
    let visible = model.visible();
    let room = usize::from(area.height.saturating_sub(2));
    let rows = visible.iter().rev().take(room).map(|row| decision_row(row));
    let widths = [
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(7),
        Constraint::Fill(3),
        Constraint::Length(3),
        Constraint::Fill(2),
    ];
    let header = [
        "TIME",
        "",
        "METHOD",
        "HOST/PATH",
        "ST",
        "BYTES MS SECRETS | REASON",
    ];
    let table = Table::new(rows, widths)
        .header(TableRow::new(header).style(bold()))
        .block(Block::new().borders(Borders::TOP).title(" decisions "));
    frame.render_widget(table, area);
}

fn decision_row(row: &Row) -> TableRow<'static> {
    let verdict = match (row.decision.as_str(), row.would.is_some()) {
        (_, true) => "would",
        ("deny", _) => "DENY",
        _ => "allow",
    };
    let method = row.method.clone().unwrap_or_else(|| row.kind.clone());
    let detail = match &row.reason {
        Some(reason) if row.refused() => reason.clone(),
        _ => traffic(row),
    };
    let cells = [
        row.clock().to_owned(),
        verdict.to_owned(),
        method,
        format!("{}{}", row.target(), row.detail()),
        row.status.map(|s| s.to_string()).unwrap_or_default(),
        detail,
    ];
    let style = if row.refused() {
        Style::new().fg(Color::Red)
    } else {
        Style::new()
    };
    TableRow::new(cells).style(style)
}

/// `50K 41ms PYPI_TOKEN`: bytes both ways, time, secrets swapped.
fn traffic(row: &Row) -> String {
    let bytes = human_bytes(row.bytes_up.unwrap_or(0) + row.bytes_down.unwrap_or(0));
    let ms = row.ms.map(|ms| format!("{ms:.0}ms")).unwrap_or_default();
    let parts = [bytes, ms, row.secrets.join(",")];
    let parts: Vec<&str> = parts
        .iter()
        .map(String::as_str)
        .filter(|p| !p.is_empty())
        .collect();
    parts.join(" ")
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// `512`, `12K`, `3.4M`: at most six characters.
fn human_bytes(bytes: u64) -> String {
    match bytes {
        0 => String::new(),
        b if b < 10_000 => b.to_string(),
        b if b < 10_000_000 => format!("{}K", b / 1024),
        b => format!("{:.1}M", b as f64 / (1024.0 * 1024.0)),
    }
}

#[cfg(test)]
mod tests;
