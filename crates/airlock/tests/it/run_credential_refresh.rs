//! OAuth refreshes of projected logins under `airlock run` (docs/secrets.md,
//! "Refreshes"): a home with Claude Code's `.credentials.json` (real tokens), the policy
//! projecting it, and the scripted model server (`tests/fixtures/model_server.py`) as
//! Claude's token endpoint and API on `ADDRESS:443` (setup:
//! `support::credential_refresh`). A python client inside the jail reads the projected
//! file, refreshes with its (surrogate) refresh token, and calls the API with the new
//! (surrogate) access token. Checked: the server saw the real refresh token, then the new
//! real access token; the command saw only surrogates (canaries); the host file holds the
//! new real tokens (mode and owner kept); an error answer changes nothing; two runs
//! refreshing at once leave the fresher login; refusals (not a grant, ambiguous, retired,
//! down-scoped, a second grant of one login at once) are never sent and are one audit
//! line each; runs starting at once on a fresh `AIRLOCK_HOME` share one CA. As root, and
//! as the test user. The real CLIs and Codex's file: `run_credential_refresh_agents`.

use std::os::unix::fs::MetadataExt as _;

use serde_json::Value;

use crate::support::TestPki;
use crate::support::agents::{can_serve_443, header_values};
use crate::support::credential_refresh::{
    Place, REAL_ACCESS, REAL_REFRESH, REVOKED_REFRESH, SLOW_FOR, SlowTokenServer,
    credentials_lines, issued, marked, outcome, request_to, setup, succeeded,
};
use crate::support::run::{code, namespaces_available, read_lines};

#[test]
fn a_refresh_inside_run_gives_surrogates_and_writes_the_real_tokens_back() {
    let test = "a_refresh_inside_run_gives_surrogates_and_writes_the_real_tokens_back";
    let Some((pki, place, server)) = setup("127.35.2.35", test, REAL_REFRESH) else {
        return;
    };
    let owner = std::fs::metadata(place.credentials()).expect("stat").uid();
    let output = place.run(&pki, "127.35.2.35", "audit.jsonl");
    let (stdout, context) = succeeded(&output);
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "one refresh: {context}");
    let new_access = issued[0]["access_token"].as_str().expect("issued access");
    let new_refresh = issued[0]["refresh_token"].as_str().expect("issued refresh");
    // The server got the real refresh token, then the new real access token.
    let requests = server.requests();
    let refresh = request_to(
        &requests,
        "/v1/oauth/token",
        "the refresh reached the server",
    );
    assert_eq!(refresh["body"]["refresh_token"], REAL_REFRESH, "{context}");
    let api = request_to(
        &requests,
        "/v1/messages/count_tokens",
        "the API call reached the server",
    );
    assert_eq!(
        header_values(api, "authorization"),
        [format!("Bearer {new_access}")],
        "{context}"
    );
    // The command saw surrogates only: in the file, in the refresh's answer.
    let answer: Value =
        serde_json::from_str(marked(&stdout, "REFRESH 200").expect("refreshed")).expect("json");
    let shown = answer["access_token"].as_str().expect("access token shown");
    assert!(
        shown.starts_with("sk-ant-") && shown != new_access,
        "{context}"
    );
    assert_eq!(answer["expires_in"], issued[0]["expires_in"]);
    assert!(marked(&stdout, "API 200").is_some(), "{context}");
    let after = marked(&stdout, "AFTER").expect("the file read again");
    // The command's copy followed the refresh: it holds the new surrogates.
    assert!(after.contains(shown), "{context}");
    let shown_refresh = answer["refresh_token"].as_str().expect("refresh shown");
    assert!(after.contains(shown_refresh), "{context}");
    let audit = std::fs::read_to_string(place.logs().join("audit.jsonl")).unwrap_or_default();
    for real in [REAL_ACCESS, REAL_REFRESH, new_access, new_refresh] {
        assert!(
            !stdout.contains(real),
            "a real token reached the command: {context}"
        );
        assert!(
            !output.stderr.contains(real),
            "a real token on stderr: {context}"
        );
        assert!(!audit.contains(real), "a real token in the audit log");
    }
    // The host file holds the new real tokens, mode and owner kept.
    let file = place.file();
    assert_eq!(file["claudeAiOauth"]["accessToken"], new_access);
    assert_eq!(file["claudeAiOauth"]["refreshToken"], new_refresh);
    assert_eq!(file["claudeAiOauth"]["subscriptionType"], "max");
    assert!(file["claudeAiOauth"]["expiresAt"].as_u64() > Some(1000));
    let meta = std::fs::metadata(place.credentials()).expect("stat");
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, owner));
    let lines = credentials_lines(&place.logs().join("audit.jsonl"));
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert!(
        messages.iter().any(|m| m.starts_with("refreshed"))
            && messages.iter().any(|m| m.starts_with("written back")),
        "credentials lines: {lines:?}"
    );
}

