//! Agent profiles, policy discovery and writable files under the real `airlock run`
//! (docs/agents.md; docs/contract.md, "Policy discovery and agent profiles"): a command
//! named `claude` runs with only a key, writes its state to the home and not its hook
//! settings; a deny rule beats the profile; `./airlock.yaml` and
//! `~/.config/airlock/policy.yaml` are found and named, and refusal hints name the file in
//! force. As root and, with `AIRLOCK_TEST_UID`, as an ordinary user (.ci/run).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::clients::{BoundedOutput, run_bounded};
use crate::support::run::{self, RUN_TIMEOUT, namespaces_available};
use crate::support::test_user;

/// The real key the runs are given (never seen inside).
const REAL_KEY: &str = "sk-ant-api03-REALKEYrealkeyREALKEYrealkey0123456789";

/// A home with a project and a `bin/claude` that runs its first argument with `sh -c`.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        // Not under /tmp: the jail has a private /tmp, and the home must be the host's.
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let place = Place { dir };
        std::fs::create_dir_all(place.project()).expect("project");
        std::fs::create_dir_all(place.dir.path().join("bin")).expect("bin");
        let claude = place.claude();
        std::fs::write(&claude, "#!/bin/sh\nexec /bin/sh -c \"$1\"\n").expect("claude");
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).expect("mode");
        place
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn project(&self) -> PathBuf {
        self.home().join("proj")
    }

    fn claude(&self) -> String {
        self.dir.path().join("bin/claude").display().to_string()
    }

    /// Writes `text` at `path` below the home (directories made).
    fn write(&self, path: &str, text: &str) {
        let path = self.home().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
        std::fs::write(path, text).expect("write");
    }

    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.home().join(path)).ok()
    }

    /// `airlock ARGS...` in the project with this home (as the test user when one is
    /// asked for: the tree is given to it first).
    fn airlock(&self, args: &[&str], env: &[(&str, &str)]) -> BoundedOutput {
        if let Some(uid) = test_user::uid() {
            test_user::chown_tree(self.dir.path(), uid);
        }
        let mut command = test_user::airlock(self.dir.path());
        command
            .args(args)
            .env_remove("XDG_CONFIG_HOME")
            .env("HOME", self.home())
            .env("AIRLOCK_HOME", self.dir.path().join("airlock"))
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir(self.project());
        for (name, value) in env {
            command.env(name, value);
        }
        run_bounded(&mut command, RUN_TIMEOUT)
    }

    /// `airlock run --secret ANTHROPIC_API_KEY@preset:anthropic ARGS...` with the real key
    /// in the environment.
    fn run_with_key(&self, args: &[&str]) -> BoundedOutput {
        let mut all = vec!["run", "--secret", "ANTHROPIC_API_KEY@preset:anthropic"];
        all.extend_from_slice(args);
        self.airlock(&all, &[("ANTHROPIC_API_KEY", REAL_KEY)])
    }
}

