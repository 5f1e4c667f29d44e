//! The policy flags shared by `run`, `proxy`, `sandbox create` and `policy explain`
//! (`--policy [FORMAT:]FILE`, `--allow RULE`, `--secret SPEC`) and the parsers of `--mode`
//! and `--ask-timeout`. The flags become [`PolicySources`]; reading and combining them is
//! `airlock_session::sources`'.

use airlock_policy::Policy;
use airlock_session::sources::PolicySources;

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
    /// The typed sources (no secrets).
    pub fn sources(&self) -> PolicySources {
        PolicySources {
            policies: self.policies.clone(),
            allows: self.allows.clone(),
            secrets: Vec::new(),
        }
    }

    /// Reads, validates and combines every source. Returns every error found, each
    /// naming its file and location; nothing is half-loaded.
    pub fn load(&self) -> Result<Policy, Vec<String>> {
        self.sources().load()
    }
}

impl PolicyArgs {
    /// The typed sources, `--secret` flags included.
    pub fn sources(&self) -> PolicySources {
        PolicySources {
            secrets: self.secrets.clone(),
            ..self.selection.sources()
        }
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
