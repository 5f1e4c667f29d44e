//! Reading `routes:` (path prefixes on the route host mapped onto an upstream, with an
//! optional secret).

use super::node::{Fields, Node};
use super::{Checker, shown};
use crate::canonical::{self, Host};
use crate::model::{Route, Secret};

const ROUTE_KEYS: &[&str] = &["prefix", "upstream", "secret"];

impl Checker<'_> {
    /// `routes:`: the valid routes, in file order (a prefix used twice is an error).
    pub(super) fn routes(
        &mut self,
        node: &Node,
        secret_names: &[String],
        secrets: &[Secret],
    ) -> Vec<Route> {
        let Some(items) = self.list(node, "routes", true) else {
            return Vec::new();
        };
        let mut routes: Vec<Route> = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let what = format!("routes[{index}]");
            let Some(fields) = self.fields(item, &what, ROUTE_KEYS) else {
                continue;
            };
            let prefix = self.route_prefix(&fields, &what, &routes);
            let upstream = self.route_upstream(&fields, &what);
            let secret = fields
                .get("secret")
                .and_then(|node| self.route_secret(node, &what, secret_names, secrets));
            if let (Some(prefix), Some(upstream)) = (prefix, upstream) {
                routes.push(Route {
                    prefix,
                    upstream,
                    secret,
                });
            }
        }
        routes
    }

    /// A route's `prefix`: `/.../`, not used by an earlier route.
    fn route_prefix(
        &mut self,
        fields: &Fields<'_>,
        what: &str,
        routes: &[Route],
    ) -> Option<String> {
        let Some(node) = fields.get("prefix") else {
            self.error(
                fields.pos,
                format!("{what}: `prefix` is missing, as in `prefix: /llm/openrouter/`"),
            );
            return None;
        };
        let prefix_what = format!("{what}.prefix");
        let text = self.string(node, &prefix_what)?;
        if text.len() < 2 || !text.starts_with('/') || !text.ends_with('/') {
            self.error(
                node.pos,
                format!(
                    "{prefix_what} `{}` must start and end with `/`, as in `/llm/openrouter/`",
                    shown(text)
                ),
            );
            None
        } else if routes.iter().any(|route| route.prefix == text) {
            self.error(
                node.pos,
                format!(
                    "{prefix_what} `{}` is already used by an earlier route: give each route its own prefix",
                    shown(text)
                ),
            );
            None
        } else {
            Some(text.to_owned())
        }
    }

    /// A route's `upstream`, canonicalised (see [`canonical_upstream`]).
    fn route_upstream(&mut self, fields: &Fields<'_>, what: &str) -> Option<String> {
        let Some(node) = fields.get("upstream") else {
            self.error(
                fields.pos,
                format!(
                    "{what}: `upstream` is missing, as in `upstream: https://openrouter.ai/api/v1/`"
                ),
            );
            return None;
        };
        let upstream_what = format!("{what}.upstream");
        let text = self.string(node, &upstream_what)?;
        match canonical_upstream(text) {
            Ok(url) => Some(url),
            Err(problem) => {
                self.error(
                    node.pos,
                    format!("{upstream_what} `{}` {problem}", shown(text)),
                );
                None
            }
        }
    }

    /// A route's `secret`: a secret of this file that has an `inject`.
    fn route_secret(
        &mut self,
        node: &Node,
        what: &str,
        secret_names: &[String],
        secrets: &[Secret],
    ) -> Option<String> {
        let secret_what = format!("{what}.secret");
        let name = self.string(node, &secret_what)?;
        let without_inject = secrets
            .iter()
            .any(|secret| secret.name == name && secret.inject.is_none());
        if without_inject {
            self.error(
                node.pos,
                format!(
                    "{secret_what}: the secret `{}` has no `inject`, so the route could not set it: give it one, as in `inject: {{header: Authorization, format: \"Bearer {{value}}\"}}`",
                    shown(name)
                ),
            );
            None
        } else if secret_names.iter().any(|known| known == name) {
            Some(name.to_owned())
        } else {
            self.error(
                node.pos,
                format!(
                    "{secret_what}: no secret named `{}` is defined under `secrets:`: define it there or fix the name",
                    shown(name)
                ),
            );
            None
        }
    }
}

/// Check a route's upstream (`https://HOST[:PORT]/PATH/`) and return it with its host
/// canonicalised; the error completes the sentence "upstream `...` ...".
fn canonical_upstream(text: &str) -> Result<String, &'static str> {
    let rest = text
        .get(..8)
        .filter(|scheme| scheme.eq_ignore_ascii_case("https://"))
        .and_then(|_| text.get(8..))
        .ok_or("must be an https:// URL, as in `https://openrouter.ai/api/v1/`")?;
    if rest.contains(['?', '#']) {
        return Err("cannot carry a query or a fragment: give the base URL, ending with `/`");
    }
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.contains('@') {
        return Err(
            "cannot carry credentials: name a secret with `secret:` and give it an `inject`",
        );
    }
    if !path.ends_with('/') {
        return Err("must end with `/`, as in `https://openrouter.ai/api/v1/`");
    }
    let (host, port) = canonical::parse_authority(authority, 443)
        .map_err(|_| "has no valid host[:port] after `https://`")?;
    let host = match host {
        Host::Name(name) => name,
        Host::Ip(std::net::IpAddr::V4(addr)) => addr.to_string(),
        Host::Ip(std::net::IpAddr::V6(addr)) => format!("[{addr}]"),
    };
    let port = if port == 443 {
        String::new()
    } else {
        format!(":{port}")
    };
    Ok(format!("https://{host}{port}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_is_canonicalised_and_checked() {
        assert_eq!(
            canonical_upstream("https://OpenRouter.AI/api/v1/"),
            Ok("https://openrouter.ai/api/v1/".to_owned())
        );
        assert_eq!(
            canonical_upstream("https://example.com:8443/"),
            Ok("https://example.com:8443/".to_owned())
        );
        assert!(canonical_upstream("http://example.com/").is_err());
        assert!(canonical_upstream("https://example.com/v1").is_err());
        assert!(canonical_upstream("https://example.com").is_err());
        assert!(canonical_upstream("https://user:pw@example.com/").is_err());
        assert!(canonical_upstream("https://example.com/?q=1/").is_err());
        assert!(canonical_upstream("https:///").is_err());
    }
}
