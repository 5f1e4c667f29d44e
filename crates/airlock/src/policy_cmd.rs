//! `airlock policy check|explain|import|suggest`: validate policies, explain one decision,
//! translate a seed system's file into native YAML, and suggest allow rules from audit
//! logs (`crate::policy_suggest`).
//!
//! Exit statuses (docs/contract.md §2): `check` 0 valid / 1 invalid; `explain` 0 allow / 1
//! deny / 2 error; `import` 0 / 1 when the file cannot be imported; `suggest` 0 / 1 when an
//! audit log or base policy cannot be read; usage errors 2.

use std::process::ExitCode;

use airlock_import::SeedFormat;
use airlock_policy::canonical::CanonicalRequest;
use airlock_policy::enforce::question_from_url;
use airlock_policy::{CompiledPolicy, Decision, emit};

use airlock_session::sources::read_policy_source;

use crate::out::{out, outln};
use crate::policy_args::PolicySelection;

/// Subcommands of `airlock policy`.
#[derive(clap::Subcommand)]
pub(crate) enum PolicyCommand {
    /// Validate policy files: exit 0, or 1 with every error as file:line:col.
    Check {
        /// Policy files; `FORMAT:FILE` for a seed system's format.
        #[arg(value_name = "[FORMAT:]FILE", required = true)]
        files: Vec<String>,
    },
    /// Explain the decision for one request: rule, reason and the secrets that would be swapped.
    Explain {
        /// The policy to decide with.
        #[command(flatten)]
        selection: PolicySelection,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Explain what `airlock run` lets the command do with this file or directory
        /// (write, read, write-protected or hidden) instead of a request.
        #[arg(long, value_name = "PATH", conflicts_with_all = ["method", "url"])]
        fs: Option<std::path::PathBuf>,
        /// Decide as if the program at PATH made the request (`process:` rules; names
        /// in rules are looked up on this shell's PATH). Without it the program is
        /// unknown, as in `airlock proxy`.
        #[arg(long, value_name = "PATH", conflicts_with = "fs")]
        process: Option<std::path::PathBuf>,
        /// The request method, e.g. GET.
        #[arg(required_unless_present = "fs")]
        method: Option<String>,
        /// The request URL, e.g. https://api.github.com/repos/acme/app.
        #[arg(required_unless_present = "fs")]
        url: Option<String>,
    },
    /// Translate a seed system's policy file into native airlock YAML (on stdout).
    Import {
        /// The seed format: airut, trustyclaw, secrets-proxy or sandbox0.
        #[arg(long = "from", value_name = "FORMAT")]
        from: SeedFormat,
        /// The file to import.
        file: String,
    },
    /// Print the network.allow entries that would have allowed what audit logs show
    /// refused for host, method or path (or `"would":"deny"` in report mode).
    Suggest {
        /// A policy whose allowed requests are left out; repeatable.
        #[arg(long = "base", value_name = "[FORMAT:]FILE")]
        base: Vec<String>,
        /// One entry per host and program (the lines' `process.exe`), with `process:`.
        #[arg(long)]
        by_process: bool,
        /// Audit logs (JSON lines); `-` reads standard input.
        #[arg(value_name = "AUDIT", required = true)]
        audits: Vec<String>,
    },
}

/// Runs one `airlock policy` subcommand.
pub(crate) fn run(cmd: PolicyCommand) -> ExitCode {
    match cmd {
        PolicyCommand::Check { files } => check(&files),
        PolicyCommand::Explain {
            selection,
            json,
            fs: Some(path),
            ..
        } => explain_fs(&selection, json, &path),
        PolicyCommand::Explain {
            selection,
            json,
            method,
            url,
            process,
            ..
        } => explain(
            &selection,
            json,
            method.as_deref().unwrap_or_default(),
            url.as_deref().unwrap_or_default(),
            process.as_deref(),
        ),
        PolicyCommand::Import { from, file } => import(from, &file),
        PolicyCommand::Suggest {
            base,
            audits,
            by_process,
        } => crate::policy_suggest::run(&base, &audits, by_process),
    }
}

