//! The validated, typed policy: what every loader and importer produces and what the
//! matcher compiles. Nothing in here is unvalidated text: hosts are canonical, methods are
//! upper-case, CIDRs have no host bits, globs and regexes have been checked to compile.
//!
//! Rule ids (`network.allow[i]`) are assigned by the loader in file order and prefixed by
//! the source name when several sources are [combined](Policy::combine).

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use crate::mcp_args::ArgGuard;

/// A whole policy: network rules, secrets, MCP tool rules and reverse-proxy routes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Which destinations may be reached.
    pub network: Network,
    /// Credentials the sandbox sees only as surrogates, in file order.
    pub secrets: Vec<Secret>,
    /// MCP tool-call rules for HTTP servers (`mcp: - host: ...`).
    pub mcp: Vec<McpRule>,
    /// MCP tool-call rules for stdio servers run by `airlock mcp` (`mcp: - stdio: NAME`).
    pub mcp_stdio: Vec<StdioMcpRule>,
    /// Reverse-proxy prefixes for base-URL clients.
    pub routes: Vec<Route>,
    /// What the command may read and write (`airlock run`, local sandboxes).
    pub filesystem: Filesystem,
    /// The outbound guard's handling of well-known credential formats.
    pub dlp: Dlp,
    /// Timeouts, the inspection memory budget and the per-client connection cap.
    pub limits: crate::limits::Limits,
    /// What the audit asks of forwarded requests (`audit: {traceparent: true}`).
    pub audit: Audit,
    /// The user's credential files projected with surrogates or hidden (`credentials`).
    pub credentials: crate::credential_files::CredentialFiles,
}

/// The `dlp` section: what the outbound guard does with a well-known credential format
/// (a GitHub token, an AWS key id, a private key, ...) that is neither a surrogate nor a
/// configured secret's value (docs/policy.md, "dlp"). Real values of configured secrets
/// are always refused outside their hosts, whatever this says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dlp {
    /// Refuse, only log, or ignore such credentials; `None` = not set (refuse).
    pub credentials: Option<DlpMode>,
    /// Places where such a credential may go.
    pub allow: Vec<DlpAllow>,
}

impl Dlp {
    /// The mode in force: the one set, or `refuse`.
    pub fn mode(&self) -> DlpMode {
        self.credentials.unwrap_or(DlpMode::Refuse)
    }

    /// Adds another source's section: `allow` lists are joined; of two modes set, the
    /// stricter holds (a source cannot weaken what another asks for).
    pub fn merge(&mut self, other: Dlp) {
        self.credentials = match (self.credentials, other.credentials) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for entry in other.allow {
            if !self.allow.contains(&entry) {
                self.allow.push(entry);
            }
        }
    }
}

/// The `audit` section (docs/policy.md, "Trace context").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Send a W3C `traceparent` upstream whose trace id the request's audit line names.
    pub traceparent: bool,
}

/// `dlp.credentials`. Ordered from the weakest to the strictest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DlpMode {
    /// Not looked for.
    Off,
    /// Passed, and the request's audit line names the kind found.
    Log,
    /// Refused with `credential_outbound` (the default).
    Refuse,
}

impl DlpMode {
    /// The policy spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DlpMode::Off => "off",
            DlpMode::Log => "log",
            DlpMode::Refuse => "refuse",
        }
    }
}

/// One `dlp.allow` entry: credentials of `kinds` (every kind when empty) may go to `host`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DlpAllow {
    /// Where they may go.
    pub host: HostPattern,
    /// Which kinds (names from the format table, e.g. `github`, `aws`); empty = all.
    pub kinds: Vec<String>,
}

/// The `filesystem` section: paths as written (`~/...`, relative or absolute), resolved
/// against the launcher's home and working directory when a jail is built
/// ([`crate::filesystem`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filesystem {
    /// Directories the command may write; `None` means the default, the working directory.
    pub writable: Option<Vec<String>>,
    /// Paths hidden besides the built-in list.
    pub hidden: Vec<String>,
    /// Exceptions to the built-in hidden list (and the only way to lift one).
    pub readable: Vec<String>,
    /// Names write-protected besides the built-in ones, even inside writable directories.
    pub protected: Vec<String>,
}

