//! The view's state: lines in, keys in, actions out.

use super::*;

const ALLOWED: &str = r#"{"ts":"2026-11-26T10:00:01.5Z","kind":"http","decision":"allow","rule":"network.allow[0]","method":"GET","host":"pypi.org","port":443,"path":"/simple/","status":200,"bytes_up":0,"bytes_down":5123,"ms":41.2,"secrets":["PYPI"]}"#;
const REFUSED: &str = r#"{"ts":"2026-11-26T10:00:02.5Z","kind":"http","decision":"deny","rule":null,"reason":"host_not_allowed","method":"POST","host":"evil.example","port":443,"path":"/x","status":403,"secrets":[]}"#;

fn ask(id: &str) -> Ask {
    Ask {
        id: id.to_owned(),
        method: "GET".to_owned(),
        host: format!("{id}.example"),
        reason: "host_not_allowed".to_owned(),
        ..Ask::default()
    }
}

#[test]
fn audit_lines_become_rows_and_refusals_are_marked() {
    let mut model = Model::new("unix:/run/x");
    model.push_line(ALLOWED);
    model.push_line(REFUSED);
    model.push_line("not json");
    assert_eq!(model.counts(), (2, 1));
    assert_eq!(model.skipped, 1);
    let rows = model.visible();
    assert_eq!(rows[0].clock(), "10:00:01");
    assert_eq!(rows[0].target(), "pypi.org");
    assert!(!rows[0].refused());
    assert!(rows[1].refused());
    assert_eq!(rows[1].reason.as_deref(), Some("host_not_allowed"));
}

#[test]
fn report_mode_lines_count_as_refusals() {
    let mut model = Model::new("x");
    model.push_line(
        r#"{"ts":"t","kind":"http","decision":"allow","would":"deny","reason":"path_not_allowed"}"#,
    );
    assert_eq!(model.counts(), (1, 1));
}

#[test]
fn rows_are_bounded() {
    let mut model = Model::new("x");
    for _ in 0..MAX_ROWS + 10 {
        model.push_line(ALLOWED);
    }
    assert_eq!(model.counts().0, MAX_ROWS);
}

#[test]
fn the_filter_is_typed_after_a_slash_and_matches_any_field() {
    let mut model = Model::new("x");
    model.push_line(ALLOWED);
    model.push_line(REFUSED);
    assert_eq!(model.on_key(Key::Char('/')), Action::None);
    for c in "EVIL".chars() {
        // While typing, letters are filter text, not commands: 'q' does not quit.
        assert_eq!(model.on_key(Key::Char(c)), Action::None);
    }
    assert_eq!(model.filter(), ("EVIL", true));
    assert_eq!(model.visible().len(), 1);
    model.on_key(Key::Enter);
    assert_eq!(model.filter(), ("EVIL", false));
    model.on_key(Key::Char('/'));
    model.on_key(Key::Backspace);
    model.on_key(Key::Char('q'));
    assert_eq!(model.filter(), ("EVIq", true));
    model.on_key(Key::Esc);
    assert_eq!(model.filter(), ("", false));
    assert_eq!(model.visible().len(), 2);
}

#[test]
fn keys_answer_the_selected_ask() {
    let mut model = Model::new("x");
    assert_eq!(model.on_key(Key::Char('a')), Action::None);
    assert_eq!(model.status, "no request is waiting");
    model.set_pending(vec![ask("one"), ask("two")]);
    let expect = |id: &str, allow, scope| Action::Answer {
        id: id.to_owned(),
        allow,
        scope,
    };
    assert_eq!(
        model.on_key(Key::Char('a')),
        expect("one", true, Scope::Once)
    );
    model.on_key(Key::Down);
    model.on_key(Key::Down);
    assert_eq!(
        model.on_key(Key::Char('r')),
        expect("two", true, Scope::Run)
    );
    assert_eq!(
        model.on_key(Key::Char('s')),
        expect("two", true, Scope::Save)
    );
    model.on_key(Key::Up);
    assert_eq!(
        model.on_key(Key::Char('d')),
        expect("one", false, Scope::Once)
    );
    assert_eq!(model.on_key(Key::Char('q')), Action::Quit);
}

#[test]
fn the_selection_follows_its_ask_when_the_list_changes() {
    let mut model = Model::new("x");
    model.set_pending(vec![ask("one"), ask("two"), ask("three")]);
    model.on_key(Key::Down);
    model.on_key(Key::Down);
    model.set_pending(vec![ask("zero"), ask("one"), ask("three")]);
    assert_eq!(model.pending()[model.selected()].id, "three");
    model.set_pending(vec![ask("zero")]);
    assert_eq!(model.selected(), 0);
    model.set_pending(Vec::new());
    assert_eq!(model.selected(), 0);
}