fn check(files: &[String]) -> ExitCode {
    let mut invalid = false;
    for spec in files {
        let result = read_policy_source(spec).and_then(|(name, policy)| {
            CompiledPolicy::compile(&policy)
                .map(|_| (name, policy))
                .map_err(|e| vec![format!("{spec}: {e}")])
        });
        match result {
            Ok((name, policy)) => outln!(
                "{name}: ok ({} allow, {} deny, {} secrets, {} mcp rules, {} routes)",
                policy.network.allow.len(),
                policy.network.deny.len(),
                policy.secrets.len(),
                policy.mcp.len(),
                policy.routes.len()
            ),
            Err(errors) => {
                invalid = true;
                for error in errors {
                    eprintln!("{error}");
                }
            }
        }
    }
    if invalid {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A request named on the command line: `METHOD URL`, as shown.
struct ExplainRequest {
    canonical: CanonicalRequest,
    host_text: String,
}

/// Explains one request with the policy's one answer ([`CompiledPolicy::answer`]), the
/// same call the proxy makes: decision, route, body guards and the secrets swapped (none
/// over plain HTTP but a route's).
fn explain(
    selection: &PolicySelection,
    json: bool,
    method: &str,
    url: &str,
    process: Option<&std::path::Path>,
) -> ExitCode {
    let policy = match selection.load() {
        Ok(policy) => policy,
        Err(errors) => return fail(&errors.join("\n")),
    };
    let compiled = match CompiledPolicy::compile(&policy) {
        Ok(compiled) => compiled,
        Err(e) => return fail(&e.to_string()),
    };
    let program = process.map(|exe| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let names = airlock_session::program_paths::ProgramPaths::for_path(&path);
        airlock_session::program_paths::ExeCheck::new(exe, names)
    });
    let (mut question, host_text) = match question_from_url(method, url) {
        Ok(parsed) => parsed,
        Err(e) => return fail(&e),
    };
    let request = ExplainRequest {
        canonical: question.canonical.clone(),
        host_text,
    };
    question.caller = program
        .as_ref()
        .map(|check| check as &dyn airlock_policy::programs::ProgramCheck);
    let answer = compiled.answer(question);
    let decision = answer.explained(&compiled);
    let secrets: Vec<String> = if decision.is_allow() {
        answer
            .scope
            .in_scope
            .iter()
            .map(|name| (*name).to_owned())
            .collect()
    } else {
        Vec::new()
    };
    let target = &answer.canonical;
    if json {
        print_json(&decision, &secrets);
    } else {
        print_text(&decision, &secrets, &request);
        if decision.is_allow() && answer.routed {
            let path = target.path.as_deref().unwrap_or_default();
            outln!("  routed to https://{}:{}{path}", target.host, target.port);
        }
        if decision.is_allow() {
            print_inspection(&compiled, target);
        }
    }
    if decision.is_allow() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The checks an allowed request's body would still go through: the `json_deny` guards
/// (WebSocket messages included) and the MCP tool policy.
fn print_inspection(compiled: &CompiledPolicy, target: &airlock_policy::CanonicalRequest) {
    let guards: Vec<&str> = compiled
        .body_guards(target)
        .iter()
        .map(|rule| rule.id.as_str())
        .collect();
    if !guards.is_empty() {
        outln!(
            "  body:    checked against json_deny of {} (WebSocket messages too)",
            guards.join(", ")
        );
    }
    if let Ok(path) = target.path.as_deref()
        && let Some(rule) = compiled.mcp_rule(&target.host, path)
    {
        outln!("  mcp:     tools/call decided by {}", rule.id);
    }
    outln!("  guard:   {}", guard_sight(compiled, target));
}

/// What the outbound guard sees of requests to `target` (docs/security.md, "Outbound
/// guard").
fn guard_sight(compiled: &CompiledPolicy, target: &airlock_policy::CanonicalRequest) -> String {
    use airlock_policy::model::DlpMode;
    if compiled.is_passthrough(&target.host) {
        return "not in sight: a TLS passthrough host is relayed unread, so neither real \
                values nor credentials are looked for"
            .to_owned();
    }
    let policy = compiled.policy();
    let formats = match (policy.dlp.mode(), compiled.dlp_kinds_for_host(&target.host)) {
        (DlpMode::Off, _) => "well-known credentials not looked for (dlp off)".to_owned(),
        (_, None) => "every well-known credential kind allowed here (dlp.allow)".to_owned(),
        (mode, Some(kinds)) if kinds.is_empty() => {
            format!("well-known credentials: {}", mode.as_str())
        }
        (mode, Some(kinds)) => format!(
            "well-known credentials: {} except {} (dlp.allow)",
            mode.as_str(),
            kinds.join(", ")
        ),
    };
    let home: Vec<&str> = compiled
        .secrets_for_host(&target.host)
        .iter()
        .map(|secret| secret.name.as_str())
        .collect();
    let foreign = policy.secrets.len() - home.len();
    format!("real values of {foreign} other secret(s) refused; {formats}")
}

fn print_json(decision: &Decision, secrets: &[String]) {
    /// The `--json` shape of docs/contract.md §2, keys in contract order.
    #[derive(serde::Serialize)]
    struct Explained<'a> {
        decision: &'static str,
        rule: Option<&'a str>,
        reason: Option<&'static str>,
        secrets: &'a [String],
    }
    let explained = Explained {
        decision: decision.verdict.as_str(),
        rule: decision.rule.as_deref(),
        reason: decision.reason.map(|r| r.as_str()),
        secrets,
    };
    match serde_json::to_string(&explained) {
        Ok(line) => outln!("{line}"),
        Err(e) => eprintln!("airlock: cannot print the decision as JSON: {e}"),
    }
}

fn print_text(decision: &Decision, secrets: &[String], request: &ExplainRequest) {
    let req = &request.canonical;
    let path = req.path.as_deref().unwrap_or("(unsafe path)");
    outln!(
        "{} {} {}:{}{}",
        decision.verdict.as_str(),
        req.method,
        request.host_text,
        req.port,
        path
    );
    outln!(
        "  rule:    {}",
        decision.rule.as_deref().unwrap_or("none (default deny)")
    );
    if let Some(reason) = decision.reason {
        let explanation = reason.explain(
            &req.method,
            &request.host_text,
            path,
            decision.rule.as_deref(),
        );
        outln!("  reason:  {reason}");
        outln!("  message: {}", explanation.message);
        outln!("  hint:    {}", explanation.hint);
    }
    if !secrets.is_empty() {
        outln!("  secrets swapped on this host: {}", secrets.join(", "));
    }
}

fn import(format: SeedFormat, file: &str) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("airlock: {file}: cannot read: {e}");
            return ExitCode::from(1);
        }
    };
    match airlock_import::import(format, file, &text) {
        Ok(policy) => {
            out!("{}", emit::to_yaml(&policy));
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::from(1)
        }
    }
}

