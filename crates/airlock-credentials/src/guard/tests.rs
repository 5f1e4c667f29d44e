use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use super::*;

const REAL: &str = "ghp_R3alT0kenValue0123456789abcdefABCD";
const SURROGATE: &str = "ghp_SurrogateValue0123456789abcdefABCD";

fn guard() -> OutboundGuard {
    OutboundGuard::new(&[("GH_TOKEN", REAL, SURROGATE)], &[]).unwrap()
}

fn scope(value: ValueScope) -> GuardScope {
    GuardScope {
        values: vec![value],
        formats: DlpMode::Refuse,
        allowed_kinds: Some(Vec::new()),
    }
}

fn github_token() -> String {
    let payload = "abcdefghijklmnopqrstuvwxyz0123";
    format!(
        "ghp_{payload}{}",
        airlock_dlp::github_checksum(payload.as_bytes())
    )
}

/// The whole of `data`, pushed in chunks of `size`: what was released, or the refusal.
fn streamed(
    guard: &OutboundGuard,
    scope: &GuardScope,
    data: &[u8],
    size: usize,
) -> Result<Vec<u8>, Finding> {
    let mut stream = guard.stream(scope.clone());
    let mut out = Vec::new();
    for chunk in data.chunks(size.max(1)) {
        let released = stream.push(Bytes::copy_from_slice(chunk))?;
        out.extend_from_slice(&released.first);
        out.extend_from_slice(&released.second);
    }
    out.extend_from_slice(&stream.finish()?);
    Ok(out)
}

#[test]
fn every_form_of_the_real_value_is_refused_away_from_home() {
    let guard = guard();
    let forms = [
        REAL.to_owned(),
        STANDARD.encode(REAL),
        URL_SAFE_NO_PAD.encode(format!("x{REAL}")),
        STANDARD.encode(format!("user:{REAL}")),
    ];
    for form in &forms {
        let body = format!("{{\"data\":\"{form}\"}}");
        let refused = guard
            .check_message(&scope(ValueScope::Foreign), body.as_bytes())
            .unwrap_err();
        assert_eq!(refused.reason, Reason::SecretOutOfScope, "{form}");
        assert_eq!(refused.form, Form::Real);
        assert_eq!(refused.secret.as_deref(), Some("GH_TOKEN"));
        assert!(
            guard
                .check_message(&scope(ValueScope::Home), body.as_bytes())
                .is_ok()
        );
    }
    let cleartext = guard.check_message(&scope(ValueScope::Cleartext), REAL.as_bytes());
    assert_eq!(cleartext.unwrap_err().form, Form::Cleartext);
}

#[test]
fn url_encoded_and_json_escaped_values_are_found() {
    let real = "p@ss/w+rd=\"XYZ\"123abc";
    let guard = OutboundGuard::new(&[("DB", real, "q@rt/x+se=\"ABC\"456def")], &[]).unwrap();
    let foreign = scope(ValueScope::Foreign);
    for form in [
        "user=p%40ss%2Fw%2Brd%3D%22XYZ%22123abc".to_owned(),
        "user=p%40ss%2fw%2brd%3d%22XYZ%22123abc".to_owned(),
        serde_json::to_string(&serde_json::json!({"password": real})).unwrap(),
        r#"{"p":"p@ss\/w+rd=\"XYZ\"123abc"}"#.to_owned(),
    ] {
        assert!(
            guard.check_message(&foreign, form.as_bytes()).is_err(),
            "{form}"
        );
    }
}

#[test]
fn the_head_is_searched_everywhere_a_value_can_hide() {
    let guard = guard();
    let scope = scope(ValueScope::Foreign);
    let encoded = REAL.replace('_', "%5F");
    assert!(
        guard
            .check_head(
                &scope,
                format!("/x?t={encoded}").as_bytes(),
                &HeaderMap::new()
            )
            .is_err()
    );
    let mut headers = HeaderMap::new();
    let basic = format!("Basic {}", STANDARD.encode(format!("x:{REAL}")));
    headers.insert("authorization", HeaderValue::from_str(&basic).unwrap());
    assert!(guard.check_head(&scope, b"/", &headers).is_err());
    let mut headers = HeaderMap::new();
    headers.insert("x-note", HeaderValue::from_static("nothing here"));
    assert_eq!(
        guard.check_head(&scope, b"/ok?q=1", &headers),
        Ok(Vec::new())
    );
}

