//! The view drawn into ratatui's test backend at 80×24 and smaller.

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::*;
use crate::model::{Ask, Key};

fn screen(model: &Model, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test terminal");
    terminal.draw(|frame| draw(frame, model)).expect("drawn");
    let buffer = terminal.backend().buffer().clone();
    let mut text = String::new();
    for y in 0..height {
        for x in 0..width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

fn model() -> Model {
    let mut model = Model::new("unix:/run/user/1000/airlock/run-42.sock");
    model.push_line(r#"{"ts":"2026-11-26T10:00:01.5Z","kind":"http","decision":"allow","method":"GET","host":"pypi.org","path":"/simple/requests/","status":200,"bytes_down":51234,"ms":41.2,"secrets":["PYPI_TOKEN"]}"#);
    model.push_line(r#"{"ts":"2026-11-26T10:00:02.5Z","kind":"http","decision":"deny","reason":"host_not_allowed","method":"POST","host":"evil.example","path":"/upload","status":403,"secrets":[]}"#);
    model
}

#[test]
fn decisions_fit_in_80_by_24() {
    let text = screen(&model(), 80, 24);
    assert!(text.contains("airlock watch"), "{text}");
    assert!(text.contains("2 decisions, 1 refused"), "{text}");
    assert!(text.contains("pypi.org/simple/requests/"), "{text}");
    assert!(text.contains("50K 41ms PYPI_TOKEN"), "{text}");
    assert!(text.contains("DENY"), "{text}");
    assert!(text.contains("host_not_allowed"), "{text}");
    assert!(text.contains("evil.example/upload"), "{text}");
    assert!(text.contains("q quit"), "{text}");
}

#[test]
fn pending_asks_are_pinned_on_top_with_their_keys() {
    let mut model = model();
    model.set_pending(vec![Ask {
        id: "7".to_owned(),
        method: "GET".to_owned(),
        host: "files.example".to_owned(),
        path: Some("/pkg.tar.gz".to_owned()),
        reason: "host_not_allowed".to_owned(),
        ..Ask::default()
    }]);
    let text = screen(&model, 80, 24);
    let ask_line = text
        .lines()
        .position(|l| l.contains("files.example"))
        .expect("ask shown");
    let row_line = text
        .lines()
        .position(|l| l.contains("pypi.org"))
        .expect("row shown");
    assert!(ask_line < row_line, "{text}");
    assert!(text.contains("1 waiting"), "{text}");
    assert!(text.contains("a allow once"), "{text}");
}

#[test]
fn tiny_terminals_do_not_panic() {
    let model = model();
    for (width, height) in [(1, 1), (20, 5), (40, 10), (200, 60)] {
        screen(&model, width, height);
    }
}

#[test]
fn byte_counts_stay_short() {
    assert_eq!(human_bytes(0), "");
    assert_eq!(human_bytes(9_999), "9999");
    assert_eq!(human_bytes(51_234), "50K");
    assert_eq!(human_bytes(123_456_789), "117.7M");
}

#[test]
fn answered_asks_read_whole_and_long_cells_end_in_an_ellipsis() {
    let mut model = Model::new("unix:/run/x.sock");
    model.push_line(r#"{"ts":"2026-11-26T10:00:03Z","kind":"ask","id":"3","method":"GET","host":"new.example","port":443,"path":"/x","reason":"host_not_allowed"}"#);
    model.push_line(
        r#"{"kind":"answered","id":"3","decision":"allow","scope":"once","timeout":false}"#,
    );
    let long = format!("/{}", "segment/".repeat(20));
    model.push_line(&format!(r#"{{"ts":"2026-11-26T10:00:04Z","kind":"http","decision":"deny","reason":"path_not_allowed","method":"GET","host":"a.example","path":"{long}","status":403}}"#));
    let text = screen(&model, 80, 24);
    assert!(text.contains("answer"), "{text}");
    assert!(text.contains("allow once"), "{text}");
    assert!(text.contains("new.example/x"), "{text}");
    assert!(!text.contains("answere "), "{text}");
    assert!(text.contains("a.example/segment/segment/"), "{text}");
    assert!(text.contains('…'), "{text}");
    assert!(text.contains("1 decisions, 1 refused"), "{text}");
}

#[test]
fn an_error_is_shown_whole_and_the_detail_wraps() {
    let mut model = model();
    model.status = format!(
        "admin API: 409 Conflict: {{\"error\":\"policy.yaml: cannot edit: the file is written in flow style {}end\"}}",
        "x".repeat(40)
    );
    let text = screen(&model, 80, 24);
    let joined: String = text.lines().map(str::trim_end).collect();
    assert!(joined.contains("409 Conflict"), "{text}");
    assert!(joined.contains("end\"}"), "{text}");

    let mut model = Model::new("x");
    model.push_line(r#"{"ts":"2026-11-26T10:00:04.5Z","kind":"http","decision":"deny","rule":"network.deny[0]","reason":"denied_by_rule","method":"POST","scheme":"https","host":"api.example","port":8443,"path":"/v1/upload/a/very/long/path/that/goes/on/and/on/beyond/eighty/columns/of/text","query":"token=REDACTED","status":403,"secrets":[],"id":"d-9","process":{"pid":7,"exe":"/usr/bin/curl"}}"#);
    model.on_key(Key::Enter);
    let text = screen(&model, 80, 24);
    let joined: String = text.lines().map(str::trim).collect();
    assert!(
        joined.contains("https://api.example:8443/v1/upload/"),
        "{text}"
    );
    assert!(joined.contains("columns/of/text?token=REDACTED"), "{text}");
    for expected in [
        "network.deny[0]",
        "denied_by_rule",
        "d-9",
        "exe=/usr/bin/curl",
        "403",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
}

#[test]
fn wide_terminals_show_the_program_and_no_color_draws_no_colour() {
    let mut model = model();
    model.push_line(r#"{"ts":"2026-11-26T10:00:05Z","kind":"http","decision":"allow","method":"GET","host":"github.com","path":"/x","status":200,"process":{"exe":"/usr/bin/git"}}"#);
    let text = screen(&model, 140, 30);
    assert!(text.contains("PROGRAM"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("git") && l.contains("github.com/x")),
        "{text}"
    );
    assert!(!screen(&model, 80, 24).contains("PROGRAM"));

    let coloured = |model: &Model| {
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        terminal.draw(|frame| draw(frame, model)).expect("drawn");
        let buffer = terminal.backend().buffer().clone();
        buffer
            .content()
            .iter()
            .any(|cell| cell.fg != ratatui::style::Color::Reset)
    };
    assert!(coloured(&model));
    model.color = false;
    assert!(!coloured(&model));
}

#[test]
fn the_ellipsis_keeps_the_width() {
    assert_eq!(ellipsis("abcdef", 6), "abcdef");
    assert_eq!(ellipsis("abcdefg", 6), "abcde…");
    assert_eq!(ellipsis("abc", 0), "");
}
