//! Running one command and streaming it: standard output and error as lines, then the
//! exit status and resource usage. Providers build the [`Command`] (entering the jail,
//! or `docker exec`); everything after the spawn is shared.
//!
//! Lines are split on `\n` and decoded as UTF-8 (invalid bytes replaced); a line longer
//! than [`MAX_LINE`] bytes is cut into several events. At most [`QUEUED_EVENTS`] events wait
//! for the consumer: a consumer slower than the command slows the command down (its pipes
//! fill up) instead of the output piling up in memory. At the request's timeout every
//! process still carrying the command's [`EXEC_ID_VARIABLE`] is killed (its descendants
//! included, wherever they are in the sandbox) and the status is 124, as with `timeout(1)`.
//! [`ExecStream::canceller`] does the same on demand (the status is then the command's,
//! 137 for the `SIGKILL`).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde::Serialize;

use crate::{ExecRequest, SandboxError};

/// The variable carrying each command's random ID, for killing it and all its descendants.
pub const EXEC_ID_VARIABLE: &str = "AIRLOCK_EXEC_ID";
/// The longest line delivered as one event, in bytes.
pub const MAX_LINE: usize = 64 * 1024;
/// The status of a command killed at its timeout.
pub const TIMEOUT_STATUS: i32 = 124;
/// How many events wait for the consumer at most before the readers stop reading the
/// command's pipes.
pub const QUEUED_EVENTS: usize = 256;
/// How long output may still be read after the command ended (background processes that
/// keep the pipes open are not waited for longer; time spent waiting for the consumer to
/// take queued lines does not count).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// The start of what `docker exec` prints, on its standard output, when the container
/// runtime cannot start the command (with status 126, even for a command not found).
const RUNTIME_EXEC_FAILED: &str = "OCI runtime exec failed";
/// How often the command is polled for its end.
const POLL: Duration = Duration::from_millis(5);

/// One event of a running command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecEvent {
    /// A line of standard output (without its newline).
    Stdout(String),
    /// A line of standard error (without its newline).
    Stderr(String),
    /// The command ended; always the last event.
    Exit(ExecReport),
}

/// How a command ended and what it used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExecReport {
    /// The shell status: the exit code, 128 + signal, 124 on timeout, 126/127 when it
    /// could not be executed / found.
    pub status: i32,
    /// Whether the wall-clock limit killed it.
    pub timed_out: bool,
    /// Wall-clock time from spawn to exit, in milliseconds.
    pub wall_ms: u64,
    /// CPU time in user mode, in milliseconds (`None` where the provider cannot tell).
    pub user_ms: Option<u64>,
    /// CPU time in kernel mode, in milliseconds.
    pub system_ms: Option<u64>,
    /// Peak resident memory of the largest process, in KiB.
    pub max_rss_kib: Option<u64>,
}

/// The events of one command, in order; ends after [`ExecEvent::Exit`].
#[derive(Debug)]
pub struct ExecStream {
    events: mpsc::Receiver<ExecEvent>,
    done: bool,
    cancelled: Arc<AtomicBool>,
}

impl ExecStream {
    /// A handle that kills the command from any thread (for a caller that is itself being
    /// stopped); the stream then ends with the command's exit report as usual.
    pub fn canceller(&self) -> ExecCanceller {
        ExecCanceller {
            cancelled: self.cancelled.clone(),
        }
    }
}

/// Kills a running command and all its descendants (see [`ExecStream::canceller`]).
#[derive(Clone, Debug)]
pub struct ExecCanceller {
    cancelled: Arc<AtomicBool>,
}

impl ExecCanceller {
    /// Asks for the command to be killed: every process carrying its exec ID gets
    /// `SIGKILL` within a few milliseconds. Does nothing once the command has ended.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

impl Iterator for ExecStream {
    type Item = ExecEvent;

    fn next(&mut self) -> Option<ExecEvent> {
        if self.done {
            return None;
        }
        let event = self.events.recv().ok()?;
        self.done = matches!(event, ExecEvent::Exit(_));
        Some(event)
    }
}

/// Whether the provider's usage figures describe the command (a direct child) or only a
/// client process (`docker exec`), in which case they are left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Usage {
    /// `wait4` of the spawned process covers the command.
    Measured,
    /// The spawned process is a client; no usage is reported.
    Unknown,
}