impl Filesystem {
    /// Adds another source's entries: lists are joined without duplicates; `writable`
    /// stays the default only if no source sets it.
    pub fn merge(&mut self, other: Filesystem) {
        fn join(into: &mut Vec<String>, from: Vec<String>) {
            for item in from {
                if !into.contains(&item) {
                    into.push(item);
                }
            }
        }
        if let Some(writable) = other.writable {
            join(self.writable.get_or_insert_with(Vec::new), writable);
        }
        join(&mut self.hidden, other.hidden);
        join(&mut self.readable, other.readable);
        join(&mut self.protected, other.protected);
    }
}

/// The `network` section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Network {
    /// A request passes if it matches no deny rule and any allow rule.
    pub allow: Vec<Rule>,
    /// Deny rules win over allow rules.
    pub deny: Vec<Rule>,
    /// Hosts whose TLS is passed through un-intercepted (decided on SNI only).
    pub tls_passthrough: Vec<HostPattern>,
}

/// One `network.allow` / `network.deny` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The rule id as shown to users: `network.allow[0]`, `team.yaml:network.deny[2]`, `--allow[1]`.
    pub id: String,
    /// Which destinations the rule is about.
    pub target: Target,
    /// Allowed methods, upper-case; `None` = every method.
    pub methods: Option<Vec<String>>,
    /// Path globs on the canonical path (`*` inside a segment, `**` across); empty = no glob rule.
    pub paths: Vec<String>,
    /// Regexes fully matched against canonical path + `?` + query; empty = no regex rule.
    pub path_regex: Vec<String>,
    /// Ports; `None` = the default `[80, 443]` for hosts (every port for CIDRs and IP literals
    /// is *not* implied: the default is `[80, 443]` for every target).
    pub ports: Option<Vec<u16>>,
    /// Body guards (`json_deny`, allow rules only): a request this rule allows is refused
    /// when its JSON body matches one; empty = the body is not looked at.
    pub json_deny: Vec<crate::json_deny::JsonDeny>,
    /// `process`: the programs the rule is about, each an absolute executable path or a
    /// bare name resolved on the command's `PATH` when the rule is used; `None` = every
    /// program. Matched on the executable the kernel names, never on `argv[0]`; an
    /// unknown program matches a deny rule and no allow rule ([`crate::matcher`]).
    pub process: Option<Vec<String>>,
}

impl Rule {
    /// The ports this rule applies to (its `ports`, or the default 80 and 443).
    pub fn effective_ports(&self) -> &[u16] {
        self.ports.as_deref().unwrap_or(&DEFAULT_PORTS)
    }

    /// Whether the rule constrains anything beyond destination (methods, paths, regexes or
    /// body guards). Only rules without such constraints allow raw (non-HTTP) TCP.
    pub fn is_destination_only(&self) -> bool {
        self.methods.is_none()
            && self.paths.is_empty()
            && self.path_regex.is_empty()
            && self.json_deny.is_empty()
    }
}

/// The ports a rule without `ports` applies to.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What a rule is about: a host name pattern or an address range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A host name pattern (or an IP literal written as a host).
    Host(HostPattern),
    /// A CIDR block of destination addresses.
    Cidr(ipnet::IpNet),
    /// `host_regex`: a regex fully matched (`^(?:re)$`), case-insensitively, against the
    /// canonical host *name* (lower-case ASCII, no trailing dot); never an IP literal and
    /// never an exemption from the private-address guard. Checked by
    /// [`crate::rule::check_host_regex`].
    HostRegex(String),
}

/// A host pattern, already canonical (lower-case ASCII, IDNA-encoded, no trailing dot).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// `*.suffix`: one or more labels in front of `suffix`; never `suffix` itself.
    /// Holds the suffix without the leading `*.`.
    Wildcard(String),
    /// An IP literal written as a host (`host: 10.0.0.5` or `host: "[::1]"`).
    Ip(IpAddr),
    /// `*` alone: every host name (used by importers for allow-all modes). Never matches an
    /// IP literal and never exempts an address from the private-address guard.
    Any,
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(h) => f.write_str(h),
            HostPattern::Wildcard(s) => write!(f, "*.{s}"),
            HostPattern::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            HostPattern::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
            HostPattern::Any => f.write_str("*"),
        }
    }
}

