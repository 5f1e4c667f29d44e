//! The private workspace: a bare clone of the user's repository and one worktree for the
//! task branch, so the agent never writes to the user's tree; `export` brings the task
//! branch back into the user's repository.
//!
//! A local path is cloned by the host (reading the user's repository, never writing it);
//! a URL is cloned from inside the sandbox, through the proxy, with the sandbox's
//! surrogate credentials. The worktree is always added from inside, so its paths are the
//! sandbox's own. Exporting runs `git fetch` in the user's repository from the bare clone
//! with hooks and fsmonitor disabled on the command line (command-line configuration
//! wins over anything the agent may have written into the clone's config).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::SandboxError;

/// The bare clone's directory name inside the workspace.
pub const BARE_NAME: &str = "repo.git";

/// Whether `source` names a repository on this machine (rather than a URL).
pub fn is_local_source(source: &str) -> bool {
    !source.contains("://") && !source.starts_with("git@") && Path::new(source).exists()
}

/// The directory name of a branch's worktree: the branch with `/` replaced by `-`.
pub fn worktree_dir_name(branch: &str) -> String {
    branch.replace('/', "-")
}

/// The default task branch of a sandbox.
pub fn default_branch(sandbox: &str) -> String {
    format!("airlock/{sandbox}")
}

/// Checks that `branch` is a usable branch name (`git check-ref-format --branch`).
pub fn check_branch(branch: &str) -> Result<(), SandboxError> {
    let valid = !branch.starts_with('-')
        && git(Command::new("git").args(["check-ref-format", "--branch", branch])).is_ok();
    if valid {
        Ok(())
    } else {
        Err(SandboxError::Git {
            step: "checking the branch name".into(),
            why: format!("{branch:?} is not a valid branch name"),
        })
    }
}

/// Clones the local repository `source` as a bare repository at `bare` (host side).
pub fn clone_local(source: &Path, bare: &Path) -> Result<(), SandboxError> {
    git(Command::new("git")
        .args(["clone", "--quiet", "--bare", "--no-hardlinks", "--"])
        .arg(source)
        .arg(bare))
    .map(drop)
    .map_err(|why| SandboxError::Git {
        step: format!("clone of {}", source.display()),
        why,
    })
}

/// The command (run inside the sandbox) that clones a remote repository as the bare clone.
pub fn clone_remote_command(url: &str, bare_inside: &Path) -> Vec<String> {
    vec![
        "git".into(),
        "clone".into(),
        "--quiet".into(),
        "--bare".into(),
        "--".into(),
        url.into(),
        bare_inside.display().to_string(),
    ]
}

/// The command (run inside the sandbox) that adds the task worktree: it checks out
/// `branch` if the clone has it, else creates it from the clone's `HEAD`.
pub fn add_worktree_command(
    bare_inside: &Path,
    worktree_inside: &Path,
    branch: &str,
) -> Vec<String> {
    let script = "if git --git-dir=\"$1\" rev-parse --quiet --verify \"refs/heads/$3\" >/dev/null; \
                  then git --git-dir=\"$1\" worktree add --quiet \"$2\" \"$3\"; \
                  else git --git-dir=\"$1\" worktree add --quiet -b \"$3\" \"$2\"; fi";
    vec![
        "sh".into(),
        "-c".into(),
        script.into(),
        "sh".into(),
        bare_inside.display().to_string(),
        worktree_inside.display().to_string(),
        branch.into(),
    ]
}

/// Fetches `branch` from the bare clone into the repository `target` as the same branch.
/// A branch that exists there is only moved forward unless `force`.
pub fn export(bare: &Path, branch: &str, target: &Path, force: bool) -> Result<(), SandboxError> {
    check_branch(branch)?;
    let reference = format!("refs/heads/{branch}");
    git(Command::new("git").arg("--git-dir").arg(bare).args([
        "-c",
        "safe.directory=*",
        "rev-parse",
        "--quiet",
        "--verify",
        &reference,
    ]))
    .map_err(|_| SandboxError::Git {
        step: "export".into(),
        why: format!("the sandbox has no branch {branch}"),
    })?;
    let refspec = format!("{}{reference}:{reference}", if force { "+" } else { "" });
    git(Command::new("git")
        .arg("-C")
        .arg(target)
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "protocol.file.allow=always",
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
        ])
        .arg(bare)
        .arg(&refspec))
    .map(drop)
    .map_err(|why| SandboxError::Git {
        step: format!("export of {branch} into {}", target.display()),
        why,
    })
}

