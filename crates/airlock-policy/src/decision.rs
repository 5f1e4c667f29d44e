//! The answer of the policy engine: allow or deny, which rule decided, and why.
//!
//! [`Reason`] is the closed list of refusal reasons of the product contract
//! (docs/contract.md §4); its `as_str` spelling is what the 403 body, the audit log and
//! `policy explain --json` show.

use std::fmt;
use std::sync::OnceLock;

use crate::canonical::ROUTE_HOST;

/// The policy source refusal hints name (docs/contract.md §4): set once per process by the
/// launcher; unset, hints say `airlock.yaml`.
static HINT_SOURCE: OnceLock<String> = OnceLock::new();

/// The [`set_hint_source`] label for rules that came from `--allow` flags only.
pub const FLAGS_SOURCE: &str = "--allow";

/// Names, once per process, the policy file that refusal hints tell the operator to edit
/// (the `--policy` file, the discovered `./airlock.yaml`, ...), or [`FLAGS_SOURCE`] when the
/// rules came from the command line only. Later calls change nothing.
pub fn set_hint_source(label: impl Into<String>) {
    let _ = HINT_SOURCE.set(label.into());
}

/// Where hints say to make a change: `in FILE`, or for flags, in a policy file to write.
fn hint_place() -> String {
    match HINT_SOURCE.get().map(String::as_str) {
        None => "in airlock.yaml".to_owned(),
        Some(FLAGS_SOURCE) => "in a policy file (`airlock init` writes ./airlock.yaml)".to_owned(),
        Some(file) => format!("in {file}"),
    }
}

/// The hint for an unlisted host: the rule to add where the rules come from.
fn allow_host_hint(host: &str) -> String {
    if HINT_SOURCE.get().map(String::as_str) == Some(FLAGS_SOURCE) {
        return format!(
            "add `--allow {host}` to the command line, or `- host: {host}` under network.allow {}",
            hint_place()
        );
    }
    format!("add `- host: {host}` under network.allow {}", hint_place())
}

/// Allow or deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The request may pass.
    Allow,
    /// The request is refused.
    Deny,
}

impl Verdict {
    /// `"allow"` or `"deny"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        }
    }
}

/// Why a request was refused (docs/contract.md §4). Exhaustive: adding one is a contract
/// change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// No allow rule names the host (or the IP literal).
    HostNotAllowed,
    /// A rule names the host but not this method.
    MethodNotAllowed,
    /// A rule names the host and method but no path glob/regex matches.
    PathNotAllowed,
    /// A deny rule matched.
    DeniedByRule,
    /// The destination resolves to a non-global address the operator did not name.
    PrivateAddress,
    /// CONNECT target, SNI, Host / :authority or absolute URI disagree.
    HostMismatch,
    /// The path still hides `..`, a backslash, a NUL or an encoded slash after canonicalisation.
    PathUnsafe,
    /// A surrogate of a secret was sent to a host outside that secret's hosts.
    SecretOutOfScope,
    /// A credential that is not the configured surrogate was sent to a secret's host.
    ForeignCredential,
    /// A body that a rule must inspect could not be inspected.
    BodyUninspectable,
    /// An MCP `tools/call` named a tool the policy refuses.
    McpToolDenied,
    /// A well-known credential format (not a surrogate, not a configured value) was on its
    /// way to a host `dlp.allow` does not name.
    CredentialOutbound,
    /// An MCP `tools/call` passed an argument value its tool's argument guard refuses.
    McpArgumentDenied,
    /// The proxy's inspection memory (`limits.buffer_memory`) or a connection cap
    /// (`limits.connections_per_client`, `limits.connections`) is taken: answered 503 (a
    /// connection: closed at accept), not a policy refusal.
    Overloaded,
}

impl Reason {
    /// Every reason, in contract order.
    pub const ALL: [Reason; 14] = [
        Reason::HostNotAllowed,
        Reason::MethodNotAllowed,
        Reason::PathNotAllowed,
        Reason::DeniedByRule,
        Reason::PrivateAddress,
        Reason::HostMismatch,
        Reason::PathUnsafe,
        Reason::SecretOutOfScope,
        Reason::ForeignCredential,
        Reason::BodyUninspectable,
        Reason::McpToolDenied,
        Reason::CredentialOutbound,
        Reason::McpArgumentDenied,
        Reason::Overloaded,
    ];

    /// The contract spelling, e.g. `host_not_allowed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::HostNotAllowed => "host_not_allowed",
            Reason::MethodNotAllowed => "method_not_allowed",
            Reason::PathNotAllowed => "path_not_allowed",
            Reason::DeniedByRule => "denied_by_rule",
            Reason::PrivateAddress => "private_address",
            Reason::HostMismatch => "host_mismatch",
            Reason::PathUnsafe => "path_unsafe",
            Reason::SecretOutOfScope => "secret_out_of_scope",
            Reason::ForeignCredential => "foreign_credential",
            Reason::BodyUninspectable => "body_uninspectable",
            Reason::McpToolDenied => "mcp_tool_denied",
            Reason::CredentialOutbound => "credential_outbound",
            Reason::McpArgumentDenied => "mcp_argument_denied",
            Reason::Overloaded => "overloaded",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of deciding one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Allow or deny.
    pub verdict: Verdict,
    /// The id of the rule that decided (`network.allow[3]`, `team.yaml:network.deny[0]`),
    /// or `None` when the default (deny) decided.
    pub rule: Option<String>,
    /// Why it was refused; `None` for an allow.
    pub reason: Option<Reason>,
}

