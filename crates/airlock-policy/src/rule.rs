//! The vocabulary of a rule, shared by the policy-file loader and the command line: host
//! patterns, methods, path globs and regexes, secret and header names; and the two
//! command-line shorthands, `--allow RULE` ([`parse_allow`]) and `--secret SPEC`
//! ([`parse_secret`]).
//!
//! Every check lives here once, so a host written in a policy file and the same host given
//! to `--allow` are validated and canonicalised by the same code.

use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;

use crate::canonical::{self, Host, HostError};
use crate::model::{HostPattern, Rule, Secret, SecretSource, Target};

/// The methods RFC 9110 defines plus PATCH (RFC 5789); lower-case spellings of these are
/// accepted and upper-cased, any other method must be written in upper case.
pub const STANDARD_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// The largest compiled size a `path_regex` may have, in bytes.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Why one value (a host, a method, a path glob, a regex) is not acceptable. The messages
/// say what is wrong and how to write it; they never repeat the offending text, so the
/// caller decides whether it may be shown.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A host was given as a URL.
    #[error(
        "a host is a bare name, not a URL: drop the `scheme://` part and put a path under `paths:`"
    )]
    HostHasScheme,
    /// A host has a `/path` after it.
    #[error("a host cannot contain a path: put the path under `paths:` instead")]
    HostHasPath,
    /// A host has a `:port` after it.
    #[error("a host cannot carry a port: list the port under `ports:` instead")]
    HostHasPort,
    /// `*` alone.
    #[error(
        "`*` alone would allow every host and is refused: list the hosts, or write `*.example.com` for every subdomain of example.com"
    )]
    BareStar,
    /// A `*` somewhere other than a leading `*.`.
    #[error("`*` is only allowed as a leading `*.`, as in `*.example.com`")]
    MisplacedStar,
    /// `*.` followed by an IP address.
    #[error("a wildcard needs a domain name after `*.`, not an IP address")]
    WildcardOnIp,
    /// The host canonicaliser refused the name.
    #[error("{0}")]
    Host(#[from] HostError),
    /// A method that is not an RFC 9110 token.
    #[error("a method is one word of letters (an RFC 9110 token), such as GET or POST")]
    MethodNotToken,
    /// A lower-case method that is not a standard one.
    #[error(
        "unknown method: use one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH, or write a custom method in upper case ({upper})"
    )]
    MethodUnknown {
        /// The upper-case spelling a custom method would need.
        upper: String,
    },
    /// A path glob that does not start with `/`.
    #[error("a path glob must start with `/`, as in `/repos/**`")]
    PathNotAbsolute,
    /// A path glob that globset refuses.
    #[error(
        "not a valid glob ({0}): `*` matches inside one segment, `**` across segments, `?` one character, `[...]` a class, `{{a,b}}` alternatives"
    )]
    PathGlob(String),
    /// A regex that does not parse.
    #[error("not a valid regular expression: {0}")]
    RegexSyntax(String),
    /// A regex whose compiled form is too large.
    #[error(
        "the regular expression compiles to more than the 1 MiB limit: simplify it or split it into several entries"
    )]
    RegexTooBig,
}

/// Parse and canonicalise a host pattern as written in a policy file or a shorthand:
/// `name`, `*.name` (one or more labels in front of `name`), an IPv4 literal or an IPv6
/// literal with or without brackets. Names are lower-cased, IDNA-encoded and lose a
/// trailing dot. `*` alone is refused (only importers may produce [`HostPattern::Any`]).
pub fn parse_host_pattern(text: &str) -> Result<HostPattern, ValueError> {
    if text.contains("://") {
        return Err(ValueError::HostHasScheme);
    }
    if text == "*" {
        return Err(ValueError::BareStar);
    }
    if let Some(suffix) = text.strip_prefix("*.") {
        check_host_shape(suffix)?;
        return match canonical::canonical_host(suffix)? {
            Host::Name(name) => Ok(HostPattern::Wildcard(name)),
            Host::Ip(_) => Err(ValueError::WildcardOnIp),
        };
    }
    if let Ok(v6) = text.parse::<Ipv6Addr>() {
        return Ok(HostPattern::Ip(IpAddr::V6(v6)));
    }
    check_host_shape(text)?;
    match canonical::canonical_host(text)? {
        Host::Name(name) => Ok(HostPattern::Exact(name)),
        Host::Ip(addr) => Ok(HostPattern::Ip(addr)),
    }
}

