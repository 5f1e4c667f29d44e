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

/// Parses `--mode`: `enforce`, `report` or `ask`.
pub fn parse_mode(text: &str) -> Result<airlock_policy::mode::Mode, String> {
    text.parse()
        .map_err(|e: airlock_policy::mode::ModeError| e.to_string())
}

/// Parses `--mode` where nobody could answer an ask (`sandbox create`): `enforce` or
/// `report`.
pub fn parse_mode_without_ask(text: &str) -> Result<airlock_policy::mode::Mode, String> {
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
pub fn parse_ask_timeout(text: &str) -> Result<std::time::Duration, String> {
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

/// The asks of `--mode ask`, each waiting at most `timeout`.
pub fn asks(timeout: std::time::Duration) -> std::sync::Arc<airlock_proxy::ask::Asks> {
    std::sync::Arc::new(airlock_proxy::ask::Asks::new(
        timeout,
        airlock_policy::ask::DEFAULT_CAPACITY,
    ))
}

/// Says on stderr what report or ask mode does (nothing in enforce mode).
pub fn announce_mode(mode: airlock_policy::mode::Mode) {
    if mode == airlock_policy::mode::Mode::Ask {
        eprintln!(
            "airlock: ask mode: requests refused only for their host, method or path are held \
             until answered through the admin API (GET /v1/pending, POST /v1/pending/ID) or \
             refused after --ask-timeout; credentials, private addresses, deny rules, body \
             guards and MCP rules are still enforced"
        );
    }
    if mode == airlock_policy::mode::Mode::Report {
        eprintln!(
            "airlock: report mode: requests refused only for their host, method or path are \
             let through and logged with \"would\":\"deny\"; credentials, private addresses, \
             deny rules, body guards and MCP rules are still enforced"
        );
    }
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
