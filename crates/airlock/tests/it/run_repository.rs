//! Nothing the command writes reaches the host's git or tools later (docs/security.md,
//! "What the command can read and write"): each test runs a hostile command inside
//! `airlock run` that plants one way of making the host run code (a replaced `.git`, a
//! `commondir`, a `config.worktree`, a worktree or module git directory, a hooks directory
//! named by `core.hooksPath`, an `includeIf` target, tool configuration), then runs the
//! host's real `git status` and `git commit` in the project and checks that the marker
//! file the planted code would create never appears. Run as root and, with
//! `AIRLOCK_TEST_UID`, as an ordinary user (support/test_user.rs); the host's git runs as
//! the same user as airlock.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::clients::BoundedOutput;
use crate::support::run::{self, RunHome};
use crate::support::test_user;

/// A project with a repository (one empty commit), and where the planted code would leave
/// its mark on the host.
struct Repo {
    home: RunHome,
    project: PathBuf,
    marker: PathBuf,
}

impl Repo {
    /// A project holding a repository; `setup` runs on the host before the user gets it.
    fn new(setup: impl Fn(&Repo)) -> Repo {
        let home = RunHome::new();
        let project = home.scratch();
        let marker = project.parent().expect("parent").join("markers/fired");
        std::fs::create_dir_all(marker.parent().expect("markers")).expect("markers");
        let repo = Repo {
            home,
            project,
            marker,
        };
        repo.git_in(&repo.project, &["init", "-q", "-b", "main"]);
        repo.git_in(
            &repo.project,
            &["commit", "-q", "--allow-empty", "-m", "init"],
        );
        setup(&repo);
        repo.adopt();
        repo
    }

    /// A submodule's layout: its repository under `.git/modules/NAME`, a `.git` file in
    /// `NAME` pointing there.
    fn add_submodule(&self, name: &str) {
        std::fs::create_dir_all(self.project.join(".git/modules")).expect("modules");
        self.adopt();
        let git_dir = format!("--separate-git-dir=.git/modules/{name}");
        self.git_in(&self.project, &["init", "-q", "-b", "main", &git_dir, name]);
    }

    /// Hands everything to the test user (when there is one).
    fn adopt(&self) {
        if let Some(uid) = test_user::uid() {
            test_user::chown_tree(self.project.parent().expect("parent"), uid);
        }
    }

    /// A shell script that creates the marker: what every planted hook runs.
    fn payload(&self) -> String {
        format!("#!/bin/sh\ntouch '{}'\n", self.marker.display())
    }

    /// `sh -c SCRIPT` inside `airlock run`, with `$PAYLOAD` the marker script and `$P` the
    /// project. Returns airlock's output.
    fn attack(&self, script: &str) -> BoundedOutput {
        let payload = self.payload();
        let project = self.project.display().to_string();
        let mut env = git_env();
        env.push(("PAYLOAD", payload.as_str()));
        env.push(("P", project.as_str()));
        let log = self.home.log_path().display().to_string();
        self.home
            .run_with_env(&["--log", &log, "--", "sh", "-c", script], &env)
    }

    /// The host's git in `dir`, as the user airlock runs as.
    fn git_in(&self, dir: &Path, args: &[&str]) -> Output {
        let mut command = match test_user::uid() {
            Some(uid) => {
                let mut command = test_user::wrap(uid);
                command.arg("git");
                command
            }
            None => Command::new("git"),
        };
        command.args(args).current_dir(dir).env_clear();
        command.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        command.env("HOME", self.project.parent().expect("parent"));
        command.envs(git_env());
        command
            .output()
            .unwrap_or_else(|e| panic!("git is needed for these tests: {e}"))
    }

    /// The host's `git status` and `git commit` in `dir`, as a user would after the run;
    /// then the marker must be absent.
    fn host_git_runs_nothing(&self, dir: &Path) {
        let status = self.git_in(dir, &["status", "--short"]);
        let commit = self.git_in(dir, &["commit", "-q", "--allow-empty", "-m", "after"]);
        assert!(
            !self.marker.exists(),
            "the host's git ran code the command wrote\nstatus: {}\ncommit: {}",
            String::from_utf8_lossy(&status.stderr),
            String::from_utf8_lossy(&commit.stderr)
        );
    }

    /// Whether `relative` is absent and its quarantined twin present.
    fn quarantined(&self, relative: &str) -> bool {
        let path = self.project.join(relative);
        let twin = PathBuf::from(format!("{}.airlock-quarantine", path.display()));
        std::fs::symlink_metadata(&path).is_err() && std::fs::symlink_metadata(twin).is_ok()
    }
}