/// Refuse the common mistakes (a path, a port, a misplaced `*`) with a message that says
/// what to write instead, before the canonicaliser sees the text.
fn check_host_shape(text: &str) -> Result<(), ValueError> {
    if text.contains('*') {
        return Err(ValueError::MisplacedStar);
    }
    let after_literal = match text.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, after)| after),
        None => text,
    };
    if after_literal.contains('/') {
        return Err(ValueError::HostHasPath);
    }
    if after_literal.contains(':') {
        return Err(ValueError::HostHasPort);
    }
    Ok(())
}

/// Whether `text` is an RFC 9110 token (the syntax of methods and header names).
pub fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// Whether `text` is a valid environment variable (and secret) name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(text: &str) -> bool {
    let mut bytes = text.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Parse a method: a standard method in any case, or a custom token in upper case.
/// Returns the upper-case spelling.
pub fn parse_method(text: &str) -> Result<String, ValueError> {
    if !is_token(text) {
        return Err(ValueError::MethodNotToken);
    }
    let upper = text.to_ascii_uppercase();
    if upper == text || STANDARD_METHODS.contains(&upper.as_str()) {
        Ok(upper)
    } else {
        Err(ValueError::MethodUnknown { upper })
    }
}

/// Check a path glob: it starts with `/` and compiles with `*` kept inside one segment.
pub fn check_path_glob(text: &str) -> Result<(), ValueError> {
    if !text.starts_with('/') {
        return Err(ValueError::PathNotAbsolute);
    }
    globset::GlobBuilder::new(text)
        .literal_separator(true)
        .build()
        .map(|_| ())
        .map_err(|e| ValueError::PathGlob(e.kind().to_string()))
}

/// Check a `path_regex`: it compiles within [`REGEX_SIZE_LIMIT`].
pub fn check_path_regex(text: &str) -> Result<(), ValueError> {
    match regex::RegexBuilder::new(text)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
    {
        Ok(_) => Ok(()),
        Err(regex::Error::CompiledTooBig(_)) => Err(ValueError::RegexTooBig),
        Err(regex::Error::Syntax(message)) => Err(ValueError::RegexSyntax(regex_summary(&message))),
        Err(other) => Err(ValueError::RegexSyntax(other.to_string())),
    }
}

/// Check a `host_regex` (the same syntax and size limit as `path_regex`; compiled
/// case-insensitively by [`host_regex`]). The text must compile on its own, so that no
/// unbalanced `)` can escape the anchoring group.
pub fn check_host_regex(text: &str) -> Result<(), ValueError> {
    check_path_regex(text)?;
    match host_regex(text) {
        Ok(_) => Ok(()),
        Err(regex::Error::CompiledTooBig(_)) => Err(ValueError::RegexTooBig),
        Err(regex::Error::Syntax(message)) => Err(ValueError::RegexSyntax(regex_summary(&message))),
        Err(other) => Err(ValueError::RegexSyntax(other.to_string())),
    }
}

/// Compile a `host_regex` for matching: anchored (`^(?:re)$`), case-insensitive (host
/// names are), within [`REGEX_SIZE_LIMIT`].
pub fn host_regex(text: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{text})$"))
        .case_insensitive(true)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
}

/// The one-line gist of the regex crate's multi-line syntax error.
fn regex_summary(message: &str) -> String {
    message
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .unwrap_or_else(|| message.lines().last().unwrap_or("syntax error"))
        .trim()
        .to_owned()
}

