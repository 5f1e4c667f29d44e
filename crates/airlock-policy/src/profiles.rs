//! Built-in agent profiles (docs/agents.md; docs/contract.md, "Agent profiles"): for Claude
//! Code, Codex, aider and Gemini CLI, a versioned policy fragment in the native format
//! (`profiles/NAME.yaml`, compiled in) with the agent's API hosts, its state directories
//! and files writable, its hook-bearing settings write-protected and its sign-in files
//! hidden; and, beside it, the secret names the agent takes its key from. A profile is
//! chosen by the command's name (or `--profile NAME`) and *added* to the policy in force:
//! it only allows, so the policy's deny rules still win. Pure: the launcher creates the
//! missing writable paths ([`Profile::writable`]).
//!
//! The sign-in files are hidden until credential files are projected as surrogates
//! (PRODUCT 9.3); that projection belongs in a profile's `credentials` entry, next to
//! [`Profile::key_secrets`].

use std::path::Path;

use crate::load;
use crate::model::Policy;

/// One built-in profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The name: `--profile NAME`, and the command name that picks it.
    pub name: &'static str,
    /// The agent, in words.
    pub agent: &'static str,
    /// The profile's own version: raised whenever what it allows changes.
    pub version: u32,
    /// The policy fragment (native YAML).
    pub yaml: &'static str,
    /// The secret names the agent reads its key from (any one is enough).
    pub key_secrets: &'static [&'static str],
    /// The `--secret` flag that gives it the usual key.
    pub key_flag: &'static str,
    /// JSON state files that also hold what the agent runs on the host later: the
    /// values at their keys are compared before and after a run ([`guarded_values`]).
    pub guarded: &'static [GuardedFile],
    /// Variables set in the command's environment (unless airlock's own environment
    /// sets them), values `~/`-resolved: where the agent keeps its state.
    pub env: &'static [(&'static str, &'static str)],
}

/// A JSON state file of the home whose hook-bearing keys must not change inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardedFile {
    /// The file, as a `~/` entry.
    pub file: &'static str,
    /// Where the agent works on a copy of it inside (a writable directory of the
    /// profile): copied there at the start, back at the end when the guarded keys did
    /// not change. `None`: the file itself is writable and checked in place.
    pub copy: Option<&'static str>,
    /// Dotted key paths (`*` is any one key) whose values run code on the host.
    pub keys: &'static [&'static str],
    /// Top-level keys that hold a real credential the command could read.
    pub secrets: &'static [&'static str],
}

/// Every built-in profile, in the order `airlock profile list` shows them.
pub const PROFILES: [Profile; 4] = [
    Profile {
        name: "claude",
        agent: "Claude Code",
        version: 2,
        yaml: include_str!("profiles/claude.yaml"),
        key_secrets: &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
        ],
        key_flag: "--secret ANTHROPIC_API_KEY@preset:anthropic",
        // What makes Claude Code on the host run or allow more than the user chose: MCP
        // servers (commands it starts), the project's approved tools and enabled
        // `.mcp.json` servers, the trust of a project, and the API key it accepts.
        guarded: &[GuardedFile {
            file: "~/.claude.json",
            copy: Some("~/.claude/.claude.json"),
            keys: &[
                "mcpServers",
                "projects.*.mcpServers",
                "projects.*.allowedTools",
                "projects.*.enabledMcpjsonServers",
                "projects.*.enableAllProjectMcpServers",
                "projects.*.hasTrustDialogAccepted",
                "projects.*.hasTrustDialogHooksAccepted",
                "enableAllProjectMcpServers",
                "primaryApiKey",
                "customApiKeyResponses",
                "env",
                "hooks",
                "permissions",
                "apiKeyHelper",
            ],
            secrets: &["primaryApiKey"],
        }],
        env: &[("CLAUDE_CONFIG_DIR", "~/.claude")],
    },
    Profile {
        name: "codex",
        agent: "OpenAI Codex CLI",
        version: 2,
        yaml: include_str!("profiles/codex.yaml"),
        key_secrets: &["OPENAI_API_KEY", "CODEX_API_KEY"],
        key_flag: "--secret OPENAI_API_KEY@preset:openai",
        guarded: &[],
        env: &[],
    },
    Profile {
        name: "aider",
        agent: "aider",
        version: 1,
        yaml: include_str!("profiles/aider.yaml"),
        key_secrets: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
        key_flag: "--secret ANTHROPIC_API_KEY@preset:anthropic (or OPENAI_API_KEY@preset:openai)",
        guarded: &[],
        env: &[],
    },
    Profile {
        name: "gemini",
        agent: "Gemini CLI",
        version: 1,
        yaml: include_str!("profiles/gemini.yaml"),
        key_secrets: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        key_flag: "--secret GEMINI_API_KEY@preset:gemini",
        guarded: &[],
        env: &[],
    },
];

