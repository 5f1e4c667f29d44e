//! The host lookup structure ([`HostIndex`]): from a host name or address to the indices
//! of the policy entries that name it (exact names, wildcards, regexes, IPs, CIDR blocks).

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

use super::CompileError;
use crate::canonical::Host;
use crate::model::{HostPattern, Rule, Target};
use crate::net;

/// Host lookup structure: from a host to the indices of the entries that name it.
#[derive(Clone, Debug, Default)]
pub(super) struct HostIndex {
    /// `HostPattern::Exact`.
    exact: HashMap<String, Vec<usize>>,
    /// `HostPattern::Wildcard`, keyed by suffix.
    wildcard: HashMap<String, Vec<usize>>,
    /// `HostPattern::Any`.
    any: Vec<usize>,
    /// `Target::HostRegex`, compiled (anchored, case-insensitive).
    regex: Vec<(regex::Regex, usize)>,
    /// `HostPattern::Ip`.
    ip: HashMap<IpAddr, Vec<usize>>,
    /// IPv4 CIDR blocks: one map per distinct prefix length, keyed by masked network.
    v4_blocks: Vec<(u8, HashMap<u32, Vec<usize>>)>,
    /// IPv6 CIDR blocks, likewise.
    v6_blocks: Vec<(u8, HashMap<u128, Vec<usize>>)>,
}

/// Which IPv6-embedded IPv4 forms an IP lookup also tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Embedded {
    /// Only IPv4-mapped (`::ffff:a.b.c.d`), which is the same destination.
    Mapped,
    /// Every fixed-position embedding ([`net::embedded_ipv4`]).
    Any,
}

impl HostIndex {
    /// Index `pattern` as entry `index` (an IPv4-mapped IPv6 literal as its IPv4 address,
    /// which lookups also try).
    pub(super) fn insert_pattern(&mut self, pattern: &HostPattern, index: usize) {
        match pattern {
            HostPattern::Exact(name) => self.exact.entry(name.clone()).or_default().push(index),
            HostPattern::Wildcard(suffix) => {
                self.wildcard.entry(suffix.clone()).or_default().push(index)
            }
            HostPattern::Ip(addr) => self.ip.entry(canonical_ip(*addr)).or_default().push(index),
            HostPattern::Any => self.any.push(index),
        }
    }

    /// Index the block `net` as entry `index`.
    pub(super) fn insert_block(&mut self, net: IpNet, index: usize) {
        let net = net.trunc();
        match net {
            IpNet::V4(v4) => {
                let key = u32::from(v4.network());
                block_map(&mut self.v4_blocks, v4.prefix_len())
                    .entry(key)
                    .or_default()
                    .push(index);
            }
            IpNet::V6(v6) => {
                let key = u128::from(v6.network());
                block_map(&mut self.v6_blocks, v6.prefix_len())
                    .entry(key)
                    .or_default()
                    .push(index);
            }
        }
    }

    /// Index `rule`'s target as entry `index` (fails only on a `host_regex` the loader
    /// would have refused).
    pub(super) fn insert_target(&mut self, rule: &Rule, index: usize) -> Result<(), CompileError> {
        match &rule.target {
            Target::Host(pattern) => self.insert_pattern(pattern, index),
            Target::Cidr(net) => self.insert_block(*net, index),
            Target::HostRegex(text) => {
                crate::rule::check_host_regex(text).map_err(|err| CompileError::Regex {
                    rule: rule.id.clone(),
                    message: err.to_string(),
                })?;
                let compiled =
                    crate::rule::host_regex(text).map_err(|err| CompileError::Regex {
                        rule: rule.id.clone(),
                        message: err.to_string(),
                    })?;
                self.regex.push((compiled, index));
            }
        }
        Ok(())
    }

    /// Call `visit` with the index of every entry naming `host` (an index may come more
    /// than once when an address is looked up in several forms).
    pub(super) fn for_each(&self, host: &Host, embedded: Embedded, mut visit: impl FnMut(usize)) {
        match host {
            Host::Name(name) => {
                visit_all(self.exact.get(name.as_str()), &mut visit);
                for (dot, _) in name.match_indices('.') {
                    visit_all(self.wildcard.get(&name[dot + 1..]), &mut visit);
                }
                self.any.iter().copied().for_each(&mut visit);
                for (regex, index) in &self.regex {
                    if regex.is_match(name) {
                        visit(*index);
                    }
                }
            }
            Host::Ip(addr) => self.for_each_address(*addr, embedded, &mut visit),
        }
    }

    /// Call `visit` for every `Ip` pattern and block naming `addr` (and its embedded
    /// IPv4 form as chosen by `embedded`).
    pub(super) fn for_each_address(
        &self,
        addr: IpAddr,
        embedded: Embedded,
        visit: &mut impl FnMut(usize),
    ) {
        self.for_each_exact_address(addr, visit);
        if let IpAddr::V6(v6) = addr {
            let inner = match embedded {
                Embedded::Mapped => v6.to_ipv4_mapped(),
                Embedded::Any => net::embedded_ipv4(v6),
            };
            if let Some(v4) = inner {
                self.for_each_exact_address(IpAddr::V4(v4), visit);
            }
        }
    }

    /// Call `visit` for every `Ip` pattern and block naming exactly `addr`.
    pub(super) fn for_each_exact_address(&self, addr: IpAddr, visit: &mut impl FnMut(usize)) {
        visit_all(self.ip.get(&addr), visit);
        match addr {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                for (len, map) in &self.v4_blocks {
                    let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
                    visit_all(map.get(&(bits & mask)), visit);
                }
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                for (len, map) in &self.v6_blocks {
                    let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
                    visit_all(map.get(&(bits & mask)), visit);
                }
            }
        }
    }
}

/// The map for prefix length `len`, created if needed.
pub(super) fn block_map<K>(
    blocks: &mut Vec<(u8, HashMap<K, Vec<usize>>)>,
    len: u8,
) -> &mut HashMap<K, Vec<usize>> {
    let position = match blocks.iter().position(|(l, _)| *l == len) {
        Some(position) => position,
        None => {
            blocks.push((len, HashMap::new()));
            blocks.len() - 1
        }
    };
    &mut blocks[position].1
}

/// Visit every index of an optional list.
pub(super) fn visit_all(indices: Option<&Vec<usize>>, visit: &mut impl FnMut(usize)) {
    if let Some(indices) = indices {
        indices.iter().copied().for_each(visit);
    }
}

/// An address with IPv4-mapped IPv6 turned into IPv4, for comparing destinations.
pub(super) fn canonical_ip(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        IpAddr::V4(_) => addr,
    }
}
