//! `routes:`: reverse-proxy prefixes served on the reserved host [`ROUTE_HOST`] for
//! base-URL clients (`OPENAI_BASE_URL=http://airlock.internal/llm/openai/`).
//!
//! This module owns the pure part: each route's upstream split into host, port and base
//! path once at compile time ([`CompiledRoutes`]), the longest-prefix match on a request's
//! *canonical* path (so `..` and encoded tricks are resolved or refused before matching),
//! and the upstream path built from the base path and the rest of the canonical path,
//! re-encoded so that the upstream reads back exactly that path.

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

pub use crate::canonical::ROUTE_HOST;
use crate::canonical::{CanonicalRequest, Host, parse_authority};
use crate::decision::{Decision, Reason};
use crate::model::{Route, Secret};

/// Whether `host` is [`ROUTE_HOST`].
pub fn is_route_host(host: &Host) -> bool {
    matches!(host, Host::Name(name) if name == ROUTE_HOST)
}

/// What is percent-encoded in the rest of a canonical path before it is sent upstream:
/// everything a URI path may not hold raw. `%`, `?` and `#` are already encoded in a
/// canonical path (as `%25`, `%3F`, `%23`), so `%` is left alone.
const PATH_ENCODE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'|')
    .add(b'^')
    .add(b'[')
    .add(b']')
    .add(b'\\');

/// Why a policy's routes cannot be compiled. The loader refuses these with a location;
/// this is the check for policies built another way.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The upstream is not `https://host[:port]/base/`.
    #[error("routes[{index}]: the upstream {upstream:?} is not https://HOST[:PORT]/PATH/")]
    Upstream {
        /// The route's index.
        index: usize,
        /// The upstream as written.
        upstream: String,
    },
    /// The secret is not defined or has no `inject`.
    #[error(
        "routes[{index}]: the secret {secret} must be defined under `secrets:` and have an `inject`"
    )]
    Secret {
        /// The route's index.
        index: usize,
        /// The secret's name.
        secret: String,
    },
}

/// How one request is handled: decided as it stands, or routed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The decision on the request itself (every refusal of a route request included).
    Decided(Decision),
    /// A request to [`ROUTE_HOST`] allowed by its route: from here on it is this request.
    Routed(Routed),
}

/// Where a request to [`ROUTE_HOST`] goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    /// The route's rule id, `routes[N]`.
    pub rule: String,
    /// The request as the upstream gets it, canonical: what the rest of the request's
    /// handling (deny rules, guards, credentials, audit) sees.
    pub request: CanonicalRequest,
    /// The upstream path (base path + rest of the request's canonical path, encoded) and
    /// the request's raw query: what is sent.
    pub path_and_query: String,
    /// The secret whose `inject` is applied.
    pub secret: Option<String>,
}

/// One route in matching form.
#[derive(Clone, Debug)]
struct CompiledRoute {
    index: usize,
    prefix: String,
    host: Host,
    port: u16,
    base_path: String,
    secret: Option<String>,
}

/// Every route of a policy, longest prefix first.
#[derive(Clone, Debug, Default)]
pub struct CompiledRoutes {
    routes: Vec<CompiledRoute>,
}

impl CompiledRoutes {
    /// Compiles `routes`; a route's secret must be one of `secrets` and have an `inject`.
    pub fn compile(routes: &[Route], secrets: &[Secret]) -> Result<Self, RouteError> {
        let mut compiled = Vec::with_capacity(routes.len());
        for (index, route) in routes.iter().enumerate() {
            let (host, port, base_path) =
                split_upstream(&route.upstream).ok_or_else(|| RouteError::Upstream {
                    index,
                    upstream: route.upstream.clone(),
                })?;
            if let Some(name) = &route.secret
                && !secrets
                    .iter()
                    .any(|secret| secret.name == *name && secret.inject.is_some())
            {
                return Err(RouteError::Secret {
                    index,
                    secret: name.clone(),
                });
            }
            compiled.push(CompiledRoute {
                index,
                prefix: route.prefix.clone(),
                host,
                port,
                base_path: base_path.to_owned(),
                secret: route.secret.clone(),
            });
        }
        compiled.sort_by_key(|route| std::cmp::Reverse(route.prefix.len()));
        Ok(CompiledRoutes { routes: compiled })
    }