/// Why a `--allow RULE` or `--secret SPEC` could not be read. Messages name the problem and
/// show how to write it; a literal secret value is never repeated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// `--allow ""`.
    #[error(
        "--allow: the rule is empty: write [METHOD[,METHOD...] ]HOST[:PORT][/PATHGLOB], e.g. `api.github.com` or `GET,HEAD pypi.org/simple/**`"
    )]
    EmptyRule,
    /// More than one space-separated word before the host.
    #[error(
        "--allow `{rule}`: expected [METHOD[,METHOD...] ]HOST[:PORT][/PATHGLOB]: separate methods by commas without spaces, e.g. `GET,HEAD pypi.org/simple/**`"
    )]
    RuleShape {
        /// The rule as given.
        rule: String,
    },
    /// A URL with a scheme was given.
    #[error(
        "--allow `{rule}`: leave out the scheme: write HOST[:PORT][/PATHGLOB], e.g. `api.github.com/repos/**` (ports 80 and 443 are the default)"
    )]
    RuleScheme {
        /// The rule as given.
        rule: String,
    },
    /// A CIDR was given.
    #[error(
        "--allow `{rule}`: an address range cannot be given with --allow: write `- cidr: {rule}` under network.allow in a policy file, or allow one address with `--allow ADDRESS[:PORT]`"
    )]
    RuleCidr {
        /// The rule as given.
        rule: String,
    },
    /// A bad method.
    #[error("--allow `{rule}`: method `{method}`: {problem}")]
    RuleMethod {
        /// The rule as given.
        rule: String,
        /// The method as given.
        method: String,
        /// What is wrong with it.
        problem: ValueError,
    },
    /// A bad host.
    #[error("--allow `{rule}`: host `{host}`: {problem}")]
    RuleHost {
        /// The rule as given.
        rule: String,
        /// The host as given.
        host: String,
        /// What is wrong with it.
        problem: ValueError,
    },
    /// A bad port.
    #[error("--allow `{rule}`: the port must be a number from 1 to 65535 after the `:`")]
    RulePort {
        /// The rule as given.
        rule: String,
    },
    /// A bad path glob.
    #[error("--allow `{rule}`: path `{path}`: {problem}")]
    RulePath {
        /// The rule as given.
        rule: String,
        /// The path glob as given.
        path: String,
        /// What is wrong with it.
        problem: ValueError,
    },
    /// No `@HOST` part.
    #[error(
        "--secret: missing `@HOST`: write NAME@HOST[,HOST...] (value from the environment variable NAME), NAME=env:VAR@HOST, NAME=file:PATH@HOST or NAME=SURROGATE=VALUE@HOST; `@preset:SERVICE` (anthropic, openai, ...) in place of the hosts"
    )]
    SecretHostsMissing,
    /// The name is not a valid environment variable name.
    #[error(
        "--secret: the secret name (before `=` or `@`) must be letters, digits and `_`, not starting with a digit, e.g. GH_TOKEN"
    )]
    SecretName,
    /// `NAME=` followed by something that is no source.
    #[error("--secret {name}: after `{name}=` write env:VAR, file:PATH or SURROGATE=VALUE")]
    SecretSource {
        /// The secret's name.
        name: String,
    },
    /// `env:` with an invalid variable name.
    #[error(
        "--secret {name}: env:VAR needs a variable name of letters, digits and `_`, not starting with a digit"
    )]
    SecretEnvVar {
        /// The secret's name.
        name: String,
    },
    /// `file:` with nothing after it.
    #[error("--secret {name}: file:PATH needs a path, e.g. {name}=file:/run/secrets/token@HOST")]
    SecretFile {
        /// The secret's name.
        name: String,
    },
    /// `NAME==VALUE`.
    #[error(
        "--secret {name}: the surrogate before the second `=` is empty: write {name}=SURROGATE=VALUE@HOST"
    )]
    SecretSurrogate {
        /// The secret's name.
        name: String,
    },
    /// `NAME=SURROGATE=@HOST`.
    #[error(
        "--secret {name}: the value after the second `=` is empty: write {name}=SURROGATE=VALUE@HOST"
    )]
    SecretValue {
        /// The secret's name.
        name: String,
    },
    /// The surrogate equals the real value.
    #[error(
        "--secret {name}: the surrogate must differ from the value, or the sandbox would hold the real secret"
    )]
    SecretSurrogateIsValue {
        /// The secret's name.
        name: String,
    },
    /// `@preset:SERVICE` naming no preset (the name is not shown: it could be the tail of
    /// a mistyped value).
    #[error("--secret {name}: after `@preset:` name one of {names}")]
    SecretPreset {
        /// The secret's name.
        name: String,
        /// Every preset name.
        names: String,
    },
    /// A bad host in the host list (its text is shown unless it could be part of a value).
    #[error("--secret {name}: host {position}{shown}: {problem}")]
    SecretHost {
        /// The secret's name.
        name: String,
        /// 1-based position in the host list.
        position: usize,
        /// ` (`host`)` when the host may be shown, else empty.
        shown: String,
        /// What is wrong with it.
        problem: ValueError,
    },
}

