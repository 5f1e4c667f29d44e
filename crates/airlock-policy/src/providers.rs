//! Provider bundles: the hosts an AI coding agent needs to reach its model provider, as
//! trustyclaw documents them for Codex (`openai`) and Claude Code (`anthropic`), and the
//! `json_deny` guards that keep the provider's server-side web tools off. Both the native
//! `providers:` key and the trustyclaw importer expand bundles from here.

use crate::json_deny::{self, JsonDeny};
use crate::model::{HostPattern, Rule, Target};

/// A model provider with a bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI (Codex): `api.openai.com`, `auth.openai.com`, `chatgpt.com`.
    OpenAi,
    /// Anthropic (Claude Code): `api.anthropic.com`, `platform.claude.com`.
    Anthropic,
}

/// The names `providers:` accepts, in the order of [`Provider`].
pub const PROVIDER_NAMES: [&str; 2] = ["openai", "anthropic"];

/// One host of a bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleHost {
    /// The exact host name.
    pub host: &'static str,
    /// The allowed methods.
    pub methods: &'static [&'static str],
    /// Path regexes (fully matched); empty = any path.
    pub path_regex: &'static [&'static str],
    /// Whether model requests go here, so the web-tool guards apply.
    pub serves_models: bool,
}

const OPENAI_BUNDLE: [BundleHost; 3] = [
    BundleHost {
        host: "api.openai.com",
        methods: &["POST"],
        path_regex: &[],
        serves_models: true,
    },
    BundleHost {
        host: "auth.openai.com",
        methods: &["GET", "POST"],
        path_regex: &[],
        serves_models: false,
    },
    BundleHost {
        // Codex signed in with ChatGPT sends Responses API requests here
        // (`/backend-api/codex/responses`).
        host: "chatgpt.com",
        methods: &["GET", "POST"],
        path_regex: &[],
        serves_models: true,
    },
];

const ANTHROPIC_BUNDLE: [BundleHost; 2] = [
    BundleHost {
        host: "api.anthropic.com",
        methods: &["GET", "POST"],
        path_regex: &[],
        serves_models: true,
    },
    BundleHost {
        host: "platform.claude.com",
        methods: &["GET", "POST"],
        path_regex: &["^/v1/oauth(?:/.*)?$"],
        serves_models: false,
    },
];

impl Provider {
    /// The provider a `providers:` key names, if any.
    pub fn from_name(name: &str) -> Option<Provider> {
        match name {
            "openai" => Some(Provider::OpenAi),
            "anthropic" => Some(Provider::Anthropic),
            _ => None,
        }
    }

    /// The name as written under `providers:`.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => PROVIDER_NAMES[0],
            Provider::Anthropic => PROVIDER_NAMES[1],
        }
    }

    /// The bundle's hosts; the first is the API host.
    pub fn bundle(self) -> &'static [BundleHost] {
        match self {
            Provider::OpenAi => &OPENAI_BUNDLE,
            Provider::Anthropic => &ANTHROPIC_BUNDLE,
        }
    }

    /// The API host (where model requests and their credentials go).
    pub fn api_host(self) -> &'static str {
        self.bundle()[0].host
    }

    /// The guards refusing server-side web access on the hosts that serve models: OpenAI
    /// `tools[*].type` `web_search*` (Responses API `web_search`, `web_search_preview`,
    /// dated variants) or `mcp` (remote MCP servers the provider calls), any
    /// `web_search_options` and `model` names with a `-search` part (Chat Completions
    /// search models); Anthropic `tools[*].type` `web_search_*` and `web_fetch_*`, and any
    /// `mcp_servers` (the MCP connector).
    pub fn web_tool_guards(self) -> Vec<JsonDeny> {
        let guard = |path: &str, values: Option<&[&str]>| JsonDeny {
            path: json_deny::parse_path(path).expect("built-in guard path parses"),
            values: values.map(|values| values.iter().map(|v| (*v).to_owned()).collect()),
        };
        match self {
            Provider::OpenAi => vec![
                guard("/tools/*/type", Some(&["web_search*", "mcp"])),
                guard("/web_search_options", None),
                guard("/model", Some(&["*-search-*", "*-search"])),
            ],
            Provider::Anthropic => vec![
                guard("/tools/*/type", Some(&["web_search_*", "web_fetch_*"])),
                guard("/mcp_servers", None),
            ],
        }
    }

    /// The bundle as allow rules with ids `providers.NAME[i]`; unless `web_tools`, the
    /// rules of hosts that serve models carry [`Provider::web_tool_guards`].
    pub fn rules(self, web_tools: bool) -> Vec<Rule> {
        self.bundle()
            .iter()
            .enumerate()
            .map(|(index, entry)| Rule {
                id: format!("providers.{}[{index}]", self.name()),
                target: Target::Host(HostPattern::Exact(entry.host.to_owned())),
                methods: Some(entry.methods.iter().map(|m| (*m).to_owned()).collect()),
                paths: Vec::new(),
                path_regex: entry.path_regex.iter().map(|r| (*r).to_owned()).collect(),
                ports: None,
                json_deny: if entry.serves_models && !web_tools {
                    self.web_tool_guards()
                } else {
                    Vec::new()
                },
                process: None,
            })
            .collect()
    }
}