#[test]
fn a_refresh_answered_with_an_error_changes_nothing() {
    let test = "a_refresh_answered_with_an_error_changes_nothing";
    let Some((pki, place, server)) = setup("127.35.2.36", test, REVOKED_REFRESH) else {
        return;
    };
    let before = std::fs::read(place.credentials()).expect("read");
    let output = place.run(&pki, "127.35.2.36", "audit.jsonl");
    let (stdout, context) = succeeded(&output);
    let refused = marked(&stdout, "REFRESH 400").expect("the error passed on");
    assert!(refused.contains("invalid_grant"), "{context}");
    assert!(issued(&server).is_empty());
    assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
    assert!(!stdout.contains(REVOKED_REFRESH) && !stdout.contains(REAL_ACCESS));
    let lines = credentials_lines(&place.logs().join("audit.jsonl"));
    assert!(
        !lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("refreshed") || m.starts_with("written"))),
        "{lines:?}"
    );
}

#[test]
fn two_runs_refreshing_at_once_leave_the_fresher_login() {
    let test = "two_runs_refreshing_at_once_leave_the_fresher_login";
    let Some((pki, place, server)) = setup("127.35.2.37", test, REAL_REFRESH) else {
        return;
    };
    let outputs = std::thread::scope(|scope| {
        let runs: Vec<_> = ["a.jsonl", "b.jsonl"]
            .into_iter()
            .map(|log| {
                let (place, pki) = (&place, &pki);
                scope.spawn(move || place.run(pki, "127.35.2.37", log))
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("join"))
            .collect::<Vec<_>>()
    });
    for output in &outputs {
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            code(output),
            0,
            "stdout:\n{stdout}\nstderr:\n{}",
            output.stderr
        );
        assert!(stdout.contains("REFRESH 200"), "{stdout}");
    }
    let issued = issued(&server);
    assert_eq!(issued.len(), 2);
    // The later answer has the later expiry: the file holds it, whichever run wrote last.
    let fresher = issued
        .iter()
        .max_by_key(|i| i["expires_in"].as_u64())
        .expect("two");
    let file = place.file();
    assert_eq!(
        file["claudeAiOauth"]["accessToken"],
        fresher["access_token"]
    );
    assert_eq!(
        file["claudeAiOauth"]["refreshToken"],
        fresher["refresh_token"]
    );
    let lines: Vec<Value> = ["a.jsonl", "b.jsonl"]
        .iter()
        .flat_map(|log| credentials_lines(&place.logs().join(log)))
        .collect();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("written back") || m.starts_with("not written")))
            .count(),
        2,
        "{lines:?}"
    );
}

/// A 2xx answer airlock cannot read (HTML) or place (a `session_token` besides the
/// tokens) is a 502: the command never gets the body, the host file is unchanged.
#[test]
fn a_refresh_answer_airlock_cannot_place_is_a_502_and_changes_nothing() {
    let test = "a_refresh_answer_airlock_cannot_place_is_a_502_and_changes_nothing";
    let garbled = "sk-ant-ort01-GARBLEDrefreshCANARY0123456789abcdefghijklmnop";
    let stray = "sk-ant-ort01-STRAYrefreshCANARY0123456789abcdefghijklmnopq";
    let Some((pki, first, server)) = setup("127.35.2.39", test, garbled) else {
        return;
    };
    let second = Place::new(stray);
    for place in [&first, &second] {
        let before = std::fs::read(place.credentials()).expect("read");
        let output = place.run(&pki, "127.35.2.39", "audit.jsonl");
        let (stdout, context) = succeeded(&output);
        assert!(marked(&stdout, "REFRESH 502").is_some(), "{context}");
        assert!(!stdout.contains("GARBLEDsecret") && !stdout.contains("sess-STRAY"));
        assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
        let lines = credentials_lines(&place.logs().join("audit.jsonl"));
        assert!(
            lines.iter().any(|l| l["decision"] == "deny"),
            "credentials lines: {lines:?}"
        );
    }
    // The stray answer's real tokens were issued and never reached the command.
    assert_eq!(issued(&server).len(), 1);
}