/// `policy explain --fs PATH`: the access `airlock run` (started here, as this user) gives
/// the command to PATH, and the entry that decides it. Exit 0 when answered.
fn explain_fs(selection: &PolicySelection, json: bool, path: &std::path::Path) -> ExitCode {
    use airlock_policy::filesystem::{Entry, FsRules, Launcher, normalise};
    let policy = match selection.load() {
        Ok(policy) => policy,
        Err(errors) => return fail(&errors.join("\n")),
    };
    let place = match airlock_session::fs_confine::Place::current() {
        Ok(place) => place,
        Err(e) => return fail(&e),
    };
    let mut extra: Vec<Entry> = airlock_session::session::airlock_state_roots()
        .into_iter()
        .chain(airlock_proxy::ca::default_dir().ok())
        .map(|path| Entry {
            path,
            why: "airlock's own state (never visible)".into(),
        })
        .collect();
    for spec in &selection.policies {
        if let Ok((_, file)) = airlock_session::sources::split_format(spec) {
            extra.push(Entry {
                path: normalise(&place.cwd.join(file)),
                why: "a policy file of the run".into(),
            });
        }
    }
    let launcher = Launcher {
        home: &place.home,
        cwd: &place.cwd,
        uid: place.uid,
    };
    let rules = FsRules::new(&policy.filesystem, launcher, extra);
    let absolute = normalise(&place.cwd.join(path));
    let target = std::fs::canonicalize(&absolute).unwrap_or(absolute);
    let access = rules.explain(&target);
    let (word, why) = airlock_session::credential_files::explain(&policy, &place.home, &target)
        .unwrap_or_else(|| (access.kind.word().to_owned(), access.why));
    if json {
        let value = serde_json::json!({
            "path": target,
            "access": word,
            "why": why,
        });
        outln!("{value}");
    } else {
        outln!("{}: {word}", target.display());
        outln!("  why: {why}");
    }
    ExitCode::SUCCESS
}

fn fail(message: &str) -> ExitCode {
    eprintln!("airlock: {message}");
    ExitCode::from(2)
}