/// One entry of `secrets`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// The secret's name: also the environment variable the sandbox sees its surrogate in.
    pub name: String,
    /// Where the real value comes from.
    pub source: SecretSource,
    /// The only hosts the real value may be sent to.
    pub hosts: Vec<HostPattern>,
    /// Header names (lower-case) the surrogate is swapped in; `None` = every header.
    pub headers: Option<Vec<String>>,
    /// Set a header outright on the secret's hosts.
    pub inject: Option<Inject>,
    /// A fixed surrogate instead of a generated one.
    pub surrogate: Option<String>,
    /// Also swap in the query and in identity-encoded bodies.
    pub body: bool,
    /// Allow credentials other than the surrogate on the secret's hosts (`foreign: allow`).
    pub foreign_allowed: bool,
}

impl Secret {
    /// A secret named `name` read from `source`, every option at its default: no hosts
    /// yet, swapped in every header, a generated surrogate, headers and query only,
    /// foreign credentials refused.
    pub fn new(name: impl Into<String>, source: SecretSource) -> Secret {
        Secret {
            name: name.into(),
            source,
            hosts: Vec::new(),
            headers: None,
            inject: None,
            surrogate: None,
            body: false,
            foreign_allowed: false,
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("source", &self.source)
            .field("hosts", &self.hosts)
            .field("headers", &self.headers)
            .field("inject", &self.inject)
            .field("surrogate", &self.surrogate)
            .field("body", &self.body)
            .field("foreign_allowed", &self.foreign_allowed)
            .finish()
    }
}

/// Where a secret's real value is read from. The `Debug` form never shows a literal value.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The launcher's environment variable of this name.
    Env(String),
    /// A file (re-read when it changes).
    File(PathBuf),
    /// A literal value in the policy itself.
    Value(String),
    /// A command run once at start (argv), its trimmed stdout being the value.
    Command(Vec<String>),
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Env(v) => f.debug_tuple("Env").field(v).finish(),
            SecretSource::File(p) => f.debug_tuple("File").field(p).finish(),
            SecretSource::Value(_) => f.write_str("Value(<redacted>)"),
            SecretSource::Command(a) => f.debug_tuple("Command").field(a).finish(),
        }
    }
}

/// `inject: {header, format}`: the header is set to `format` with `{value}` replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inject {
    /// Header name, lower-case.
    pub header: String,
    /// Format string containing `{value}` exactly once.
    pub format: String,
}

/// One `mcp` entry: tool-call policy for an MCP server endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpRule {
    /// The rule id (`mcp[0]`, prefixed like network rules when combined).
    pub id: String,
    /// The server's host.
    pub host: HostPattern,
    /// Path glob (same syntax as `paths`), matched on the path without query.
    pub path: String,
    /// Tools allowed; empty = all not denied.
    pub allow: Vec<String>,
    /// Tools denied; checked first.
    pub deny: Vec<String>,
    /// Argument guards (`tools.args`): values an allowed call may pass.
    pub args: Vec<ArgGuard>,
}

/// One `mcp` entry for a stdio server (`stdio: NAME`), used by `airlock mcp --name NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioMcpRule {
    /// The rule id (`mcp[0]`, prefixed like network rules when combined).
    pub id: String,
    /// The server's name (`--name`, default the basename of its command).
    pub server: String,
    /// Tools allowed; empty = all not denied.
    pub allow: Vec<String>,
    /// Tools denied; checked first.
    pub deny: Vec<String>,
    /// Argument guards (`tools.args`): values an allowed call may pass.
    pub args: Vec<ArgGuard>,
}

/// The tool part of an MCP rule, HTTP ([`McpRule`]) or stdio ([`StdioMcpRule`]): what the
/// pure MCP decisions (`airlock-mcp`) read.
pub trait ToolRules {
    /// Tools allowed; empty = all not denied.
    fn allowed_tools(&self) -> &[String];
    /// Tools denied; checked first.
    fn denied_tools(&self) -> &[String];
    /// Argument guards of allowed calls.
    fn arg_guards(&self) -> &[ArgGuard];
}

/// Implements [`ToolRules`] for rule types with `allow`, `deny` and `args` fields.
macro_rules! tool_rules {
    ($($rule:ty),*) => {$(
        impl ToolRules for $rule {
            fn allowed_tools(&self) -> &[String] {
                &self.allow
            }
            fn denied_tools(&self) -> &[String] {
                &self.deny
            }
            fn arg_guards(&self) -> &[ArgGuard] {
                &self.args
            }
        }
    )*};
}

