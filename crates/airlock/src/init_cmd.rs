//! `airlock init [--profile NAME] [--force]`: writes a commented starter policy,
//! `./airlock.yaml`, the file `airlock run` then reads when no `--policy` or `--allow` is
//! given (docs/contract.md, "Policy discovery and agent profiles"). It refuses to replace
//! an existing file without `--force`; what it writes passes `airlock policy check`.
//! Exit 0 when written, 1 otherwise.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use airlock_policy::profiles::Profile;

use crate::out::outln;

/// Flags of `airlock init`.
#[derive(clap::Args)]
pub(crate) struct InitArgs {
    /// Write the starter for an agent: claude, codex, aider or gemini (its key as a secret,
    /// and what its profile adds, in comments).
    #[arg(long, value_name = "NAME", value_parser = crate::profile_cmd::parse_profile)]
    pub profile: Option<&'static Profile>,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
    /// Where to write (default `./airlock.yaml`).
    #[arg(long, value_name = "FILE", default_value = "airlock.yaml")]
    pub output: PathBuf,
}

/// Runs `airlock init`.
pub(crate) fn run(args: &InitArgs) -> ExitCode {
    let text = starter(args.profile);
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let written = options
        .open(&args.output)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    match written {
        Ok(()) => {
            outln!(
                "wrote {}: check it with `airlock policy check {0}`; `airlock run -- CMD` in this \
                 directory reads it",
                args.output.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            eprintln!(
                "airlock: {} exists: it was left as it is (use --force to replace it)",
                args.output.display()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("airlock: cannot write {}: {e}", args.output.display());
            ExitCode::FAILURE
        }
    }
}

/// The starter text, for `profile` when given.
pub(crate) fn starter(profile: Option<&Profile>) -> String {
    let mut text = String::from(HEAD);
    if let Some(profile) = profile {
        text.push_str(&profile_part(profile));
    } else {
        text.push_str(PROFILE_NOTE);
    }
    text.push_str(BODY);
    match profile.and_then(|p| p.key_flag.split_whitespace().nth(1)) {
        Some(spec) => {
            let (name, preset) = spec.split_once("@preset:").unwrap_or((spec, ""));
            text.push_str(&format!(
                "secrets:\n  # The agent's key: the real value is read from ${name} when the run starts;\n  \
                 # the agent sees a placeholder, swapped back only towards the service's hosts.\n  \
                 # (Then do not also pass --secret {name}.)\n  {name}: {{preset: {preset}}}\n"
            ));
        }
        None => text.push_str(SECRETS_EXAMPLE),
    }
    text
}

/// The first lines, whatever the agent.
const HEAD: &str = "\
# airlock policy, written by `airlock init` (docs/policy.md has every key).
# `airlock run -- CMD` reads ./airlock.yaml when no --policy or --allow is given, then
# ~/.config/airlock/policy.yaml. Check it:   airlock policy check airlock.yaml
# Ask it:     airlock policy explain GET https://api.github.com/repos/OWNER/REPO
# Everything not allowed here is refused, and the refusal says which rule to add.
";

/// Said when no profile was asked for.
const PROFILE_NOTE: &str = "\
#
# Agents: `airlock run -- claude` (codex, aider, gemini) adds that agent's built-in profile
# to this policy: its API host, its state directory writable, its settings read-only
# (`airlock profile show claude`; `airlock init --profile claude` for its starter).
";

/// The rules, as examples to edit.
const BODY: &str = "\
version: 1
network:
  allow:
    # One entry per host the command may reach; `methods` and `paths` narrow it.
    # - host: api.github.com
    #   methods: [GET]
    #   paths: [\"/repos/OWNER/REPO\", \"/repos/OWNER/REPO/**\"]
    # - host: github.com                  # git over https
    #   paths: [\"/OWNER/REPO.git/**\"]
    # Python packages (read only):
    - host: pypi.org
      methods: [GET, HEAD]
      paths: [\"/simple/**\"]
    - host: files.pythonhosted.org
      methods: [GET, HEAD]
  deny:
    # Deny rules win over every allow, the agent profiles' too.
    - cidr: 169.254.0.0/16              # cloud metadata

# What the command may write besides the working directory (the default):
# filesystem:
#   writable: [\".\", \"~/.cache/pip\"]
#   protected: [\".github/workflows\"]    # read-only even inside writable directories

";

/// The secrets example without a profile.
const SECRETS_EXAMPLE: &str = "\
# Credentials: the command sees a placeholder; airlock swaps in the real value only towards
# the secret's hosts.
# secrets:
#   GH_TOKEN: {preset: github}          # the real value from $GH_TOKEN
";

/// What a profile adds, as comments.
fn profile_part(profile: &Profile) -> String {
    let mut text = format!(
        "#\n# With `airlock run -- {0}` the `{0}` profile ({1}, version {2})\n# is added to \
         this file:\n",
        profile.name, profile.agent, profile.version
    );
    for line in profile
        .show()
        .lines()
        .filter(|line| !line.trim_start().starts_with('#') && !line.trim().is_empty())
    {
        text.push_str("#   ");
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&format!(
        "# (`airlock profile show {}`). Add your project's own hosts below.\n",
        profile.name
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::starter;

    #[test]
    fn every_starter_is_a_valid_policy() {
        let mut texts = vec![starter(None)];
        texts.extend(
            airlock_policy::profiles::PROFILES
                .iter()
                .map(|p| starter(Some(p))),
        );
        for text in texts {
            let policy = airlock_policy::load::load_str("airlock.yaml", &text)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert!(!policy.network.allow.is_empty());
        }
        let claude = starter(airlock_policy::profiles::find("claude"));
        assert!(
            claude.contains("ANTHROPIC_API_KEY: {preset: anthropic}"),
            "{claude}"
        );
        assert!(
            claude.contains("#       - host: api.anthropic.com"),
            "{claude}"
        );
    }
}
