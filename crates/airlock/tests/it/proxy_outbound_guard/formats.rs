//! Well-known credential formats nobody configured: refused `credential_outbound` unless
//! they are documentation examples or fail their checksum, or `dlp` logs, ignores or allows
//! them; ordinary uploads (100 MiB of random bytes) pass whole.

use crate::support;

use super::{REAL, SURROGATE, Setup, assert_refused, assert_refused_on, unknown_github_token};

#[test]
fn well_known_formats_are_refused_unless_they_are_examples_or_bad_checksums() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let token = unknown_github_token();
    let mut bad = token.clone().into_bytes();
    let last = bad.len() - 1;
    bad[last] = if bad[last] == b'A' { b'B' } else { b'A' };
    let bad = String::from_utf8(bad).unwrap();
    let github = format!("Authorization: token {token}");
    let bad_github = format!("Authorization: token {bad}");
    let pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    let anthropic = format!("/llm?key=sk-ant-api03-{}AA", "Zx9_".repeat(23));
    let refused: [(&str, Vec<&str>, Option<&str>, &str); 4] = [
        ("/f/github", vec![&github], None, "github"),
        ("/f/aws", vec!["X-Aws: AKIAQWERTYUIOPASDFGH"], None, "aws"),
        ("/f/pem", vec![], Some(pem), "private_key"),
        (
            "/f/slack",
            vec![],
            Some("{\"t\":\"xoxb-1234567890-abcdefghijkl\"}"),
            "slack",
        ),
    ];
    for (path, headers, body, kind) in refused {
        let response = setup.send("other.test", path, &headers, body);
        assert_refused(&response, "credential_outbound", path);
        assert_eq!(setup.line(path)["credential"], kind);
    }
    let response = setup.send("other.test", &anthropic, &[], None);
    assert_refused(&response, "credential_outbound", "/llm");
    let passed: [(&str, Vec<&str>); 3] = [
        ("/ok/bad-checksum", vec![&bad_github]),
        ("/ok/aws-example", vec!["X-Aws: AKIAIOSFODNN7EXAMPLE"]),
        ("/ok/surrogate", vec![]),
    ];
    for (path, headers) in passed {
        let response = setup.send("other.test", path, &headers, Some(SURROGATE));
        assert_eq!(response.status, 200, "{path}: {response:?}");
    }
    setup.assert_never_received("formats", &[token.as_bytes(), b"OPENSSH PRIVATE"]);
    setup.assert_real_value_never_logged();
}

#[test]
fn dlp_log_off_and_allow_change_only_the_formats() {
    crate::support::need_all(&["curl"]);
    let token = unknown_github_token();
    let github = format!("Authorization: token {token}");
    let real = format!("X-Data: {REAL}");
    let log = Setup::new("dlp: {credentials: log}\n");
    let response = log.send("other.test", "/log", &[&github], None);
    assert_eq!(response.status, 200, "{response:?}");
    // A token in the path passes too, but never into the log.
    let response = log.send("other.test", &format!("/log/{token}"), &[], None);
    assert_eq!(response.status, 200, "{response:?}");
    assert!(log.line("/log/[REDACTED:github]")["credential"] == "github");
    assert!(
        !log.proxy.audit_log_text().contains(&token),
        "the log holds the token"
    );
    let line = log.line("/log");
    assert_eq!(
        (&line["decision"], &line["credential"]),
        (&"allow".into(), &"github".into())
    );
    let response = log.send("other.test", "/log/real", &[&real], None);
    assert_eq!(
        response.status, 403,
        "a real value is refused whatever dlp says"
    );

    let off = Setup::new("dlp: {credentials: off}\n");
    let response = off.send("other.test", "/off", &[&github], None);
    assert_eq!(response.status, 200, "{response:?}");
    assert!(off.line("/off").get("credential").is_none());
    let response = off.send("other.test", "/off/real", &[&real], None);
    assert_eq!(
        response.status, 403,
        "a real value is refused whatever dlp says"
    );

    let allow = Setup::new("dlp:\n  allow:\n    - {host: other.test, kinds: [github]}\n");
    let response = allow.send("other.test", "/allowed", &[&github], None);
    assert_eq!(response.status, 200, "{response:?}");
    let response = allow.send("other.test", "/aws", &["X-Aws: AKIAQWERTYUIOPASDFGH"], None);
    assert_refused(&response, "credential_outbound", "/aws");
    // (In a header that is no credential header of the secret there: in `Authorization`
    // it would be another account's key, refused `foreign_credential` first.)
    let in_note = format!("X-Note: {token}");
    let response = allow.send("localhost", "/elsewhere", &[&in_note], None);
    assert_refused_on(&response, "credential_outbound", "localhost", "/elsewhere");
}

#[test]
fn a_hundred_mib_of_random_upload_passes_whole() {
    crate::support::need_all(&["curl"]);
    let setup = Setup::new("");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("random.bin");
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut data = vec![0u8; 100 * 1024 * 1024];
    for chunk in data.chunks_mut(8) {
        // xorshift64: fast, deterministic, no pattern a format could match by design.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&path, &data).unwrap();
    let file = format!("@{}", path.display());
    let response = setup.upload("other.test", "/sink", &file, support::HttpVersion::Http1);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json()["body_len"], data.len());
}