tool_rules!(McpRule, StdioMcpRule);

/// One `routes` entry: `prefix` on the proxy's plain-HTTP address forwards to `upstream`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Path prefix, starting and ending with `/`.
    pub prefix: String,
    /// Upstream base URL (https), ending with `/`.
    pub upstream: String,
    /// Secret injected per its `inject`.
    pub secret: Option<String>,
}

impl Policy {
    /// The `mcp` rule for the stdio server `server` (names compare exactly), if any.
    pub fn stdio_rule(&self, server: &str) -> Option<&StdioMcpRule> {
        self.mcp_stdio.iter().find(|rule| rule.server == server)
    }

    /// Union several sources into one policy: allows and denies are concatenated,
    /// secrets, MCP rules and routes gathered. When more than one source is given, the
    /// rule ids of every *named* source are prefixed by its name
    /// (`team.yaml:network.allow[2]`); a source named `None` (the `--allow` flags, whose ids
    /// already read `--allow[0]`) keeps its ids, and so does a single source.
    ///
    /// Fails when two sources define a secret of the same name or a route with the same
    /// prefix (which one would win is not obvious, so neither does).
    pub fn combine(sources: Vec<(Option<String>, Policy)>) -> Result<Policy, CombineError> {
        let prefix = sources.len() > 1;
        let mut out = Policy::default();
        for (source, mut policy) in sources {
            if let (true, Some(source)) = (prefix, &source) {
                let tag = |id: &mut String| *id = format!("{source}:{id}");
                policy.network.allow.iter_mut().for_each(|r| tag(&mut r.id));
                policy.network.deny.iter_mut().for_each(|r| tag(&mut r.id));
                policy.mcp.iter_mut().for_each(|r| tag(&mut r.id));
                policy.mcp_stdio.iter_mut().for_each(|r| tag(&mut r.id));
            }
            for secret in policy.secrets {
                if out.secrets.iter().any(|s| s.name == secret.name) {
                    return Err(CombineError::DuplicateSecret {
                        name: secret.name,
                        origin: source_label(&source),
                    });
                }
                out.secrets.push(secret);
            }
            for route in policy.routes {
                if out.routes.iter().any(|r| r.prefix == route.prefix) {
                    return Err(CombineError::DuplicateRoute {
                        prefix: route.prefix,
                        origin: source_label(&source),
                    });
                }
                out.routes.push(route);
            }
            out.network.allow.extend(policy.network.allow);
            out.network.deny.extend(policy.network.deny);
            for host in policy.network.tls_passthrough {
                if !out.network.tls_passthrough.contains(&host) {
                    out.network.tls_passthrough.push(host);
                }
            }
            out.mcp.extend(policy.mcp);
            for rule in policy.mcp_stdio {
                if out.mcp_stdio.iter().any(|r| r.server == rule.server) {
                    return Err(CombineError::DuplicateStdioServer {
                        server: rule.server,
                        origin: source_label(&source),
                    });
                }
                out.mcp_stdio.push(rule);
            }
            out.filesystem.merge(policy.filesystem);
            out.dlp.merge(policy.dlp);
            // Any source asking for trace context gets it.
            out.audit.traceparent |= policy.audit.traceparent;
            out.limits.merge(policy.limits);
            out.credentials.merge(policy.credentials);
        }
        Ok(out)
    }
}

fn source_label(source: &Option<String>) -> String {
    source
        .clone()
        .unwrap_or_else(|| "the command line".to_owned())
}

/// Why several policy sources could not be combined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CombineError {
    /// Two sources define the same secret.
    #[error(
        "secret {name} is defined again in {origin}: define each secret in one policy source only"
    )]
    DuplicateSecret {
        /// The secret's name.
        name: String,
        /// The source that defines it a second time.
        origin: String,
    },
    /// Two sources define an `mcp` rule for the same stdio server.
    #[error(
        "mcp rule for stdio server {server} is defined again in {origin}: give each stdio server one rule in one policy source"
    )]
    DuplicateStdioServer {
        /// The server's name.
        server: String,
        /// The source that defines it a second time.
        origin: String,
    },
    /// Two sources define the same route prefix.
    #[error("route prefix {prefix} is defined again in {origin}: give each route its own prefix")]
    DuplicateRoute {
        /// The route prefix.
        prefix: String,
        /// The source that defines it a second time.
        origin: String,
    },
}