/// A token request that carries the projected refresh token but is not a refresh grant
/// (an `authorization_code` login of another account, say) is refused 403 before it is
/// sent (the real token is never swapped into it), and the host file is unchanged.
#[test]
fn a_token_request_that_is_not_a_refresh_grant_is_never_written_back() {
    let test = "a_token_request_that_is_not_a_refresh_grant_is_never_written_back";
    let Some((pki, place, server)) = setup("127.35.2.41", test, REAL_REFRESH) else {
        return;
    };
    std::fs::write(place.home().join("grant.txt"), "authorization_code").expect("grant");
    place.adopt();
    let before = std::fs::read(place.credentials()).expect("read");
    let output = place.run(&pki, "127.35.2.41", "audit.jsonl");
    let (stdout, context) = succeeded(&output);
    assert!(issued(&server).is_empty(), "{context}");
    assert!(marked(&stdout, "REFRESH 403").is_some(), "{context}");
    assert!(!stdout.contains(REAL_REFRESH), "{context}");
    assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
    let refused = marked(&stdout, "REFRESH 403").expect("refused");
    assert!(refused.contains("not a refresh grant"), "{context}");
    // One refusal, one audit line (rereview35: the refresh step wrote two).
    let denied = denied_lines(&place);
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["kind"], "http");
    assert_eq!(denied[0]["reason"], "secret_out_of_scope");
    assert!(
        output.stderr.contains("airlock: 1 request refused"),
        "{context}"
    );
}

/// The audit log's `deny` lines.
fn denied_lines(place: &Place) -> Vec<Value> {
    read_lines(&place.logs().join("audit.jsonl"))
        .into_iter()
        .filter(|line| line["decision"] == "deny")
        .collect()
}

/// review35 F4 and F3 (fixB): a refresh body whose first `refresh_token` hides behind an
/// encoded key (`refresh%5Ftoken=<attacker's token>`) is refused 403 and never sent (a
/// first-value-wins server would refresh the attacker's login and airlock would write it
/// into the host file); a 2xx with tokens from the token host that answers no refresh of
/// the projected login (here an `authorization_code` login the command made) is a 502:
/// the command never gets its tokens; a `create_api_key` call with the projected access
/// token is refused 403 before it is sent.
#[test]
fn ambiguous_refreshes_and_other_token_answers_are_refused() {
    let test = "ambiguous_refreshes_and_other_token_answers_are_refused";
    let Some((pki, place, server)) = setup("127.35.2.61", test, REAL_REFRESH) else {
        return;
    };
    let script = r#"
attacker = "".join("%%%02X" % ord(c) for c in "sk-ant-ort01-ATTACKERownREFRESHtoken0123456789abcdef")
bodies = {
    "FORMKEY": "refresh%5Ftoken=" + attacker + "&grant_type=refresh_token&refresh_token="
               + creds["refreshToken"] + "&client_id=c",
    "OWNLOGIN": "grant_type=authorization_code&code=x&refresh_token=attacker-own-login",
}
for name, body in bodies.items():
    request = token_request(body.encode(), "application/x-www-form-urlencoded")
    status, text = send(request)
    print("%s %d %s" % (name, status, text.replace("\n", " ")))
mint = urllib.request.Request("https://api.anthropic.com/api/oauth/claude_cli/create_api_key",
    data=b"{}", method="POST", headers={"Authorization": "Bearer " + creds["accessToken"],
                                         "Content-Type": "application/json"})
status, text = send(mint)
print("MINT %d %s" % (status, text.replace("\n", " ")))
"#;
    let program = place.token_script("attack.py", script);
    let before = std::fs::read(place.credentials()).expect("read");
    let output = place.run_program(&pki, "127.35.2.61", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    let formkey = marked(&stdout, "FORMKEY 403").expect(&context);
    assert!(formkey.contains("ambiguous"), "{context}");
    let own = marked(&stdout, "OWNLOGIN 502").expect(&context);
    assert!(own.contains("token fields"), "{context}");
    // Minting an API key from the projected access token is refused before it is sent.
    let mint = marked(&stdout, "MINT 403").expect(&context);
    assert!(mint.contains("mints an API key"), "{context}");
    // Only the command's own login reached the server; its tokens never reached the command.
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "{context}");
    for field in ["access_token", "refresh_token"] {
        let value = issued[0][field].as_str().expect("issued");
        assert!(!stdout.contains(value), "{context}");
    }
    assert!(
        !stdout.contains(REAL_REFRESH) && !stdout.contains(REAL_ACCESS),
        "{context}"
    );
    let requests = std::fs::read_to_string(place.logs().join("requests.jsonl")).unwrap_or_default();
    assert!(
        !requests.contains("ATTACKER")
            && !requests.contains(REAL_REFRESH)
            && !requests.contains("create_api_key"),
        "{requests}"
    );
    assert_eq!(std::fs::read(place.credentials()).expect("read"), before);
}

