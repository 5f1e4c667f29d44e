//! The I/O pump of `airlock mcp`: airlock's standard input is framed into lines and each
//! decided by [`crate::stdio::client_line`] (forwarded to the server, answered here,
//! or refused); the server's standard output is framed and each line decided by
//! [`crate::stdio::server_line`] (relayed, filtered, or dropped, the client then
//! getting an error for each response it carried). Both directions
//! hold at most [`LINE_LIMIT`] bytes of an unfinished line; a full pipe on one side stops
//! reading on the other (back-pressure), so memory stays bounded whatever either side
//! sends. One writer task owns airlock's standard output, so lines never interleave.
//! Every `tools/call` and every refused line gets an audit line (`kind: mcp`,
//! `"server":NAME`); argument values are never logged.

use std::os::fd::OwnedFd;

use crate::Uninspectable;
use crate::stdio::{ClientDecision, Frame, Framer, LINE_LIMIT, ServerDecision};
use airlock_audit::{AuditEvent, AuditLog, Decision, Kind};
use airlock_policy::Reason;
use airlock_policy::model::StdioMcpRule;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Lines waiting for airlock's standard output (each at most [`LINE_LIMIT`] bytes).
const OUTPUT_QUEUE: usize = 16;

/// How much is read at once from either side.
const READ_CHUNK: usize = 64 * 1024;

/// What both directions need: the rule, the server's name and the audit log.
#[derive(Clone)]
struct Context {
    rule: StdioMcpRule,
    server: String,
    audit: AuditLog,
}

/// Starts relaying between airlock's standard input/output and the server's
/// (`to_server`: the write end of its stdin pipe; `from_server`: the read end of its
/// stdout pipe). The returned task ends once the server's output ended and every line
/// was written.
pub fn start(
    rule: StdioMcpRule,
    server: String,
    audit: AuditLog,
    to_server: OwnedFd,
    from_server: OwnedFd,
) -> std::io::Result<JoinHandle<()>> {
    let to_server = pipe::Sender::from_owned_fd(to_server)?;
    let from_server = pipe::Receiver::from_owned_fd(from_server)?;
    let context = Context {
        rule,
        server,
        audit,
    };
    let (output, lines) = mpsc::channel(OUTPUT_QUEUE);
    let writer = tokio::spawn(write_lines(tokio::io::stdout(), lines));
    let client = tokio::spawn(client_to_server(
        tokio::io::stdin(),
        to_server,
        output.clone(),
        context.clone(),
    ));
    let server_side = tokio::spawn(server_to_client(from_server, output, context));
    Ok(tokio::spawn(async move {
        let _ = server_side.await;
        // The server is done: the client's pending input has nobody to go to.
        client.abort();
        let _ = client.await;
        let _ = writer.await;
    }))
}

/// Writes each line and a newline to `out`, flushing after each.
async fn write_lines(mut out: impl AsyncWrite + Unpin, mut lines: mpsc::Receiver<String>) {
    while let Some(line) = lines.recv().await {
        let written = async {
            out.write_all(line.as_bytes()).await?;
            out.write_all(b"\n").await?;
            out.flush().await
        };
        if written.await.is_err() {
            return;
        }
    }
}

/// `input` read as framed lines.
struct Lines<R> {
    input: R,
    framer: Framer,
    buffer: Vec<u8>,
    done: bool,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(input: R) -> Self {
        Lines {
            input,
            framer: Framer::new(LINE_LIMIT),
            buffer: vec![0; READ_CHUNK],
            done: false,
        }
    }

    /// The lines completed by the next read (an unfinished last line at the end), or
    /// `None` once the input ended.
    async fn next(&mut self) -> Option<Vec<Frame>> {
        if self.done {
            return None;
        }
        match self.input.read(&mut self.buffer).await {
            Ok(0) | Err(_) => {
                self.done = true;
                Some(self.framer.finish().into_iter().collect())
            }
            Ok(read) => Some(self.framer.push(&self.buffer[..read])),
        }
    }
}

