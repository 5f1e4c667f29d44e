//! The one table of credential stores (docs/secrets.md, "Credential files"): for each
//! store, where its file lies under the home, its format, and for each kind of token in
//! it the hosts the token belongs to and how it is sent there. The parsers read their
//! slots from here, and docs/secrets.md's table is [`markdown_table`]'s output.

use crate::Store;

/// How a token is sent to its hosts: what the proxy swaps it back in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// In the `Authorization` header (Bearer, token or Basic credentials).
    Authorization,
    /// In the request body or query only (a refresh token posted to a token endpoint).
    Body,
    /// Never: the copy shows a surrogate, but no secret is made of it, so it is never
    /// swapped back (a refresh token whose refresh no watch covers: the answer's new
    /// tokens would reach the command raw; the client gets `invalid_grant` and signs in
    /// again; Codex's OpenID `id_token`, which the CLI only reads locally for its claims,
    /// kept by its surrogate, and which no request of the CLI needs but a token exchange
    /// that mints an API key).
    Never,
}

/// The hosts a token belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hosts {
    /// These hosts, whatever the file says.
    Fixed(&'static [&'static str]),
    /// The host the file names beside the token (a URL, a section, a `machine`).
    Named,
    /// The host the file names, and `api.` in front of it (GitHub's API host).
    NamedAndApi,
}

/// One kind of token in a store's file.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    /// The field as the file spells it (also the last part of the secret's name).
    pub field: &'static str,
    /// Where in the file it sits, for people.
    pub place: &'static str,
    /// The hosts it is swapped back for.
    pub hosts: Hosts,
    /// How it is sent there.
    pub sent: Sent,
}

/// One store: its file, format and token slots.
#[derive(Clone, Copy, Debug)]
pub struct StoreSpec {
    /// The store.
    pub store: Store,
    /// The file, relative to the home directory.
    pub path: &'static str,
    /// The file's format, for people.
    pub format: &'static str,
    /// The tokens it holds.
    pub slots: &'static [Slot],
}

impl StoreSpec {
    /// The slot whose field is `field` (the parsers name only fields of the table).
    pub fn slot(&self, field: &str) -> &'static Slot {
        self.slots
            .iter()
            .find(|slot| slot.field == field)
            .unwrap_or_else(|| panic!("store {} has no slot {field}", self.store.name()))
    }
}

/// Claude Code's OAuth token endpoint hosts (`TOKEN_URL` in the CLI; the older console host).
pub const CLAUDE_TOKEN_HOSTS: &[&str] = &["platform.claude.com", "console.anthropic.com"];
/// Codex's OAuth token endpoint host.
pub const CODEX_TOKEN_HOSTS: &[&str] = &["auth.openai.com"];
/// Docker Hub's hosts: the index, the registry and its token service.
pub const DOCKER_HUB_HOSTS: &[&str] =
    &["index.docker.io", "registry-1.docker.io", "auth.docker.io"];

const fn slot(field: &'static str, place: &'static str, hosts: Hosts, sent: Sent) -> Slot {
    Slot {
        field,
        place,
        hosts,
        sent,
    }
}