/// A fresh random exec ID (128 bits, hex).
pub(crate) fn new_exec_id() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut random) = std::fs::File::open("/dev/urandom") {
        let _ = random.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Maps a client's status, the program asked for and the first line of one of the
/// client's streams to the command's shell status when the client reports, in its own
/// words, that the command could not be started (`docker exec`:
/// [`crate::docker::exec_failure_status`]).
pub(crate) type StartFailure = fn(i32, &str, &str) -> Option<i32>;

/// Spawns `command` (environment, program and arguments already set; its standard streams
/// are set here) and streams it. `exec_id` must be in the command's environment.
pub(crate) fn stream(
    command: Command,
    request: &ExecRequest,
    exec_id: String,
    usage: Usage,
) -> Result<ExecStream, SandboxError> {
    stream_with(command, request, exec_id, usage, None)
}

/// [`stream`], with the final status corrected by `start_failure` when the spawned process
/// is a client that reports start failures itself.
pub(crate) fn stream_with(
    mut command: Command,
    request: &ExecRequest,
    exec_id: String,
    usage: Usage,
    start_failure: Option<StartFailure>,
) -> Result<ExecStream, SandboxError> {
    command
        .stdin(if request.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let (sender, events) = mpsc::sync_channel(QUEUED_EVENTS);
    let cancelled = Arc::new(AtomicBool::new(false));
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            // Not found / cannot execute inside the sandbox, as a shell reports them.
            let status = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let program = request.argv.first().cloned().unwrap_or_default();
            let _ = sender.send(ExecEvent::Stderr(format!(
                "airlock: cannot run {program}: {e}"
            )));
            let _ = sender.send(ExecEvent::Exit(ExecReport {
                status,
                timed_out: false,
                wall_ms: elapsed_ms(started),
                user_ms: None,
                system_ms: None,
                max_rss_kib: None,
            }));
            return Ok(ExecStream {
                events,
                done: false,
                cancelled,
            });
        }
    };
    if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), request.stdin.clone()) {
        std::thread::spawn(move || {
            // A command that does not read its input is not an error.
            let _ = stdin.write_all(&bytes);
        });
    }
    let mut readers = Vec::new();
    // How many readers are waiting for room in the queue (the consumer is behind).
    let waiting = Arc::new(AtomicUsize::new(0));
    // The first line of each stream, for `start_failure` (Docker 20.10 writes its start
    // failure to standard output, later versions to standard error).
    let first_lines = [Arc::new(OnceLock::new()), Arc::new(OnceLock::new())];
    // An engine client's own start-failure line on its standard output is standard error.
    let relabel = start_failure.is_some();
    if let Some(stdout) = child.stdout.take() {
        readers.push(spawn_reader(
            stdout,
            Relay {
                sender: sender.clone(),
                waiting: waiting.clone(),
                first: Arc::clone(&first_lines[0]),
                relabel,
            },
            ExecEvent::Stdout,
        ));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(spawn_reader(
            stderr,
            Relay {
                sender: sender.clone(),
                waiting: waiting.clone(),
                first: Arc::clone(&first_lines[1]),
                relabel: false,
            },
            ExecEvent::Stderr,
        ));
    }
    let timeout = request.timeout;
    let stop = cancelled.clone();
    let program = request.argv.first().cloned().unwrap_or_default();
    std::thread::spawn(move || {
        let (mut status, timed_out, usage_report) =
            wait_for(&child, timeout, &stop, &exec_id, started);
        let mut deadline = Instant::now() + OUTPUT_GRACE;
        while !readers.iter().all(std::thread::JoinHandle::is_finished) {
            if waiting.load(Ordering::SeqCst) > 0 {
                // Output is there, the consumer is slow: not a reason to cut it off.
                deadline = Instant::now() + OUTPUT_GRACE;
            } else if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(POLL);
        }
        // As a shell (and the local provider) reports it.
        if let Some(classify) = start_failure
            && !timed_out
            && let Some(corrected) = first_lines
                .iter()
                .filter_map(|first| first.get())
                .find_map(|line| classify(status, &program, line))
        {
            status = corrected;
        }
        let (user_ms, system_ms, max_rss_kib) = match usage {
            Usage::Measured => usage_report,
            Usage::Unknown => (None, None, None),
        };
        let _ = sender.send(ExecEvent::Exit(ExecReport {
            status,
            timed_out,
            wall_ms: elapsed_ms(started),
            user_ms,
            system_ms,
            max_rss_kib,
        }));
    });
    Ok(ExecStream {
        events,
        done: false,
        cancelled,
    })
}

