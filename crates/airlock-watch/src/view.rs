//! Draws a [`Model`] with ratatui: a title line, the pending asks pinned on top (when
//! there are any), the decisions newest first with refusals in red and their reason (or
//! the detail of one, [`detail`]), the last answer or error wrapped whole, and a line of
//! keys or the filter being typed. Host and path share one column and bytes, time and
//! secrets another, so that 80 columns show a typical line whole; a longer cell ends in
//! `…`. From 120 columns a PROGRAM column shows which program made the request. Without
//! colour (`NO_COLOR`) only reverse video and bold mark things.

mod detail;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row as TableRow, Table, Wrap};

use crate::model::{Ask, Model, Row};

/// The most asks shown at once (the rest are counted).
const ASKS_SHOWN: usize = 5;
/// From this width on, a PROGRAM column is shown.
const WIDE: u16 = 120;
/// The most lines the status (an answer, an error) takes.
const STATUS_LINES: u16 = 3;

/// Colours, or none (`NO_COLOR`).
#[derive(Clone, Copy)]
struct Palette {
    color: bool,
}

impl Palette {
    fn fg(self, color: Color) -> Style {
        if self.color {
            Style::new().fg(color)
        } else {
            Style::new()
        }
    }
}

/// Draws the whole view into `frame`.
pub fn draw(frame: &mut Frame, model: &Model) {
    let palette = Palette { color: model.color };
    let area = frame.area();
    let asks = model.pending().len().min(ASKS_SHOWN);
    let ask_height = if asks == 0 { 0 } else { asks as u16 + 3 };
    let status_height = status_lines(&model.status, area.width);
    let [title, pending, body, status, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(ask_height),
        Constraint::Min(3),
        Constraint::Length(status_height),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(title_line(model)), title);
    if asks > 0 {
        draw_pending(frame, pending, model, palette);
    }
    match model.shown() {
        Some(shown) => detail::draw(frame, body, model, shown, palette),
        None => draw_decisions(frame, body, model, palette),
    }
    if status_height > 0 {
        let text = Paragraph::new(format!(" {}", model.status))
            .style(palette.fg(Color::Yellow))
            .wrap(Wrap { trim: false });
        frame.render_widget(text, status);
    }
    frame.render_widget(Paragraph::new(footer_line(model, palette)), footer);
}

/// The lines the status needs when wrapped at `width` (at most [`STATUS_LINES`]).
fn status_lines(status: &str, width: u16) -> u16 {
    if status.is_empty() || width == 0 {
        return 0;
    }
    let chars = status.chars().count() + 1;
    let lines = chars.div_ceil(usize::from(width));
    u16::try_from(lines).unwrap_or(u16::MAX).min(STATUS_LINES)
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

fn footer_line(model: &Model, palette: Palette) -> Line<'static> {
    let (filter, typing) = model.filter();
    if typing {
        return Line::from(format!(
            " filter: {filter}_  (decision: host: program: or any word; Enter keep, Esc clear)"
        ));
    }
    let keys = if model.shown().is_some() {
        "Esc back  ↑↓ previous/next  q back"
    } else if model.pending().is_empty() {
        "↑↓ select  Enter detail  / filter  q quit"
    } else {
        "a allow once  r allow run  s save  d deny  ↑↓ select  Enter detail  / filter  q quit"
    };
    let mut spans = vec![Span::raw(format!(" {keys}"))];
    if !filter.is_empty() {
        spans.push(Span::styled(
            format!("  [{filter}]"),
            palette.fg(Color::Cyan).add_modifier(Modifier::BOLD),
        ));
    }
    Line::from(spans)
}

fn draw_pending(frame: &mut Frame, area: Rect, model: &Model, palette: Palette) {
    let total = model.pending().len();
    let first = model.selected().saturating_sub(ASKS_SHOWN - 1);
    let wide = area.width >= WIDE;
    let mut widths = vec![
        Constraint::Length(7),
        Constraint::Percentage(35),
        Constraint::Percentage(40),
        Constraint::Length(18),
    ];
    if wide {
        widths.push(Constraint::Length(12));
    }
    let inner = Rect {
        width: area.width.saturating_sub(2),
        ..area
    };
    let fit = column_widths(inner, &widths);
    let rows = model
        .pending()
        .iter()
        .enumerate()
        .skip(first)
        .take(ASKS_SHOWN)
        .map(|(index, ask)| {
            let selected = index == model.selected() && model.on_asks();
            ask_row(ask, selected, wide, &fit)
        });
    let mut header = vec!["METHOD", "HOST", "PATH", "REASON"];
    if wide {
        header.push("PROGRAM");
    }
    let title = format!(" {total} waiting for an answer ");
    let table = Table::new(rows, widths)
        .header(TableRow::new(header).style(bold()))
        .block(Block::new().borders(Borders::ALL).title(title))
        .style(palette.fg(Color::Yellow));
    frame.render_widget(table, area);
}

