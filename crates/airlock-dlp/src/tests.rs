use proptest::prelude::*;

use super::*;

/// A GitHub classic token with a valid checksum over `payload` (30 alphanumerics).
fn github_token(prefix: &str, payload: &str) -> String {
    format!("{prefix}{payload}{}", github_checksum(payload.as_bytes()))
}

fn kinds_in(text: &str) -> Vec<&'static str> {
    find_all(text.as_bytes()).iter().map(|f| f.kind).collect()
}

#[test]
fn published_github_tokens_pass_the_checksum_and_mutations_fail() {
    // Checksums published with third-party scanners' tests of the format.
    for token in [
        "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",
        "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",
    ] {
        assert_eq!(kinds_in(token), ["github"], "{token}");
    }
    assert!(kinds_in("ghp_M7H4jxUDDWHP4kZ6A4dxlQYsQIWJuq11T4V3").is_empty());
    // GitHub's documentation example has no valid checksum: it is not a credential.
    assert!(kinds_in("gho_16C7e42F292c6912E7710c838347Ae178B4a").is_empty());
}

#[test]
fn each_format_is_found_in_context() {
    let github = github_token("ghs_", "abcdefghijklmnopqrstuvwxyz0123");
    let cases = [
        (format!("Authorization: token {github}"), "github"),
        (format!("github_pat_{}", "A".repeat(82)), "github"),
        ("key=AKIAQWERTYUIOPASDFGH&x=1".to_owned(), "aws"),
        ("ASIAQWERTYUIOPASDFGH".to_owned(), "aws"),
        (
            format!("x-api-key: sk-ant-api03-{}AA", "x".repeat(90)),
            "anthropic",
        ),
        (format!("\"sk-proj-{}\"", "Ab1_".repeat(12)), "openai"),
        ("xoxb-1234567890-abcdefghij".to_owned(), "slack"),
        ("glpat-abcdefghij0123456789".to_owned(), "gitlab"),
        (
            format!("//registry/:_authToken=npm_{}", "a1".repeat(18)),
            "npm",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl".to_owned(),
            "private_key",
        ),
        ("-----BEGIN PRIVATE KEY-----".to_owned(), "private_key"),
        ("-----BEGIN RSA PRIVATE KEY-----".to_owned(), "private_key"),
        (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----".to_owned(),
            "private_key",
        ),
    ];
    for (text, kind) in cases {
        assert_eq!(kinds_in(&text), [kind], "{text}");
    }
}

#[test]
fn look_alikes_are_not_credentials() {
    for text in [
        // AWS documentation examples.
        "AKIAIOSFODNN7EXAMPLE",
        "ASIAIOSFODNN7EXAMPLE",
        // Too short, too long, wrong alphabet.
        "AKIAQWERTYUIOPASDFG",
        "AKIAQWERTYUIOPASDFGHJ",
        "AKIAqwertyuiopasdfgh",
        "sk-ant-short",
        "glpat-short",
        "npm_install",
        "ghp_tooshort",
        "xoxb-123",
        "-----BEGIN CERTIFICATE-----",
        "-----BEGIN PUBLIC KEY-----",
        "-----BEGIN PRIVATE KEY without dashes",
        "the sk-proj- prefix alone",
    ] {
        assert!(kinds_in(text).is_empty(), "{text}");
    }
}

#[test]
fn a_decision_waits_for_the_bytes_it_needs() {
    let (format, prefix) = prefixes().find(|(p, _)| *p == "AKIA").unwrap();
    let partial = b"AKIAQWERTYUIOPASDF";
    assert_eq!(
        examine(prefix, partial, format.len(), false),
        Verdict::NeedMore
    );
    assert_eq!(examine(prefix, partial, format.len(), true), Verdict::Not);
    let whole = b"AKIAQWERTYUIOPASDFGH";
    // Sixteen characters, but a seventeenth could still follow.
    assert_eq!(examine(prefix, whole, 4, false), Verdict::NeedMore);
    assert_eq!(examine(prefix, whole, 4, true), Verdict::Token { len: 20 });
    assert_eq!(
        examine(prefix, b"AKIAQWERTYUIOPASDFGH,", 4, false),
        Verdict::Token { len: 20 }
    );
    assert_eq!(examine(prefix, b"AKIA!", 4, false), Verdict::Not);
}

#[test]
fn redaction_replaces_tokens_only() {
    let token = github_token("ghp_", "abcdefghijklmnopqrstuvwxyz0123");
    let text = format!("/upload/{token}/x?k=AKIAQWERTYUIOPASDFGH");
    assert_eq!(
        redact(&text),
        "/upload/[REDACTED:github]/x?k=[REDACTED:aws]"
    );
    assert!(matches!(
        redact("/plain/path"),
        std::borrow::Cow::Borrowed(_)
    ));
    // Found by fuzzing (the `dlp` target of `fuzz/`): redacting the later, overlapping key ends the
    // run before it, which then is a key of its own.
    let text = "AKIAQWERTYUIASIAKIAQWERTYUIOP1SDFG";
    assert!(
        find_all(redact(text).as_bytes()).is_empty(),
        "{}",
        redact(text)
    );
}

proptest! {
    #[test]
    fn redaction_leaves_no_token(text in "[A-Z2-7 ]{0,80}(AKIA|ASIA)[A-Z2-7]{10,40}") {
        prop_assert!(find_all(redact(&text).as_bytes()).is_empty());
    }
}

