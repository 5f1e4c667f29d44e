//! secrets-proxy's secrets JSON (the placeholder secrets proxy with an nftables jail),
//! together with the `--allow-net` hosts of its command line:
//!
//! ```json
//! {
//!   "OPENAI_API_KEY": {
//!     "placeholder": "SECRETS_PROXY_PLACEHOLDER_<random>",
//!     "value": "sk-real-key-here",
//!     "hosts": ["api.openai.com"],
//!     "inject": {"header": "Authorization", "format": "Bearer {value}"}
//!   }
//! }
//! ```
//!
//! How secrets-proxy decides, and the translation:
//!
//! * Each key is a secret name (`[A-Za-z_][A-Za-z0-9_]*`); `value` and a non-empty `hosts`
//!   list are required. Each becomes an airlock secret with a literal `value:` source,
//!   swapped in every header, the query and identity-encoded bodies (`body: true`), as
//!   secrets-proxy substitutes placeholders in headers, URL and body.
//! * Hosts are cleaned as secrets-proxy does (a `http://`/`https://` prefix, a path and a
//!   `:port` are dropped, letters lower-cased); `*.example.com` matches `example.com` *and*
//!   its subdomains there, so it becomes both `example.com` and `*.example.com`.
//! * Every secret host and every `--allow-net` host is reachable (an allow rule, ports 80
//!   and 443); IP literals are refused by secrets-proxy unless `--allow-ip-literals`, so
//!   they get no allow rule (they stay in the secret's hosts).
//! * `inject` (header and a format holding `{value}` once) is kept as airlock's `inject`.
//! * `placeholder` becomes the fixed surrogate. Each `<random>` in it is filled with 32
//!   lower-case hexadecimal digits, as secrets-proxy's generated placeholders have. The
//!   digits are a deterministic function of the secret's name, the placeholder text and
//!   the occurrence's index (two 64-bit FNV-1a hashes, seeded differently, of
//!   `"airlock secrets-proxy surrogate\0" NAME "\0" PLACEHOLDER "\0" INDEX`), never of the
//!   secret's value: importing twice gives the same surrogate, so `policy import` output
//!   and `--policy secrets-proxy:FILE` agree, and different secrets never collide. A
//!   surrogate is not itself a secret (the sandbox sees it); what makes it safe is that the
//!   proxy swaps it only on the secret's hosts. Without a `placeholder`, airlock generates a
//!   format-preserving surrogate for every sandbox.
//!
//! airlock is stricter in one place: a request to a secret's host carrying some other
//! credential is refused (the foreign-credential check), where secrets-proxy forwards it.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::{
    Ordered, Problems, at, destination_rule, parse_document, push_unique, suffix_and_apex,
};
use airlock_policy::load::LoadError;
use airlock_policy::model::{HostPattern, Inject, Policy, Secret, SecretSource, Target};
use airlock_policy::rule::{is_env_name, is_token, parse_host_pattern};

/// One secret.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    placeholder: Option<Spanned<String>>,
    value: Option<Spanned<String>>,
    hosts: Option<Vec<Spanned<String>>>,
    inject: Option<Spanned<InjectSpec>>,
}

/// `inject`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InjectSpec {
    header: Option<Spanned<String>>,
    format: Option<Spanned<String>>,
}

/// Import a secrets-proxy secrets file (no `--allow-net` hosts).
pub fn import(file: &str, text: &str) -> Result<Policy, LoadError> {
    import_with_allow_net(file, text, &[])
}

/// Import a secrets-proxy secrets file plus the hosts its `--allow-net` flags named
/// (reachable without any secret). A bad `--allow-net` host is reported with the source
/// `--allow-net[i]` and no line.
pub fn import_with_allow_net(
    file: &str,
    text: &str,
    allow_net: &[&str],
) -> Result<Policy, LoadError> {
    let mut problems = Problems::new(file);
    let mut policy = Policy::default();
    let parsed = parse_document::<Ordered<Spanned<String>, Spanned<Entry>>>(file, text)
        .map_err(without_quoted_text)?;
    if let Some(secrets) = parsed {
        for (name, entry) in &secrets.0 {
            if let Some(secret) = read_secret(name, entry, &mut problems) {
                for host in &secret.hosts {
                    if !matches!(host, HostPattern::Ip(_)) {
                        push_unique(
                            &mut policy.network.allow,
                            destination_rule(Target::Host(host.clone()), None),
                        );
                    }
                }
                policy.secrets.push(secret);
            }
        }
    }
    for (index, host) in allow_net.iter().enumerate() {
        match host_patterns(host) {
            Ok(patterns) => {
                for pattern in patterns {
                    if !matches!(pattern, HostPattern::Ip(_)) {
                        push_unique(
                            &mut policy.network.allow,
                            destination_rule(Target::Host(pattern), None),
                        );
                    }
                }
            }
            Err(message) => problems.outside(
                &format!("--allow-net[{index}]"),
                format!("{host:?}: {message}"),
            ),
        }
    }
    super::assign_ids(&mut policy);
    problems.finish(policy)
}