/// The stdout lines of a run that succeeded.
fn lines(output: &BoundedOutput) -> Vec<String> {
    assert_eq!(
        run::code(output),
        0,
        "airlock run failed: {}",
        output.stderr
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// What the command inside tries: each `escaped=` line is a failure of the jail.
const CLAUDE_PROBES: &str = r#"
[ "$CLAUDE_CONFIG_DIR" = "$HOME/.claude" ] && echo config_dir=ok
grep -q '"n":1' "$CLAUDE_CONFIG_DIR/.claude.json" && echo copy=start
mkdir "$CLAUDE_CONFIG_DIR/.claude.json.lock" && echo '{"n":2}' > "$CLAUDE_CONFIG_DIR/.claude.json.tmp" \
  && mv "$CLAUDE_CONFIG_DIR/.claude.json.tmp" "$CLAUDE_CONFIG_DIR/.claude.json" \
  && rmdir "$CLAUDE_CONFIG_DIR/.claude.json.lock" && echo wrote=json
(echo bad > "$HOME/.claude.json") 2>/dev/null && echo escaped=home_json
mkdir -p "$HOME/.claude/projects/p" && echo s > "$HOME/.claude/projects/p/1.jsonl" && echo wrote=state
echo ok > made && echo wrote=project
(echo bad > "$HOME/.claude/settings.json") 2>/dev/null && echo escaped=settings
(echo bad > "$HOME/.claude/hooks/h.sh") 2>/dev/null && echo escaped=hook
(echo bad > "$HOME/.claude/plugins/p.json") 2>/dev/null && echo escaped=plugins
[ -d "$HOME/.claude/plugins" ] || echo escaped=no_plugins_dir
(echo bad > "$HOME/.claude/CLAUDE.md") 2>/dev/null && echo escaped=memory
(rm -f "$HOME/.claude/settings.json") 2>/dev/null; [ -e "$HOME/.claude/settings.json" ] || echo escaped=removed
(echo bad > "$HOME/.claude.json.tmp") 2>/dev/null && echo escaped=sibling
(echo bad > "$HOME/other") 2>/dev/null && echo escaped=home
(mv "$HOME/.claude.json" "$HOME/.claude/moved") 2>/dev/null && echo escaped=renamed
cat "$HOME/.claude/.credentials.json" 2>/dev/null | grep -q CANARY && echo escaped=credentials
cat "$HOME/.ssh/id_ed25519" 2>/dev/null | grep -q CANARY && echo escaped=ssh
mkdir "$HOME/.claude/commands" && echo bad > "$HOME/.claude/commands/c.md" && echo planted=commands
echo "key=$ANTHROPIC_API_KEY"
"#;

#[test]
fn claude_runs_with_only_a_key_and_keeps_its_state_but_not_its_hooks() {
    if !namespaces_available("claude_runs_with_only_a_key_and_keeps_its_state_but_not_its_hooks") {
        return;
    }
    let place = Place::new();
    place.write(".claude.json", "{\"n\":1}\n");
    place.write(".claude/settings.json", "{\"hooks\":{}}\n");
    place.write(".claude/CLAUDE.md", "be nice\n");
    place.write(".claude/hooks/keep.sh", "true\n");
    place.write(".claude/.credentials.json", "CANARY-oauth\n");
    place.write(".ssh/id_ed25519", "CANARY-ssh\n");
    let output = place.run_with_key(&["--", &place.claude(), CLAUDE_PROBES]);
    let lines = lines(&output);
    let escaped: Vec<&String> = lines.iter().filter(|l| l.starts_with("escaped=")).collect();
    assert!(
        escaped.is_empty(),
        "{escaped:?}\n{lines:?}\n{}",
        output.stderr
    );
    for expected in [
        "config_dir=ok",
        "copy=start",
        "wrote=json",
        "wrote=state",
        "wrote=project",
        "planted=commands",
    ] {
        assert!(
            lines.iter().any(|l| l == expected),
            "no {expected}: {lines:?}\n{}",
            output.stderr
        );
    }
    let key = lines
        .iter()
        .find_map(|l| l.strip_prefix("key="))
        .expect("key line");
    assert!(key.starts_with("sk-ant-") && key != REAL_KEY, "{key}");
    assert_eq!(key.len(), REAL_KEY.len(), "{key}");
    assert!(
        output
            .stderr
            .contains("airlock: profile claude (version 2, Claude Code) added"),
        "{}",
        output.stderr
    );
    // On the host: the state written, the hook settings untouched, the planted commands
    // directory set aside.
    // The working copy went back to the home.
    assert_eq!(place.read(".claude.json").as_deref(), Some("{\"n\":2}\n"));
    assert_eq!(place.read(".claude/.claude.json"), None);
    assert_eq!(
        place.read(".claude/projects/p/1.jsonl").as_deref(),
        Some("s\n")
    );
    assert_eq!(
        place.read(".claude/settings.json").as_deref(),
        Some("{\"hooks\":{}}\n")
    );
    assert_eq!(
        place.read(".claude/CLAUDE.md").as_deref(),
        Some("be nice\n")
    );
    assert_eq!(place.read(".claude/hooks/h.sh"), None);
    assert!(!place.home().join(".claude/commands").exists());
    // `~/.claude` is private to the run (docs/secrets.md, "Private parent directories"):
    // the planted directory, a write-protected name, stayed there and was not copied back.
    assert!(
        output
            .stderr
            .contains(".claude/commands: the command's version was not copied back")
            && output.stderr.contains("a write-protected name"),
        "{}",
        output.stderr
    );
    // Made before the run, so read-only from the start rather than set aside after it.
    assert!(
        !place
            .home()
            .join(".claude/plugins.airlock-quarantine")
            .exists()
    );
    assert_eq!(place.read("other"), None);
}

#[test]
fn an_mcp_server_planted_in_claude_json_is_set_aside_and_not_copied_back() {
    if !namespaces_available(
        "an_mcp_server_planted_in_claude_json_is_set_aside_and_not_copied_back",
    ) {
        return;
    }
    let place = Place::new();
    let start = "{\"numStartups\":1,\"projects\":{}}\n";
    place.write(".claude.json", start);
    let planted = r#"{"numStartups":2,"mcpServers":{"x":{"command":"sh","args":["-c","id"]}}}"#;
    let script = format!("echo '{planted}' > \"$CLAUDE_CONFIG_DIR/.claude.json\" && echo planted");
    let output = place.run_with_key(&["--", &place.claude(), &script]);
    assert_eq!(lines(&output), ["planted"], "{}", output.stderr);
    assert_eq!(place.read(".claude.json").as_deref(), Some(start));
    assert_eq!(
        place
            .read(".claude/.claude.json.airlock-quarantine")
            .as_deref(),
        Some(format!("{planted}\n").as_str())
    );
    assert!(output.stderr.contains("mcpServers"), "{}", output.stderr);
}

#[test]
fn a_first_run_creates_the_state_and_no_key_says_what_to_do() {
    let place = Place::new();
    // No key: refused before anything starts (125), naming the flag; nothing created.
    let output = place.airlock(&["run", "--", &place.claude(), "true"], &[]);
    assert_eq!(run::code(&output), 125, "{}", output.stderr);
    assert!(
        output
            .stderr
            .contains("--secret ANTHROPIC_API_KEY@preset:anthropic"),
        "{}",
        output.stderr
    );
    assert!(!place.home().join(".claude").exists());
    if !namespaces_available("a_first_run_creates_the_state_and_no_key_says_what_to_do") {
        return;
    }
    let script = "echo '{}' > \"$CLAUDE_CONFIG_DIR/.claude.json\" && echo s > \"$HOME/.claude/s\" && echo ok";
    let lines = lines(&place.run_with_key(&["--", &place.claude(), script]));
    assert_eq!(lines, ["ok"]);
    let mode = |path: &str| {
        std::fs::metadata(place.home().join(path))
            .expect("created")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(".claude"), 0o700);
    assert_eq!(mode(".claude.json"), 0o600);
    assert_eq!(place.read(".claude.json").as_deref(), Some("{}\n"));
}

#[test]
fn profile_none_refuses_the_profile_and_profile_names_one_for_any_command() {
    if !namespaces_available(
        "profile_none_refuses_the_profile_and_profile_names_one_for_any_command",
    ) {
        return;
    }
    let place = Place::new();
    place.write(".claude/x", "{}\n");
    let script = "(echo x > \"$HOME/.claude/x\") 2>/dev/null && echo wrote || echo refused";
    let none = place.run_with_key(&["--profile", "none", "--", &place.claude(), script]);
    assert_eq!(lines(&none), ["refused"]);
    assert!(!none.stderr.contains("airlock: profile"), "{}", none.stderr);
    let named = place.run_with_key(&["--profile", "claude", "--", "sh", "-c", script]);
    assert_eq!(lines(&named), ["wrote"]);
    assert!(
        named.stderr.contains("airlock: profile claude"),
        "{}",
        named.stderr
    );
    let unknown = place.run_with_key(&["--profile", "cursor", "--", "true"]);
    assert_eq!(run::code(&unknown), 125, "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("claude, codex, aider, gemini"),
        "{}",
        unknown.stderr
    );
}

/// The JSON refusal printed after `marker`.
fn refusal(stdout: &[u8], marker: &str) -> Value {
    run::json_after(&String::from_utf8_lossy(stdout), marker)
}

/// Two requests inside: the API host (denied or allowed by the profile) and an unlisted
/// host; each answer after its marker.
const TWO_REQUESTS: &str = "echo API; curl -sS --max-time 20 -X POST https://api.anthropic.com/v1/messages; echo; \
     echo UNLISTED; curl -sS --max-time 20 https://unlisted.example/x; echo";

#[test]
fn a_deny_rule_of_the_discovered_policy_beats_the_profile_and_hints_name_it() {
    if !namespaces_available(
        "a_deny_rule_of_the_discovered_policy_beats_the_profile_and_hints_name_it",
    ) {
        return;
    }
    crate::support::need_all(&["curl"]);
    let place = Place::new();
    place.write(
        "proj/airlock.yaml",
        "version: 1\nnetwork:\n  allow:\n    - host: allowed.example\n  deny:\n    - host: api.anthropic.com\n",
    );
    let output = place.run_with_key(&["--", &place.claude(), TWO_REQUESTS]);
    assert_eq!(run::code(&output), 0, "{}", output.stderr);
    assert!(
        output
            .stderr
            .contains("airlock: policy ./airlock.yaml (found"),
        "{}",
        output.stderr
    );
    let api = refusal(&output.stdout, "API");
    assert_eq!(api["reason"], "denied_by_rule", "{api}");
    assert_eq!(api["rule"], "./airlock.yaml:network.deny[0]", "{api}");
    assert!(
        api["hint"]
            .as_str()
            .is_some_and(|h| h.contains("in ./airlock.yaml")),
        "{api}"
    );
    let unlisted = refusal(&output.stdout, "UNLISTED");
    assert_eq!(unlisted["reason"], "host_not_allowed", "{unlisted}");
    assert_eq!(
        unlisted["hint"], "add `- host: unlisted.example` under network.allow in ./airlock.yaml",
        "{unlisted}"
    );
}

/// Runs `sh -c` with one request to an unlisted host; returns stderr and the refusal.
fn unlisted(place: &Place, args: &[&str], env: &[(&str, &str)]) -> (String, Value) {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--",
        "sh",
        "-c",
        "echo UNLISTED; curl -sS --max-time 20 https://unlisted.example/x; echo",
    ]);
    let output = place.airlock(&all, env);
    assert_eq!(run::code(&output), 0, "{}", output.stderr);
    (output.stderr.clone(), refusal(&output.stdout, "UNLISTED"))
}

