//! Filtering of MCP server-sent event streams (`text/event-stream`, both transports):
//! every event's `data` is read as a JSON-RPC message and its `tools/list` result
//! filtered; an event whose data is not JSON, a line broken by a lone CR, an oversize
//! event, or (old HTTP+SSE transport) an `endpoint` event naming a path the rule does not
//! cover ends the stream with an error — it is never passed on unfiltered.

use airlock_policy::model::McpRule;

use crate::{BODY_LIMIT, Uninspectable, filter_response};

/// Decides whether an `endpoint` event's path (old HTTP+SSE transport) is covered by the
/// same `mcp` rule, so that the client's POSTs there are inspected too.
pub(crate) type EndpointCheck = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// A streaming filter for one event stream.
pub struct SseFilter {
    rule: McpRule,
    endpoint_covered: EndpointCheck,
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// Lines of the current, unfinished event.
    event: Vec<String>,
    /// Bytes held in `line` and `event`.
    held: usize,
    /// Events written before the first upstream event (local errors of a partly denied batch).
    prefix: Vec<u8>,
}

impl SseFilter {
    /// A filter for `rule`'s stream; `endpoint_covered` judges `endpoint` events;
    /// `local_messages` (JSON-RPC errors) are sent first, one `message` event each.
    pub fn new(rule: McpRule, endpoint_covered: EndpointCheck, local_messages: &[String]) -> Self {
        let mut prefix = Vec::new();
        for message in local_messages {
            prefix.extend_from_slice(b"event: message\ndata: ");
            prefix.extend_from_slice(message.as_bytes());
            prefix.extend_from_slice(b"\n\n");
        }
        SseFilter {
            rule,
            endpoint_covered,
            line: Vec::new(),
            event: Vec::new(),
            held: 0,
            prefix,
        }
    }

    /// Feeds upstream bytes; returns the filtered bytes to send on.
    pub fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, Uninspectable> {
        let mut out = std::mem::take(&mut self.prefix);
        for &byte in data {
            if byte != b'\n' {
                self.line.push(byte);
                self.held += 1;
                if self.held > BODY_LIMIT {
                    return Err(Uninspectable::TooLarge);
                }
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.contains(&b'\r') {
                return Err(Uninspectable::Stream("a line is broken by a lone CR"));
            }
            let line = String::from_utf8(line).map_err(|_| Uninspectable::NotUtf8)?;
            if line.is_empty() {
                self.held = 0;
                let event = std::mem::take(&mut self.event);
                self.emit(&event, &mut out)?;
            } else {
                self.event.push(line);
            }
        }
        Ok(out)
    }

    /// The end of the stream: an unfinished event is dropped (a client would drop it too).
    pub fn finish(&mut self) -> Vec<u8> {
        self.line.clear();
        self.event.clear();
        std::mem::take(&mut self.prefix)
    }

    fn emit(&self, event: &[String], out: &mut Vec<u8>) -> Result<(), Uninspectable> {
        let mut data: Vec<&str> = Vec::new();
        let mut name = "message";
        for line in event {
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line.as_str(), ""),
            };
            match field {
                "data" => data.push(value),
                "event" => name = value,
                _ => {}
            }
        }
        let data = data.join("\n");
        let replaced = if name == "endpoint" {
            if !self.endpoint_ok(&data) {
                return Err(Uninspectable::Stream(
                    "the endpoint event names a path the mcp rule does not cover",
                ));
            }
            None
        } else if data.trim().is_empty() {
            None
        } else {
            filter_response(data.as_bytes(), &self.rule)?
        };
        for line in event {
            let is_data = line == "data" || line.starts_with("data:");
            if replaced.is_some() && is_data {
                continue;
            }
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        if let Some(new) = replaced {
            for piece in new.split('\n') {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(piece.as_bytes());
                out.push(b'\n');
            }
        }
        out.push(b'\n');
        Ok(())
    }

    /// An endpoint must be a relative path (no scheme, no `//`), with nothing encoded or
    /// dot-segmented, covered by the rule.
    fn endpoint_ok(&self, data: &str) -> bool {
        let path = data.trim().split(['?', '#']).next().unwrap_or("");
        path.starts_with('/')
            && !path.starts_with("//")
            && !path.contains(['%', '\\'])
            && !path
                .split('/')
                .any(|segment| segment == "." || segment == "..")
            && (self.endpoint_covered)(path)
    }
}
