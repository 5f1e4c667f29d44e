//! The policy flags shared by `proxy` and `policy explain` (`--policy [FORMAT:]FILE`,
//! `--allow RULE`) and by `proxy` alone (`--secret SPEC`), and how they combine into one
//! validated policy. Reading files happens here, at the edge; everything else is the
//! policy crate's pure code.

use std::str::FromStr;

use airlock_policy::Policy;
use airlock_policy::import::{self, SeedFormat};
use airlock_policy::load;
use airlock_policy::rule;

/// `--policy` and `--allow`: which rules apply.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct PolicySelection {
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
pub struct PolicyArgs {
    /// The rules.
    #[command(flatten)]
    pub selection: PolicySelection,
    /// A secret: `NAME@HOST[,HOST...]` (value from the environment variable NAME),
    /// `NAME=env:VAR@HOSTS`, `NAME=file:PATH@HOSTS` or `NAME=SURROGATE=VALUE@HOSTS`;
    /// `@preset:SERVICE` (anthropic, openai, github, gitlab, huggingface, npm, pypi) in
    /// place of the hosts takes that service's hosts and headers.
    #[arg(long = "secret", value_name = "SPEC")]
    pub secrets: Vec<String>,
}

impl PolicySelection {
    /// Whether neither a policy file nor an `--allow` rule was given.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.allows.is_empty()
    }

    /// Reads, validates and combines every source. Returns every error found, each
    /// naming its file and location; nothing is half-loaded.
    pub fn load(&self) -> Result<Policy, Vec<String>> {
        self.load_with_secrets(&[])
    }

    fn load_with_secrets(&self, secret_specs: &[String]) -> Result<Policy, Vec<String>> {
        let mut errors = Vec::new();
        let mut sources: Vec<(Option<String>, Policy)> = Vec::new();
        for spec in &self.policies {
            match read_policy_source(spec) {
                Ok((name, policy)) => sources.push((Some(name), policy)),
                Err(mut errs) => errors.append(&mut errs),
            }
        }
        let mut flags = Policy::default();
        for (index, text) in self.allows.iter().enumerate() {
            match rule::parse_allow(text, index) {
                Ok(rule) => flags.network.allow.push(rule),
                Err(e) => errors.push(format!("--allow {text:?}: {e}")),
            }
        }
        for spec in secret_specs {
            match rule::parse_secret(spec) {
                Ok(secret) => flags.secrets.push(secret),
                Err(e) => errors.push(format!("--secret: {e}")),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if !self.allows.is_empty() || !secret_specs.is_empty() {
            sources.push((None, flags));
        }
        Policy::combine(sources).map_err(|e| vec![e.to_string()])
    }
}

impl PolicyArgs {
    /// Reads, validates and combines every source, `--secret` flags included.
    pub fn load(&self) -> Result<Policy, Vec<String>> {
        self.selection.load_with_secrets(&self.secrets)
    }
}

/// Splits `[FORMAT:]FILE` into the seed format (if the prefix names one) and the path.
pub fn split_format(spec: &str) -> Result<(Option<SeedFormat>, &str), String> {
    if let Some((prefix, path)) = spec.split_once(':') {
        if let Ok(format) = SeedFormat::from_str(prefix) {
            return Ok((Some(format), path));
        }
        if prefix.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !prefix.is_empty() {
            return Err(format!(
                "{spec}: unknown policy format {prefix:?}: use airut, trustyclaw, secrets-proxy or sandbox0, \
                 or no prefix for a native airlock policy (write ./{spec} for a file whose name has a colon)"
            ));
        }
    }
    Ok((None, spec))
}

/// Reads one `[FORMAT:]FILE` (or `git:REPO_DIR#BRANCH:PATH`) into a policy, named by its
/// path (or the whole `git:` spec) for rule ids and errors.
pub fn read_policy_source(spec: &str) -> Result<(String, Policy), Vec<String>> {
    if let Some(git) = crate::git_source::parse(spec) {
        let text = git.and_then(|git| git.read()).map_err(|e| vec![e])?;
        return load::load_str(spec, &text)
            .map(|policy| (spec.to_owned(), policy))
            .map_err(|e| e.errors.iter().map(ToString::to_string).collect());
    }
    let (format, path) = split_format(spec).map_err(|e| vec![e])?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![format!("{path}: cannot read policy: {e}")])?;
    let result = match format {
        None => load::load_str(path, &text),
        Some(format) => import::import(format, path, &text),
    };
    result
        .map(|policy| (path.to_owned(), policy))
        .map_err(|e| e.errors.iter().map(ToString::to_string).collect())
}

impl PolicyArgs {
    /// Reads the real value of every secret of `policy` and builds the credential store
    /// (surrogates generated here). Errors name the secret, never a value.
    pub fn credentials(&self, policy: &Policy) -> Result<airlock_credentials::Credentials, String> {
        let values =
            crate::secret_sources::read_all(&policy.secrets).map_err(|errors| errors.join("\n"))?;
        airlock_credentials::Credentials::new(values).map_err(|e| e.to_string())
    }
}

/// Parses `--mode`: `enforce` or `report` (`ask` is refused with a clear message).
pub fn parse_mode(text: &str) -> Result<airlock_policy::mode::Mode, String> {
    text.parse()
        .map_err(|e: airlock_policy::mode::ModeError| e.to_string())
}

/// Says on stderr what report mode does (nothing in enforce mode).
pub fn announce_mode(mode: airlock_policy::mode::Mode) {
    if mode == airlock_policy::mode::Mode::Report {
        eprintln!(
            "airlock: report mode: requests refused only for their host, method or path are \
             let through and logged with \"would\":\"deny\"; credentials, private addresses, \
             deny rules, body guards and MCP rules are still enforced"
        );
    }
}