/// Parse `--allow RULE`: `[METHOD[,METHOD...] ]HOST[:PORT][/PATHGLOB]`, e.g.
/// `api.github.com`, `GET,HEAD pypi.org/simple/**`, `localhost:8443`, `[::1]:8443/x`,
/// `*.example.com`. The rule id is `--allow[{index}]`; without a port the default ports
/// apply; `HOST:PORT` restricts the rule to that one port.
pub fn parse_allow(text: &str, index: usize) -> Result<Rule, RuleError> {
    let rule_text = text.trim();
    if rule_text.is_empty() {
        return Err(RuleError::EmptyRule);
    }
    let shape_error = || RuleError::RuleShape {
        rule: rule_text.to_owned(),
    };
    let mut words = rule_text.split_whitespace();
    let (method_word, target) = match (words.next(), words.next(), words.next()) {
        (Some(target), None, _) => (None, target),
        (Some(methods), Some(target), None) => (Some(methods), target),
        _ => return Err(shape_error()),
    };
    if target.contains("://") {
        return Err(RuleError::RuleScheme {
            rule: rule_text.to_owned(),
        });
    }
    let methods = match method_word {
        None => None,
        Some(word) => {
            let mut methods: Vec<String> = Vec::new();
            for method in word.split(',') {
                if method.is_empty() {
                    return Err(shape_error());
                }
                let upper = parse_method(method).map_err(|problem| RuleError::RuleMethod {
                    rule: rule_text.to_owned(),
                    method: method.to_owned(),
                    problem,
                })?;
                if !methods.contains(&upper) {
                    methods.push(upper);
                }
            }
            Some(methods)
        }
    };

    // Split HOST, :PORT and /PATH; a bracketed IPv6 literal keeps its colons.
    let host_end = if target.starts_with('[') {
        target.find(']').map_or(target.len(), |close| close + 1)
    } else {
        target.find([':', '/']).unwrap_or(target.len())
    };
    let (host_text, rest) = target.split_at(host_end);
    let (port_text, path_text) = match rest.strip_prefix(':') {
        Some(after) => {
            let (port, path) = after.split_at(after.find('/').unwrap_or(after.len()));
            (Some(port), path)
        }
        None => (None, rest),
    };
    if !path_text.is_empty() && !path_text.starts_with('/') {
        return Err(shape_error());
    }

    let host = parse_host_pattern(host_text).map_err(|problem| RuleError::RuleHost {
        rule: rule_text.to_owned(),
        host: host_text.to_owned(),
        problem,
    })?;
    let is_prefix_length = path_text.len() > 1
        && path_text.len() <= 4
        && path_text[1..].bytes().all(|b| b.is_ascii_digit());
    if matches!(host, HostPattern::Ip(_)) && port_text.is_none() && is_prefix_length {
        return Err(RuleError::RuleCidr {
            rule: rule_text.to_owned(),
        });
    }
    let ports = match port_text {
        None => None,
        Some(port) => Some(vec![parse_port_text(port).ok_or_else(|| {
            RuleError::RulePort {
                rule: rule_text.to_owned(),
            }
        })?]),
    };
    let paths = if path_text.is_empty() {
        Vec::new()
    } else {
        check_path_glob(path_text).map_err(|problem| RuleError::RulePath {
            rule: rule_text.to_owned(),
            path: path_text.to_owned(),
            problem,
        })?;
        vec![path_text.to_owned()]
    };
    Ok(Rule {
        id: format!("--allow[{index}]"),
        target: Target::Host(host),
        methods,
        paths,
        path_regex: Vec::new(),
        ports,
        json_deny: Vec::new(),
        process: None,
    })
}

