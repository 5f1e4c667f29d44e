//! The view drawn into ratatui's test backend at 80×24 and smaller.

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::*;
use crate::model::Ask;

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
