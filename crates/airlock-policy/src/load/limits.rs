//! Reading `limits:` (timeouts, buffer memory, connection counts).

use super::node::{Kind, Node};
use super::{Checker, shown};

const LIMITS_KEYS: &[&str] = &[
    "body_timeout",
    "idle_timeout",
    "buffer_memory",
    "connections_per_client",
    "connections",
];

impl Checker<'_> {
    /// `limits:`: timeouts, the inspection memory budget and the per-client connection
    /// cap (docs/policy.md, "limits").
    pub(super) fn limits(&mut self, node: &Node) -> crate::limits::Limits {
        use crate::limits::parse_duration;
        let mut out = crate::limits::Limits::default();
        if matches!(node.kind, Kind::Null) {
            return out;
        }
        let Some(fields) = self.fields(node, "limits", LIMITS_KEYS) else {
            return out;
        };
        if let Some(value) = fields.get("body_timeout") {
            out.body_timeout = self.limit_value(value, "limits.body_timeout", parse_duration);
        }
        if let Some(value) = fields.get("idle_timeout") {
            out.idle_timeout = self.limit_value(value, "limits.idle_timeout", parse_duration);
        }
        if let Some(value) = fields.get("buffer_memory") {
            out.buffer_memory = self.limit_value(value, "limits.buffer_memory", |text| {
                crate::size::parse_size(text)
                    .map_err(|_| "is not a size: write a number and a unit, as in 64MiB".into())
            });
        }
        if let Some(value) = fields.get("connections_per_client") {
            out.connections_per_client = self.count_limit(value, "limits.connections_per_client");
        }
        if let Some(value) = fields.get("connections") {
            out.connections = self.count_limit(value, "limits.connections");
        }
        if let (Some(value), Some(per_client)) = (
            fields.get("connections_per_client"),
            out.connections_per_client,
        ) {
            self.client_share_check(value, per_client, out.connections);
        }
        out
    }

    /// A `connections_per_client` over a quarter of `connections` (as written in the same
    /// section, or the default) would let three clients refuse every other: refused at
    /// its place (docs/policy.md, "limits").
    pub(super) fn client_share_check(
        &mut self,
        value: &Node,
        per_client: u32,
        connections: Option<u32>,
    ) {
        use crate::limits::{DEFAULT_CONNECTIONS, client_share};
        let total = connections.unwrap_or(DEFAULT_CONNECTIONS);
        let share = client_share(total);
        if per_client > share {
            self.error(
                value.pos,
                format!(
                    "limits.connections_per_client {per_client} is more than a quarter of \
                     limits.connections ({total}): a few clients could hold every connection \
                     and refuse all others; write at most {share}, or raise \
                     limits.connections to at least {}",
                    u64::from(per_client) * 4
                ),
            );
        }
    }

    /// A `limits` count (`connections`, `connections_per_client`): 1 to 1,000,000.
    pub(super) fn count_limit(&mut self, value: &Node, key: &str) -> Option<u32> {
        match value.kind {
            Kind::Int(number) if (1..=1_000_000).contains(&number) => u32::try_from(number).ok(),
            Kind::Int(number) => {
                self.error(
                    value.pos,
                    format!("{key} {number} is out of range: write a number from 1 to 1000000"),
                );
                None
            }
            _ => {
                self.wrong_type(value, key, "a number");
                None
            }
        }
    }

    /// A `limits` value written as a string (`30s`, `64MiB`) and read by `parse`.
    pub(super) fn limit_value<T>(
        &mut self,
        node: &Node,
        what: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let text = self.string(node, what)?;
        match parse(text) {
            Ok(value) => Some(value),
            Err(problem) => {
                self.error(node.pos, format!("{what} `{}` {problem}", shown(text)));
                None
            }
        }
    }
}