impl Decision {
    /// An allow by `rule`.
    pub fn allow(rule: impl Into<String>) -> Self {
        Decision {
            verdict: Verdict::Allow,
            rule: Some(rule.into()),
            reason: None,
        }
    }

    /// A refusal for `reason`, decided by `rule` (or by the default when `None`).
    pub fn deny(reason: Reason, rule: Option<String>) -> Self {
        Decision {
            verdict: Verdict::Deny,
            rule,
            reason: Some(reason),
        }
    }

    /// Whether the request may pass.
    pub fn is_allow(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

/// The human explanation of a refusal: the `message` and `hint` of the 403 body
/// (docs/contract.md §4) and of `airlock policy explain`. One place, so every surface says
/// the same thing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// What happened, in one sentence.
    pub message: String,
    /// What the operator can change to allow it (or why they should not).
    pub hint: String,
}

impl Reason {
    /// Explains a refusal of `method host path` for this reason. `rule` is the deciding
    /// rule id, when one decided.
    pub fn explain(self, method: &str, host: &str, path: &str, rule: Option<&str>) -> Explanation {
        let rule = rule.unwrap_or("the policy");
        let (message, hint) = match self {
            Reason::PathNotAllowed if host == ROUTE_HOST => (
                format!("no route's prefix matches {path} on {ROUTE_HOST}"),
                format!("add a route whose prefix starts {path} under routes {}", hint_place()),
            ),
            Reason::HostNotAllowed if host == ROUTE_HOST => (
                format!("{ROUTE_HOST} serves routes over plain HTTP only"),
                format!("use http://{ROUTE_HOST}/PREFIX/ as the base URL"),
            ),
            Reason::HostNotAllowed => (
                format!("{host} is not in the allowlist"),
                allow_host_hint(host),
            ),
            Reason::MethodNotAllowed => (
                format!("{method} is not allowed for {host}"),
                format!("add {method} to the methods of the rule for {host} {}", hint_place()),
            ),
            Reason::PathNotAllowed => (
                format!("{method} {path} is not allowed for {host}"),
                format!("add a glob matching {path} to the paths of the rule for {host} {}", hint_place()),
            ),
            Reason::DeniedByRule => (
                format!("{host} is refused by {rule}"),
                format!("remove or narrow {rule} {} if this request should pass", hint_place()),
            ),
            Reason::PrivateAddress => (
                format!("{host} resolves to a private, loopback or link-local address"),
                format!(
                    "if the operator means to reach it, name the address: a `cidr` allow rule, \
                     an allow rule for the IP literal, or `--resolve {host}:ADDR`"
                ),
            ),
            Reason::HostMismatch => (
                "the CONNECT target, TLS SNI, Host header and URL do not name the same host".to_owned(),
                "send the request to the host it is addressed to; domain fronting is refused".to_owned(),
            ),
            Reason::PathUnsafe => (
                format!("the path {path} hides `..`, a backslash, a NUL or an encoded slash"),
                "send the path in its plain form; encoded traversal is refused on hosts with path rules"
                    .to_owned(),
            ),
            Reason::SecretOutOfScope => (
                format!(
                    "a secret's credential (its placeholder or its real value) was sent to {host}, \
                     which is not one of its hosts, or was sent without TLS"
                ),
                format!(
                    "add {host} to the secret's hosts {} only if it should receive \
                     that credential, and use https",
                    hint_place()
                ),
            ),
            Reason::ForeignCredential => (
                format!("{host} received a credential that is not the one configured for it"),
                "use the credential placeholder from the environment; other accounts are refused".to_owned(),
            ),
            Reason::BodyUninspectable => (
                format!("the body of {method} {path} must be inspected but could not be"),
                "send an uncompressed body within the size limit".to_owned(),
            ),
            Reason::McpToolDenied => (
                format!("an MCP tool call to {host} is refused by {rule}"),
                format!(
                    "allow the tool under mcp[].tools.allow {} if the agent should call it",
                    hint_place()
                ),
            ),
            Reason::CredentialOutbound => (
                format!("the request to {host} carries a credential (a token or key of a well-known format)"),
                format!(
                    "configure it as a secret with a placeholder, or name {host} under dlp.allow \
                     {} if that credential belongs there",
                    hint_place()
                ),
            ),
            Reason::McpArgumentDenied => (
                format!("an MCP tool call to {host} passed an argument refused by {rule}"),
                format!(
                    "widen the tool's guard under mcp[].tools.args {} if the agent should pass \
                     that value",
                    hint_place()
                ),
            ),
            Reason::Overloaded => (
                format!("airlock is holding as many bodies for inspection as its limits allow; {method} {path} was not read"),
                format!(
                    "retry later, or raise limits.buffer_memory (for connections: \
                     limits.connections_per_client or limits.connections) {}",
                    hint_place()
                ),
            ),
        };
        Explanation { message, hint }
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    /// docs/contract.md §4 lists exactly the reasons of [`Reason::ALL`], in the same order.
    #[test]
    fn the_contract_lists_every_reason_in_order() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/contract.md");
        let text = std::fs::read_to_string(path).expect("docs/contract.md");
        let start = text.find("`reason` is one of").expect("the reason list");
        let end = start + text[start..].find("list is closed").expect("its end");
        let listed: Vec<&str> = text[start..end]
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|word| *word != "reason")
            .collect();
        let known: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(listed, known);
    }
}
