//! What the command may read and write (docs/security.md, "What the command can read and
//! write"; docs/policy.md, "filesystem"): the built-in hidden and write-protected lists,
//! the resolution of `~` and relative entries against the launcher's home and working
//! directory, and the access of one path with the reason for it. Pure: no I/O; the
//! launcher canonicalises, checks existence and finds the protected names on disk.

use std::path::{Component, Path, PathBuf};

use crate::model::Filesystem;

/// Credential stores and private data under the home directory, hidden by default.
pub const HOME_HIDDEN: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gnupg",
    ".password-store",
    ".vault-token",
    ".terraform.d",
    ".config/op",
    ".local/share/keyrings",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".bash_history",
    ".zsh_history",
    ".histfile",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".lesshst",
    ".local/share/fish/fish_history",
];

/// System files hidden by default: password hashes, sudo rules, container engine sockets.
pub const SYSTEM_HIDDEN: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd",
    "/run/podman",
];

/// Names that make code run later on the host: read-only wherever they exist at start,
/// even inside writable directories, and quarantined at the end of a run when the command
/// created them (docs/security.md, "What the command can read and write"). Matched as
/// trailing path components.
pub const PROTECTED_NAMES: &[&str] = &[
    // git: hooks, configuration, and every file that points git at another configuration.
    ".git/hooks",
    ".git/config",
    ".git/commondir",
    ".git/config.worktree",
    ".git/worktrees",
    // A submodule's own repository stays writable (its objects, refs and index), but not
    // what runs code (`*` matches any one name).
    ".git/modules/*/config",
    ".git/modules/*/hooks",
    ".git/modules/*/info",
    ".git/modules/*/commondir",
    ".git/modules/*/config.worktree",
    ".git/modules/*/worktrees",
    ".git/modules/*/modules/*/config",
    ".git/modules/*/modules/*/hooks",
    ".git/modules/*/modules/*/info",
    ".git/modules/*/modules/*/commondir",
    ".git/modules/*/modules/*/config.worktree",
    ".git/modules/*/modules/*/worktrees",
    ".git/modules/*/modules/*/modules/*/config",
    ".git/modules/*/modules/*/modules/*/hooks",
    ".git/modules/*/modules/*/modules/*/commondir",
    // What installed hooks run from the work tree (husky's lint-staged, lefthook,
    // commitlint, overcommit).
    ".lintstagedrc",
    ".lintstagedrc.json",
    ".lintstagedrc.yaml",
    ".lintstagedrc.yml",
    ".lintstagedrc.js",
    ".lintstagedrc.cjs",
    ".lintstagedrc.mjs",
    "lint-staged.config.js",
    "lint-staged.config.cjs",
    "lint-staged.config.mjs",
    "lefthook.yml",
    ".lefthook.yml",
    "lefthook-local.yml",
    ".lefthook-local.yml",
    "commitlint.config.js",
    "commitlint.config.cjs",
    "commitlint.config.mjs",
    ".commitlintrc",
    ".commitlintrc.json",
    ".commitlintrc.yml",
    ".commitlintrc.js",
    ".overcommit.yml",
    ".git/info",
    ".gitmodules",
    ".gitconfig",
    ".config/git",
    ".husky",
    ".pre-commit-config.yaml",
    // Editors and coding agents (MCP servers, hooks, tasks run on opening a folder).
    ".vscode",
    ".idea",
    ".mcp.json",
    ".claude",
    ".cursor",
    ".gemini",
    ".codex",
    ".continue",
    ".windsurf",
    ".zed",
    ".devcontainer",
    ".roo",
    ".kiro",
    ".amazonq",
    ".kilocode",
    ".opencode",
    "opencode.json",
    ".aider.conf.yml",
    ".helix",
    // Build and package tools that run commands their project configuration names.
    ".cargo/config.toml",
    ".cargo/config",
    // A toolchain path that rustup runs on any `cargo` or `rustc` in the project.
    "rust-toolchain.toml",
    "rust-toolchain",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pnpmfile.cjs",
    // Environment managers that run or load code on entering a directory.
    ".envrc",
    "mise.toml",
    ".mise.toml",
    "mise.local.toml",
    ".mise.local.toml",
    ".config/mise",
    ".config/mise.toml",
    ".mise",
    ".rtx.toml",
    ".tool-versions",
    // Shell start-up files.
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    // airlock's own policy, found by discovery in the working directory and the user's
    // configuration: a policy the command wrote would govern the next run.
    "airlock.yaml",
    ".config/airlock",
];

