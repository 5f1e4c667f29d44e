//! Secret presets: `secrets: NAME: {preset: anthropic}` says *which service* a credential
//! belongs to, and the preset supplies the hosts it may be sent to and every request
//! header in which that service's official clients carry it. Without a source key the
//! value is read from the environment variable `NAME`; `hosts` or `headers` written next
//! to `preset` replace the preset's (a self-hosted GitLab, GitHub Enterprise).
//!
//! The surrogate is swapped wherever it appears in those headers, inside
//! `Authorization: Basic` after base64 decoding too, so one header name covers every
//! scheme a client puts in it (`Bearer`, `token`, `Basic user:TOKEN`). A header outside
//! the list keeps its surrogate (and the upstream refuses it); another credential in one
//! of the listed headers is refused as foreign unless `foreign: allow`.

/// A service whose credentials airlock knows how to scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The name written after `preset:`.
    pub name: &'static str,
    /// The hosts the real value may be sent to, as policy host patterns.
    pub hosts: &'static [&'static str],
    /// The request headers (lower-case) the official clients carry the credential in.
    pub headers: &'static [&'static str],
}

/// Every preset, in the order the documentation lists them.
pub const PRESETS: [Preset; 8] = [
    // Anthropic SDKs: `X-Api-Key` for an API key (`api_key`, ANTHROPIC_API_KEY);
    // `Authorization: Bearer` for a token (`auth_token`, ANTHROPIC_AUTH_TOKEN, OAuth as
    // Claude Code signs in).
    Preset {
        name: "anthropic",
        hosts: &["api.anthropic.com"],
        headers: &["x-api-key", "authorization"],
    },
    // OpenAI SDKs and Codex: `Authorization: Bearer`.
    Preset {
        name: "openai",
        hosts: &["api.openai.com"],
        headers: &["authorization"],
    },
    // gh, Octokit and PyGithub: `Authorization: token` / `Bearer` on the REST and GraphQL
    // API and for release uploads; git over HTTPS: `Authorization: Basic` (user
    // `x-access-token` or any name, the token as password); raw files of private
    // repositories: `Authorization: token`.
    Preset {
        name: "github",
        hosts: &[
            "api.github.com",
            "github.com",
            "uploads.github.com",
            "raw.githubusercontent.com",
        ],
        headers: &["authorization"],
    },
    // python-gitlab and glab: `PRIVATE-TOKEN` for personal, project and group tokens,
    // `Authorization: Bearer` for OAuth tokens, `JOB-TOKEN` for CI job tokens; git over
    // HTTPS: `Authorization: Basic` (user `oauth2` or any name, the token as password).
    Preset {
        name: "gitlab",
        hosts: &["gitlab.com"],
        headers: &["private-token", "authorization", "job-token"],
    },
    // huggingface_hub and transformers: `Authorization: Bearer` to the Hub and to its
    // inference services (router.huggingface.co, api-inference.huggingface.co); git over
    // HTTPS: `Authorization: Basic`.
    Preset {
        name: "huggingface",
        hosts: &["huggingface.co", "*.huggingface.co"],
        headers: &["authorization"],
    },
    // npm, pnpm and Yarn with an `_authToken`: `Authorization: Bearer`.
    Preset {
        name: "npm",
        hosts: &["registry.npmjs.org"],
        headers: &["authorization"],
    },
    // twine and uv publish with an API token: `Authorization: Basic` (`__token__` and the
    // token) to the upload endpoint.
    Preset {
        name: "pypi",
        hosts: &["upload.pypi.org"],
        headers: &["authorization"],
    },
    // Gemini CLI and the Google Gen AI SDKs with an API key (GEMINI_API_KEY):
    // `x-goog-api-key` to the Gemini API.
    Preset {
        name: "gemini",
        hosts: &["generativelanguage.googleapis.com"],
        headers: &["x-goog-api-key"],
    },
];

/// The preset called `name`, if there is one.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|preset| preset.name == name)
}

/// Every preset name, comma-separated, for messages.
pub fn names() -> String {
    PRESETS
        .iter()
        .map(|preset| preset.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::HostPattern;
    use crate::rule::{is_token, parse_host_pattern};

    #[test]
    fn every_preset_is_valid_policy_text() {
        for entry in &PRESETS {
            assert!(!entry.hosts.is_empty() && !entry.headers.is_empty());
            for host in entry.hosts {
                let parsed = parse_host_pattern(host).expect("preset host parses");
                assert_eq!(&parsed.to_string(), host, "preset hosts are canonical");
                assert!(!matches!(parsed, HostPattern::Any | HostPattern::Ip(_)));
            }
            for header in entry.headers {
                assert!(is_token(header) && header.to_ascii_lowercase() == *header);
            }
            assert_eq!(preset(entry.name), Some(entry));
        }
        assert_eq!(preset("Anthropic"), None);
        assert_eq!(
            names(),
            "anthropic, openai, github, gitlab, huggingface, npm, pypi, gemini"
        );
    }

    #[test]
    fn anthropic_covers_both_forms_the_sdks_send() {
        let anthropic = preset("anthropic").unwrap();
        assert!(anthropic.headers.contains(&"x-api-key"));
        assert!(anthropic.headers.contains(&"authorization"));
    }
}