#[test]
fn unknown_tokens_are_refused_surrogates_and_allowed_kinds_pass() {
    let guard = guard();
    let token = github_token();
    let refused = guard
        .check_message(&scope(ValueScope::Foreign), token.as_bytes())
        .unwrap_err();
    assert_eq!(
        (refused.reason, refused.kind),
        (Reason::CredentialOutbound, Some("github"))
    );
    assert!(
        guard
            .check_message(&scope(ValueScope::Foreign), SURROGATE.as_bytes())
            .is_ok()
    );
    assert!(
        guard
            .check_message(&scope(ValueScope::Foreign), b"AKIAIOSFODNN7EXAMPLE")
            .is_ok()
    );
    let mut allowed = scope(ValueScope::Foreign);
    allowed.allowed_kinds = Some(vec!["github".to_owned()]);
    assert!(guard.check_message(&allowed, token.as_bytes()).is_ok());
    allowed.allowed_kinds = None;
    assert!(
        guard
            .check_message(&allowed, b"AKIAQWERTYUIOPASDFGH")
            .is_ok()
    );
    let mut log = scope(ValueScope::Foreign);
    log.formats = DlpMode::Log;
    assert_eq!(
        guard.check_message(&log, token.as_bytes()),
        Ok(vec!["github"])
    );
    log.formats = DlpMode::Off;
    assert_eq!(guard.check_message(&log, token.as_bytes()), Ok(Vec::new()));
    // Off concerns formats only: a real value is refused whatever dlp says.
    assert!(guard.check_message(&log, REAL.as_bytes()).is_err());
}

#[test]
fn a_stream_releases_everything_when_clean_and_nothing_of_a_value() {
    let guard = guard();
    let scope = scope(ValueScope::Foreign);
    let clean: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    for size in [1, 7, 100, 4096, 65_536, 200_000] {
        assert_eq!(
            streamed(&guard, &scope, &clean, size).unwrap(),
            clean,
            "{size}"
        );
    }
    // The value across a 64 KiB boundary of an 8 MiB-like body is never released.
    let mut body = vec![b'a'; 65_536 - 10];
    body.extend_from_slice(REAL.as_bytes());
    body.extend(vec![b'b'; 70_000]);
    let mut stream = guard.stream(scope.clone());
    let first = stream
        .push(Bytes::copy_from_slice(&body[..65_536]))
        .unwrap();
    let sent = [first.first, first.second].concat();
    assert!(
        !sent.windows(4).any(|w| w == &REAL.as_bytes()[..4]),
        "no part of the value left"
    );
    assert!(
        stream
            .push(Bytes::copy_from_slice(&body[65_536..]))
            .is_err()
    );
}

proptest! {
    #[test]
    fn streaming_decides_like_the_whole(
        before in prop::collection::vec(any::<u8>(), 0..3000),
        after in prop::collection::vec(any::<u8>(), 0..3000),
        which in 0usize..3,
        size in 1usize..6000,
    ) {
        let guard = guard();
        let scope = scope(ValueScope::Foreign);
        let inserted = match which {
            0 => REAL.to_owned(),
            1 => github_token(),
            _ => String::new(),
        };
        let data = [before, inserted.into_bytes(), after].concat();
        let whole = guard.check_message(&scope, &data);
        let streamed = streamed(&guard, &scope, &data, size);
        prop_assert_eq!(whole.is_ok(), streamed.is_ok());
        if let Ok(out) = streamed {
            prop_assert_eq!(out, data);
        }
    }

    #[test]
    fn format_findings_match_the_reference(text in "[ -~]{0,200}", cut in 0usize..200) {
        // The automaton finds a format token exactly when the slow reference does.
        let guard = OutboundGuard::new(&[], &[]).unwrap();
        let scope = GuardScope { values: Vec::new(), formats: DlpMode::Refuse, allowed_kinds: Some(Vec::new()) };
        let token = github_token();
        let cut = cut.min(text.len());
        let data = format!("{} {token} {}", &text[..cut], &text[cut..]);
        let reference = airlock_dlp::find_all(data.as_bytes());
        prop_assert!(!reference.is_empty());
        prop_assert!(guard.check_message(&scope, data.as_bytes()).is_err());
        prop_assert_eq!(guard.check_message(&scope, text.as_bytes()).is_err(), !airlock_dlp::find_all(text.as_bytes()).is_empty());
    }
}