/// Where a reader sends its lines: the bounded queue, the count of readers waiting for
/// room in it, the first line (kept for `start_failure`) and whether an engine client's
/// start-failure first line is relabelled as standard error.
struct Relay {
    sender: mpsc::SyncSender<ExecEvent>,
    waiting: Arc<AtomicUsize>,
    first: Arc<OnceLock<String>>,
    relabel: bool,
}

/// Reads `pipe` line by line into events; the first line is also kept in the relay.
fn spawn_reader(
    pipe: impl Read + Send + 'static,
    relay: Relay,
    wrap: fn(String) -> ExecEvent,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Relay {
            sender,
            waiting,
            first,
            relabel,
        } = relay;
        let mut reader = BufReader::with_capacity(MAX_LINE, pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    let text = String::from_utf8_lossy(&line).into_owned();
                    let is_first = first.get().is_none();
                    if is_first {
                        let _ = first.set(text.clone());
                    }
                    let event = if relabel && is_first && text.starts_with(RUNTIME_EXEC_FAILED) {
                        ExecEvent::Stderr(text)
                    } else {
                        wrap(text)
                    };
                    let event = match sender.try_send(event) {
                        Ok(()) => continue,
                        Err(mpsc::TrySendError::Disconnected(_)) => return,
                        Err(mpsc::TrySendError::Full(event)) => event,
                    };
                    waiting.fetch_add(1, Ordering::SeqCst);
                    let sent = sender.send(event);
                    waiting.fetch_sub(1, Ordering::SeqCst);
                    if sent.is_err() {
                        return;
                    }
                }
            }
        }
    })
}

type UsageFigures = (Option<u64>, Option<u64>, Option<u64>);

/// Waits for the spawned process (killing the command at the deadline or once `cancelled`)
/// and returns its shell status, whether it timed out, and its usage.
// wait4 (with the child's resource usage) has no safe wrapper in nix.
#[allow(unsafe_code)]
fn wait_for(
    child: &std::process::Child,
    timeout: Option<Duration>,
    cancelled: &AtomicBool,
    exec_id: &str,
    started: Instant,
) -> (i32, bool, UsageFigures) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return (125, false, (None, None, None));
    };
    let mut timed_out = false;
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid output buffer.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our unreaped child; `status` and `usage` are valid outputs.
        let waited = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if waited == pid {
            let code = if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            };
            let code = if timed_out { TIMEOUT_STATUS } else { code };
            let millis = |time: libc::timeval| {
                u64::try_from(time.tv_sec).unwrap_or(0) * 1000
                    + u64::try_from(time.tv_usec).unwrap_or(0) / 1000
            };
            let figures = (
                Some(millis(usage.ru_utime)),
                Some(millis(usage.ru_stime)),
                u64::try_from(usage.ru_maxrss).ok(),
            );
            return (code, timed_out, figures);
        }
        if waited < 0 {
            return (125, timed_out, (None, None, None));
        }
        if !killed && timeout.is_some_and(|limit| started.elapsed() >= limit) {
            timed_out = true;
        }
        if !killed && (timed_out || cancelled.load(Ordering::SeqCst)) {
            killed = true;
            kill_tagged(exec_id);
            // `pid` is our unreaped child: the number cannot have been reused.
            crate::signal::send(pid, Signal::SIGKILL);
        }
        std::thread::sleep(POLL);
    }
}

/// Sends `SIGKILL` to every process whose environment carries `EXEC_ID=exec_id`.
pub(crate) fn kill_tagged(exec_id: &str) {
    let needle = format!("{EXEC_ID_VARIABLE}={exec_id}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|byte| *byte == 0)
            .any(|variable| variable == needle.as_bytes())
        {
            crate::signal::send(pid, Signal::SIGKILL);
        }
    }
}

fn elapsed_ms(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}