#[test]
fn discovery_reads_the_working_directory_then_the_user_config_and_hints_follow() {
    if !namespaces_available(
        "discovery_reads_the_working_directory_then_the_user_config_and_hints_follow",
    ) {
        return;
    }
    crate::support::need_all(&["curl"]);
    let place = Place::new();
    let policy = "version: 1\nnetwork:\n  allow:\n    - host: allowed.example\n";
    // The user's configuration alone.
    place.write(".config/airlock/policy.yaml", policy);
    let config = place
        .home()
        .join(".config/airlock/policy.yaml")
        .display()
        .to_string();
    let (stderr, body) = unlisted(&place, &[], &[]);
    assert!(
        stderr.contains(&format!("airlock: policy {config} (found")),
        "{stderr}"
    );
    let hint = format!("add `- host: unlisted.example` under network.allow in {config}");
    assert_eq!(body["hint"], hint.as_str(), "{body}");
    // XDG_CONFIG_HOME, when set, is where the user's configuration is.
    place.write("xdg/airlock/policy.yaml", policy);
    let xdg = place.home().join("xdg");
    let xdg_text = xdg.display().to_string();
    let (stderr, _) = unlisted(&place, &[], &[("XDG_CONFIG_HOME", &xdg_text)]);
    let xdg_policy = xdg.join("airlock/policy.yaml").display().to_string();
    assert!(
        stderr.contains(&format!("airlock: policy {xdg_policy} (found")),
        "{stderr}"
    );
    // The working directory's wins.
    place.write("proj/airlock.yaml", policy);
    let (stderr, body) = unlisted(&place, &[], &[]);
    assert!(
        stderr.contains("airlock: policy ./airlock.yaml (found"),
        "{stderr}"
    );
    assert!(!stderr.contains(&config), "{stderr}");
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.ends_with("in ./airlock.yaml")),
        "{body}"
    );
    // Rules named on the command line: nothing is discovered, the hint says --allow.
    let (stderr, body) = unlisted(&place, &["--allow", "allowed.example"], &[]);
    assert!(!stderr.contains("(found"), "{stderr}");
    assert!(
        body["hint"]
            .as_str()
            .is_some_and(|h| h.starts_with("add `--allow unlisted.example` to the command line")),
        "{body}"
    );
}

