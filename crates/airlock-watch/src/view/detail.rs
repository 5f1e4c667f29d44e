//! The detail view (Enter): every field of one decision or pending ask, one per line,
//! long values (URL, message, process) wrapped whole rather than cut.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use super::{Palette, human_bytes};
use crate::model::{Ask, Model, Row, Shown, value_text};

/// Draws the detail of `shown` into `area`.
pub(super) fn draw(frame: &mut Frame, area: Rect, model: &Model, shown: Shown, palette: Palette) {
    let (title, fields) = match shown {
        Shown::Ask(ask) => (" waiting for an answer ", ask_fields(ask)),
        Shown::Row(row) => (" decision ", row_fields(model, row)),
    };
    let lines: Vec<Line> = fields
        .into_iter()
        .map(|(name, value)| {
            let style = match name {
                "decision" if value.starts_with("DENY") || value.starts_with("would") => {
                    palette.fg(Color::Red).add_modifier(Modifier::BOLD)
                }
                "reason" | "message" => palette.fg(Color::Red),
                _ => Style::new(),
            };
            Line::from(vec![
                Span::styled(
                    format!("{name:>10}  "),
                    Style::new().add_modifier(Modifier::BOLD),
                ),
                Span::styled(value, style),
            ])
        })
        .collect();
    let paragraph = Paragraph::new(lines)
        .block(Block::new().borders(Borders::TOP).title(title))
        .wrap(Wrap { trim: false });
    frame.render_widget(paragraph, area);
}

/// The fields of a decision (or ask event) that it has, in reading order.
fn row_fields(model: &Model, row: &Row) -> Vec<(&'static str, String)> {
    let mut fields = vec![("decision", verdict_text(row)), ("kind", row.kind.clone())];
    let mut put = |name: &'static str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            fields.push((name, value));
        }
    };
    put("time", Some(row.ts.clone()));
    if row.kind == "answered" {
        let id = row.id_text().unwrap_or_default();
        put("answer", Some(row.answer_text()));
        put("request", model.ask_event(&id).map(ask_line));
        put("ask", Some(id));
        return fields;
    }
    put("method", row.method.clone());
    put("url", row.url());
    if row.url().is_none() {
        put("host", destination(row));
        put("path", row.path.clone());
    }
    put(
        "name",
        row.name.clone().map(|n| join(n, row.qtype.as_deref())),
    );
    put("server", row.server.clone());
    put("tool", row.tool.clone());
    put("argument", row.argument.clone());
    put("rule", row.rule.clone());
    put("reason", row.reason.clone());
    put("status", row.status.map(|s| s.to_string()));
    put("secrets", Some(row.secrets.join(", ")));
    put(
        "credential",
        row.credential.clone().map(|c| join(c, row.form.as_deref())),
    );
    put(
        "form",
        row.form.clone().filter(|_| row.credential.is_none()),
    );
    put("bytes", bytes_text(row));
    put("time", row.ms.map(|ms| format!("{ms:.1} ms")));
    put(
        "count",
        row.count.map(|c| format!("{c} identical decisions")),
    );
    put("id", row.id_text());
    put("process", row.process.as_ref().map(value_text));
    put(
        "connection",
        row.conn.map(|c| join(c.to_string(), row.phase.as_deref())),
    );
    put("suggestion", row.suggestion.as_ref().map(value_text));
    put("message", row.message.clone());
    fields
}

/// The fields of a pending ask, and the keys that answer it.
fn ask_fields(ask: &Ask) -> Vec<(&'static str, String)> {
    let row = Row {
        method: Some(ask.method.clone()),
        host: Some(ask.host.clone()),
        port: ask.port,
        path: ask.path.clone(),
        ..Row::default()
    };
    let mut fields = vec![("request", ask_line(&row)), ("reason", ask.reason.clone())];
    if let Some(suggestion) = &ask.suggestion {
        fields.push(("suggestion", value_text(suggestion)));
    }
    if let Some(since) = &ask.since {
        fields.push(("since", value_text(since)));
    }
    if let Some(process) = &ask.process {
        fields.push(("process", value_text(process)));
    }
    fields.push(("id", ask.id.clone()));
    fields.push((
        "keys",
        "a allow once  r allow for the run  s save to the policy  d deny".to_owned(),
    ));
    fields
}

/// `GET files.example:443 /pkg.tar.gz`, or `CONNECT host:port` for raw TCP.
fn ask_line(row: &Row) -> String {
    let port = row.port.map_or_else(String::new, |p| format!(":{p}"));
    format!(
        "{} {}{port} {}",
        row.method.as_deref().unwrap_or(""),
        row.target(),
        row.path.as_deref().unwrap_or("")
    )
    .trim_end()
    .to_owned()
}

fn verdict_text(row: &Row) -> String {
    let mut text = match row.verdict() {
        "would" => "would deny (report mode let it through)".to_owned(),
        "ASK" => "held, asking".to_owned(),
        verdict => verdict.to_owned(),
    };
    if row.asked == Some(true) {
        text.push_str(" (asked)");
    }
    text
}

fn destination(row: &Row) -> Option<String> {
    let host = row.host.clone()?;
    Some(match row.port {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

fn bytes_text(row: &Row) -> Option<String> {
    if row.bytes_up.is_none() && row.bytes_down.is_none() {
        return None;
    }
    let show = |b: Option<u64>| {
        let b = b.unwrap_or(0);
        if b < 10_000 {
            format!("{b}")
        } else {
            format!("{b} ({})", human_bytes(b))
        }
    };
    Some(format!(
        "{} up, {} down",
        show(row.bytes_up),
        show(row.bytes_down)
    ))
}

fn join(first: String, second: Option<&str>) -> String {
    match second {
        Some(second) => format!("{first} {second}"),
        None => first,
    }
}
