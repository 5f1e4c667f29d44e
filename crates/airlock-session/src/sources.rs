//! Policy sources of a session (`[FORMAT:]FILE` and `git:` files, allow-rule shorthands,
//! secret specs) and how they combine into one validated policy. Reading files happens
//! here, at the edge; everything else is the policy crate's pure code.

use std::str::FromStr;

use airlock_import::{self as import, SeedFormat};
use airlock_policy::Policy;
use airlock_policy::load;
use airlock_policy::rule;

/// Which rules and secrets apply: the typed form of `--policy`, `--allow` and `--secret`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicySources {
    /// Policy files: `[FORMAT:]FILE` (FORMAT is a seed system's) or
    /// `git:REPO_DIR#BRANCH:PATH`. Rules are combined.
    pub policies: Vec<String>,
    /// Allow rules: `[METHOD[,METHOD...] ]HOST[:PORT][/PATHGLOB]`.
    pub allows: Vec<String>,
    /// Secret specs: `NAME@HOSTS`, `NAME=env:VAR@HOSTS`, `NAME=file:PATH@HOSTS`,
    /// `NAME=SURROGATE=VALUE@HOSTS`, or any of them `@preset:SERVICE`.
    pub secrets: Vec<String>,
    /// A built-in agent profile added to the rules (docs/agents.md); with one, the
    /// combined policy must give the agent its key.
    pub profile: Option<&'static airlock_policy::profiles::Profile>,
}

impl PolicySources {
    /// Whether neither a policy file, an allow rule nor a profile was given.
    pub fn has_no_rules(&self) -> bool {
        self.policies.is_empty() && self.allows.is_empty() && self.profile.is_none()
    }

    /// Reads, validates and combines every source. Returns every error found, each
    /// naming its file and location; nothing is half-loaded.
    pub fn load(&self) -> Result<Policy, Vec<String>> {
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
        for spec in &self.secrets {
            match rule::parse_secret(spec) {
                Ok(secret) => flags.secrets.push(secret),
                Err(e) => errors.push(format!("--secret: {e}")),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        if !self.allows.is_empty() || !self.secrets.is_empty() {
            sources.push((None, flags));
        }
        if let Some(profile) = self.profile {
            profile.add_to(&mut sources).map_err(|e| vec![e])?;
        }
        let policy = Policy::combine(sources).map_err(|e| vec![e.to_string()])?;
        if let Some(profile) = self.profile
            && !crate::credential_files::login_present(&policy, profile.name)
        {
            profile.check_key(&policy).map_err(|e| vec![e])?;
        }
        Ok(policy)
    }

    /// Reads the real value of every secret of `policy` and builds the credential store
    /// (surrogates generated here). Errors name the secret, never a value.
    pub fn credentials(policy: &Policy) -> Result<airlock_credentials::Credentials, String> {
        let values =
            crate::secret_sources::read_all(&policy.secrets).map_err(|errors| errors.join("\n"))?;
        airlock_credentials::Credentials::new(values).map_err(|e| e.to_string())
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
             until answered: run `airlock watch` in another terminal (`--admin ADDR` for a \
             proxy; a allow once, r for the run, s save, d deny); unanswered ones are refused after --ask-timeout; \
             credentials, private addresses, deny rules, body guards and MCP rules are still \
             enforced"
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
mod tests {
    use super::{PolicySources, split_format};

    #[test]
    fn a_seed_prefix_is_split_and_an_unknown_one_refused() {
        assert!(matches!(
            split_format("airut:a.yaml"),
            Ok((Some(_), "a.yaml"))
        ));
        assert!(matches!(
            split_format("./x:y.yaml"),
            Ok((None, "./x:y.yaml"))
        ));
        assert!(split_format("nosuch:a.yaml").is_err());
    }

    #[test]
    fn allow_rules_alone_make_a_policy() {
        let sources = PolicySources {
            allows: vec!["api.example.com".to_owned()],
            ..PolicySources::default()
        };
        assert!(!sources.has_no_rules());
        let policy = sources.load().expect("policy");
        assert_eq!(policy.network.allow.len(), 1);
    }
}