#[test]
fn a_writable_file_is_writable_and_its_siblings_are_not() {
    let place = Place::new();
    place.write("notes.txt", "old\n");
    place.write("other.txt", "keep\n");
    let policy = place.dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\nfilesystem:\n  writable: [\".\", \"~/notes.txt\"]\n",
    )
    .expect("policy");
    let policy = policy.display().to_string();
    let explain = |path: &str| {
        let path = place.home().join(path).display().to_string();
        let args = [
            "policy", "explain", "--policy", &policy, "--fs", &path, "--json",
        ];
        let output = place.airlock(&args, &[]);
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        value["access"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(explain("notes.txt"), "write");
    assert_eq!(explain("other.txt"), "read");
    if !namespaces_available("a_writable_file_is_writable_and_its_siblings_are_not") {
        return;
    }
    let script = "echo new > \"$HOME/notes.txt\" && echo wrote=notes; \
                  (echo bad > \"$HOME/other.txt\") 2>/dev/null && echo escaped=sibling; \
                  (echo bad > \"$HOME/notes.txt.tmp\") 2>/dev/null && echo escaped=new; \
                  (rm \"$HOME/notes.txt\") 2>/dev/null && echo escaped=removed; echo done";
    let output = place.airlock(&["run", "--policy", &policy, "--", "sh", "-c", script], &[]);
    assert_eq!(lines(&output), ["wrote=notes", "done"], "{}", output.stderr);
    assert_eq!(place.read("notes.txt").as_deref(), Some("new\n"));
    assert_eq!(place.read("other.txt").as_deref(), Some("keep\n"));
    assert_eq!(place.read("notes.txt.tmp"), None);
    // A missing file is not made: the run says which entry and stops (125).
    std::fs::write(
        place.dir.path().join("policy.yaml"),
        "version: 1\nfilesystem:\n  writable: [\".\", \"~/absent.txt\"]\n",
    )
    .expect("policy");
    let output = place.airlock(&["run", "--policy", &policy, "--", "true"], &[]);
    assert_eq!(run::code(&output), 125, "{}", output.stderr);
    assert!(output.stderr.contains("~/absent.txt"), "{}", output.stderr);
}
