//! Which host a request is for, established once: the CONNECT target, the TLS server name
//! (SNI), the `Host` header / `:authority` and an absolute request URI must all name the
//! same host and port after canonicalisation; if they do not the request is refused as
//! `host_mismatch`, and a request with several `Host` headers or an unreadable target is
//! malformed (400). The result is the one destination the policy decides on, the upstream
//! is dialled for and the upstream's `Host` is set to.
//!
//! An origin-form request (`GET /llm/x`) on a direct connection is addressed to the proxy
//! itself, as to a reverse proxy: its destination is [`ROUTE_HOST`] (plain HTTP, port 80),
//! where only `routes` are served.

use airlock_policy::canonical::{Host, parse_authority};
use airlock_policy::enforce::is_loopback_alias;
use airlock_policy::route::ROUTE_HOST;
use http::{HeaderMap, Uri, header};

/// How the connection a request arrived on was opened.
#[derive(Clone, Debug)]
pub enum Origin {
    /// A plain connection to the proxy: requests carry an absolute URI (`GET http://h/p`),
    /// or an origin-form one addressed to the proxy's routes.
    Direct,
    /// A tunnel opened by `CONNECT host:port` (or a transparent capture to that
    /// destination), with the TLS server name when the tunnel carried TLS.
    Tunnel {
        /// The canonical CONNECT host.
        host: Host,
        /// The CONNECT port.
        port: u16,
        /// The SNI the client sent, canonicalised (`None` without TLS or without SNI).
        sni: Option<Host>,
        /// Whether the tunnel carries TLS (then `https` is the scheme and 443 the default
        /// port of a `Host` header).
        tls: bool,
    },
}

/// The destination of a request, agreed by every name the client gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// `https` or `http`.
    pub scheme: &'static str,
    /// The canonical host.
    pub host: Host,
    /// The port.
    pub port: u16,
}

/// Why a request's names do not establish one destination.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The request is malformed (400, connection closed).
    #[error("{0}")]
    Malformed(&'static str),
    /// The names disagree (403 `host_mismatch`); `host` is the best name for the report.
    #[error("the request names more than one host")]
    Mismatch {
        /// The host the connection was opened for (or the URI's host).
        host: String,
    },
}