/// A port written in digits, 1 to 65535.
fn parse_port_text(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|port| *port != 0)
}

/// Parse `--secret SPEC`:
///
/// * `NAME@HOST[,HOST...]`: the value is the launcher's environment variable NAME;
/// * `NAME=env:VAR@HOSTS`: the value is the environment variable VAR;
/// * `NAME=file:PATH@HOSTS`: the value is read from PATH;
/// * `NAME=SURROGATE=VALUE@HOSTS`: a fixed surrogate and a literal value;
/// * any of these with `@preset:SERVICE` in place of the hosts: the hosts and headers of
///   that [secret preset](crate::presets).
///
/// The hosts are split off at the last `@`, so a value may contain `@`. Errors never
/// repeat a literal value.
pub fn parse_secret(spec: &str) -> Result<Secret, RuleError> {
    let (definition, host_list) = spec.rsplit_once('@').ok_or(RuleError::SecretHostsMissing)?;
    let (name, source_text) = match definition.split_once('=') {
        Some((name, source)) => (name, Some(source)),
        None => (definition, None),
    };
    if !is_env_name(name) {
        return Err(RuleError::SecretName);
    }
    let owned_name = || name.to_owned();
    let (source, surrogate) = match source_text {
        None => (SecretSource::Env(name.to_owned()), None),
        Some(text) => {
            if let Some(var) = text.strip_prefix("env:") {
                if !is_env_name(var) {
                    return Err(RuleError::SecretEnvVar { name: owned_name() });
                }
                (SecretSource::Env(var.to_owned()), None)
            } else if let Some(path) = text.strip_prefix("file:") {
                if path.is_empty() {
                    return Err(RuleError::SecretFile { name: owned_name() });
                }
                (SecretSource::File(PathBuf::from(path)), None)
            } else if let Some((surrogate, value)) = text.split_once('=') {
                if surrogate.is_empty() {
                    return Err(RuleError::SecretSurrogate { name: owned_name() });
                }
                if value.is_empty() {
                    return Err(RuleError::SecretValue { name: owned_name() });
                }
                if surrogate == value {
                    return Err(RuleError::SecretSurrogateIsValue { name: owned_name() });
                }
                (
                    SecretSource::Value(value.to_owned()),
                    Some(surrogate.to_owned()),
                )
            } else {
                return Err(RuleError::SecretSource { name: owned_name() });
            }
        }
    };
    // With a literal value in the spec, a host could be the tail of a mistyped value:
    // do not repeat it.
    if let Some(service) = host_list.strip_prefix("preset:") {
        let preset = crate::presets::preset(service).ok_or_else(|| RuleError::SecretPreset {
            name: owned_name(),
            names: crate::presets::names(),
        })?;
        return Ok(Secret {
            hosts: preset
                .hosts
                .iter()
                .map(|host| parse_host_pattern(host).expect("preset hosts parse"))
                .collect(),
            headers: Some(preset.headers.iter().map(|h| (*h).to_owned()).collect()),
            surrogate,
            ..Secret::new(name, source)
        });
    }
    let may_show_hosts = !matches!(source, SecretSource::Value(_));
    let mut hosts = Vec::new();
    for (position, host_text) in host_list.split(',').enumerate() {
        let host = parse_host_pattern(host_text).map_err(|problem| RuleError::SecretHost {
            name: owned_name(),
            position: position + 1,
            shown: if may_show_hosts {
                format!(" (`{host_text}`)")
            } else {
                String::new()
            },
            problem,
        })?;
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    Ok(Secret {
        hosts,
        surrogate,
        ..Secret::new(name, source)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns_are_canonical() {
        assert_eq!(
            parse_host_pattern("Example.COM."),
            Ok(HostPattern::Exact("example.com".into()))
        );
        assert_eq!(
            parse_host_pattern("*.Example.com"),
            Ok(HostPattern::Wildcard("example.com".into()))
        );
        assert_eq!(
            parse_host_pattern("::1"),
            Ok(HostPattern::Ip("::1".parse().expect("v6")))
        );
        assert_eq!(
            parse_host_pattern("[::1]"),
            Ok(HostPattern::Ip("::1".parse().expect("v6")))
        );
        assert_eq!(
            parse_host_pattern("10.0.0.5"),
            Ok(HostPattern::Ip("10.0.0.5".parse().expect("v4")))
        );
    }

    #[test]
    fn host_pattern_mistakes_get_their_own_error() {
        assert_eq!(parse_host_pattern("*"), Err(ValueError::BareStar));
        assert_eq!(
            parse_host_pattern("a.*.com"),
            Err(ValueError::MisplacedStar)
        );
        assert_eq!(
            parse_host_pattern("*.1.2.3.4"),
            Err(ValueError::WildcardOnIp)
        );
        assert_eq!(parse_host_pattern("a.com:80"), Err(ValueError::HostHasPort));
        assert_eq!(parse_host_pattern("[::1]:80"), Err(ValueError::HostHasPort));
        assert_eq!(parse_host_pattern("a.com/x"), Err(ValueError::HostHasPath));
        assert_eq!(
            parse_host_pattern("http://a.com"),
            Err(ValueError::HostHasScheme)
        );
        assert_eq!(
            parse_host_pattern(""),
            Err(ValueError::Host(HostError::Empty))
        );
    }

    #[test]
    fn methods_are_upper_cased_tokens() {
        assert_eq!(parse_method("get"), Ok("GET".into()));
        assert_eq!(parse_method("PROPFIND"), Ok("PROPFIND".into()));
        assert_eq!(
            parse_method("propfind"),
            Err(ValueError::MethodUnknown {
                upper: "PROPFIND".into()
            })
        );
        assert_eq!(parse_method(""), Err(ValueError::MethodNotToken));
        assert_eq!(parse_method("G T"), Err(ValueError::MethodNotToken));
    }

    #[test]
    fn env_names_and_tokens() {
        assert!(is_env_name("_A1") && is_env_name("GH_TOKEN"));
        assert!(!is_env_name("1A") && !is_env_name("A-B") && !is_env_name(""));
        assert!(is_token("X-Api-Key") && !is_token("a b") && !is_token(""));
    }

    #[test]
    fn globs_and_regexes_are_checked() {
        assert_eq!(check_path_glob("/a/**"), Ok(()));
        assert_eq!(check_path_glob("a/**"), Err(ValueError::PathNotAbsolute));
        assert!(matches!(
            check_path_glob("/[a"),
            Err(ValueError::PathGlob(_))
        ));
        assert_eq!(check_path_regex("^/a$"), Ok(()));
        assert_eq!(
            check_path_regex("(a"),
            Err(ValueError::RegexSyntax("unclosed group".into()))
        );
        assert_eq!(
            check_path_regex(r"\w{1000}\w{1000}"),
            Err(ValueError::RegexTooBig)
        );
    }
}