/// A parser message never quotes the file's text here, since that may be a secret value:
/// one that would is replaced by a description of the expected shape.
fn without_quoted_text(mut error: LoadError) -> LoadError {
    for located in &mut error.errors {
        if located.message.contains(['"', '\'']) {
            located.message = "this is not secrets-proxy's shape: an object of NAME: {value, hosts, placeholder?, inject?}".to_owned();
        }
    }
    error
}

/// Validate one entry into an airlock secret.
fn read_secret(
    name: &Spanned<String>,
    entry: &Spanned<Entry>,
    problems: &mut Problems,
) -> Option<Secret> {
    let before = problems.len();
    if !is_env_name(&name.value) {
        problems.at(
            at(name),
            format!(
                "secret name {:?} must be an environment variable name: [A-Za-z_][A-Za-z0-9_]*",
                name.value
            ),
        );
    }
    let label = &name.value;
    let value = match &entry.value.value {
        Some(value) if !value.value.is_empty() => Some(value.value.clone()),
        Some(value) => {
            problems.at(at(value), format!("secret {label}: `value` is empty"));
            None
        }
        None => {
            problems.at(at(entry), format!("secret {label}: `value` is required"));
            None
        }
    };
    let mut hosts = Vec::new();
    match &entry.value.hosts {
        Some(listed) if !listed.is_empty() => {
            for host in listed {
                match host_patterns(&host.value) {
                    Ok(patterns) => {
                        for pattern in patterns {
                            if !hosts.contains(&pattern) {
                                hosts.push(pattern);
                            }
                        }
                    }
                    Err(message) => problems.at(
                        at(host),
                        format!("secret {label}: host {:?}: {message}", host.value),
                    ),
                }
            }
        }
        _ => problems.at(
            at(entry),
            format!(
                "secret {label}: `hosts` must list the hosts the secret may be sent to (secrets-proxy refuses unscoped secrets)"
            ),
        ),
    }
    let surrogate = match &entry.value.placeholder {
        Some(placeholder) if placeholder.value.is_empty() => {
            problems.at(
                at(placeholder),
                format!("secret {label}: `placeholder` is empty"),
            );
            None
        }
        Some(placeholder) => {
            let surrogate = fill_random(label, &placeholder.value);
            if value.as_deref() == Some(surrogate.as_str()) {
                problems.at(
                    at(placeholder),
                    format!(
                        "secret {label}: `placeholder` is the same as `value`: the sandbox would hold the real secret; choose another placeholder"
                    ),
                );
            }
            Some(surrogate)
        }
        None => None,
    };
    let inject = entry
        .value
        .inject
        .as_ref()
        .and_then(|inject| read_inject(label, inject, problems));
    if problems.len() != before {
        return None;
    }
    Some(Secret {
        name: name.value.clone(),
        source: SecretSource::Value(value?),
        hosts,
        headers: None,
        inject,
        surrogate,
        body: true,
        foreign_allowed: false,
    })
}

/// `inject: {header, format}`.
fn read_inject(
    label: &str,
    inject: &Spanned<InjectSpec>,
    problems: &mut Problems,
) -> Option<Inject> {
    let header = match &inject.value.header {
        Some(header) if is_token(&header.value) => Some(header.value.to_ascii_lowercase()),
        Some(header) => {
            problems.at(
                at(header),
                format!(
                    "secret {label}: inject header {:?} is not a header name",
                    header.value
                ),
            );
            None
        }
        None => {
            problems.at(
                at(inject),
                format!("secret {label}: inject needs a `header`"),
            );
            None
        }
    };
    let format = match &inject.value.format {
        Some(format) if format.value.matches("{value}").count() == 1 => Some(format.value.clone()),
        Some(format) => {
            problems.at(
                at(format),
                format!("secret {label}: inject format must contain `{{value}}` exactly once"),
            );
            None
        }
        None => {
            problems.at(
                at(inject),
                format!("secret {label}: inject needs a `format`"),
            );
            None
        }
    };
    Some(Inject {
        header: header?,
        format: format?,
    })
}

