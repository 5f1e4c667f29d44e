//! The policy flags shared by `run`, `proxy`, `sandbox create` and `policy explain`
//! (`--policy [FORMAT:]FILE`, `--allow RULE`, `--secret SPEC`), `run`'s `--profile` and
//! policy discovery (docs/contract.md, "Policy discovery and agent profiles"), and the
//! parsers of `--mode` and `--ask-timeout`. The flags become [`PolicySources`]; reading and
//! combining them is `airlock_session::sources`'.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use airlock_policy::Policy;
use airlock_policy::profiles::{self, Choice, Profile};
use airlock_session::sources::PolicySources;

/// `--policy` and `--allow`: which rules apply.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct PolicySelection {
    /// A policy file; `FORMAT:FILE` reads a seed system's own file as is (FORMAT is
    /// airut, trustyclaw, secrets-proxy or sandbox0). Repeatable: rules are combined.
    #[arg(long = "policy", value_name = "[FORMAT:]FILE")]
    pub policies: Vec<String>,
    /// One allow rule: `[METHOD[,METHOD...] ]HOST[:PORT][/PATHGLOB]`. Repeatable.
    #[arg(long = "allow", value_name = "RULE")]
    pub allows: Vec<String>,
}

/// `--policy`, `--allow` and `--secret`.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct PolicyArgs {
    /// The rules.
    #[command(flatten)]
    pub selection: PolicySelection,
    /// A secret: `NAME@HOST[,HOST...]` (value from the environment variable NAME),
    /// `NAME=env:VAR@HOSTS`, `NAME=file:PATH@HOSTS` or `NAME=SURROGATE=VALUE@HOSTS`;
    /// `@preset:SERVICE` (anthropic, openai, github, gitlab, huggingface, npm, pypi, gemini) in
    /// place of the hosts takes that service's hosts and headers.
    #[arg(long = "secret", value_name = "SPEC")]
    pub secrets: Vec<String>,
}

impl PolicySelection {
    /// The typed sources (no secrets).
    pub(crate) fn sources(&self) -> PolicySources {
        PolicySources {
            policies: self.policies.clone(),
            allows: self.allows.clone(),
            secrets: Vec::new(),
            profile: None,
        }
    }

    /// Policy discovery: with neither `--policy` nor `--allow`, the first of
    /// `./airlock.yaml` and `$XDG_CONFIG_HOME/airlock/policy.yaml` (`~/.config/...`) that
    /// exists becomes the policy. Returns it, to be named on stderr.
    pub(crate) fn discover(&mut self) -> Option<String> {
        if !self.policies.is_empty() || !self.allows.is_empty() {
            return None;
        }
        let found = discovery_candidates()
            .into_iter()
            .find(|path| std::fs::symlink_metadata(path).is_ok())?;
        let found = found.display().to_string();
        self.policies.push(found.clone());
        Some(found)
    }

    /// Reads, validates and combines every source. Returns every error found, each
    /// naming its file and location; nothing is half-loaded.
    pub(crate) fn load(&self) -> Result<Policy, Vec<String>> {
        let sources = self.sources();
        set_hint_source(&sources);
        sources.load()
    }
}

impl PolicyArgs {
    /// The typed sources, `--secret` flags included.
    pub(crate) fn sources(&self) -> PolicySources {
        PolicySources {
            secrets: self.secrets.clone(),
            ..self.selection.sources()
        }
    }
}

/// The policy a run discovers, in order: `./airlock.yaml`, then
/// `$XDG_CONFIG_HOME/airlock/policy.yaml` (`$HOME/.config/airlock/policy.yaml` when
/// `XDG_CONFIG_HOME` is unset or not absolute).
pub(crate) fn discovery_candidates() -> Vec<PathBuf> {
    let mut candidates = vec![PathBuf::from("./airlock.yaml")];
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|home| !home.is_empty())
                .map(|home| Path::new(&home).join(".config"))
        });
    if let Some(config) = config {
        candidates.push(config.join("airlock/policy.yaml"));
    }
    candidates
}

/// `--profile NAME|none` of `run` and `mcp`.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct ProfileArg {
    /// A built-in agent profile added to the policy: claude, codex, aider or gemini
    /// (`airlock profile show NAME`); `none` for none. Default: the profile named like
    /// the command (`airlock run -- claude` takes `claude`).
    #[arg(long = "profile", value_name = "NAME|none", value_parser = profiles::parse_choice)]
    pub profile: Option<Choice>,
}

/// The policy sources of `airlock run` (and `mcp`): discovery when no rules were named,
/// the profile picked by `--profile` or the command's name; each said on stderr, and the
/// file refusal hints name set ([`airlock_policy::decision::set_hint_source`]).
pub(crate) fn run_sources(
    policy: &PolicyArgs,
    profile: &ProfileArg,
    command: &[OsString],
) -> PolicySources {
    let mut selection = policy.selection.clone();
    let discovered = selection.discover();
    let program = command.first().map_or(Path::new(""), Path::new);
    let profile = profiles::select(profile.profile, program);
    let sources = PolicySources {
        secrets: policy.secrets.clone(),
        profile,
        ..selection.sources()
    };
    announce(&sources, discovered.as_deref());
    set_hint_source(&sources);
    sources
}