/// What `--profile` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// `--profile none`: no profile, whatever the command.
    None,
    /// `--profile NAME`.
    Named(&'static Profile),
}

/// Finds a profile by name.
pub fn find(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|profile| profile.name == name)
}

/// The names, for messages: `claude, codex, aider, gemini`.
pub fn names() -> String {
    let names: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
    names.join(", ")
}

/// Parses `--profile NAME|none`; the error lists the profiles.
pub fn parse_choice(text: &str) -> Result<Choice, String> {
    if text == "none" {
        return Ok(Choice::None);
    }
    find(text).map(Choice::Named).ok_or_else(|| {
        format!(
            "--profile {text:?}: no such profile: use one of {} (or none)",
            names()
        )
    })
}

/// The profile for a run of `command` (its first word): the one `--profile` names, else
/// the one named like the command's file name (`/usr/bin/claude` → `claude`).
pub fn select(choice: Option<Choice>, command: &Path) -> Option<&'static Profile> {
    match choice {
        Some(Choice::None) => None,
        Some(Choice::Named(profile)) => Some(profile),
        None => command
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(find),
    }
}

/// A writable entry of a profile and what to create when it is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WritableEntry {
    /// The entry as written (`~/.claude/`, `~/.claude.json`).
    pub text: String,
    /// A directory (written with a trailing `/`), else a file.
    pub is_dir: bool,
}

impl Profile {
    /// The label of the profile as a policy source (rule ids, errors): `profile:claude`.
    pub fn label(&self) -> String {
        format!("profile:{}", self.name)
    }

    /// The fragment as a policy. The built-in text is checked by the tests, so an error
    /// here is a build mistake; it is returned, not hidden.
    pub fn policy(&self) -> Result<Policy, String> {
        load::load_str(&self.label(), self.yaml).map_err(|e| e.to_string())
    }

    /// The writable entries of the fragment, each a directory or a file.
    pub fn writable(&self) -> Vec<WritableEntry> {
        let Ok(policy) = self.policy() else {
            return Vec::new();
        };
        policy
            .filesystem
            .writable
            .unwrap_or_default()
            .into_iter()
            .map(|text| WritableEntry {
                is_dir: text.ends_with('/'),
                text,
            })
            .collect()
    }

    /// What the launcher creates when missing: the writable entries, and the protected
    /// entries written as directories (trailing `/`), which then are read-only from the
    /// start.
    pub fn created(&self) -> Vec<WritableEntry> {
        let mut entries = self.writable();
        if let Ok(policy) = self.policy() {
            entries.extend(
                policy
                    .filesystem
                    .protected
                    .into_iter()
                    .filter(|text| text.starts_with("~/") && text.ends_with('/'))
                    .map(|text| WritableEntry { text, is_dir: true }),
            );
        }
        entries
    }

    /// Adds the fragment to `sources` (the policy sources in force, before combining).
    /// When no source sets `filesystem.writable` the working directory stays writable (the
    /// default), beside the profile's entries.
    pub fn add_to(&self, sources: &mut Vec<(Option<String>, Policy)>) -> Result<(), String> {
        let mut fragment = self.policy()?;
        let default_writable = sources
            .iter()
            .all(|(_, policy)| policy.filesystem.writable.is_none());
        if default_writable && let Some(writable) = fragment.filesystem.writable.as_mut() {
            writable.insert(0, ".".to_owned());
        }
        sources.push((Some(self.label()), fragment));
        Ok(())
    }

    /// Whether `policy` (combined, the profile included) gives the agent a key: a secret
    /// named like one of [`Profile::key_secrets`]. `Err` says what to do.
    pub fn check_key(&self, policy: &Policy) -> Result<(), String> {
        if policy
            .secrets
            .iter()
            .any(|secret| self.key_secrets.contains(&secret.name.as_str()))
        {
            return Ok(());
        }
        Err(format!(
            "the {} profile ({}) has no key to give it: add {} (the real key is read from \
             that environment variable and the agent sees a placeholder), or a secret named \
             {} in the policy's `secrets:`; or run with --profile none",
            self.name,
            self.agent,
            self.key_flag,
            self.key_secrets.join(" or "),
        ))
    }