/// A refusal of the real value (`secret_out_of_scope`, `"form":"real"`).
fn is_real(result: Result<Vec<&'static str>, Finding>) -> bool {
    result.is_err_and(|f| f.reason == Reason::SecretOutOfScope && f.form == Form::Real)
}

#[test]
fn a_header_name_carrying_the_value_is_found_lower_cased() {
    let guard = guard();
    let mut headers = HeaderMap::new();
    // The `http` crate (and HTTP/2) lower-case names: the value arrives lower-cased.
    let name = http::HeaderName::from_bytes(REAL.as_bytes()).unwrap();
    assert_eq!(name.as_str(), REAL.to_ascii_lowercase());
    headers.insert(name, HeaderValue::from_static("1"));
    assert!(is_real(guard.check_head(
        &scope(ValueScope::Foreign),
        b"/",
        &headers
    )));
    assert!(
        guard
            .check_head(&scope(ValueScope::Home), b"/", &headers)
            .is_ok()
    );
}

#[test]
fn base64_wrapped_or_spaced_is_found_whole_and_streamed() {
    let guard = guard();
    let foreign = scope(ValueScope::Foreign);
    let encoded = STANDARD.encode(format!("some text before {REAL} and after"));
    let wrap = |width: usize, separator: &str| {
        encoded
            .as_bytes()
            .chunks(width)
            .map(|line| std::str::from_utf8(line).unwrap())
            .collect::<Vec<_>>()
            .join(separator)
    };
    for wrapped in [
        wrap(76, "\r\n"),
        wrap(64, "\n"),
        wrap(4, " "),
        wrap(1, " "),
        wrap(76, "\\n"),
    ] {
        let body = format!("{{\"attachment\":\"{wrapped}\"}}");
        assert!(
            is_real(guard.check_message(&foreign, body.as_bytes())),
            "{wrapped}"
        );
        for size in [1, 3, 50, 4096] {
            assert!(
                streamed(&guard, &foreign, body.as_bytes(), size).is_err(),
                "{size}: {wrapped}"
            );
        }
    }
    let mut headers = HeaderMap::new();
    headers.insert("x-blob", HeaderValue::from_str(&wrap(10, " ")).unwrap());
    assert!(is_real(guard.check_head(&foreign, b"/", &headers)));
    // Home, the wrapped value passes; ordinary text with spaces passes anywhere.
    assert!(
        guard
            .check_message(&scope(ValueScope::Home), wrap(76, "\r\n").as_bytes())
            .is_ok()
    );
    let prose = b"The quick brown fox jumps over the lazy dog.\r\nAgain and again.\\n";
    assert_eq!(streamed(&guard, &foreign, prose, 7).unwrap(), prose);
}

#[test]
fn a_value_split_over_header_lines_is_found() {
    let guard = guard();
    let foreign = scope(ValueScope::Foreign);
    let (first, second) = REAL.split_at(17);
    for (a, b) in [("x-a", "x-a"), ("x-a", "x-b")] {
        let mut headers = HeaderMap::new();
        headers.append(a, HeaderValue::from_static("nothing"));
        headers.append(a, HeaderValue::from_str(first).unwrap());
        headers.append(b, HeaderValue::from_str(second).unwrap());
        assert!(
            is_real(guard.check_head(&foreign, b"/", &headers)),
            "{a} {b}"
        );
    }
    // Joined as a server joins them: a value with `, ` in it.
    let real = "p4ss, w0rd-and-more-of-it";
    let guard = OutboundGuard::new(&[("PW", real, "q5tt, x1se-bnd-nore-pf-ju")], &[]).unwrap();
    let mut headers = HeaderMap::new();
    headers.append("x-a", HeaderValue::from_static("p4ss"));
    headers.append("x-a", HeaderValue::from_static("w0rd-and-more-of-it"));
    assert!(is_real(guard.check_head(&foreign, b"/", &headers)));
}

