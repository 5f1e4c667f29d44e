//! `airlock logs`: the audit logs `airlock run` and `airlock mcp` write when no `--log` is
//! given, `run-<unix seconds>-<pid>.jsonl` under `logs/` of the CA directory
//! (docs/operations.md, "Where files live"): list them, print one, prune old ones.
//!
//! Exit statuses (docs/contract.md §2): 0; 1 when the directory or a log cannot be read, a
//! log named by `show` does not exist, or a log cannot be removed; 2 usage errors.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::out::outln;

/// `airlock logs` flags.
#[derive(clap::Args, Debug)]
pub(crate) struct LogsArgs {
    /// Show or prune; without one, list the logs (oldest first).
    #[command(subcommand)]
    pub command: Option<LogsCommand>,
    /// List as JSON lines, one object per log.
    #[arg(long)]
    pub json: bool,
}

/// Subcommands of `airlock logs`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum LogsCommand {
    /// Print one run's audit log (JSON lines, as written).
    Show {
        /// The log's ID as `airlock logs` lists it (`run-1764241234-4242`).
        #[arg(required_unless_present = "last")]
        id: Option<String>,
        /// The newest log.
        #[arg(long, conflicts_with = "id")]
        last: bool,
    },
    /// Remove old logs. With both flags, the newest N stay and, of the others, those
    /// written to within AGE.
    Prune {
        /// Remove the logs last written to more than AGE ago (`30m`, `12h`, `7d`, `2w`).
        #[arg(long, value_name = "AGE", value_parser = parse_age, required_unless_present = "keep")]
        older_than: Option<Duration>,
        /// Keep the newest N logs.
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Print what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// One run log.
struct RunLog {
    id: String,
    path: PathBuf,
    started: u64,
    bytes: u64,
    modified: SystemTime,
}

/// Runs `airlock logs`.
pub(crate) fn run(args: LogsArgs) -> Result<ExitCode, String> {
    let dir = logs_dir()?;
    let logs = list(&dir)?;
    match args.command {
        None => print_list(&dir, &logs, args.json),
        Some(LogsCommand::Show { id, last }) => show(&dir, &logs, id.as_deref(), last)?,
        Some(LogsCommand::Prune {
            older_than,
            keep,
            dry_run,
        }) => prune(&dir, logs, older_than, keep, dry_run)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Where run logs go: `logs/` of the CA directory (`airlock_session`'s log module).
fn logs_dir() -> Result<PathBuf, String> {
    airlock_proxy::ca::default_dir()
        .map(|dir| dir.join("logs"))
        .map_err(|e| e.to_string())
}

/// Every `run-<stamp>-<pid>.jsonl` in `dir`, oldest first; none when `dir` does not exist.
fn list(dir: &Path) -> Result<Vec<RunLog>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut logs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let name = entry.file_name();
        let Some((id, started, pid)) = name.to_str().and_then(parse_name) else {
            continue;
        };
        let Ok(metadata) = entry.metadata() else {
            continue; // removed meanwhile
        };
        if !metadata.is_file() {
            continue;
        }
        logs.push((
            (started, pid),
            RunLog {
                id,
                path: entry.path(),
                started,
                bytes: metadata.len(),
                modified: metadata.modified().unwrap_or(UNIX_EPOCH),
            },
        ));
    }
    logs.sort_by_key(|(key, _)| *key);
    Ok(logs.into_iter().map(|(_, log)| log).collect())
}

/// `run-<stamp>-<pid>.jsonl` → (`run-<stamp>-<pid>`, stamp, pid).
fn parse_name(name: &str) -> Option<(String, u64, u32)> {
    let id = name.strip_suffix(".jsonl")?;
    let (stamp, pid) = id.strip_prefix("run-")?.split_once('-')?;
    Some((id.to_owned(), stamp.parse().ok()?, pid.parse().ok()?))
}

fn print_list(dir: &Path, logs: &[RunLog], json: bool) {
    if logs.is_empty() && !json {
        eprintln!("airlock: no run logs in {}", dir.display());
        return;
    }
    if !json {
        outln!("{:<28} {:<20} {:>10}", "ID", "STARTED (UTC)", "SIZE");
    }
    for log in logs {
        if json {
            let value = serde_json::json!({
                "id": log.id,
                "path": log.path,
                "started_unix": log.started,
                "bytes": log.bytes,
                "modified_unix": unix_seconds(log.modified),
            });
            outln!("{value}");
        } else {
            outln!(
                "{:<28} {:<20} {:>10}",
                log.id,
                utc_time(log.started),
                human_size(log.bytes)
            );
        }
    }
}

fn show(dir: &Path, logs: &[RunLog], id: Option<&str>, last: bool) -> Result<(), String> {
    let found = if last {
        logs.last()
            .ok_or_else(|| format!("no run logs in {}", dir.display()))?
    } else {
        let id = id.unwrap_or_default();
        let wanted = id.strip_suffix(".jsonl").unwrap_or(id);
        logs.iter().find(|log| log.id == wanted).ok_or_else(|| {
            format!(
                "no run log {id} in {} (`airlock logs` lists them)",
                dir.display()
            )
        })?
    };
    let mut file = std::fs::File::open(&found.path)
        .map_err(|e| format!("cannot read {}: {e}", found.path.display()))?;
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = std::io::Read::read(&mut file, &mut buffer)
            .map_err(|e| format!("cannot read {}: {e}", found.path.display()))?;
        if read == 0 || crate::out::closed() {
            return Ok(());
        }
        crate::out::write_bytes(&buffer[..read]);
    }
}

fn prune(
    dir: &Path,
    logs: Vec<RunLog>,
    older_than: Option<Duration>,
    keep: Option<usize>,
    dry_run: bool,
) -> Result<(), String> {
    let now = SystemTime::now();
    let kept_newest = keep.unwrap_or(0).min(logs.len());
    let candidates = logs.len() - kept_newest;
    let doomed: Vec<RunLog> = logs
        .into_iter()
        .take(candidates)
        .filter(|log| {
            older_than.is_none_or(|age| now.duration_since(log.modified).unwrap_or_default() > age)
        })
        .collect();
    let mut freed = 0;
    for log in &doomed {
        if !dry_run {
            match std::fs::remove_file(&log.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("cannot remove {}: {e}", log.path.display())),
            }
        }
        freed += log.bytes;
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    outln!(
        "{verb} {} run log(s), {}, from {}",
        doomed.len(),
        human_size(freed),
        dir.display()
    );
    Ok(())
}

/// `30s`, `30m`, `12h`, `7d`, `2w`.
fn parse_age(text: &str) -> Result<Duration, String> {
    let split = text.len().saturating_sub(1);
    let (number, unit) = text.split_at(split);
    let seconds: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return Err("expected a number and a unit: s, m, h, d or w (e.g. 7d)".into()),
    };
    let count: u64 = number
        .parse()
        .map_err(|_| format!("{number:?} is not a whole number"))?;
    count
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| "too long".to_owned())
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) for Unix seconds.
fn utc_time(seconds: u64) -> String {
    let days = i64::try_from(seconds / 86_400).unwrap_or(0);
    let rest = seconds % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Bytes in B, KiB, MiB or GiB.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ages_dates_and_sizes() {
        assert_eq!(
            parse_name("run-1764241234-4242.jsonl"),
            Some(("run-1764241234-4242".into(), 1_764_241_234, 4242))
        );
        assert_eq!(parse_name("run-x-1.jsonl"), None);
        assert_eq!(parse_name("other.jsonl"), None);
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
        assert!(parse_age("7").is_err() && parse_age("d").is_err() && parse_age("").is_err());
        assert_eq!(utc_time(0), "1970-01-01 00:00:00");
        assert_eq!(utc_time(1_709_210_096), "2024-02-29 12:34:56");
        assert_eq!(human_size(10), "10 B");
        assert_eq!(human_size(1536), "1.5 KiB");
    }
}