    /// Routes a request to [`ROUTE_HOST`] by its canonical path: the route with the
    /// longest prefix of the path. Refused as `path_unsafe` when the canonicaliser refused
    /// the path, `path_not_allowed` when no prefix matches.
    pub fn route(&self, req: &CanonicalRequest) -> Result<Routed, Decision> {
        let path = req
            .path
            .as_ref()
            .map_err(|_| Decision::deny(Reason::PathUnsafe, None))?;
        let route = self
            .routes
            .iter()
            .find(|route| path.starts_with(&route.prefix))
            .ok_or_else(|| Decision::deny(Reason::PathNotAllowed, None))?;
        let rest = &path[route.prefix.len()..];
        let path_and_query = upstream_path_and_query(&route.base_path, rest, req.query.as_deref());
        Ok(Routed {
            rule: format!("routes[{}]", route.index),
            request: CanonicalRequest::new(
                &req.method,
                route.host.clone(),
                route.port,
                &path_and_query,
            ),
            path_and_query,
            secret: route.secret.clone(),
        })
    }
}

/// `https://host[:port]/base/` → host, port and `/base/`.
fn split_upstream(upstream: &str) -> Option<(Host, u16, &str)> {
    let rest = upstream.strip_prefix("https://")?;
    let slash = rest.find('/')?;
    let (authority, base_path) = rest.split_at(slash);
    if !base_path.ends_with('/') || base_path.contains(['?', '#']) {
        return None;
    }
    let (host, port) = parse_authority(authority, 443).ok()?;
    Some((host, port, base_path))
}

