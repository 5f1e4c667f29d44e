use std::os::unix::fs::PermissionsExt as _;

use super::*;

const CLAUDE: &str = "{\n  \"claudeAiOauth\": {\n    \"accessToken\": \"sk-ant-oat01-OLD\",\n    \"refreshToken\": \"sk-ant-ort01-OLD\",\n    \"expiresAt\": 1000,\n    \"scopes\": [\"user:inference\"]\n  }\n}\n";

fn tokens(tag: &str, expires_in: u64) -> NewTokens {
    NewTokens {
        access: Some(format!("sk-ant-oat01-{tag}")),
        refresh: Some(format!("sk-ant-ort01-{tag}")),
        id: None,
        expires_in: Some(expires_in),
    }
}

fn stamp(ms: u64) -> Stamp {
    Stamp {
        unix_ms: ms,
        rfc3339: String::new(),
    }
}

fn setup(mode: u32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("home")).expect("home");
    let path = dir.path().join("home/.credentials.json");
    std::fs::write(&path, CLAUDE).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    (dir, path)
}

/// airlock's own directory for the crash copies (made by the write-back).
fn state(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("airlock-home").join(STATE_DIR)
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_refresh_is_written_in_place_keeping_the_mode() {
    let (dir, path) = setup(0o640);
    let home = dir.path().join("home");
    let inode = std::fs::metadata(&path).expect("stat").ino();
    let outcome = write_back(
        Login::Claude,
        &path,
        &tokens("NEW", 3600),
        Some("sk-ant-ort01-OLD"),
        &stamp(5_000),
        &state(&dir),
    );
    assert_eq!(outcome, Ok(Outcome::Written));
    let after = std::fs::read_to_string(&path).expect("read");
    let expected = CLAUDE
        .replace("oat01-OLD", "oat01-NEW")
        .replace("ort01-OLD", "ort01-NEW")
        .replace("1000", "3605000");
    assert_eq!(after, expected);
    let meta = std::fs::metadata(&path).expect("stat");
    assert_eq!(meta.mode() & 0o777, 0o640);
    // In place: a bind mount over the file in a running jail stays attached.
    assert_eq!(meta.ino(), inode);
    // Only the file is left in its directory (the command may see it): no lock file,
    // no copy; the crash copy went to airlock's own directory and was removed.
    assert_eq!(entries(&home), [".credentials.json"]);
    assert!(entries(&state(&dir)).is_empty());
    let mode = std::fs::metadata(state(&dir)).expect("state").mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn a_newer_refresh_by_another_run_is_kept_and_an_older_one_replaced() {
    let (dir, path) = setup(0o600);
    // Another run wrote a refresh expiring at 10_000_000.
    let theirs = tokens("THEIRS", 10_000);
    write_back(Login::Claude, &path, &theirs, None, &stamp(0), &state(&dir)).expect("theirs");
    let outcome = write_back(
        Login::Claude,
        &path,
        &tokens("OURS", 60),
        Some("sk-ant-ort01-OLD"),
        &stamp(0),
        &state(&dir),
    );
    assert_eq!(outcome, Ok(Outcome::KeptNewer));
    assert!(
        std::fs::read_to_string(&path)
            .expect("read")
            .contains("THEIRS")
    );
    let outcome = write_back(
        Login::Claude,
        &path,
        &tokens("LATER", 10_000),
        Some("sk-ant-ort01-OLD"),
        &stamp(1),
        &state(&dir),
    );
    assert_eq!(outcome, Ok(Outcome::Merged));
    assert!(
        std::fs::read_to_string(&path)
            .expect("read")
            .contains("LATER")
    );
}

#[test]
fn concurrent_write_backs_leave_the_freshest_login() {
    let (dir, path) = setup(0o600);
    let threads: Vec<_> = (0..8u64)
        .map(|n| {
            let path = path.clone();
            let state = state(&dir);
            std::thread::spawn(move || {
                write_back(
                    Login::Claude,
                    &path,
                    &tokens(&format!("T{n}"), 100 + n),
                    Some("sk-ant-ort01-OLD"),
                    &stamp(0),
                    &state,
                )
            })
        })
        .collect();
    for thread in threads {
        assert!(thread.join().expect("join").is_ok());
    }
    let after = std::fs::read_to_string(&path).expect("read");
    let value: serde_json::Value = serde_json::from_str(&after).expect("valid JSON");
    assert_eq!(value["claudeAiOauth"]["refreshToken"], "sk-ant-ort01-T7");
    assert_eq!(value["claudeAiOauth"]["expiresAt"], 107_000);
    assert_eq!(entries(&dir.path().join("home")).len(), 1);
}

#[test]
fn an_unusable_file_is_left_alone() {
    let (dir, path) = setup(0o600);
    std::fs::write(&path, "{not json").expect("write");
    let state = state(&dir);
    let outcome = write_back(
        Login::Claude,
        &path,
        &tokens("X", 1),
        None,
        &stamp(0),
        &state,
    );
    assert!(outcome.is_err());
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "{not json");
    let missing = path.with_file_name("absent.json");
    assert!(
        write_back(
            Login::Claude,
            &missing,
            &tokens("X", 1),
            None,
            &stamp(0),
            &state
        )
        .is_err()
    );
}

#[test]
fn watches_are_built_from_the_projected_names() {
    let audit = AuditLog::disabled();
    let files = [
        LoginFile {
            login: Login::Codex,
            file: PathBuf::from("/h/.codex/auth.json"),
            copy: None,
            tokens: vec![
                ("file:codex:access_token".into(), "a".into()),
                ("file:codex:refresh_token".into(), "r".into()),
                ("file:codex:id_token".into(), "i".into()),
                ("file:codex:OPENAI_API_KEY".into(), "k".into()),
            ],
        },
        LoginFile {
            login: Login::Claude,
            file: PathBuf::from("/h/.claude/.credentials.json"),
            copy: None,
            tokens: vec![("file:claude:accessToken".into(), "a".into())],
        },
    ];
    let refreshes = refreshes(&files, &audit, Path::new("/nonexistent")).expect("one watch");
    assert_eq!(refreshes.watches.len(), 1);
    let watch = &refreshes.watches[0];
    assert_eq!(watch.secret(Field::Id), Some("file:codex:id_token"));
    assert_eq!(watch.secrets.len(), 3);
}

#[test]
fn a_fifo_or_a_held_lock_in_place_of_the_file_fails_within_a_bound() {
    let (dir, path) = setup(0o600);
    let started = std::time::Instant::now();
    // Another holder of the lock (the command cannot open the host file; another process
    // may): the write-back gives up after LOCK_WAIT, never hangs.
    let held =
        Flock::lock(File::open(&path).expect("open"), FlockArg::LockExclusive).expect("held");
    let outcome = write_back(
        Login::Claude,
        &path,
        &tokens("X", 1),
        None,
        &stamp(0),
        &state(&dir),
    );
    assert!(outcome.is_err_and(|e| e.contains("lock")));
    drop(held);
    // A FIFO: opened without blocking, refused as not a regular file.
    std::fs::remove_file(&path).expect("rm");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let outcome = write_back(
        Login::Claude,
        &path,
        &tokens("X", 1),
        None,
        &stamp(0),
        &state(&dir),
    );
    assert!(outcome.is_err_and(|e| e.contains("regular")));
    assert!(started.elapsed() < LOCK_WAIT + Duration::from_secs(3));
}

#[test]
fn a_state_directory_others_can_read_is_refused() {
    let (dir, path) = setup(0o600);
    let state = state(&dir);
    std::fs::create_dir_all(&state).expect("state");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let outcome = write_back(
        Login::Claude,
        &path,
        &tokens("X", 1),
        None,
        &stamp(0),
        &state,
    );
    assert!(outcome.is_err_and(|e| e.contains("private")));
    assert_eq!(std::fs::read_to_string(&path).expect("read"), CLAUDE);
}

#[test]
fn the_sink_runs_inside_a_multi_thread_runtime() {
    // The proxy calls the sink from an async task: the blocking part moves off the worker.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .expect("runtime");
    let ran = runtime.block_on(async { tokio::spawn(async { blocking(|| 7) }).await });
    assert_eq!(ran.expect("joined"), 7);
    assert_eq!(blocking(|| 8), 8);
}