    /// The text `airlock profile show` prints: the fragment as it is compiled in.
    pub fn show(&self) -> &'static str {
        self.yaml
    }
}

/// The non-empty values at `keys` (dotted paths, `*` any one key) of a JSON document,
/// each with its path, sorted; `None` when the text is not a JSON object. An empty object,
/// array, string, `false` or `null` counts as absent (an agent adds `"mcpServers": {}` and
/// `"hasTrustDialogAccepted": false` to every new project).
pub fn guarded_values(text: &str, keys: &[&str]) -> Option<Vec<(String, serde_json::Value)>> {
    let json: serde_json::Value = serde_json::from_str(text).ok()?;
    json.as_object()?;
    let mut out = Vec::new();
    for key in keys {
        let parts: Vec<&str> = key.split('.').collect();
        collect(&json, &parts, String::new(), &mut out);
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Some(out)
}

fn collect(
    value: &serde_json::Value,
    parts: &[&str],
    at: String,
    out: &mut Vec<(String, serde_json::Value)>,
) {
    use serde_json::Value;
    let Some((first, rest)) = parts.split_first() else {
        let empty = match value {
            Value::Null => true,
            Value::Object(map) => map.is_empty(),
            Value::Array(list) => list.is_empty(),
            Value::String(text) => text.is_empty(),
            Value::Bool(set) => !set,
            _ => false,
        };
        if !empty {
            out.push((at, value.clone()));
        }
        return;
    };
    let Some(map) = value.as_object() else {
        return;
    };
    for (key, inner) in map {
        if *first == "*" || first == key {
            collect(inner, rest, format!("{at}.{key}"), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filesystem::{AccessKind, FsRules, Launcher};

    #[test]
    fn every_profile_loads_and_names_its_version_in_its_header() {
        for profile in &PROFILES {
            let policy = profile.policy().expect(profile.name);
            assert!(!policy.network.allow.is_empty(), "{}", profile.name);
            assert!(
                policy.network.deny.is_empty(),
                "{}: a profile only allows",
                profile.name
            );
            assert!(
                policy.secrets.is_empty(),
                "{}: keys come from the run",
                profile.name
            );
            let header = format!("# airlock profile `{}`", profile.name);
            assert!(profile.yaml.starts_with(&header), "{}", profile.name);
            let version = format!("version {}.", profile.version);
            assert!(
                profile.yaml.lines().take(3).any(|l| l.contains(&version)),
                "{}",
                profile.name
            );
            for rule in &policy.network.allow {
                assert_eq!(
                    rule.ports.as_deref(),
                    Some(&[443][..]),
                    "{}: https only",
                    profile.name
                );
            }
        }
    }

    #[test]
    fn the_command_name_picks_the_profile_and_none_refuses_one() {
        let claude = find("claude").expect("claude");
        assert_eq!(select(None, Path::new("/opt/bin/claude")), Some(claude));
        assert_eq!(
            select(None, Path::new("codex")).map(|p| p.name),
            Some("codex")
        );
        assert_eq!(select(None, Path::new("python3")), None);
        assert_eq!(select(Some(Choice::None), Path::new("claude")), None);
        let aider = parse_choice("aider").expect("aider");
        assert_eq!(
            select(Some(aider), Path::new("python3")).map(|p| p.name),
            Some("aider")
        );
        let error = parse_choice("cursor").expect_err("unknown");
        assert!(error.contains("claude, codex, aider, gemini"), "{error}");
    }

    #[test]
    fn a_profile_keeps_the_default_working_directory_writable() {
        let claude = find("claude").expect("claude");
        let mut sources = vec![(Some("a.yaml".to_owned()), Policy::default())];
        claude.add_to(&mut sources).expect("added");
        let policy = Policy::combine(sources).expect("combined");
        let writable = policy.filesystem.writable.expect("writable");
        assert_eq!(writable[..2], [".", "~/.claude/"]);
        // A policy that names its writable directories keeps exactly those, plus the
        // profile's.
        let mut narrow = Policy::default();
        narrow.filesystem.writable = Some(vec!["~/work".to_owned()]);
        let mut sources = vec![(Some("a.yaml".to_owned()), narrow)];
        claude.add_to(&mut sources).expect("added");
        let policy = Policy::combine(sources).expect("combined");
        let writable = policy.filesystem.writable.expect("writable");
        assert_eq!(writable[..2], ["~/work", "~/.claude/"]);
        assert_eq!(
            claude.writable(),
            vec![WritableEntry {
                text: "~/.claude/".into(),
                is_dir: true
            }]
        );
    }

    #[test]
    fn the_hook_settings_stay_read_only_inside_the_writable_state_directory() {
        let claude = find("claude").expect("claude");
        let mut sources = Vec::new();
        claude.add_to(&mut sources).expect("added");
        let policy = Policy::combine(sources).expect("combined");
        let launcher = Launcher {
            home: Path::new("/home/u"),
            cwd: Path::new("/home/u/proj"),
            uid: 1000,
        };
        let rules = FsRules::new(&policy.filesystem, launcher, Vec::new());
        let kind = |path: &str| rules.explain(Path::new(path)).kind;
        assert_eq!(
            kind("/home/u/.claude/projects/x/1.jsonl"),
            AccessKind::Writable
        );
        assert_eq!(kind("/home/u/.claude/.claude.json"), AccessKind::Writable);
        assert_eq!(kind("/home/u/.claude.json"), AccessKind::ReadOnly);
        assert_eq!(kind("/home/u/proj/src/a.rs"), AccessKind::Writable);
        assert_eq!(
            kind("/home/u/proj/.claude/settings.json"),
            AccessKind::Protected
        );
        for path in [
            "/home/u/.claude/settings.json",
            "/home/u/.claude/settings.local.json",
            "/home/u/.claude/hooks/x.sh",
            "/home/u/.claude/commands/c.md",
            "/home/u/.claude/agents/a.md",
            "/home/u/.claude/plugins/p/hooks.json",
            "/home/u/.claude/CLAUDE.md",
        ] {
            assert_eq!(kind(path), AccessKind::Protected, "{path}");
        }
        // The sign-in file is projected with surrogates (the session binds the copy).
        assert!(policy.credentials.is_projected("claude"));
        assert_eq!(kind("/home/u/.ssh/id_ed25519"), AccessKind::Hidden);
    }

    #[test]
    fn guarded_values_see_a_planted_server_but_not_an_empty_new_project() {
        let keys = find("claude").expect("claude").guarded[0].keys;
        let start = r#"{"numStartups":3,"mcpServers":{},"projects":{"/p":{"mcpServers":{}}}}"#;
        let before = guarded_values(start, keys).expect("json");
        assert!(before.is_empty(), "{before:?}");
        let new_project = r#"{"numStartups":4,"projects":{"/p":{"mcpServers":{}},
            "/q":{"mcpServers":{},"allowedTools":[],"hasTrustDialogAccepted":false,"x":1}}}"#;
        assert_eq!(guarded_values(new_project, keys), Some(before.clone()));
        let allowed = r#"{"projects":{"/p":{"allowedTools":["Bash(*)"]}}}"#;
        assert_ne!(guarded_values(allowed, keys), Some(before.clone()));
        let trusted = r#"{"projects":{"/p":{"hasTrustDialogAccepted":true}}}"#;
        assert_ne!(guarded_values(trusted, keys), Some(before.clone()));
        let planted = r#"{"projects":{"/p":{"mcpServers":{"x":{"command":"sh"}}}}}"#;
        let after = guarded_values(planted, keys).expect("json");
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].0, ".projects./p.mcpServers");
        assert_ne!(after, before);
        assert_eq!(guarded_values("", keys), None);
        assert_eq!(guarded_values("[1]", keys), None);
    }

    #[test]
    fn without_a_key_the_error_says_which_flag_gives_one() {
        let codex = find("codex").expect("codex");
        let error = codex.check_key(&Policy::default()).expect_err("no key");
        assert!(
            error.contains("--secret OPENAI_API_KEY@preset:openai"),
            "{error}"
        );
        let mut policy = Policy::default();
        policy
            .secrets
            .push(crate::rule::parse_secret("OPENAI_API_KEY@preset:openai").expect("spec"));
        assert!(codex.check_key(&policy).is_ok());
    }
}