/// The git identity and a configuration of the user's that holds nothing.
fn git_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_AUTHOR_NAME", "a"),
        ("GIT_AUTHOR_EMAIL", "a@example.com"),
        ("GIT_COMMITTER_NAME", "a"),
        ("GIT_COMMITTER_EMAIL", "a@example.com"),
    ]
}

/// The code of a run that airlock itself completed.
fn completed(output: &BoundedOutput) -> i32 {
    let code = run::code(output);
    assert_ne!(code, 125, "airlock failed: {}", output.stderr);
    code
}

/// Writes `$PAYLOAD` as an executable script at `$1`.
const PLANT: &str = "plant() { mkdir -p \"$(dirname \"$1\")\" && printf '%s' \"$PAYLOAD\" > \"$1\" \
                     && chmod +x \"$1\"; }\n";

fn skip(test: &str) -> bool {
    !run::namespaces_available(test)
}

#[test]
fn a_moved_git_directory_and_a_new_one_with_fsmonitor_and_hooks_run_nothing() {
    if skip("a_moved_git_directory_and_a_new_one_with_fsmonitor_and_hooks_run_nothing") {
        return;
    }
    let repo = Repo::new(|_| {});
    let output = repo.attack(&format!(
        "{PLANT}mv .git .git-orig; git init -q . ; plant \"$P/fsmon\"; \
         git config core.fsmonitor \"$P/fsmon\"; plant .git/hooks/pre-commit; true"
    ));
    completed(&output);
    repo.host_git_runs_nothing(&repo.project);
    assert!(
        output.stderr.contains("Device or resource busy"),
        "the rename must fail: {}",
        output.stderr
    );
    assert!(repo.project.join(".git/config").is_file() && !repo.project.join(".git-orig").exists());
}

