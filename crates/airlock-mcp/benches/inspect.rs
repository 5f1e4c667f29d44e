//! Cost of deciding a typical MCP `tools/call` body (the request step) and of filtering
//! a `tools/list` answer.

use airlock_mcp::{filter_response, inspect_request};
use airlock_policy::model::{HostPattern, McpRule};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn rule() -> McpRule {
    McpRule {
        id: "mcp[0]".into(),
        host: HostPattern::Exact("mcp.example.com".into()),
        path: "/mcp".into(),
        allow: vec!["read_file".into(), "list_dir".into(), "search".into()],
        deny: vec!["run_command".into(), "write_file".into()],
        args: Vec::new(),
    }
}

fn bench(c: &mut Criterion) {
    let rule = rule();
    let call = br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/src/main.rs","encoding":"utf-8"},"_meta":{"progressToken":7}}}"#;
    c.bench_function("mcp_inspect_tools_call", |b| {
        b.iter(|| inspect_request(black_box(call), &rule))
    });
    let tools: Vec<String> = (0..20)
        .map(|i| format!(r#"{{"name":"tool_{i}","description":"does {i}","inputSchema":{{"type":"object"}}}}"#))
        .collect();
    let list = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{}]}}}}"#,
        tools.join(",")
    );
    c.bench_function("mcp_filter_tools_list_20", |b| {
        b.iter(|| filter_response(black_box(list.as_bytes()), &rule))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