#[test]
fn trailers_are_searched_like_headers() {
    let guard = guard();
    let mut stream = guard.stream(scope(ValueScope::Foreign));
    let released = stream.push(Bytes::from_static(b"a clean body")).unwrap();
    assert!(released.first.len() + released.second.len() <= 12);
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_static("abc"));
    assert!(stream.check_trailers(&trailers).is_ok());
    trailers.insert("x-leak", HeaderValue::from_str(REAL).unwrap());
    let refused = stream.check_trailers(&trailers).unwrap_err();
    assert_eq!(refused.reason, Reason::SecretOutOfScope);
    let mut trailers = HeaderMap::new();
    let token = format!("token {}", github_token());
    trailers.insert("x-other", HeaderValue::from_str(&token).unwrap());
    let refused = stream.check_trailers(&trailers).unwrap_err();
    assert_eq!(refused.reason, Reason::CredentialOutbound);
}

#[test]
fn a_host_name_carrying_a_value_is_refused_whatever_its_case() {
    let guard = guard();
    let lower = format!("{}.example.test", REAL.to_ascii_lowercase());
    for name in [lower.clone(), format!("{REAL}.example.test")] {
        let refused = guard
            .check_authority(DlpMode::Refuse, name.as_bytes())
            .unwrap_err();
        assert_eq!(
            (refused.reason, refused.form),
            (Reason::SecretOutOfScope, Form::Real)
        );
        // Off concerns formats only.
        assert!(
            guard
                .check_authority(DlpMode::Off, name.as_bytes())
                .is_err()
        );
    }
    // Spread over labels.
    let (head, tail) = REAL.split_at(REAL.len() / 2);
    let split = format!("{head}.{tail}.example.test");
    assert!(
        guard
            .check_authority(DlpMode::Refuse, split.as_bytes())
            .is_err()
    );
    let token = format!("{}.example.test", github_token());
    let refused = guard
        .check_authority(DlpMode::Refuse, token.as_bytes())
        .unwrap_err();
    assert_eq!(refused.reason, Reason::CredentialOutbound);
    assert!(
        guard
            .check_authority(DlpMode::Log, token.as_bytes())
            .is_ok()
    );
    for clean in ["api.github.com", "ghp.example.test", "localhost:8443"] {
        assert!(
            guard
                .check_authority(DlpMode::Refuse, clean.as_bytes())
                .is_ok()
        );
    }
}

proptest! {
    #[test]
    fn base64_with_white_space_anywhere_is_refused_in_any_chunking(
        breaks in prop::collection::vec((0usize..80, 0usize..5), 0..12),
        before in "[a-z ]{0,40}",
        size in 1usize..200,
    ) {
        let guard = guard();
        let scope = scope(ValueScope::Foreign);
        let mut encoded = STANDARD.encode(format!("{before}{REAL}")).into_bytes();
        let spaces: [&[u8]; 5] = [b" ", b"\r\n", b"\n", b"\t", b"\\n"];
        let mut at: Vec<(usize, usize)> = breaks;
        at.sort_unstable_by_key(|b| std::cmp::Reverse(b.0));
        for (position, kind) in at {
            let position = position.min(encoded.len());
            encoded.splice(position..position, spaces[kind].iter().copied());
        }
        let body = [b"{\"file\":\"".as_slice(), &encoded, b"\"}"].concat();
        prop_assert!(guard.check_message(&scope, &body).is_err());
        prop_assert!(streamed(&guard, &scope, &body, size).is_err());
    }
}

#[test]
fn joined_header_lines_make_no_format_token_of_a_surrogate() {
    let real = format!("sk-ant-api03-{}", "R3al".repeat(10));
    let surrogate = format!("sk-ant-api03-{}", "Surr".repeat(10));
    let guard = OutboundGuard::new(&[("ANTHROPIC", &real, &surrogate)], &[]).unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", HeaderValue::from_str(&surrogate).unwrap());
    headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    assert_eq!(
        guard.check_head(&scope(ValueScope::Foreign), b"/v1/messages", &headers),
        Ok(Vec::new())
    );
}