/// Names the policy file in force for refusal hints: the first policy file, or the
/// command line's flags when there is none.
pub(crate) fn set_hint_source(sources: &PolicySources) {
    let hint = match sources.policies.first() {
        Some(spec) => airlock_session::sources::split_format(spec)
            .map_or_else(|_| spec.clone(), |(_, path)| path.to_owned()),
        None => airlock_policy::decision::FLAGS_SOURCE.to_owned(),
    };
    airlock_policy::decision::set_hint_source(hint);
}

/// The start lines: the policy in force and the profile added to it.
fn announce(sources: &PolicySources, discovered: Option<&str>) {
    match discovered {
        Some(file) => eprintln!("airlock: policy {file} (found: no --policy or --allow was given)"),
        None if !sources.policies.is_empty() => {
            eprintln!("airlock: policy {}", sources.policies.join(", "));
        }
        None if !sources.allows.is_empty() => eprintln!("airlock: policy from --allow flags"),
        None => {}
    }
    if let Some(profile) = sources.profile {
        eprintln!("airlock: {}", profile_line(profile));
    }
}

/// One line naming a profile and what it adds.
fn profile_line(profile: &Profile) -> String {
    let policy = profile.policy().unwrap_or_default();
    let mut hosts: Vec<String> = Vec::new();
    for rule in &policy.network.allow {
        if let airlock_policy::model::Target::Host(host) = &rule.target
            && !hosts.contains(&host.to_string())
        {
            hosts.push(host.to_string());
        }
    }
    let writable = policy.filesystem.writable.unwrap_or_default();
    format!(
        "profile {} (version {}, {}) added: hosts {}; writable {}; see `airlock profile show {}`, \
         `--profile none` for none",
        profile.name,
        profile.version,
        profile.agent,
        hosts.join(", "),
        writable.join(", "),
        profile.name
    )
}

/// Creates the profile's missing writable paths and protected directories in the home
/// (directories 0700, files empty, 0600), as the agent would on its first run outside
/// airlock: the jail binds only what exists.
pub(crate) fn create_profile_paths(profile: Option<&Profile>) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let Some(profile) = profile else {
        return Ok(());
    };
    let place = airlock_session::fs_confine::Place::current()?;
    for entry in profile.created() {
        let path = airlock_policy::filesystem::resolve(&entry.text, &place.home, &place.cwd);
        if std::fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        let created = if entry.is_dir {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map(drop)
        };
        created.map_err(|e| {
            format!(
                "profile {}: cannot create {} ({}): {e}",
                profile.name,
                entry.text,
                path.display()
            )
        })?;
    }
    Ok(())
}

/// Parses `--mode`: `enforce`, `report` or `ask`.
pub(crate) fn parse_mode(text: &str) -> Result<airlock_policy::mode::Mode, String> {
    text.parse()
        .map_err(|e: airlock_policy::mode::ModeError| e.to_string())
}

/// Parses `--mode` where nobody could answer an ask (`sandbox create`): `enforce` or
/// `report`.
pub(crate) fn parse_mode_without_ask(text: &str) -> Result<airlock_policy::mode::Mode, String> {
    match parse_mode(text)? {
        airlock_policy::mode::Mode::Ask => Err(
            "`--mode ask` is not available here: use enforce or report (ask works with \
             `airlock run` and `airlock proxy`)"
                .to_owned(),
        ),
        mode => Ok(mode),
    }
}

/// Parses `--ask-timeout`: seconds (`90`, `90s`), minutes (`2m`) or milliseconds
/// (`500ms`); at least 1 ms, at most a day.
pub(crate) fn parse_ask_timeout(text: &str) -> Result<std::time::Duration, String> {
    use std::time::Duration;
    let bad =
        || format!("--ask-timeout {text:?}: use seconds (60, 60s), minutes (2m) or ms (500ms)");
    let (number, unit) = match text {
        t if t.ends_with("ms") => (&t[..t.len() - 2], 1),
        t if t.ends_with('s') => (&t[..t.len() - 1], 1000),
        t if t.ends_with('m') => (&t[..t.len() - 1], 60_000),
        t => (t, 1000),
    };
    let millis = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(bad)?;
    if millis == 0 || millis > 86_400_000 {
        return Err(bad());
    }
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod ask_timeout_tests {
    use std::time::Duration;

    #[test]
    fn ask_timeouts_parse() {
        let parse = super::parse_ask_timeout;
        assert_eq!(parse("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        for bad in ["", "0", "-1", "1h", "2 s", "99999999999999999999"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