/// A host as secrets-proxy cleans and validates it, as airlock host patterns.
fn host_patterns(raw: &str) -> Result<Vec<HostPattern>, String> {
    let host = raw
        .strip_prefix("https://")
        .or_else(|| raw.strip_prefix("http://"))
        .unwrap_or(raw);
    let host = host.split('/').next().unwrap_or(host);
    let host = match host.rsplit_once(':') {
        Some((name, _port)) if !host.starts_with('[') => name,
        _ => host,
    };
    let host = host.to_lowercase();
    if let Some(suffix) = host.strip_prefix("*.") {
        if suffix.is_empty() || suffix.contains("..") || suffix.starts_with('.') {
            return Err("the domain after `*.` is not valid".to_owned());
        }
        return match parse_host_pattern(&host).map_err(|e| e.to_string())? {
            HostPattern::Wildcard(name) => Ok(suffix_and_apex(name).to_vec()),
            other => Ok(vec![other]),
        };
    }
    if host.starts_with('*') {
        return Err("wildcards must start with `*.`, as in `*.example.com`".to_owned());
    }
    parse_host_pattern(&host)
        .map(|pattern| vec![pattern])
        .map_err(|e| e.to_string())
}

/// The placeholder with every `<random>` filled (see the module documentation).
fn fill_random(name: &str, placeholder: &str) -> String {
    let mut filled = String::with_capacity(placeholder.len() + 32);
    let mut rest = placeholder;
    let mut index: u64 = 0;
    while let Some((before, after)) = rest.split_once("<random>") {
        filled.push_str(before);
        filled.push_str(&random_digits(name, placeholder, index));
        index += 1;
        rest = after;
    }
    filled.push_str(rest);
    filled
}

/// 32 hexadecimal digits for one `<random>` occurrence.
fn random_digits(name: &str, placeholder: &str, index: u64) -> String {
    let mut input = Vec::with_capacity(64 + name.len() + placeholder.len());
    input.extend_from_slice(b"airlock secrets-proxy surrogate\0");
    input.extend_from_slice(name.as_bytes());
    input.push(0);
    input.extend_from_slice(placeholder.as_bytes());
    input.push(0);
    input.extend_from_slice(&index.to_le_bytes());
    format!("{:016x}{:016x}", fnv1a(&input, 0), fnv1a(&input, 1))
}

/// 64-bit FNV-1a of `seed` followed by `data`.
fn fnv1a(data: &[u8], seed: u8) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    std::iter::once(&seed)
        .chain(data)
        .fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_is_filled_deterministically_and_distinctly() {
        let a = fill_random("A", "SECRETS_PROXY_PLACEHOLDER_<random>");
        assert_eq!(a, fill_random("A", "SECRETS_PROXY_PLACEHOLDER_<random>"));
        assert_ne!(a, fill_random("B", "SECRETS_PROXY_PLACEHOLDER_<random>"));
        let digits = a.strip_prefix("SECRETS_PROXY_PLACEHOLDER_").unwrap();
        assert_eq!(digits.len(), 32);
        assert!(
            digits
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        let two = fill_random("A", "<random>-<random>");
        let (x, y) = two.split_once('-').unwrap();
        assert_ne!(x, y);
        assert_eq!(fill_random("A", "fixed"), "fixed");
    }

    #[test]
    fn hosts_are_cleaned_like_secrets_proxy() {
        let exact = |s: &str| HostPattern::Exact(s.to_owned());
        assert_eq!(
            host_patterns("https://API.openai.com:443/v1"),
            Ok(vec![exact("api.openai.com")])
        );
        assert_eq!(
            host_patterns("*.github.com"),
            Ok(vec![
                exact("github.com"),
                HostPattern::Wildcard("github.com".into())
            ])
        );
        assert!(host_patterns("*github.com").is_err());
        assert!(host_patterns("*").is_err());
        assert!(host_patterns("*..x.com").is_err());
        assert_eq!(
            host_patterns("10.0.0.5"),
            Ok(vec![HostPattern::Ip("10.0.0.5".parse().unwrap())])
        );
    }
}