/// `body` with `insert` put at `position` of the base64 of `{before}{REAL}`, as a JSON
/// string.
fn json_with(before: &str, position: usize, insert: &[u8]) -> Vec<u8> {
    let mut encoded = STANDARD.encode(format!("{before}{REAL}")).into_bytes();
    let position = position.min(encoded.len());
    encoded.splice(position..position, insert.iter().copied());
    [b"{\"file\":\"".as_slice(), &encoded, b"\"}"].concat()
}

#[test]
fn a_json_escape_at_the_edge_of_the_kept_window_hides_nothing() {
    // The saved proptest case: a `\n` escape right before the last base64 character, the
    // body one byte per chunk. The backslash was kept as the last of `longest - 1` bytes,
    // the `n` took it out, and the window lost a byte of the form.
    let guard = guard();
    let scope = scope(ValueScope::Foreign);
    let body = [
        b"{\"file\":\"\n\r\n\r\n\\n\r\n\n\n\r\n".as_slice(),
        b"YSBhYWdocF9SM2FsVDBrZW5WYWx1ZTAxMjM0NTY3ODlhYmNkZWZBQkN\\nE\"}",
    ]
    .concat();
    assert!(guard.check_message(&scope, &body).is_err());
    assert!(streamed(&guard, &scope, &body, 1).is_err());
    // Every escape at every place of the form, in small chunks.
    let inserts: [&[u8]; 5] = [b"\\n", b"\\r", b"\\t", b"\\n\\r\\t", b"\\n \\n"];
    for before in ["", "a aa", "xyz"] {
        let length = STANDARD.encode(format!("{before}{REAL}")).len();
        for position in 0..=length {
            for insert in inserts {
                let body = json_with(before, position, insert);
                assert!(guard.check_message(&scope, &body).is_err());
                for size in 1..=4 {
                    assert!(
                        streamed(&guard, &scope, &body, size).is_err(),
                        "{:?} in chunks of {size}",
                        String::from_utf8_lossy(&body)
                    );
                }
            }
        }
    }
}

#[test]
fn an_escaped_backslash_before_a_letter_keeps_the_letter() {
    // `\\n` in JSON is a backslash and the letter `n`, not a line break: the `n` is data,
    // whole or streamed. (The backslash stays, so the form is not whole here.)
    let guard = guard();
    let scope = scope(ValueScope::Foreign);
    let encoded = STANDARD.encode(REAL);
    let at = encoded.find('n').map_or(0, |at| at + 1);
    let (head, tail) = encoded.split_at(at);
    // `\\` then `\n`: the escaped backslash stays, the line break goes.
    let body = format!("{{\"file\":\"{head}\\\\\\n{tail}\"}}");
    assert_eq!(
        Squeezer::squeeze(body.as_bytes()),
        format!("{{\"file\":\"{head}\\\\{tail}\"}}").as_bytes()
    );
    // A line break escape after an escaped backslash pair still goes.
    let body = format!("{{\"file\":\"\\\\\\\\\\n{encoded}\"}}");
    assert!(guard.check_message(&scope, body.as_bytes()).is_err());
    for size in 1..=3 {
        assert!(streamed(&guard, &scope, body.as_bytes(), size).is_err());
    }
}

/// Texts of pieces that start, continue and end format tokens, long runs included.
fn run_soup() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "xoxb-", "sk-ant-", "glpat-", "npm_", "AKIA", "Q7", "a", "-", "_", " ", "\"",
    ]);
    prop::collection::vec(pieces, 0..200).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn format_findings_in_long_runs_match_the_reference(text in run_soup(), size in 1usize..300) {
        // The guard decides within a bounded window from each prefix; the reference counts
        // every run whole.
        let guard = OutboundGuard::new(&[], &[]).unwrap();
        let scope = GuardScope { values: Vec::new(), formats: DlpMode::Refuse, allowed_kinds: Some(Vec::new()) };
        let expected = !airlock_dlp::find_all(text.as_bytes()).is_empty();
        prop_assert_eq!(guard.check_message(&scope, text.as_bytes()).is_err(), expected);
        prop_assert_eq!(streamed(&guard, &scope, text.as_bytes(), size).is_err(), expected);
    }
}