#[test]
fn a_commondir_pointing_at_a_planted_configuration_runs_nothing() {
    if skip("a_commondir_pointing_at_a_planted_configuration_runs_nothing") {
        return;
    }
    let repo = Repo::new(|_| {});
    let output = repo.attack(&format!(
        "{PLANT}mkdir -p .evil/objects .evil/refs/heads; cp -r .git/objects/. .evil/objects/; \
         cp .git/refs/heads/main .evil/refs/heads/main; plant .evil/fsmon; \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = %s/.evil/fsmon\\n' \"$P\" \
         > .evil/config; plant .evil/hooks/pre-commit; echo ../.evil > .git/commondir"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    repo.host_git_runs_nothing(&repo.project);
    assert!(repo.quarantined(".git/commondir"), "{}", output.stderr);
}

#[test]
fn a_config_worktree_runs_nothing() {
    if skip("a_config_worktree_runs_nothing") {
        return;
    }
    // The user has per-worktree configuration enabled (sparse checkouts need it).
    let repo = Repo::new(|repo| {
        repo.git_in(
            &repo.project,
            &["config", "core.repositoryformatversion", "1"],
        );
        repo.git_in(
            &repo.project,
            &["config", "extensions.worktreeConfig", "true"],
        );
    });
    let output = repo.attack(&format!(
        "{PLANT}plant \"$P/fsmon\"; printf '[core]\\n\\tfsmonitor = %s/fsmon\\n' \"$P\" \
         > .git/config.worktree"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    repo.host_git_runs_nothing(&repo.project);
    assert!(
        repo.quarantined(".git/config.worktree"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_planted_worktree_and_its_gitdir_file_run_nothing() {
    if skip("a_planted_worktree_and_its_gitdir_file_run_nothing") {
        return;
    }
    let repo = Repo::new(|_| {});
    // The worktree's common directory is a planted one with a configuration and hooks.
    let output = repo.attack(&format!(
        "{PLANT}mkdir -p .evil/objects .evil/refs/heads wt; cp -r .git/objects/. .evil/objects/; \
         cp .git/refs/heads/main .evil/refs/heads/main; plant .evil/fsmon; \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = %s/.evil/fsmon\\n' \"$P\" \
         > .evil/config; plant .evil/hooks/pre-commit; w=.git/worktrees/x; mkdir -p $w; \
         cp .git/HEAD $w/HEAD; echo \"$P/.evil\" > $w/commondir; echo \"$P/wt/.git\" > $w/gitdir; \
         printf 'gitdir: %s/.git/worktrees/x\\n' \"$P\" > wt/.git"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    repo.host_git_runs_nothing(&repo.project.join("wt"));
    repo.host_git_runs_nothing(&repo.project);
    assert!(repo.quarantined(".git/worktrees") && repo.quarantined("wt/.git"));
}

#[test]
fn a_planted_module_git_directory_runs_nothing() {
    if skip("a_planted_module_git_directory_runs_nothing") {
        return;
    }
    let repo = Repo::new(|_| {});
    let output = repo.attack(&format!(
        "{PLANT}git init -q --bare .git/modules/sub && mkdir sub && \
         printf 'gitdir: ../.git/modules/sub\\n' > sub/.git && plant \"$P/fsmon\" && \
         git -C .git/modules/sub config core.bare false && \
         git -C .git/modules/sub config core.worktree ../../../sub && \
         git -C .git/modules/sub config core.fsmonitor \"$P/fsmon\" && \
         plant .git/modules/sub/hooks/pre-commit"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    repo.host_git_runs_nothing(&repo.project.join("sub"));
    // The module's repository stays (objects, refs); what runs code is set aside.
    assert!(
        repo.quarantined(".git/modules/sub/config")
            && repo.quarantined(".git/modules/sub/hooks")
            && repo.quarantined("sub/.git"),
        "{}",
        output.stderr
    );
}

#[test]
fn git_info_cannot_be_written() {
    if skip("git_info_cannot_be_written") {
        return;
    }
    let repo = Repo::new(|_| {});
    let output = repo.attack("echo '* filter=tool' >> .git/info/attributes; true");
    completed(&output);
    assert!(
        !repo.project.join(".git/info/attributes").exists(),
        "{}",
        output.stderr
    );
}

#[test]
fn the_hooks_path_directory_runs_nothing_whether_or_not_it_existed() {
    if skip("the_hooks_path_directory_runs_nothing_whether_or_not_it_existed") {
        return;
    }
    // An existing hooks directory with a harmless hook, named by core.hooksPath.
    let existing = Repo::new(|repo| {
        let hooks = repo.project.join("tools/hooks");
        std::fs::create_dir_all(&hooks).expect("hooks");
        std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\nexit 0\n").expect("hook");
        repo.git_in(&repo.project, &["config", "core.hooksPath", "tools/hooks"]);
    });
    let output = existing.attack(&format!("{PLANT}plant tools/hooks/pre-commit; true"));
    completed(&output);
    existing.host_git_runs_nothing(&existing.project);
    // A hooks directory named but absent at the start (husky before `npm install`).
    let absent = Repo::new(|repo| {
        repo.git_in(&repo.project, &["config", "core.hooksPath", "githooks"]);
    });
    let output = absent.attack(&format!("{PLANT}plant githooks/pre-commit"));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    assert!(absent.quarantined("githooks"), "{}", output.stderr);
    absent.host_git_runs_nothing(&absent.project);
}

#[test]
fn an_include_if_target_runs_nothing() {
    if skip("an_include_if_target_runs_nothing") {
        return;
    }
    let repo = Repo::new(|repo| {
        repo.git_in(
            &repo.project,
            &["config", "includeIf.gitdir:/.path", "../.gitlocal"],
        );
    });
    let output = repo.attack(&format!(
        "{PLANT}plant \"$P/fsmon\"; printf '[core]\\n\\tfsmonitor = %s/fsmon\\n' \"$P\" > .gitlocal"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    repo.host_git_runs_nothing(&repo.project);
    assert!(repo.quarantined(".gitlocal"), "{}", output.stderr);
}

#[test]
fn tool_configuration_created_during_the_run_is_quarantined_even_when_killed() {
    if skip("tool_configuration_created_during_the_run_is_quarantined_even_when_killed") {
        return;
    }
    let repo = Repo::new(|repo| {
        std::fs::create_dir_all(repo.project.join(".vscode")).expect("vscode");
        std::fs::write(repo.project.join(".vscode/tasks.json"), "{}").expect("tasks");
    });
    let created = [
        ".cursor",
        ".gemini",
        ".cargo/config.toml",
        ".npmrc",
        ".envrc",
        "sub/.mcp.json",
        "mise.toml",
        ".pre-commit-config.yaml",
    ];
    let output = repo.attack(
        "mkdir -p .cursor .gemini .cargo sub && echo '{}' > .cursor/mcp.json && \
         echo '{}' > .gemini/settings.json && \
         printf '[target.x86_64-unknown-linux-gnu]\\nrunner = \"sh\"\\n' > .cargo/config.toml && \
         ln -s /etc/passwd .npmrc && echo 'touch x' > .envrc && echo '{}' > sub/.mcp.json && \
         echo '[tasks]' > mise.toml && echo 'repos: []' > .pre-commit-config.yaml; \
         echo '{\"tasks\":[]}' > .vscode/tasks.json; kill -9 $$",
    );
    assert_eq!(completed(&output), 137, "{}", output.stderr);
    for name in created {
        assert!(repo.quarantined(name), "{name}: {}", output.stderr);
    }
    assert!(
        std::fs::symlink_metadata(repo.project.join(".npmrc.airlock-quarantine"))
            .expect("link")
            .is_symlink()
    );
    let tasks = std::fs::read_to_string(repo.project.join(".vscode/tasks.json")).expect("tasks");
    assert_eq!(tasks, "{}");
    let quarantines = repo
        .home
        .audit_lines()
        .into_iter()
        .filter(|line| line["kind"] == "fs" && line["reason"] == "quarantined")
        .count();
    assert_eq!(
        quarantines,
        created.len(),
        "one audit line per quarantined name"
    );
}

#[test]
fn a_repository_created_in_the_run_keeps_its_commits_but_not_its_hooks() {
    if skip("a_repository_created_in_the_run_keeps_its_commits_but_not_its_hooks") {
        return;
    }
    let repo = Repo::new(|repo| {
        std::fs::create_dir_all(repo.project.join("fresh")).expect("fresh");
    });
    let output = repo.attack(&format!(
        "{PLANT}cd fresh && git init -q -b main . && echo work > work.txt && git add work.txt && \
         git commit -q -m agent-work && plant \"$P/fsmon\" && \
         git config core.fsmonitor \"$P/fsmon\" && plant .git/hooks/pre-commit"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    let fresh = repo.project.join("fresh");
    repo.host_git_runs_nothing(&fresh);
    assert!(repo.quarantined("fresh/.git/config") && repo.quarantined("fresh/.git/hooks"));
    let log = repo.git_in(&fresh, &["log", "--format=%s"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains("agent-work"),
        "the agent's commit survives: {log}"
    );
}

#[test]
fn a_subdirectory_shaped_as_a_bare_repository_runs_nothing() {
    if skip("a_subdirectory_shaped_as_a_bare_repository_runs_nothing") {
        return;
    }
    let repo = Repo::new(|_| {});
    let output = repo.attack(&format!(
        "{PLANT}mkdir src && cd src && git init -q --bare . && git config core.bare false && \
         git config core.worktree .. && plant \"$P/fsmon\" && \
         git config core.fsmonitor \"$P/fsmon\" && plant hooks/pre-commit"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    repo.host_git_runs_nothing(&repo.project.join("src"));
    assert!(repo.quarantined("src/config") && repo.quarantined("src/hooks"));
}

#[test]
fn legitimate_work_and_commits_inside_survive_untouched() {
    if skip("legitimate_work_and_commits_inside_survive_untouched") {
        return;
    }
    let repo = Repo::new(|repo| {
        std::fs::write(repo.project.join("main.rs"), "fn main() {}\n").expect("file");
        repo.git_in(&repo.project, &["add", "main.rs"]);
        repo.git_in(&repo.project, &["commit", "-q", "-m", "base"]);
    });
    let output = repo.attack(
        "echo '// edited' >> main.rs && mkdir -p src && echo x > src/lib.rs && \
         git add -A && git commit -q -m inside-the-jail && git status --short",
    );
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    assert!(!output.stderr.contains("quarantined"), "{}", output.stderr);
    let log = repo.git_in(&repo.project, &["log", "--format=%s"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.starts_with("inside-the-jail\n"), "{log}");
    let text = std::fs::read_to_string(repo.project.join("main.rs")).expect("main.rs");
    assert_eq!(text, "fn main() {}\n// edited\n");
    repo.host_git_runs_nothing(&repo.project);
}

#[test]
fn an_existing_submodule_commits_inside_but_its_hooks_and_config_stay_read_only() {
    if skip("an_existing_submodule_commits_inside_but_its_hooks_and_config_stay_read_only") {
        return;
    }
    let repo = Repo::new(|repo| {
        repo.add_submodule("sub");
        repo.git_in(
            &repo.project.join("sub"),
            &["commit", "-q", "--allow-empty", "-m", "sub-init"],
        );
    });
    let output = repo.attack(&format!(
        "{PLANT}cd sub && echo x > f && git add f && git commit -q -m inside-the-submodule && \
         echo COMMITTED; plant ../.git/modules/sub/hooks/pre-commit 2>/dev/null \
         || echo HOOKS-READ-ONLY; git config core.fsmonitor \"$P/fsmon\" 2>/dev/null \
         || echo CONFIG-READ-ONLY"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in ["COMMITTED", "HOOKS-READ-ONLY", "CONFIG-READ-ONLY"] {
        assert!(stdout.contains(line), "{line}: {stdout}\n{}", output.stderr);
    }
    let log = repo.git_in(&repo.project.join("sub"), &["log", "--format=%s"]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.starts_with("inside-the-submodule\n"), "{log}");
    repo.host_git_runs_nothing(&repo.project.join("sub"));
}

#[test]
fn a_repository_planted_where_the_walk_does_not_look_and_linked_in_the_index_runs_nothing() {
    if skip(
        "a_repository_planted_where_the_walk_does_not_look_and_linked_in_the_index_runs_nothing",
    ) {
        return;
    }
    let repo = Repo::new(|_| {});
    // `node_modules` is not walked; a gitlink in the (writable) index makes the host's
    // `git status` recurse into the repository planted there, with its configuration.
    let output = repo.attack(&format!(
        "{PLANT}plant \"$P/fsmon\" && D=node_modules/x && mkdir -p $D && cd $D && \
         git init -q . && git commit -q --allow-empty -m x && \
         git config core.fsmonitor \"$P/fsmon\" && SHA=$(git rev-parse HEAD) && cd \"$P\" && \
         git update-index --add --cacheinfo 160000,$SHA,$D"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    repo.host_git_runs_nothing(&repo.project);
    assert!(
        repo.quarantined("node_modules/x/.git/config"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_submodules_commondir_and_a_toolchain_path_run_nothing() {
    if skip("a_submodules_commondir_and_a_toolchain_path_run_nothing") {
        return;
    }
    let repo = Repo::new(|repo| {
        repo.add_submodule("sub");
    });
    let output = repo.attack(&format!(
        "{PLANT}plant \"$P/fsmon\"; mkdir -p evil/objects evil/refs; \
         printf '[core]\\n\\tfsmonitor = %s/fsmon\\n' \"$P\" > evil/config; \
         echo ../../../evil > .git/modules/sub/commondir; \
         printf '[toolchain]\\npath = \"%s/tc\"\\n' \"$P\" > rust-toolchain.toml; \
         printf '[core]\\n\\trepositoryformatversion = 0 ;\\\\\\n\\tfsmonitor = %s/fsmon\\n' \"$P\" \
         > .git/config 2>/dev/null || echo CONFIG-READ-ONLY; \
         mkdir fresh && cd fresh && git init -q . && \
         printf '[core]\\n\\trepositoryformatversion = 0 ;\\\\\\n\\tfsmonitor = %s/fsmon\\n' \"$P\" \
         > .git/config"
    ));
    assert_eq!(completed(&output), 0, "{}", output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);

    assert!(
        stdout.contains("CONFIG-READ-ONLY"),
        "{stdout}\n{}",
        output.stderr
    );
    repo.host_git_runs_nothing(&repo.project.join("sub"));
    repo.host_git_runs_nothing(&repo.project.join("fresh"));
    // A comment ending in a backslash hides nothing: git reads the next line as a key.
    assert!(repo.quarantined("fresh/.git/config"), "{}", output.stderr);
    assert!(repo.quarantined("rust-toolchain.toml"), "{}", output.stderr);
    // Created during the run, the submodule's commondir is set aside.
    assert!(
        repo.quarantined(".git/modules/sub/commondir"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_command_that_ignores_signals_is_killed_and_the_check_still_runs() {
    if skip("a_command_that_ignores_signals_is_killed_and_the_check_still_runs") {
        return;
    }
    let repo = Repo::new(|_| {});
    let mut command = repo.home.command();
    command
        .args(["run", "--", "sh", "-c"])
        .arg("trap '' TERM HUP INT; echo 'touch x' > .envrc; echo READY; sleep 100")
        .env("AIRLOCK_HOME", repo.home.airlock_home())
        .current_dir(&repo.project)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("airlock run");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("READY");
    assert_eq!(line.trim(), "READY");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    // The first SIGTERM is passed on (and ignored); the second kills the command, and
    // airlock lives on to check the writable directories.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("first");
    std::thread::sleep(std::time::Duration::from_millis(300));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("second");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "airlock did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(repo.quarantined(".envrc"), "{stderr}");
}