/// Client to server: decides each line; closes the server's input at the end.
async fn client_to_server(
    input: impl AsyncRead + Unpin,
    mut to_server: pipe::Sender,
    output: mpsc::Sender<String>,
    context: Context,
) {
    let mut lines = Lines::new(input);
    while let Some(frames) = lines.next().await {
        for frame in frames {
            if !client_frame(frame, &mut to_server, &output, &context).await {
                return;
            }
        }
    }
}

/// One client line; `false` when either side is gone.
async fn client_frame(
    frame: Frame,
    to_server: &mut pipe::Sender,
    output: &mpsc::Sender<String>,
    context: &Context,
) -> bool {
    let line = match frame {
        Frame::Line(line) => line,
        Frame::TooLong => {
            context.refused("client", &Uninspectable::TooLarge);
            return true;
        }
    };
    let ClientDecision {
        forward,
        answer,
        calls,
        refused,
    } = crate::stdio::client_line(&line, &context.rule);
    for call in calls {
        context.call(call);
    }
    if let Some(problem) = refused {
        context.refused("client", &problem);
    }
    if let Some(answer) = answer
        && output.send(answer).await.is_err()
    {
        return false;
    }
    if let Some(mut forward) = forward {
        forward.push('\n');
        if to_server.write_all(forward.as_bytes()).await.is_err() {
            return false;
        }
    }
    true
}

/// Server to client: relays (filtered) or drops each line.
async fn server_to_client(input: pipe::Receiver, output: mpsc::Sender<String>, context: Context) {
    let mut lines = Lines::new(input);
    while let Some(frames) = lines.next().await {
        for frame in frames {
            let decision = match frame {
                Frame::Line(line) => crate::stdio::server_line(&line, &context.rule),
                Frame::TooLong => ServerDecision::Refuse(Uninspectable::TooLarge),
            };
            match decision {
                ServerDecision::Relay(line) => {
                    if output.send(line).await.is_err() {
                        return;
                    }
                }
                ServerDecision::Refuse(problem) => context.refused("server", &problem),
                ServerDecision::Answer { problem, answer } => {
                    context.refused("server", &problem);
                    if output.send(answer).await.is_err() {
                        return;
                    }
                }
                ServerDecision::Skip => {}
            }
        }
    }
}

impl Context {
    /// The audit line of one `tools/call`.
    fn call(&self, call: crate::Call) {
        let reason = match (call.allowed, &call.argument) {
            (true, _) => None,
            (false, None) => Some(Reason::McpToolDenied),
            (false, Some(_)) => Some(Reason::McpArgumentDenied),
        };
        self.audit.record(AuditEvent {
            kind: Kind::Mcp,
            decision: if call.allowed {
                Decision::Allow
            } else {
                Decision::Deny
            },
            rule: Some(self.rule.id.clone()),
            reason: reason.map(Reason::as_str),
            server: Some(self.server.clone()),
            tool: Some(call.tool),
            argument: call.argument,
            ..AuditEvent::default()
        });
    }

    /// The audit line (and a stderr note) of a line refused whole, from `side`.
    fn refused(&self, side: &str, problem: &Uninspectable) {
        let what = problem_kind(problem);
        eprintln!("airlock: a line from the MCP {side} was not relayed: {what} (docs/mcp.md)");
        self.audit.record(AuditEvent {
            kind: Kind::Mcp,
            decision: Decision::Deny,
            rule: Some(self.rule.id.clone()),
            reason: Some(Reason::BodyUninspectable.as_str()),
            server: Some(self.server.clone()),
            message: Some(format!("{side} line refused: {what}")),
            ..AuditEvent::default()
        });
    }
}