#[test]
fn lookahead_covers_every_format() {
    // github_pat_ (11) + 82 + the byte after.
    assert_eq!(lookahead(), 94);
    assert_eq!(
        kinds(),
        [
            "github",
            "aws",
            "anthropic",
            "openai",
            "slack",
            "gitlab",
            "npm",
            "private_key"
        ]
    );
}

proptest! {
    #[test]
    fn every_checksummed_github_token_is_found_anywhere(
        prefix in prop::sample::select(vec!["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]),
        payload in "[A-Za-z0-9]{30}",
        before in "[ -~]{0,40}",
        after in "[^A-Za-z0-9][ -~]{0,40}",
    ) {
        let token = github_token(prefix, &payload);
        let text = format!("{before}{token}{after}");
        let found = find_all(text.as_bytes());
        prop_assert!(found.iter().any(|f| f.kind == "github" && f.start == before.len()
            && f.len == token.len()));
    }

    #[test]
    fn a_changed_checksum_is_refused_as_a_token(
        payload in "[A-Za-z0-9]{30}",
        position in 30usize..36,
        replacement in "[A-Za-z0-9]",
    ) {
        let mut token = github_token("ghp_", &payload).into_bytes();
        let original = token[4 + position];
        let replacement = replacement.as_bytes()[0];
        prop_assume!(original != replacement);
        token[4 + position] = replacement;
        prop_assert!(find_all(&token).is_empty());
    }

    #[test]
    fn a_decision_never_changes_once_made(data in "[A-Za-z0-9_ -]{0,120}", cut in 0usize..120) {
        // Whatever examine decides on a prefix of the data (other than NeedMore) it decides
        // on the whole data too: a streaming caller may act on the first decision.
        for (prefix, format) in prefixes() {
            let text = format!("{prefix}{data}");
            let bytes = text.as_bytes();
            let cut = (prefix.len() + cut).min(bytes.len());
            let early = examine(format, &bytes[..cut], prefix.len(), false);
            let late = examine(format, bytes, prefix.len(), true);
            if early != Verdict::NeedMore {
                let token = |v: Verdict| matches!(v, Verdict::Token { .. });
                prop_assert_eq!(token(early), token(late), "{}", text);
            }
        }
    }
}

thread_local! {
    /// Bytes [`run_length`] looked at on this thread (each test runs on its own thread).
    pub(super) static SCANNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The obvious search [`find_all`] replaced: every prefix at every position, each run
/// counted from its own prefix.
fn naive_find_all(data: &[u8]) -> Vec<Found> {
    let mut found = Vec::new();
    for start in 0..data.len() {
        for (prefix, format) in prefixes() {
            if data[start..].starts_with(prefix.as_bytes())
                && let Verdict::Token { len } = examine(format, &data[start..], prefix.len(), true)
            {
                found.push(Found {
                    kind: FORMATS[format].kind,
                    start,
                    len,
                });
            }
        }
    }
    found
}

/// Texts made of pieces that start, continue and end tokens of every shape.
fn token_soup() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "xoxa-",
        "sk-ant-",
        "sk-proj-",
        "glpat-",
        "npm_",
        "ghp_",
        "AKIA",
        "ASIA",
        "github_pat_",
        "-----BEGIN ",
        "RSA PRIVATE KEY-----",
        "A",
        "Z7",
        "x",
        "_",
        "-",
        " ",
        "/",
        "[",
        "EXAMPLE",
    ]);
    prop::collection::vec(pieces, 0..120).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn find_all_finds_what_the_obvious_search_finds(text in token_soup()) {
        prop_assert_eq!(find_all(text.as_bytes()), naive_find_all(text.as_bytes()));
    }

    #[test]
    fn redaction_of_any_soup_leaves_no_token(text in token_soup()) {
        prop_assert!(find_all(redact(&text).as_bytes()).is_empty());
    }
}

#[test]
fn a_long_run_is_counted_once_not_from_every_prefix_in_it() {
    // 64 KiB of `xoxa-`: 13,107 slack prefixes in one run. Counted from each of them,
    // the run costs 13,107 × 32 KiB on average (0.6 s of CPU in a release build).
    for piece in ["xoxa-", "sk-ant-", "glpat-"] {
        let text = piece.repeat(64 * 1024 / piece.len());
        SCANNED.set(0);
        let found = find_all(text.as_bytes());
        assert_eq!(
            found[0].len,
            text.len(),
            "{piece}: the first token is the whole run"
        );
        let scanned = SCANNED.get();
        assert!(
            scanned <= 2 * text.len(),
            "{piece}: {scanned} bytes looked at for {}",
            text.len()
        );
    }
}

#[test]
fn redaction_gives_up_on_a_chain_of_tokens_and_redacts_the_whole_text() {
    // Each AWS-shaped run is followed by the next, so only the last is a key; redacting
    // it ends the one before, which becomes a key in the next pass, and so on: one pass
    // per key over the whole text (12 s of CPU for 64 KiB in a release build).
    let chain = "AKIAQWERTYUIOPASDFGH".repeat(64 * 1024 / 20);
    assert_eq!(find_all(chain.as_bytes()).len(), 1);
    assert_eq!(redact(&chain), REDACTED_WHOLE);
    // A chain of two converges within the passes, as before.
    let two = "AKIAQWERTYUIOPASDFGH".repeat(2);
    assert_eq!(redact(&two), "[REDACTED:aws][REDACTED:aws]");
    assert!(find_all(REDACTED_WHOLE.as_bytes()).is_empty());
}