/// The name of git's directory; as a *file* (or a link) it redirects git to another
/// directory and is write-protected like [`PROTECTED_NAMES`].
pub const GIT_DIR_NAME: &str = ".git";

/// Checks one entry of `filesystem.KEY` as written; the message says what to write.
pub fn check_entry(key: &str, text: &str) -> Result<(), String> {
    if text.contains('\0') {
        return Err("a path cannot contain a NUL byte".into());
    }
    if text.starts_with('~') && text != "~" && !text.starts_with("~/") {
        return Err("only `~` and `~/...` (the launcher's home) are understood".into());
    }
    if key == "protected" && !text.starts_with('/') && !text.starts_with('~') {
        let parts = components(Path::new(text));
        if parts.is_none() || parts.is_some_and(|p| p.is_empty()) {
            return Err(
                "a protected name is relative path components such as `.github/workflows`, \
                 without `.` or `..`"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Resolves an entry: `~` against `home`, a relative path against `cwd`, then `.` and `..`
/// removed lexically.
pub fn resolve(text: &str, home: &Path, cwd: &Path) -> PathBuf {
    let joined = if text == "~" {
        home.to_owned()
    } else if let Some(rest) = text.strip_prefix("~/") {
        home.join(rest)
    } else {
        cwd.join(text)
    };
    normalise(&joined)
}

/// `.` and `..` removed without looking at the disk (`..` at the root stays at the root).
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The normal components of a relative path; `None` if it has `.`, `..` or a root.
fn components(path: &Path) -> Option<Vec<String>> {
    path.components()
        .map(|c| match c {
            Component::Normal(part) => Some(part.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

/// One resolved entry and why it is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The absolute path.
    pub path: PathBuf,
    /// Where it comes from, for `policy explain --fs` and errors.
    pub why: String,
}

/// What the command may do with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    /// Not visible: an empty directory or an empty file.
    Hidden,
    /// Readable, not writable.
    ReadOnly,
    /// Readable and writable.
    Writable,
    /// Inside a writable directory, but a write-protected name: read-only.
    Protected,
}

impl AccessKind {
    /// The word `policy explain --fs` prints.
    pub fn word(self) -> &'static str {
        match self {
            AccessKind::Hidden => "hidden",
            AccessKind::ReadOnly => "read",
            AccessKind::Writable => "write",
            AccessKind::Protected => "read (write-protected)",
        }
    }
}

/// The access of one path, and the entry that decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// What the command may do.
    pub kind: AccessKind,
    /// Why, in words.
    pub why: String,
}

/// The filesystem rules of one launch, every entry resolved.
#[derive(Clone, Debug, Default)]
pub struct FsRules {
    /// Directories the command may write.
    pub writable: Vec<Entry>,
    /// Hidden paths, built-in entries lifted by `readable` already removed.
    pub hidden: Vec<Entry>,
    /// `readable` entries that lie strictly inside a hidden directory: shown again.
    pub exceptions: Vec<PathBuf>,
    /// Write-protected names, as path components.
    pub protected_names: Vec<Vec<String>>,
    /// Write-protected absolute paths (`protected` entries written with `/` or `~`).
    pub protected_paths: Vec<PathBuf>,
}

/// [`FsRules`]' protected names, indexed ([`FsRules::index`]).
#[derive(Debug)]
pub struct ProtectedIndex<'a> {
    rules: &'a FsRules,
    /// Names of one component without a wildcard.
    single: std::collections::HashSet<&'a str>,
    /// The other names.
    rest: Vec<&'a [String]>,
}

impl ProtectedIndex<'_> {
    /// [`FsRules::is_protected`] for a walk that never enters a protected directory: when
    /// no proper ancestor of `path` below `base` is protected, the two agree, and this
    /// compares only the names that end at `path`'s last component.
    pub fn protects_last(&self, base: &Path, path: &Path) -> bool {
        if self
            .rules
            .protected_paths
            .iter()
            .any(|p| path.starts_with(p))
        {
            return true;
        }
        let Some(inner) = path.strip_prefix(base).ok() else {
            return false;
        };
        let Some(last) = inner.file_name() else {
            return false;
        };
        let last = last.to_string_lossy();
        if self.single.contains(last.as_ref()) {
            return true;
        }
        self.rest.iter().any(|name| {
            let mut parts = inner.components().rev();
            name.iter().rev().all(|pattern| match parts.next() {
                Some(Component::Normal(part)) => {
                    pattern == "*" || *pattern == part.to_string_lossy()
                }
                _ => false,
            })
        })
    }
}

/// Where a launch happens: the launcher's home, working directory and uid.
#[derive(Clone, Copy, Debug)]
pub struct Launcher<'a> {
    /// The home directory (`~`).
    pub home: &'a Path,
    /// The working directory (relative entries, the default writable directory).
    pub cwd: &'a Path,
    /// The user id (`/run/user/UID` is hidden).
    pub uid: u32,
}

impl FsRules {
    /// The rules for `fs` at `launcher`, with `extra_hidden` entries (airlock's own state,
    /// secret files, logs) that nothing can lift.
    pub fn new(fs: &Filesystem, launcher: Launcher<'_>, extra_hidden: Vec<Entry>) -> FsRules {
        let Launcher { home, cwd, uid } = launcher;
        let at = |text: &str| resolve(text, home, cwd);
        let readable: Vec<PathBuf> = fs.readable.iter().map(|t| at(t)).collect();
        let mut hidden: Vec<Entry> = Vec::new();
        let builtin = HOME_HIDDEN
            .iter()
            .map(|name| (home.join(name), format!("built-in hidden entry ~/{name}")))
            .chain(
                SYSTEM_HIDDEN
                    .iter()
                    .map(|path| (PathBuf::from(path), format!("built-in hidden entry {path}"))),
            )
            .chain([(
                PathBuf::from(format!("/run/user/{uid}")),
                "built-in hidden entry /run/user/UID (agent sockets)".to_owned(),
            )]);
        for (path, why) in builtin {
            if !readable.contains(&path) {
                hidden.push(Entry { path, why });
            }
        }
        for text in &fs.hidden {
            hidden.push(Entry {
                path: at(text),
                why: format!("filesystem.hidden entry {text}"),
            });
        }
        hidden.extend(extra_hidden);
        let exceptions = readable
            .into_iter()
            .filter(|path| {
                hidden
                    .iter()
                    .any(|h| path.starts_with(&h.path) && *path != h.path)
            })
            .collect();
        let writable = match &fs.writable {
            None => vec![Entry {
                path: normalise(cwd),
                why: "the working directory (the default of filesystem.writable)".into(),
            }],
            Some(list) => list
                .iter()
                .map(|text| Entry {
                    path: at(text),
                    why: format!("filesystem.writable entry {text}"),
                })
                .collect(),
        };
        let mut protected_names: Vec<Vec<String>> = PROTECTED_NAMES
            .iter()
            .filter_map(|name| components(Path::new(name)))
            .collect();
        let mut protected_paths = Vec::new();
        for text in &fs.protected {
            if text.starts_with('/') || text.starts_with('~') {
                protected_paths.push(at(text));
            } else if let Some(parts) = components(Path::new(text)) {
                protected_names.push(parts);
            }
        }
        FsRules {
            writable,
            hidden,
            exceptions,
            protected_names,
            protected_paths,
        }
    }

    /// Whether `path` (inside the writable directory `base`) is write-protected.
    pub fn is_protected(&self, base: &Path, path: &Path) -> bool {
        if self.protected_paths.iter().any(|p| path.starts_with(p)) {
            return true;
        }
        let Some(parts) = path.strip_prefix(base).ok().and_then(components) else {
            return false;
        };
        let same = |pattern: &String, part: &String| pattern == "*" || pattern == part;
        self.protected_names.iter().any(|name| {
            (0..parts.len()).any(|start| {
                parts[start..].len() >= name.len()
                    && name.iter().zip(&parts[start..]).all(|(p, q)| same(p, q))
            })
        })
    }

    /// The protected names indexed by their last component, for a walk that asks
    /// [`ProtectedIndex::protects_last`] of every entry.
    pub fn index(&self) -> ProtectedIndex<'_> {
        let (single, rest): (Vec<&Vec<String>>, Vec<&Vec<String>>) = self
            .protected_names
            .iter()
            .partition(|name| name.len() == 1 && name[0] != "*");
        ProtectedIndex {
            rules: self,
            single: single.into_iter().map(|name| name[0].as_str()).collect(),
            rest: rest.into_iter().map(Vec::as_slice).collect(),
        }
    }

    /// What the command may do with `path` (absolute, already normalised), and why.
    pub fn explain(&self, path: &Path) -> Access {
        let hidden = self
            .hidden
            .iter()
            .filter(|h| path.starts_with(&h.path))
            .max_by_key(|h| h.path.components().count());
        if let Some(hidden) = hidden {
            let lifted = self
                .exceptions
                .iter()
                .find(|e| e.starts_with(&hidden.path) && path.starts_with(e));
            return match lifted {
                Some(exception) => Access {
                    kind: AccessKind::ReadOnly,
                    why: format!(
                        "filesystem.readable entry {} inside the {}",
                        exception.display(),
                        hidden.why
                    ),
                },
                None => Access {
                    kind: AccessKind::Hidden,
                    why: hidden.why.clone(),
                },
            };
        }
        let writable = self
            .writable
            .iter()
            .filter(|w| path.starts_with(&w.path))
            .max_by_key(|w| w.path.components().count());
        if let Some(writable) = writable {
            if self.is_protected(&writable.path, path) {
                return Access {
                    kind: AccessKind::Protected,
                    why: format!(
                        "a write-protected name (code that runs later on the host) inside {}",
                        writable.why
                    ),
                };
            }
            return Access {
                kind: AccessKind::Writable,
                why: writable.why.clone(),
            };
        }
        if ["/tmp", "/var/tmp", "/dev/shm"]
            .iter()
            .any(|tmp| path.starts_with(tmp))
        {
            return Access {
                kind: AccessKind::Writable,
                why: "the jail's private temporary directory (empty at start, not the host's)"
                    .into(),
            };
        }
        Access {
            kind: AccessKind::ReadOnly,
            why: "outside every filesystem.writable directory: the host's files are read-only"
                .into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(fs: &Filesystem) -> FsRules {
        FsRules::new(
            fs,
            Launcher {
                home: Path::new("/home/u"),
                cwd: Path::new("/home/u/proj"),
                uid: 1000,
            },
            vec![Entry {
                path: PathBuf::from("/home/u/.local/state/airlock"),
                why: "airlock's own state".into(),
            }],
        )
    }

    fn kind(rules: &FsRules, path: &str) -> AccessKind {
        rules.explain(Path::new(path)).kind
    }

    #[test]
    fn entries_resolve_against_home_and_working_directory() {
        let home = Path::new("/home/u");
        let cwd = Path::new("/home/u/proj");
        assert_eq!(resolve("~", home, cwd), PathBuf::from("/home/u"));
        assert_eq!(
            resolve("~/.cache/pip", home, cwd),
            PathBuf::from("/home/u/.cache/pip")
        );
        assert_eq!(resolve(".", home, cwd), PathBuf::from("/home/u/proj"));
        assert_eq!(
            resolve("../other/./x", home, cwd),
            PathBuf::from("/home/u/other/x")
        );
        assert_eq!(resolve("/a/../../b", home, cwd), PathBuf::from("/b"));
    }

    #[test]
    fn the_default_is_the_working_directory_and_the_rest_read_only() {
        let rules = rules(&Filesystem::default());
        assert_eq!(
            kind(&rules, "/home/u/proj/src/main.rs"),
            AccessKind::Writable
        );
        assert_eq!(kind(&rules, "/home/u/other"), AccessKind::ReadOnly);
        assert_eq!(kind(&rules, "/etc/passwd"), AccessKind::ReadOnly);
        assert_eq!(kind(&rules, "/tmp/x"), AccessKind::Writable);
    }

    #[test]
    fn credential_stores_are_hidden_unless_readable_lifts_them() {
        let plain = rules(&Filesystem::default());
        for path in [
            "/home/u/.ssh/id_ed25519",
            "/home/u/.aws/credentials",
            "/home/u/.config/gh/hosts.yml",
            "/home/u/.netrc",
            "/etc/shadow",
            "/run/user/1000/ssh-agent.sock",
            "/home/u/.local/state/airlock/ca/key.pem",
        ] {
            assert_eq!(kind(&plain, path), AccessKind::Hidden, "{path}");
        }
        let fs = Filesystem {
            readable: vec!["~/.netrc".into(), "~/.ssh/known_hosts".into()],
            ..Filesystem::default()
        };
        let lifted = rules(&fs);
        assert_eq!(kind(&lifted, "/home/u/.netrc"), AccessKind::ReadOnly);
        assert_eq!(
            kind(&lifted, "/home/u/.ssh/known_hosts"),
            AccessKind::ReadOnly
        );
        assert_eq!(kind(&lifted, "/home/u/.ssh/id_ed25519"), AccessKind::Hidden);
        assert_eq!(
            lifted.exceptions,
            vec![PathBuf::from("/home/u/.ssh/known_hosts")]
        );
        // airlock's own state cannot be lifted.
        let fs = Filesystem {
            readable: vec!["~/.local/state/airlock".into()],
            ..Filesystem::default()
        };
        assert_eq!(
            kind(&rules(&fs), "/home/u/.local/state/airlock/x"),
            AccessKind::Hidden
        );
    }

    #[test]
    fn protected_names_stay_read_only_inside_writable_directories() {
        let fs = Filesystem {
            writable: Some(vec![".".into(), "~".into()]),
            protected: vec![".github/workflows".into(), "/home/u/notes".into()],
            ..Filesystem::default()
        };
        let rules = rules(&fs);
        for path in [
            "/home/u/proj/.git/hooks/pre-commit",
            "/home/u/proj/.git/config",
            "/home/u/proj/sub/.envrc",
            "/home/u/.bashrc",
            "/home/u/proj/.github/workflows/ci.yml",
            "/home/u/notes/a",
            "/home/u/proj/.git/commondir",
            "/home/u/proj/.git/modules/sub/hooks/pre-commit",
            "/home/u/proj/.git/worktrees/x/config.worktree",
            "/home/u/proj/.cursor/mcp.json",
            "/home/u/proj/.cargo/config.toml",
            "/home/u/proj/web/.npmrc",
            "/home/u/proj/.husky/pre-commit",
            "/home/u/.gitconfig",
        ] {
            assert_eq!(kind(&rules, path), AccessKind::Protected, "{path}");
        }
        assert_eq!(
            kind(&rules, "/home/u/proj/.git/objects/ab"),
            AccessKind::Writable
        );
        assert_eq!(
            kind(&rules, "/home/u/proj/.github/other"),
            AccessKind::Writable
        );
        assert_eq!(
            kind(&rules, "/home/u/proj/.cargo/registry/x"),
            AccessKind::Writable
        );
        assert_eq!(kind(&rules, "/home/u/.ssh"), AccessKind::Hidden);
    }

    #[test]
    fn entries_are_checked() {
        assert!(check_entry("writable", "~other/x").is_err());
        assert!(check_entry("protected", "../x").is_err());
        assert!(check_entry("protected", ".github/workflows").is_ok());
        assert!(check_entry("hidden", "~/work/customer-data").is_ok());
        assert!(check_entry("writable", "a\0b").is_err());
    }

    proptest::proptest! {
        /// A walk that stops at protected paths and asks `protects_last` of each entry
        /// protects exactly what `is_protected` protects.
        #[test]
        fn protects_last_agrees_with_is_protected_along_a_walk(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    ".git", "hooks", "config", "objects", ".github", "workflows", ".cargo",
                    "config.toml", "src", "modules", "sub", ".vscode", "tasks.json", "x", "deep",
                    "name", "fixed",
                ]),
                1..7,
            ),
        ) {
            let fs = Filesystem {
                protected: vec!["deep/*/name".into(), "/home/u/proj/fixed".into()],
                ..Filesystem::default()
            };
            let rules = rules(&fs);
            let index = rules.index();
            let base = Path::new("/home/u/proj");
            let mut path = base.to_path_buf();
            let mut walked = false;
            for part in &parts {
                path.push(part);
                walked = walked || index.protects_last(base, &path);
                proptest::prop_assert_eq!(walked, rules.is_protected(base, &path), "{:?}", path);
            }
        }
    }
}