/// A refresh surrogate an earlier refresh in this run replaced (rereview35 G3) is refused
/// 403 before it is sent, even in a clean refresh grant: replaying a rotated refresh token
/// may revoke the new login. Only the first grant reached the server.
#[test]
fn a_retired_refresh_surrogate_is_refused_and_never_sent() {
    let test = "a_retired_refresh_surrogate_is_refused_and_never_sent";
    let Some((pki, place, server)) = setup("127.35.2.62", test, REAL_REFRESH) else {
        return;
    };
    let script = r#"
body = "grant_type=refresh_token&refresh_token=" + creds["refreshToken"] + "&client_id=c"
for name in ["FIRST", "SECOND"]:
    request = token_request(body.encode(), "application/x-www-form-urlencoded")
    status, text = send(request)
    print("%s %d %s" % (name, status, text.replace("\n", " ")))
"#;
    let program = place.token_script("retired.py", script);
    let output = place.run_program(&pki, "127.35.2.62", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    assert!(marked(&stdout, "FIRST 200").is_some(), "{context}");
    let second = marked(&stdout, "SECOND 403").expect(&context);
    assert!(second.contains("earlier refresh"), "{context}");
    let issued = issued(&server);
    assert_eq!(issued.len(), 1, "{context}");
    // The host file holds the first (and only) refresh's login.
    let file = place.file();
    assert_eq!(
        file["claudeAiOauth"]["refreshToken"], issued[0]["refresh_token"],
        "{context}"
    );
}

/// Two refresh grants of one login at once (rereview35 G4): both carry the current
/// refresh surrogate, the token endpoint takes 1.5 s to answer. The second waits for the
/// first and is then refused 403 (its surrogate retired): only one reaches the server
/// with the real refresh token (a provider that rotates refresh tokens could revoke the
/// login on the second use); the host file holds that one refresh.
#[test]
fn two_grants_of_one_login_at_once_reach_the_server_once() {
    let test = "two_grants_of_one_login_at_once_reach_the_server_once";
    let address = "127.35.2.63";
    if !namespaces_available(test) || !can_serve_443(address) {
        return;
    }
    let pki = TestPki::new();
    let place = Place::new(REAL_REFRESH);
    let server = SlowTokenServer::start(&pki, address, &place.logs().join("hits.jsonl"));
    let script = r#"
body = json.dumps({"grant_type": "refresh_token", "refresh_token": creds["refreshToken"],
                   "client_id": "c"}).encode()
start = threading.Barrier(2)
def grant(name):
    request = token_request(body, "application/json")
    start.wait()
    status, text = send(request)
    print("GRANT %d %s" % (status, text.replace("\n", " ")), flush=True)
threads = [threading.Thread(target=grant, args=(n,)) for n in "ab"]
[t.start() for t in threads]
[t.join() for t in threads]
"#;
    let program = place.token_script("twice.py", script);
    let started = std::time::Instant::now();
    let output = place.run_program(&pki, address, "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    let hits = server.hits();
    assert_eq!(
        hits,
        [REAL_REFRESH],
        "one grant reached the server: {context}"
    );
    let mut statuses: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("GRANT "))
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses.len(), 2, "{context}");
    assert!(statuses[0].starts_with("200 "), "{context}");
    assert!(
        statuses[1].starts_with("403 ") && statuses[1].contains("waited"),
        "{context}"
    );
    assert!(started.elapsed() >= SLOW_FOR, "the endpoint was slow");
    assert!(!stdout.contains(REAL_REFRESH), "{context}");
    let file = place.file();
    assert!(
        file["claudeAiOauth"]["refreshToken"]
            .as_str()
            .is_some_and(|token| token.contains("SLOWREFRESH0001")),
        "{file}"
    );
    assert_eq!(denied_lines(&place).len(), 1, "{context}");
}