fn ask_row(ask: &Ask, selected: bool, wide: bool, fit: &[usize]) -> TableRow<'static> {
    let style = if selected {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new()
    };
    let host = match ask.port {
        Some(port) if ask.path.is_none() => format!("{}:{port}", ask.host),
        _ => ask.host.clone(),
    };
    let mut cells = vec![
        ask.method.clone(),
        host,
        ask.path.clone().unwrap_or_default(),
        ask.reason.clone(),
    ];
    if wide {
        let row = Row {
            process: ask.process.clone(),
            ..Row::default()
        };
        cells.push(row.program());
    }
    TableRow::new(fitted(cells, fit)).style(style)
}

fn draw_decisions(frame: &mut Frame, area: Rect, model: &Model, palette: Palette) {
    let visible = model.visible_rows();
    let room = usize::from(area.height.saturating_sub(2));
    // Newest first; scrolled so that the cursor's row is on screen.
    let position = model
        .cursor()
        .and_then(|seq| visible.iter().rev().position(|(s, _)| *s == seq));
    let skip = position.map_or(0, |p| (p + 1).saturating_sub(room));
    let wide = area.width >= WIDE;
    let widths = decision_widths(wide);
    let fit = column_widths(area, &widths);
    let rows = visible
        .iter()
        .rev()
        .skip(skip)
        .take(room)
        .map(|(seq, row)| {
            let selected = model.cursor() == Some(*seq);
            decision_row(model, row, selected, wide, &fit, palette)
        });
    let mut header = vec!["TIME", "", "METHOD"];
    if wide {
        header.push("PROGRAM");
    }
    header.extend(["HOST/PATH", "ST", "BYTES MS SECRETS | REASON"]);
    let title = if model.filter().0.is_empty() {
        " decisions ".to_owned()
    } else {
        format!(" decisions: {} shown ", visible.len())
    };
    let table = Table::new(rows, widths)
        .header(TableRow::new(header).style(bold()))
        .block(Block::new().borders(Borders::TOP).title(title));
    frame.render_widget(table, area);
}

fn decision_widths(wide: bool) -> Vec<Constraint> {
    let mut widths = vec![
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(7),
    ];
    if wide {
        widths.push(Constraint::Length(12));
    }
    widths.extend([
        Constraint::Fill(3),
        Constraint::Length(3),
        Constraint::Fill(2),
    ]);
    widths
}

/// The widths ratatui's table gives `widths` in `area` (one space between columns).
fn column_widths(area: Rect, widths: &[Constraint]) -> Vec<usize> {
    let line = Rect {
        height: 1,
        x: 0,
        y: 0,
        ..area
    };
    Layout::horizontal(widths.iter().copied())
        .spacing(1)
        .split(line)
        .iter()
        .map(|rect| usize::from(rect.width))
        .collect()
}

/// Each cell cut to its column's width, ending in `…` when cut.
fn fitted(cells: Vec<String>, widths: &[usize]) -> Vec<String> {
    cells
        .into_iter()
        .enumerate()
        .map(|(index, cell)| ellipsis(&cell, widths.get(index).copied().unwrap_or(0)))
        .collect()
}

/// `text` in at most `width` characters: cut, with `…` as its last one.
pub(crate) fn ellipsis(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut cut: String = text.chars().take(width - 1).collect();
    cut.push('…');
    cut
}

fn decision_row(
    model: &Model,
    row: &Row,
    selected: bool,
    wide: bool,
    fit: &[usize],
    palette: Palette,
) -> TableRow<'static> {
    let (method, target, detail) = match row.kind.as_str() {
        "answered" => {
            let id = row.id_text().unwrap_or_default();
            let target = model
                .ask_event(&id)
                .map_or_else(|| format!("ask {id}"), ask_target);
            ("answer".to_owned(), target, row.answer_text())
        }
        "ask" => (
            row.method.clone().unwrap_or_default(),
            ask_target(row),
            row.reason.clone().unwrap_or_default(),
        ),
        _ => {
            let detail = match &row.reason {
                Some(reason) if row.refused() => reason.clone(),
                _ => traffic(row),
            };
            let method = row.method.clone().unwrap_or_else(|| row.kind.clone());
            (method, format!("{}{}", row.target(), row.detail()), detail)
        }
    };
    let mut cells = vec![row.clock().to_owned(), row.verdict().to_owned(), method];
    if wide {
        cells.push(row.program());
    }
    cells.extend([
        target,
        row.status.map(|s| s.to_string()).unwrap_or_default(),
        detail,
    ]);
    let mut style = match row.kind.as_str() {
        "ask" | "answered" => palette.fg(Color::Yellow),
        _ if row.refused() => palette.fg(Color::Red),
        _ => Style::new(),
    };
    if selected {
        style = style.add_modifier(Modifier::REVERSED);
    }
    TableRow::new(fitted(cells, fit)).style(style)
}

/// `host/path` of an ask, `host:port` for raw TCP.
fn ask_target(row: &Row) -> String {
    match (&row.path, row.port) {
        (Some(path), _) => format!("{}{path}", row.target()),
        (None, Some(port)) => format!("{}:{port}", row.target()),
        (None, None) => row.target().to_owned(),
    }
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
