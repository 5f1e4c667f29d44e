//! Reads the real values of secrets from their sources (`env`, `file`, `value`,
//! `command`) at start-up. This is the only place real values enter airlock; errors name
//! the secret and the source, never a value.

use std::process::{Command, Stdio};

use airlock_policy::model::{Secret, SecretSource};

/// Reads every secret's real value. A source that is missing or empty is an error naming
/// the secret; all errors are reported together.
pub fn read_all(secrets: &[Secret]) -> Result<Vec<(Secret, String)>, Vec<String>> {
    let mut values = Vec::with_capacity(secrets.len());
    let mut errors = Vec::new();
    for secret in secrets {
        match read_one(secret) {
            Ok(value) => values.push((secret.clone(), value)),
            Err(e) => errors.push(format!("secret {}: {e}", secret.name)),
        }
    }
    if errors.is_empty() {
        Ok(values)
    } else {
        Err(errors)
    }
}

/// Reads one secret's real value from its source; a missing or empty source is an error
/// naming the source, never a value.
pub(crate) fn read_one(secret: &Secret) -> Result<String, String> {
    let value = match &secret.source {
        SecretSource::Env(var) => match std::env::var(var) {
            Ok(v) => v,
            Err(std::env::VarError::NotPresent) => {
                return Err(format!("environment variable {var} is not set"));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("environment variable {var} is not valid UTF-8"));
            }
        },
        SecretSource::File(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .trim_end_matches(['\r', '\n'])
            .to_owned(),
        SecretSource::Value(v) => v.clone(),
        SecretSource::Command(argv) => run_command(argv)?,
    };
    if value.is_empty() {
        return Err(format!(
            "its source ({}) is empty",
            describe(&secret.source)
        ));
    }
    Ok(value)
}

fn run_command(argv: &[String]) -> Result<String, String> {
    let (program, args) = argv.split_first().ok_or("command is empty")?;
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if !output.status.success() {
        return Err(format!("command {program} failed ({})", output.status));
    }
    let text = String::from_utf8(output.stdout)
        .map_err(|_| format!("command {program} printed non-UTF-8 output"))?;
    Ok(text.trim().to_owned())
}

fn describe(source: &SecretSource) -> String {
    match source {
        SecretSource::Env(var) => format!("env {var}"),
        SecretSource::File(path) => format!("file {}", path.display()),
        SecretSource::Value(_) => "value".to_owned(),
        SecretSource::Command(argv) => {
            format!("command {}", argv.first().map_or("", String::as_str))
        }
    }
}