/// The bare clone of a workspace directory.
pub fn bare_path(workspace: &Path) -> PathBuf {
    workspace.join(BARE_NAME)
}

/// `git` configuration, as environment variables, with one credential helper that answers
/// HTTPS credential requests for each secret's hosts (wildcards included, any port) with
/// that secret's surrogate (`username=x-access-token`, `password=$NAME`); the proxy swaps
/// it for the real value on those hosts only. `secrets` are `(name, hosts)`; IP-literal
/// hosts are skipped; for a host named by several secrets the first wins.
pub fn git_credential_env(secrets: &[(String, Vec<String>)]) -> Vec<(String, String)> {
    let mut cases = String::new();
    for (name, hosts) in secrets {
        let usable: Vec<&str> = hosts
            .iter()
            .map(String::as_str)
            .filter(|host| {
                host.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '*'))
                    && host.contains(|c: char| c.is_ascii_alphabetic())
            })
            .collect();
        let valid_name = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if usable.is_empty() || !valid_name {
            continue;
        }
        cases.push_str(&format!("{}) p=\"${name}\";; ", usable.join("|")));
    }
    if cases.is_empty() {
        return Vec::new();
    }
    let helper = format!(
        "!f() {{ test \"$1\" = get || exit 0; h=; while IFS== read -r k v; do \
         test \"$k\" = host && h=\"$v\"; done; case \"${{h%%:*}}\" in {cases}*) exit 0;; esac; \
         echo username=x-access-token; echo \"password=$p\"; }}; f"
    );
    vec![
        ("GIT_CONFIG_COUNT".to_owned(), "1".to_owned()),
        (
            "GIT_CONFIG_KEY_0".to_owned(),
            "credential.helper".to_owned(),
        ),
        ("GIT_CONFIG_VALUE_0".to_owned(), helper),
    ]
}

/// Runs a git command; its stdout on success, its trimmed stderr on failure.
fn git(command: &mut Command) -> Result<String, String> {
    let output = command
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let trimmed: String = stderr.trim().chars().take(2000).collect();
        Err(trimmed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the helper as git would and returns what it prints.
    fn ask(env: &[(String, String)], host: &str, surrogates: &[(&str, &str)]) -> String {
        let helper = env[2].1.trim_start_matches('!');
        let mut command = Command::new("sh");
        command.args(["-c", &format!("{helper} get")]);
        command.envs(surrogates.iter().copied());
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = command.spawn().expect("sh");
        use std::io::Write;
        let input = format!("protocol=https\nhost={host}\n\n");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write");
        let output = child.wait_with_output().expect("helper output");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    #[test]
    fn the_credential_helper_answers_each_secrets_hosts_with_its_surrogate() {
        let env = git_credential_env(&[
            (
                "GH_TOKEN".into(),
                vec!["github.com".into(), "*.github.com".into()],
            ),
            (
                "OTHER".into(),
                vec!["github.com".into(), "gitlab.com".into(), "10.0.0.1".into()],
            ),
        ]);
        assert_eq!(env[0], ("GIT_CONFIG_COUNT".into(), "1".into()));
        assert_eq!(env[1].1, "credential.helper");
        let surrogates = [("GH_TOKEN", "ghp_surrogate"), ("OTHER", "glpat_surrogate")];
        let answer = ask(&env, "github.com:8443", &surrogates);
        assert_eq!(answer, "username=x-access-token\npassword=ghp_surrogate\n");
        assert!(ask(&env, "api.github.com", &surrogates).contains("password=ghp_surrogate"));
        assert!(ask(&env, "gitlab.com", &surrogates).contains("password=glpat_surrogate"));
        assert_eq!(ask(&env, "evil.example", &surrogates), "");
        assert_eq!(ask(&env, "10.0.0.1", &surrogates), "");
        assert!(git_credential_env(&[("X".into(), vec!["10.0.0.1".into()])]).is_empty());
    }

    #[test]
    fn branch_names_are_checked() {
        assert!(check_branch("airlock/task-1").is_ok());
        for bad in ["-x", "a..b", "a b", "", "a~1"] {
            assert!(check_branch(bad).is_err(), "{bad}");
        }
    }
}