/// A refresh grant whose `scope` leaves out a scope the file records (rereview35 G8) is
/// refused 403 before it is sent, with one audit line; one naming every recorded scope
/// (and more) goes out and is written back.
#[test]
fn a_down_scoped_refresh_is_refused_before_it_is_sent() {
    let test = "a_down_scoped_refresh_is_refused_before_it_is_sent";
    let Some((pki, place, server)) = setup("127.35.2.64", test, REAL_REFRESH) else {
        return;
    };
    // The file records `user:inference` (support::credential_refresh::Place).
    let script = r#"
for name, scope in [("DOWN", "user:profile"), ("FULL", "user:profile user:inference")]:
    body = json.dumps({"grant_type": "refresh_token", "refresh_token": creds["refreshToken"],
                       "client_id": "c", "scope": scope}).encode()
    status, text = send(token_request(body, "application/json"))
    print("%s %d %s" % (name, status, text.replace("\n", " ")))
"#;
    let program = place.token_script("scopes.py", script);
    let output = place.run_program(&pki, "127.35.2.64", "audit.jsonl", &program);
    let (stdout, context) = succeeded(&output);
    let down = marked(&stdout, "DOWN 403").expect(&context);
    assert!(down.contains("scope"), "{context}");
    assert!(marked(&stdout, "FULL 200").is_some(), "{context}");
    let requests = server.requests();
    let grants: Vec<&Value> = requests
        .iter()
        .filter(|r| r["method"] == "POST" && r["path"] == "/v1/oauth/token")
        .collect();
    assert_eq!(grants.len(), 1, "{context}");
    assert_eq!(grants[0]["body"]["scope"], "user:profile user:inference");
    let issued = issued(&server);
    assert_eq!(
        place.file()["claudeAiOauth"]["refreshToken"],
        issued[0]["refresh_token"]
    );
    let denied = denied_lines(&place);
    assert_eq!(denied.len(), 1, "one refusal, one line: {denied:?}");
    assert!(
        output.stderr.contains("airlock: 1 request refused"),
        "{context}"
    );
}

/// Runs starting at once on a fresh shared `AIRLOCK_HOME` (rereview35): one creates the
/// CA, every one uses it (before the lock, one could exit 125, "the CA key does not match
/// the CA certificate").
#[test]
fn runs_starting_at_once_on_a_fresh_home_share_one_ca() {
    let test = "runs_starting_at_once_on_a_fresh_home_share_one_ca";
    if !namespaces_available(test) {
        return;
    }
    let pki = TestPki::new();
    let place = Place::new(REAL_REFRESH);
    for round in 0..3 {
        let home = place.dir().join(format!("shared-home-{round}"));
        let outputs = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..6)
                .map(|n| {
                    let (place, pki, home) = (&place, &pki, &home);
                    scope.spawn(move || {
                        let log = format!("ca-{round}-{n}.jsonl");
                        let true_ = ["true".to_owned()];
                        let mut command = place.command(pki, "127.35.2.65", &log, &true_);
                        command.env("AIRLOCK_HOME", home);
                        crate::support::clients::run_bounded(
                            &mut command,
                            crate::support::run::RUN_TIMEOUT,
                        )
                    })
                })
                .collect();
            runs.into_iter()
                .map(|run| run.join().expect("join"))
                .collect::<Vec<_>>()
        });
        for output in &outputs {
            let (_, context) = outcome(output);
            assert_eq!(code(output), 0, "{context}");
        }
        assert!(home.join("ca.pem").is_file() && home.join("ca-key.pem").is_file());
    }
}