static TABLE: [StoreSpec; 8] = [
    StoreSpec {
        store: Store::Claude,
        path: ".claude/.credentials.json",
        format: "JSON",
        slots: &[
            slot(
                "accessToken",
                "`claudeAiOauth.accessToken`",
                Hosts::Fixed(&["api.anthropic.com"]),
                Sent::Authorization,
            ),
            slot(
                "refreshToken",
                "`claudeAiOauth.refreshToken`",
                Hosts::Fixed(CLAUDE_TOKEN_HOSTS),
                Sent::Body,
            ),
            slot(
                "mcpAccessToken",
                "`mcpOAuth.*.accessToken` (host of its `serverUrl`)",
                Hosts::Named,
                Sent::Authorization,
            ),
            slot(
                "mcpRefreshToken",
                "`mcpOAuth.*.refreshToken` (host of its `serverUrl`)",
                Hosts::Named,
                Sent::Never,
            ),
        ],
    },
    StoreSpec {
        store: Store::Codex,
        path: ".codex/auth.json",
        format: "JSON",
        slots: &[
            slot(
                "OPENAI_API_KEY",
                "`OPENAI_API_KEY`",
                Hosts::Fixed(&["api.openai.com"]),
                Sent::Authorization,
            ),
            slot(
                "access_token",
                "`tokens.access_token`",
                Hosts::Fixed(&["chatgpt.com", "api.openai.com"]),
                Sent::Authorization,
            ),
            slot(
                "id_token",
                "`tokens.id_token`",
                Hosts::Fixed(CODEX_TOKEN_HOSTS),
                Sent::Never,
            ),
            slot(
                "refresh_token",
                "`tokens.refresh_token`",
                Hosts::Fixed(CODEX_TOKEN_HOSTS),
                Sent::Body,
            ),
        ],
    },
    StoreSpec {
        store: Store::Gh,
        path: ".config/gh/hosts.yml",
        format: "YAML",
        slots: &[slot(
            "oauth_token",
            "`HOST.oauth_token`, `HOST.users.USER.oauth_token`",
            Hosts::NamedAndApi,
            Sent::Authorization,
        )],
    },
    StoreSpec {
        store: Store::Git,
        path: ".git-credentials",
        format: "one URL a line",
        slots: &[slot(
            "password",
            "`https://USER:PASSWORD@HOST` lines",
            Hosts::Named,
            Sent::Authorization,
        )],
    },
    StoreSpec {
        store: Store::Docker,
        path: ".docker/config.json",
        format: "JSON",
        slots: &[
            slot(
                "auth",
                "`auths.REGISTRY.auth` (the password inside `base64(user:password)`)",
                Hosts::Named,
                Sent::Authorization,
            ),
            slot(
                "identitytoken",
                "`auths.REGISTRY.identitytoken`",
                Hosts::Named,
                Sent::Never,
            ),
            slot(
                "registrytoken",
                "`auths.REGISTRY.registrytoken`",
                Hosts::Named,
                Sent::Authorization,
            ),
        ],
    },
    StoreSpec {
        store: Store::Npm,
        path: ".npmrc",
        format: "ini lines",
        slots: &[slot(
            "_authToken",
            "`//REGISTRY/:_authToken=`",
            Hosts::Named,
            Sent::Authorization,
        )],
    },
    StoreSpec {
        store: Store::Pypi,
        path: ".pypirc",
        format: "ini",
        slots: &[slot(
            "password",
            "`password =` of each section (host of its `repository`; `pypi`: upload.pypi.org, `testpypi`: test.pypi.org)",
            Hosts::Named,
            Sent::Authorization,
        )],
    },
    StoreSpec {
        store: Store::Netrc,
        path: ".netrc",
        format: "netrc",
        slots: &[slot(
            "password",
            "`machine HOST ... password P`",
            Hosts::Named,
            Sent::Authorization,
        )],
    },
];

/// The table entry of `store`.
pub fn spec(store: Store) -> &'static StoreSpec {
    &TABLE[store as usize]
}

/// Every store's entry, in [`Store::ALL`] order.
pub fn table() -> &'static [StoreSpec] {
    &TABLE
}

/// The table as Markdown, as docs/secrets.md shows it.
pub fn markdown_table() -> String {
    let mut text = String::from(
        "| store | file | format | token | hosts it is swapped back for | sent as |\n\
         |---|---|---|---|---|---|\n",
    );
    for spec in table() {
        for slot in spec.slots {
            let hosts = match slot.hosts {
                _ if slot.sent == Sent::Never => "none".to_owned(),
                Hosts::Fixed(hosts) => hosts.join(", "),
                Hosts::Named => "the host the file names".to_owned(),
                Hosts::NamedAndApi => "HOST and api.HOST".to_owned(),
            };
            let sent = match slot.sent {
                Sent::Authorization => "`Authorization` header",
                Sent::Body => "body (token endpoint)",
                Sent::Never => "never (surrogate only, see below)",
            };
            text.push_str(&format!(
                "| `{}` | `~/{}` | {} | {} | {} | {} |\n",
                spec.store.name(),
                spec.path,
                spec.format,
                slot.place,
                hosts,
                sent
            ));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/secrets.md shows this table as it is.
    #[test]
    fn the_docs_show_the_table() {
        let docs = include_str!("../../../docs/secrets.md");
        assert!(
            docs.contains(&markdown_table()),
            "docs/secrets.md must hold stores::markdown_table():\n{}",
            markdown_table()
        );
    }

    #[test]
    fn the_policy_knows_every_store() {
        let names: Vec<&str> = Store::ALL.iter().map(|store| store.name()).collect();
        assert_eq!(names, airlock_policy::credential_files::STORE_NAMES);
    }

    #[test]
    fn the_table_is_in_store_order() {
        for (index, store) in Store::ALL.iter().enumerate() {
            assert_eq!(table()[index].store, *store);
            assert_eq!(spec(*store).store, *store);
        }
    }
}