/// Why a line was refused, without any of its content.
fn problem_kind(problem: &Uninspectable) -> &'static str {
    match problem {
        Uninspectable::NotUtf8 => "not UTF-8",
        Uninspectable::Json(_) => "not JSON",
        Uninspectable::DuplicateKey(_) => "a key appears twice (or twice under case folding)",
        Uninspectable::EmptyBatch => "an empty batch",
        Uninspectable::NotAMessage => "a message is not a JSON object",
        Uninspectable::ToolNameMissing => "a tools/call without a string params.name",
        Uninspectable::TooLarge => "longer than 1 MiB",
        Uninspectable::Stream(_) => "not a JSON-RPC line",
        Uninspectable::LineBreak(_) => "a raw line break (CR, U+2028, U+2029...) inside the line",
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;
    use std::os::fd::OwnedFd;

    use airlock_audit::AuditLog;
    use airlock_policy::model::StdioMcpRule;
    use tokio::net::unix::pipe;
    use tokio::sync::mpsc;

    use super::{Context, client_to_server, server_to_client};

    fn context(log: &std::path::Path) -> Context {
        Context {
            rule: StdioMcpRule {
                id: "mcp[0]".into(),
                server: "files".into(),
                allow: Vec::new(),
                deny: vec!["delete".into()],
                args: Vec::new(),
            },
            server: "files".into(),
            audit: AuditLog::open(log.to_str().expect("utf-8")).expect("audit log"),
        }
    }

    fn drain(mut lines: mpsc::Receiver<String>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(line) = lines.try_recv() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn client_lines_are_forwarded_answered_or_refused_and_audited() {
        let dir = tempfile::tempdir().expect("dir");
        let log = dir.path().join("audit.jsonl");
        let context = context(&log);
        let (mut from_relay, to_server) = std::io::pipe().expect("pipe");
        let to_server = pipe::Sender::from_owned_fd(OwnedFd::from(to_server)).expect("sender");
        let (output, lines) = mpsc::channel(16);
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"path":"s3cret-argument"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete"}}"#,
            "\n",
            "not json\n",
        );
        client_to_server(input.as_bytes(), to_server, output, context.clone()).await;
        let mut forwarded = String::new();
        from_relay
            .read_to_string(&mut forwarded)
            .expect("server input");
        assert_eq!(forwarded.lines().count(), 1, "{forwarded}");
        assert!(forwarded.contains(r#""name":"read""#), "{forwarded}");
        let answers = drain(lines);
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert!(answers[0].contains(r#""id":2"#), "{answers:?}");
        context.audit.flush();
        let audit = std::fs::read_to_string(&log).expect("audit");
        assert!(audit.contains(r#""tool":"read""#), "{audit}");
        assert!(audit.contains("mcp_tool_denied"), "{audit}");
        assert!(audit.contains("body_uninspectable"), "{audit}");
        assert!(audit.contains(r#""server":"files""#), "{audit}");
        assert!(!audit.contains("s3cret-argument"), "{audit}");
    }

    #[tokio::test]
    async fn server_lines_are_filtered_before_the_client_sees_them() {
        let dir = tempfile::tempdir().expect("dir");
        let context = context(&dir.path().join("audit.jsonl"));
        let (from_server, mut to_relay) = std::io::pipe().expect("pipe");
        let from_server =
            pipe::Receiver::from_owned_fd(OwnedFd::from(from_server)).expect("receiver");
        let sent = concat!(
            r#"{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"read"},{"name":"delete"}]}}"#,
            "\n",
            "not json\n",
        );
        std::io::Write::write_all(&mut to_relay, sent.as_bytes()).expect("write");
        drop(to_relay);
        let (output, lines) = mpsc::channel(16);
        server_to_client(from_server, output, context).await;
        let relayed = drain(lines);
        assert_eq!(relayed.len(), 1, "{relayed:?}");
        assert!(relayed[0].contains(r#""name":"read""#), "{relayed:?}");
        assert!(!relayed[0].contains("delete"), "{relayed:?}");
    }
}
