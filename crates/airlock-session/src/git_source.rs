//! `--policy git:REPO_DIR#BRANCH:PATH`: a policy file read from a branch of a git
//! repository (its object database, never the working tree), so that edits in a checkout
//! change nothing until someone commits them to the branch. git runs with a cleared
//! environment and no system or global configuration.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A parsed `git:` policy source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitSource {
    /// The repository directory as given (a checkout or a bare repository).
    pub repo: PathBuf,
    /// The branch (`refs/heads/BRANCH`).
    pub branch: String,
    /// The file's path inside the branch's tree.
    pub path: String,
}

/// `Some` when `spec` is a `git:` source: its parts, or why they are malformed.
pub fn parse(spec: &str) -> Option<Result<GitSource, String>> {
    let rest = spec.strip_prefix("git:")?;
    let parsed = rest
        .split_once('#')
        .and_then(|(repo, tail)| {
            let (branch, path) = tail.split_once(':')?;
            (!repo.is_empty() && !branch.is_empty() && !path.is_empty()).then(|| GitSource {
                repo: PathBuf::from(repo),
                branch: branch.to_owned(),
                path: path.trim_start_matches('/').to_owned(),
            })
        })
        .ok_or_else(|| format!("{spec}: expected git:REPO_DIR#BRANCH:PATH"));
    Some(parsed)
}

impl GitSource {
    /// The file's text on the branch's current commit.
    pub fn read(&self) -> Result<String, String> {
        let object = format!("refs/heads/{}:{}", self.branch, self.path);
        let bytes = self.git(&["cat-file", "blob", &object])?;
        String::from_utf8(bytes).map_err(|_| format!("{}: the file is not UTF-8", self.name()))
    }

    /// The commit the branch points at now (to notice a new one).
    pub fn head(&self) -> Result<String, String> {
        let rev = format!("refs/heads/{}^{{commit}}", self.branch);
        let bytes = self.git(&["rev-parse", "--verify", "--quiet", &rev])?;
        Ok(String::from_utf8_lossy(&bytes).trim().to_owned())
    }

    /// The source as written on the command line.
    pub fn name(&self) -> String {
        format!("git:{}#{}:{}", self.repo.display(), self.branch, self.path)
    }

    fn git_dir(&self) -> PathBuf {
        let dot_git = self.repo.join(".git");
        if dot_git.is_dir() {
            dot_git
        } else {
            self.repo.clone()
        }
    }

    fn git(&self, args: &[&str]) -> Result<Vec<u8>, String> {
        let output = Command::new("git")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", "/nonexistent")
            .arg("--git-dir")
            .arg(self.git_dir())
            .args(args)
            .current_dir(Path::new("/"))
            .output()
            .map_err(|e| format!("{}: cannot run git: {e}", self.name()))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(format!(
                "{}: git {} failed: {}",
                self.name(),
                args.first().copied().unwrap_or(""),
                stderr.trim()
            ));
        }
        Ok(output.stdout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_malformed_specs() {
        assert_eq!(
            parse("git:/srv/policy#main:airlock/policy.yaml"),
            Some(Ok(GitSource {
                repo: PathBuf::from("/srv/policy"),
                branch: "main".to_owned(),
                path: "airlock/policy.yaml".to_owned(),
            }))
        );
        assert!(parse("policy.yaml").is_none());
        for bad in [
            "git:",
            "git:/r",
            "git:/r#main",
            "git:/r#:p",
            "git:#main:p",
            "git:/r#main:",
        ] {
            assert!(matches!(parse(bad), Some(Err(_))), "{bad}");
        }
    }
}