/// Establishes the destination of a request with `uri` and `headers` arriving on a
/// connection opened as `origin`.
pub fn destination(
    origin: &Origin,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Destination, IdentityError> {
    let mut host_headers = headers.get_all(header::HOST).iter();
    let host_header = host_headers.next();
    if host_headers.next().is_some() {
        return Err(IdentityError::Malformed(
            "the request has more than one Host header",
        ));
    }
    match origin {
        Origin::Direct => {
            let scheme = match uri.scheme_str() {
                Some("http") => "http",
                Some("https") => "https",
                Some(_) => return Err(IdentityError::Malformed("unsupported URI scheme")),
                None if uri.authority().is_none() && uri.path().starts_with('/') => {
                    return Ok(Destination {
                        scheme: "http",
                        host: Host::Name(ROUTE_HOST.to_owned()),
                        port: 80,
                    });
                }
                None => {
                    return Err(IdentityError::Malformed(
                        "a proxy request needs an absolute URI (http://host/path)",
                    ));
                }
            };
            let default_port = default_port(scheme);
            let authority = uri
                .authority()
                .ok_or(IdentityError::Malformed("the request URI has no host"))?;
            if authority.as_str().contains('@') {
                return Err(IdentityError::Malformed(
                    "the request URI carries user information",
                ));
            }
            let (host, port) = parse_authority(authority.as_str(), default_port)
                .map_err(|_| IdentityError::Malformed("the request URI's host is not valid"))?;
            if let Some(value) = host_header {
                agree(value.as_bytes(), &host, port, default_port)?;
            }
            Ok(Destination { scheme, host, port })
        }
        Origin::Tunnel {
            host,
            port,
            sni,
            tls,
        } => {
            let host = &loopback_named(host, sni.as_ref(), uri, host_header);
            let mismatch = || IdentityError::Mismatch {
                host: host.to_string(),
            };
            if let Some(sni) = sni
                && sni != host
            {
                return Err(mismatch());
            }
            let scheme = if *tls { "https" } else { "http" };
            let default_port = default_port(scheme);
            if let Some(authority) = uri.authority() {
                if uri.scheme_str().is_some_and(|s| s != scheme) {
                    return Err(mismatch());
                }
                agree(authority.as_str().as_bytes(), host, *port, default_port)?;
            }
            if let Some(value) = host_header {
                agree(value.as_bytes(), host, *port, default_port)?;
            }
            Ok(Destination {
                scheme,
                host: host.clone(),
                port: *port,
            })
        }
    }
}

/// The host a tunnel to `host` is for: a tunnel to a loopback address (`airlock run`'s
/// capture of a connection to `127.0.0.1` or `::1`) whose client names it `localhost` (its
/// SNI, else its URI's authority, else its `Host`) is for `localhost`, decided as `airlock
/// proxy` and `airlock policy explain` decide it (docs/architecture.md; the policy's
/// [`is_loopback_alias`]). Every name is still checked against the result.
fn loopback_named(
    host: &Host,
    sni: Option<&Host>,
    uri: &Uri,
    host_header: Option<&http::HeaderValue>,
) -> Host {
    if !matches!(host, Host::Ip(ip) if ip.to_canonical().is_loopback()) {
        return host.clone();
    }
    let named = sni.cloned().or_else(|| {
        let text = match uri.authority() {
            Some(authority) => authority.as_str(),
            None => host_header.and_then(|value| value.to_str().ok())?,
        };
        parse_authority(text, 80).ok().map(|(named, _)| named)
    });
    match named {
        Some(named) if is_loopback_alias(host, &named) => named,
        _ => host.clone(),
    }
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

/// Whether the authority `named` (a `Host` value or URI authority) is `host:port`.
fn agree(named: &[u8], host: &Host, port: u16, default_port: u16) -> Result<(), IdentityError> {
    let mismatch = || IdentityError::Mismatch {
        host: host.to_string(),
    };
    let text = std::str::from_utf8(named).map_err(|_| mismatch())?;
    if text.contains('@') {
        return Err(IdentityError::Malformed(
            "the request names a host with user information",
        ));
    }
    match parse_authority(text, default_port) {
        Ok((named_host, named_port)) if named_host == *host && named_port == port => Ok(()),
        _ => Err(mismatch()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn name(n: &str) -> Host {
        Host::Name(n.to_owned())
    }

    fn tunnel(host: &str, port: u16, sni: Option<&str>) -> Origin {
        Origin::Tunnel {
            host: name(host),
            port,
            sni: sni.map(name),
            tls: true,
        }
    }

    fn headers(hosts: &[&'static str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for h in hosts {
            map.append(header::HOST, HeaderValue::from_static(h));
        }
        map
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap_or_default()
    }

    #[test]
    fn tunnel_with_agreeing_names_is_its_host() {
        let d = destination(
            &tunnel("api.example", 443, Some("api.example")),
            &uri("/x"),
            &headers(&["API.example.:443"]),
        );
        assert_eq!(
            d,
            Ok(Destination {
                scheme: "https",
                host: name("api.example"),
                port: 443
            })
        );
    }

    #[test]
    fn a_captured_loopback_named_localhost_is_for_localhost() {
        let loopback = |ip: &str, sni: Option<&str>| Origin::Tunnel {
            host: Host::Ip(ip.parse().unwrap()),
            port: 8443,
            sni: sni.map(name),
            tls: sni.is_some(),
        };
        for ip in ["127.0.0.1", "::1"] {
            let by_sni = destination(
                &loopback(ip, Some("localhost")),
                &uri("/x"),
                &headers(&["localhost:8443"]),
            );
            assert_eq!(by_sni.map(|d| d.host), Ok(name("localhost")), "{ip}");
            let by_host = destination(
                &loopback(ip, None),
                &uri("/x"),
                &headers(&["localhost:8443"]),
            );
            assert_eq!(by_host.map(|d| d.host), Ok(name("localhost")), "{ip}");
        }
        // Another name for a loopback address is still a mismatch, and a name's tunnel
        // stays its name.
        let other = destination(
            &loopback("127.0.0.1", None),
            &uri("/x"),
            &headers(&["evil.example:8443"]),
        );
        assert!(matches!(other, Err(IdentityError::Mismatch { .. })));
        let split = destination(
            &loopback("127.0.0.1", Some("localhost")),
            &uri("/x"),
            &headers(&["127.0.0.1:8443"]),
        );
        assert!(matches!(split, Err(IdentityError::Mismatch { .. })));
    }

    #[test]
    fn host_header_naming_another_host_is_a_mismatch() {
        let d = destination(
            &tunnel("api.example", 443, Some("api.example")),
            &uri("/x"),
            &headers(&["evil.example"]),
        );
        assert!(matches!(d, Err(IdentityError::Mismatch { .. })));
    }

    #[test]
    fn sni_naming_another_host_is_a_mismatch() {
        let d = destination(
            &tunnel("api.example", 443, Some("evil.example")),
            &uri("/x"),
            &headers(&["api.example"]),
        );
        assert!(matches!(d, Err(IdentityError::Mismatch { .. })));
    }

    #[test]
    fn ports_are_considered() {
        let d = destination(
            &tunnel("api.example", 8443, None),
            &uri("/x"),
            &headers(&["api.example"]),
        );
        assert!(matches!(d, Err(IdentityError::Mismatch { .. })));
        let d = destination(
            &tunnel("api.example", 8443, None),
            &uri("/x"),
            &headers(&["api.example:8443"]),
        );
        assert!(d.is_ok());
    }

    #[test]
    fn h2_authority_must_agree() {
        let d = destination(
            &tunnel("api.example", 443, Some("api.example")),
            &uri("https://evil.example/x"),
            &HeaderMap::new(),
        );
        assert!(matches!(d, Err(IdentityError::Mismatch { .. })));
    }

    #[test]
    fn duplicate_host_headers_are_malformed() {
        let d = destination(
            &tunnel("api.example", 443, None),
            &uri("/x"),
            &headers(&["api.example", "api.example"]),
        );
        assert!(matches!(d, Err(IdentityError::Malformed(_))));
    }

    #[test]
    fn direct_requests_take_the_uri_and_check_host() {
        let d = destination(
            &Origin::Direct,
            &uri("http://a.example:8080/p"),
            &headers(&[]),
        );
        assert_eq!(
            d,
            Ok(Destination {
                scheme: "http",
                host: name("a.example"),
                port: 8080
            })
        );
        let d = destination(
            &Origin::Direct,
            &uri("http://a.example/p"),
            &headers(&["b.example"]),
        );
        assert!(matches!(d, Err(IdentityError::Mismatch { .. })));
        let d = destination(&Origin::Direct, &uri("*"), &headers(&["a.example"]));
        assert!(matches!(d, Err(IdentityError::Malformed(_))));
    }

    #[test]
    fn origin_form_on_a_direct_connection_is_for_the_routes() {
        let d = destination(
            &Origin::Direct,
            &uri("/llm/x"),
            &headers(&["127.0.0.1:8080"]),
        );
        assert_eq!(
            d,
            Ok(Destination {
                scheme: "http",
                host: name(ROUTE_HOST),
                port: 80
            })
        );
    }
}
