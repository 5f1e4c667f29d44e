//! The session's audit log: where it goes (a `--log` file, standard output or a new file
//! under the CA directory's `logs/`), its rotation, and the one-line summary of refusals
//! printed when the session ends.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use airlock_audit::AuditLog;

/// Where the audit log goes, and where this session's lines start in it.
pub(crate) enum LogTarget {
    /// Standard output: lines cannot be read back for the summary.
    Stdout,
    /// A file; this session's lines start at `start`.
    File { path: PathBuf, start: u64 },
}

impl LogTarget {
    /// One stderr line when anything was refused (file logs only).
    pub(crate) fn print_summary(&self) {
        let LogTarget::File { path, start } = self else {
            return;
        };
        let Ok(text) = read_from(path, *start) else {
            return;
        };
        let would = count_would_deny(&text);
        if would > 0 {
            eprintln!(
                "airlock: report mode: {would} {} would have been refused — `airlock policy \
                 suggest {}` prints allow rules for them",
                if would == 1 { "request" } else { "requests" },
                path.display()
            );
        }
        let refusals = count_refusals(&text);
        let total: u64 = refusals.values().sum();
        if total == 0 {
            return;
        }
        let mut by_count: Vec<(&String, &u64)> = refusals.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut shown: Vec<String> = by_count
            .iter()
            .take(3)
            .map(|(host, count)| format!("{host} ×{count}"))
            .collect();
        if by_count.len() > 3 {
            shown.push("...".to_owned());
        }
        let noun = if total == 1 { "request" } else { "requests" };
        eprintln!(
            "airlock: {total} {noun} refused ({}) — see {}",
            shown.join(", "),
            path.display()
        );
    }
}

/// Opens the audit log: `--log` as given, or a new file under `<ca_dir>/logs/`, rotated
/// beyond `max_size` bytes; its checkpoints are signed with the key beside the CA
/// (`airlock_audit::signing`). A rotated `--log` file's directory must not hold the working
/// directory: it is hidden from the command (`crate::session`).
pub(crate) fn open_log(
    dest: Option<&str>,
    ca_dir: &Path,
    max_size: Option<u64>,
    format: airlock_audit::ocsf::Format,
    export: Option<&airlock_audit::otlp::Config>,
) -> Result<(AuditLog, LogTarget), String> {
    let signing = airlock_audit::checkpoint::Signing::beside(ca_dir)?;
    let path = match dest {
        Some("-") => {
            let options = airlock_audit::LogOptions::default();
            let audit = AuditLog::open_exported(Some("-"), options, Some(signing), format, export)
                .map_err(|e| format!("--log -: {e}"))?;
            return Ok((audit, LogTarget::Stdout));
        }
        Some(file) => PathBuf::from(file),
        None => {
            let logs = ca_dir.join("logs");
            std::fs::create_dir_all(&logs)
                .map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            logs.join(format!("run-{stamp}-{}.jsonl", std::process::id()))
        }
    };
    let text = path
        .to_str()
        .ok_or_else(|| format!("--log {}: not a UTF-8 path", path.display()))?;
    let options = airlock_audit::LogOptions { max_size };
    let audit = AuditLog::open_exported(Some(text), options, Some(signing), format, export)
        .map_err(|e| format!("--log {text}: {e}"))?;
    let start = std::fs::metadata(&path).map_or(0, |m| m.len());
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    if max_size.is_some() && dest.is_some() {
        check_rotated_log_dir(&path)?;
    }
    Ok((audit, LogTarget::File { path, start }))
}

/// A rotated log's directory is hidden from the command (the files rotation creates would
/// otherwise show in it): refused when it holds the working directory.
fn check_rotated_log_dir(log: &Path) -> Result<(), String> {
    let dir = log.parent().unwrap_or(Path::new("/"));
    let cwd = std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?;
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    if cwd.starts_with(dir) {
        return Err(format!(
            "--audit-max-size: the log's directory {} holds the working directory and cannot \
             be hidden from the command; put the rotated log in a directory of its own",
            dir.display()
        ));
    }
    Ok(())
}

/// The log's text after `start` (this session's lines).
fn read_from(path: &Path, start: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(start))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// Requests that report mode let through (`"would":"deny"`; a folded line counts for its
/// `count`).
fn count_would_deny(text: &str) -> u64 {
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|value| value.get("would").and_then(|w| w.as_str()) == Some("deny"))
        .map(|value| {
            value
                .get("count")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(1)
        })
        .sum()
}

/// Refusals per host (or DNS name) in `text`'s log lines.
fn count_refusals(text: &str) -> BTreeMap<String, u64> {
    let mut refusals = BTreeMap::new();
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if value.get("decision").and_then(|d| d.as_str()) != Some("deny") {
            continue;
        }
        // Not requests: the end check's and the credential files' lines say themselves.
        let kind = value.get("kind").and_then(|k| k.as_str());
        if matches!(kind, Some("fs" | "credentials" | "policy" | "audit")) {
            continue;
        }
        let host = value
            .get("host")
            .or_else(|| value.get("name"))
            .and_then(|h| h.as_str())
            .map(str::to_owned)
            .or_else(|| stdio_mcp_label(&value))
            .unwrap_or_else(|| "?".to_owned());
        let count = value.get("count").and_then(serde_json::Value::as_u64);
        *refusals.entry(host).or_insert(0) += count.unwrap_or(1);
    }
    refusals
}

/// `mcp SERVER: TOOL` for a refused call to a stdio MCP server (its line has no host).
fn stdio_mcp_label(value: &serde_json::Value) -> Option<String> {
    let server = value.get("server")?.as_str()?;
    let tool = value.get("tool").and_then(|t| t.as_str()).unwrap_or("?");
    Some(format!("mcp {server}: {tool}"))
}

#[cfg(test)]
mod tests {
    use super::count_refusals;

    #[test]
    fn refusals_are_named_by_host_dns_name_or_stdio_server() {
        let log = [
            r#"{"kind":"http","decision":"deny","host":"evil.example","count":3}"#,
            r#"{"kind":"dns","decision":"deny","name":"x.example"}"#,
            r#"{"kind":"mcp","decision":"deny","server":"fs","tool":"exec"}"#,
            r#"{"kind":"mcp","decision":"allow","server":"fs","tool":"read_file"}"#,
            r#"{"kind":"credentials","decision":"deny","message":"copy changed"}"#,
            r#"{"kind":"fs","decision":"deny","reason":"quarantined"}"#,
            "not json",
        ]
        .join("\n");
        let refusals = count_refusals(&log);
        let listed: Vec<(&str, u64)> = refusals.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            listed,
            vec![("evil.example", 3), ("mcp fs: exec", 1), ("x.example", 1)]
        );
    }
}
