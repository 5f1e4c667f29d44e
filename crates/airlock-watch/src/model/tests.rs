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

const ASK_EVENT: &str = r#"{"kind":"ask","id":"3","method":"GET","host":"new.example","port":443,"path":"/x","reason":"host_not_allowed","suggestion":"GET new.example/x","since":"2026-11-26T10:00:03Z"}"#;
const ANSWERED: &str =
    r#"{"kind":"answered","id":"3","decision":"allow","scope":"once","timeout":false}"#;
const WITH_PROCESS: &str = r#"{"ts":"2026-11-26T10:00:04.5Z","kind":"http","decision":"allow","rule":"network.allow[1]","method":"GET","scheme":"https","host":"github.com","port":443,"path":"/acme/app.git/info/refs","query":"service=REDACTED","status":200,"bytes_up":10,"bytes_down":20000,"ms":12.5,"secrets":["GH_TOKEN"],"id":"d-17","process":{"pid":42,"exe":"/usr/bin/git","argv0":"git"}}"#;

#[test]
fn ask_events_are_not_decisions_and_answers_read_as_such() {
    let mut model = Model::new("x");
    model.push_line(ASK_EVENT);
    model.push_line(ANSWERED);
    model.push_line(REFUSED);
    assert_eq!(model.counts(), (1, 1));
    let rows = model.visible();
    assert_eq!(rows[0].verdict(), "ASK");
    assert_eq!(rows[1].verdict(), "allow");
    assert_eq!(rows[1].answer_text(), "allow once");
    assert_eq!(
        model.ask_event("3").and_then(|r| r.path.clone()),
        Some("/x".into())
    );
    let timed_out = Row::from_line(
        r#"{"kind":"answered","id":"4","decision":"deny","scope":null,"timeout":true}"#,
    )
    .expect("row");
    assert_eq!(timed_out.answer_text(), "timed out");
    assert!(!timed_out.refused());
}

#[test]
fn the_filter_names_decision_host_and_program() {
    let mut model = Model::new("x");
    model.push_line(ALLOWED);
    model.push_line(REFUSED);
    model.push_line(WITH_PROCESS);
    let shown = |model: &mut Model, filter: &str| {
        model.on_key(Key::Char('f'));
        for c in filter.chars() {
            model.on_key(Key::Char(c));
        }
        model.on_key(Key::Enter);
        let hosts: Vec<String> = model
            .visible()
            .iter()
            .map(|r| r.target().to_owned())
            .collect();
        model.on_key(Key::Esc);
        hosts
    };
    assert_eq!(shown(&mut model, "decision:deny"), ["evil.example"]);
    assert_eq!(
        shown(&mut model, "decision:allow"),
        ["pypi.org", "github.com"]
    );
    assert_eq!(shown(&mut model, "host:GITHUB"), ["github.com"]);
    assert_eq!(shown(&mut model, "program:git"), ["github.com"]);
    assert_eq!(shown(&mut model, "program:curl"), Vec::<String>::new());
    assert_eq!(shown(&mut model, "decision:allow simple"), ["pypi.org"]);
    // An unknown field name is an ordinary word.
    assert_eq!(shown(&mut model, "nosuch:thing"), Vec::<String>::new());
}

#[test]
fn enter_opens_the_detail_of_the_row_under_the_cursor() {
    let mut model = Model::new("x");
    model.push_line(ALLOWED);
    model.push_line(WITH_PROCESS);
    assert!(model.shown().is_none());
    // Nothing selected and no ask: Enter shows the newest decision.
    model.on_key(Key::Enter);
    let Some(Shown::Row(row)) = model.shown() else {
        panic!("no detail");
    };
    assert_eq!(row.target(), "github.com");
    assert_eq!(
        row.url().as_deref(),
        Some("https://github.com/acme/app.git/info/refs?service=REDACTED")
    );
    assert_eq!(row.program(), "git");
    assert_eq!(row.id_text().as_deref(), Some("d-17"));
    // Down moves to the older one, in the detail view too; q closes it, not the view.
    model.on_key(Key::Down);
    let Some(Shown::Row(row)) = model.shown() else {
        panic!("no detail");
    };
    assert_eq!(row.target(), "pypi.org");
    assert_eq!(model.on_key(Key::Char('q')), Action::None);
    assert!(model.shown().is_none());
    assert_eq!(model.on_key(Key::Char('q')), Action::Quit);
}

#[test]
fn the_cursor_runs_from_the_asks_into_the_decisions_and_back() {
    let mut model = Model::new("x");
    model.push_line(ALLOWED);
    model.push_line(REFUSED);
    model.set_pending(vec![ask("one")]);
    assert!(model.on_asks());
    model.on_key(Key::Enter);
    assert!(matches!(model.shown(), Some(Shown::Ask(ask)) if ask.id == "one"));
    model.on_key(Key::Esc);
    model.on_key(Key::Down);
    assert!(!model.on_asks());
    assert_eq!(model.visible_rows().last().map(|(s, _)| *s), model.cursor());
    // Answer keys still answer the selected ask.
    assert_eq!(
        model.on_key(Key::Char('a')),
        Action::Answer {
            id: "one".to_owned(),
            allow: true,
            scope: Scope::Once
        }
    );
    model.on_key(Key::Down);
    model.on_key(Key::Down);
    assert_eq!(
        model.visible_rows().first().map(|(s, _)| *s),
        model.cursor()
    );
    model.on_key(Key::Up);
    model.on_key(Key::Up);
    assert!(model.on_asks());
}