/// `base_path` (ends with `/`) + `rest` of a canonical path, encoded for a URI, + `?query`.
pub fn upstream_path_and_query(base_path: &str, rest: &str, query: Option<&str>) -> String {
    let mut out = format!("{base_path}{}", utf8_percent_encode(rest, PATH_ENCODE));
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::canonical_path;
    use crate::model::{Inject, SecretSource};
    use proptest::prelude::*;

    fn route(prefix: &str, upstream: &str, secret: Option<&str>) -> Route {
        Route {
            prefix: prefix.to_owned(),
            upstream: upstream.to_owned(),
            secret: secret.map(str::to_owned),
        }
    }

    fn secret(name: &str, inject: bool) -> Secret {
        let mut secret = Secret::new(name, SecretSource::Env(name.to_owned()));
        secret.inject = inject.then(|| Inject {
            header: "Authorization".to_owned(),
            format: "Bearer {value}".to_owned(),
        });
        secret
    }

    fn routes() -> CompiledRoutes {
        CompiledRoutes::compile(
            &[
                route("/llm/", "https://general.example/", None),
                route("/llm/openai/", "https://api.openai.com/v1/", Some("K")),
                route("/x/", "https://[::1]:8443/base/", None),
            ],
            &[secret("K", true)],
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn routed(path_and_query: &str) -> Result<Routed, Decision> {
        let host = Host::Name(ROUTE_HOST.to_owned());
        routes().route(&CanonicalRequest::new("GET", host, 80, path_and_query))
    }

    #[test]
    fn longest_prefix_wins_and_the_rest_is_appended() {
        let r = routed("/llm/openai/chat/completions?stream=1").unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(r.rule, "routes[1]");
        assert_eq!(r.request.host, Host::Name("api.openai.com".to_owned()));
        assert_eq!(r.request.port, 443);
        assert_eq!(r.request.path.as_deref(), Ok("/v1/chat/completions"));
        assert_eq!(r.path_and_query, "/v1/chat/completions?stream=1");
        assert_eq!(r.secret.as_deref(), Some("K"));
        let r = routed("/llm/other").unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(r.rule, "routes[0]");
        assert_eq!(r.path_and_query, "/other");
        let r = routed("/x/a%20b").unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(r.request.port, 8443);
        assert_eq!(r.path_and_query, "/base/a%20b");
    }

    #[test]
    fn dot_segments_are_resolved_before_matching() {
        let r = routed("/llm/openai/../../x/y").unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(
            (r.rule.as_str(), r.path_and_query.as_str()),
            ("routes[2]", "/base/y")
        );
        let r = routed("/llm/openai/%2e%2e/v1").unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(r.rule, "routes[0]");
    }

    #[test]
    fn no_prefix_or_an_unsafe_path_is_refused() {
        let reason = |p: &str| routed(p).err().and_then(|d| d.reason);
        assert_eq!(reason("/nothing"), Some(Reason::PathNotAllowed));
        assert_eq!(reason("/llm"), Some(Reason::PathNotAllowed));
        assert_eq!(reason("/llm/openai/a%2fb"), Some(Reason::PathUnsafe));
        assert_eq!(reason("/llm/openai/%252e%252e/x"), Some(Reason::PathUnsafe));
        assert_eq!(reason("/llm/openai/a\\b"), Some(Reason::PathUnsafe));
    }

    #[test]
    fn a_secret_without_inject_or_a_bad_upstream_does_not_compile() {
        let compile = |r: Route, s: Secret| CompiledRoutes::compile(&[r], &[s]).err();
        assert!(matches!(
            compile(
                route("/a/", "https://a.example/", Some("K")),
                secret("K", false)
            ),
            Some(RouteError::Secret { .. })
        ));
        assert!(matches!(
            compile(
                route("/a/", "https://a.example/", Some("L")),
                secret("K", true)
            ),
            Some(RouteError::Secret { .. })
        ));
        assert!(matches!(
            compile(route("/a/", "http://a.example/", None), secret("K", true)),
            Some(RouteError::Upstream { .. })
        ));
        assert!(matches!(
            compile(
                route("/a/", "https://a.example/v1", None),
                secret("K", true)
            ),
            Some(RouteError::Upstream { .. })
        ));
    }

    #[test]
    fn a_deny_rule_for_the_upstream_still_refuses_a_routed_request() {
        let policy = crate::load::load_str(
            "p.yaml",
            "version: 1
network:
  deny:
    - host: api.example
      paths: [/v1/admin/**]
routes:
  - prefix: /a/
    upstream: https://api.example/v1/
",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let compiled = crate::CompiledPolicy::compile(&policy).unwrap_or_else(|e| panic!("{e}"));
        let request = |path: &str| {
            let host = Host::Name(ROUTE_HOST.to_owned());
            compiled.route(&CanonicalRequest::new("GET", host, 80, path))
        };
        let refusal = request("/a/admin/x").err();
        assert_eq!(
            refusal.as_ref().and_then(|d| d.reason),
            Some(Reason::DeniedByRule)
        );
        assert_eq!(
            refusal.and_then(|d| d.rule).as_deref(),
            Some("network.deny[0]")
        );
        assert!(request("/a/chat").is_ok());
    }

    proptest! {
        /// Whatever the client sends, a routed request stays under the upstream's base
        /// path, and the upstream reads back the base path plus the rest of the canonical
        /// path (nothing re-decodes into a `..` or a new delimiter).
        #[test]
        fn the_upstream_path_stays_under_the_base_path(
            parts in proptest::collection::vec(
                prop_oneof![
                    Just(".."), Just("."), Just("/"), Just("%2e"), Just("%2E%2e"), Just("%25"),
                    Just("%2f"), Just("%5c"), Just("%252e"), Just(";"), Just("?"), Just("#"),
                    Just(" "), Just("%20"), Just("é"), Just("[x]"), Just("a"), Just("v1"),
                ],
                0..16,
            ),
            noise in "[a-zA-Z0-9./%?#;\\\\ ~-]{0,20}",
        ) {
            let tail = format!("{}{noise}", parts.concat());
            let (path, _) = canonical_path(&format!("/llm/openai/{tail}"));
            if let Ok(r) = routed(&format!("/llm/openai/{tail}")) {
                let sent_path = r.path_and_query.split('?').next().unwrap_or_default();
                let (prefix, base) = match r.rule.as_str() {
                    "routes[0]" => ("/llm/", "/"),
                    "routes[1]" => ("/llm/openai/", "/v1/"),
                    _ => ("/x/", "/base/"),
                };
                prop_assert!(sent_path.starts_with(base), "{sent_path}");
                let (reread, _) = canonical_path(sent_path);
                let canonical = path.clone().unwrap_or_default();
                prop_assert_eq!(reread, Ok(format!("{base}{}", &canonical[prefix.len()..])));
                prop_assert!(http_path_is_valid(sent_path), "{sent_path}");
            }
        }
    }

    /// Every byte is one a URI path may carry raw (RFC 3986 pchar, `/` or `%`).
    fn http_path_is_valid(path: &str) -> bool {
        path.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b))
    }
}