#[test]
fn a_known_value_longer_than_the_lookahead_is_still_known() {
    // An Anthropic-shaped value of 207 bytes, past the 94 bytes a format needs to be
    // decided: its run must be read to its end to tell it from a longer, unknown one.
    let real = format!("sk-ant-api03-{}", "R".repeat(194));
    let surrogate = format!("sk-ant-api03-{}", "S".repeat(194));
    let guard = OutboundGuard::new(&[("ANTHROPIC", &real, &surrogate)], &[]).unwrap();
    let home = scope(ValueScope::Home);
    for known in [&real, &surrogate] {
        let body = format!("{{\"key\":\"{known}\"}}");
        assert!(guard.check_message(&home, body.as_bytes()).is_ok());
        // Streamed in chunks of any size, a chunk ending inside the value included: the
        // run that reaches a chunk's end is decided once the value has ended.
        for size in 1..=300 {
            let out = streamed(&guard, &home, body.as_bytes(), size);
            assert_eq!(out.as_deref(), Ok(body.as_bytes()), "chunks of {size}");
            let longer = format!("{{\"key\":\"{known}x\"}}");
            let refused = streamed(&guard, &home, longer.as_bytes(), size).unwrap_err();
            assert_eq!(refused.kind, Some("anthropic"), "chunks of {size}");
        }
        let longer = format!("{{\"key\":\"{known}x\"}}");
        let refused = guard.check_message(&home, longer.as_bytes()).unwrap_err();
        assert_eq!(
            (refused.reason, refused.kind),
            (Reason::CredentialOutbound, Some("anthropic"))
        );
    }
    // 64 KiB of one run of prefixes: a token, decided from its first prefix.
    let run = "xoxb-".repeat(64 * 1024 / 5);
    let refused = guard.check_message(&home, run.as_bytes()).unwrap_err();
    assert_eq!(refused.kind, Some("slack"));
}

#[test]
fn only_values_a_token_of_open_length_could_equal_widen_the_decision_window() {
    // A PEM key (or any secret not shaped like an open-length token) as a secret leaves the
    // window at the lookahead: a run of prefixes costs no more with it configured.
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----",
        "A".repeat(3000)
    );
    let guard = OutboundGuard::new(&[("KEY", &pem, "surrogate-of-the-key")], &[]).unwrap();
    assert_eq!(guard.inner.decide_within, airlock_dlp::lookahead());
    let long = format!("sk-ant-api03-{}", "R".repeat(194));
    let guard = OutboundGuard::new(&[("KEY", &pem, "s"), ("ANTHROPIC", &long, "t")], &[]).unwrap();
    assert_eq!(guard.inner.decide_within, long.len() + 1);
}

proptest! {
    #[test]
    fn an_open_length_known_value_is_decided_alike_whole_and_streamed(
        before in run_soup(),
        after in run_soup(),
        tail in prop::sample::select(vec![" ", "\"", " ", "x"]),
        size in 1usize..400,
    ) {
        // A secret shaped like an open-length token, its real value and surrogate spliced
        // into runs of prefixes: the stream refuses exactly when the whole body is refused,
        // wherever the chunks end, and releases a clean body whole.
        let real = format!("sk-ant-api03-{}", "R".repeat(120));
        let surrogate = format!("sk-ant-api03-{}", "S".repeat(120));
        let guard = OutboundGuard::new(&[("ANTHROPIC", &real, &surrogate)], &[]).unwrap();
        let home = scope(ValueScope::Home);
        for known in [&real, &surrogate] {
            let data = format!("{before} {known}{tail}{after}");
            let whole = guard.check_message(&home, data.as_bytes());
            let streamed = streamed(&guard, &home, data.as_bytes(), size);
            prop_assert_eq!(whole.is_ok(), streamed.is_ok(), "{}", data);
            if let Ok(out) = streamed {
                prop_assert_eq!(out, data.as_bytes());
            }
        }
    }
}
