//! `localhost` in a rule is the host's loopback (docs/policy.md, "Hosts"): an allow rule
//! naming `localhost` exactly (not a wildcard, not `*`) is the operator's consent to reach
//! the loopback addresses on its ports, as an IP literal rule is for its address; the
//! private-address guard does not refuse it, and `airlock policy explain` and the proxy
//! answer it the same way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::canonical::Host;
use crate::matcher::CompiledPolicy;
use crate::model::{HostPattern, Target};

/// The name that means the host's loopback.
const LOCALHOST: &str = "localhost";

impl CompiledPolicy {
    /// The loopback addresses `host:port` stands for when an allow rule names `localhost`
    /// exactly on that port; `None` otherwise (the name is resolved and guarded as usual).
    pub fn loopback_named(&self, host: &Host, port: u16) -> Option<[IpAddr; 2]> {
        let Host::Name(name) = host else {
            return None;
        };
        let named = name == LOCALHOST && self.policy().network.allow.iter().any(|rule| {
            matches!(&rule.target, Target::Host(HostPattern::Exact(exact)) if exact == LOCALHOST)
                && rule.effective_ports().contains(&port)
        });
        named.then_some([
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(yaml: &str) -> CompiledPolicy {
        let policy = crate::load::load_str("test.yaml", yaml).expect("policy");
        CompiledPolicy::compile(&policy).expect("compile")
    }

    #[test]
    fn only_an_exact_localhost_rule_on_the_port_names_the_loopback() {
        let name = |n: &str| Host::Name(n.to_owned());
        let exact = compiled(
            "version: 1\nnetwork:\n  allow:\n    - host: localhost\n      ports: [8080]\n",
        );
        assert!(exact.loopback_named(&name("localhost"), 8080).is_some());
        assert!(exact.loopback_named(&name("localhost"), 443).is_none());
        assert!(exact.loopback_named(&name("example.com"), 8080).is_none());
        let wildcard = compiled("version: 1\nnetwork:\n  allow:\n    - host: \"*\"\n");
        assert!(wildcard.loopback_named(&name("localhost"), 443).is_none());
    }
}
