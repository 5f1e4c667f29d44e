//! The native-YAML emitter: every field of the model written by `emit::to_yaml` and read
//! back by the native loader gives the same policy; tricky strings survive quoting.

use airlock_policy::emit::to_yaml;
use airlock_policy::load::load_str;

/// A native policy using every section and key the format has.
const EVERYTHING: &str = r#"version: 1
network:
  allow:
    - host: api.github.com
      methods: [GET, POST]
      paths: ["/repos/acme/app", "/repos/acme/app/**"]
    - host: "*.githubusercontent.com"
    - host: pypi.org
      path_regex: ['^/simple(?:/.*)?(?:\?.*)?$']
    - host: github.com
      ports: [22]
    - cidr: 10.20.0.0/16
      ports: [5432]
    - host_regex: 'api-[a-z]+\.example\.com|(?s-i:x.*)'
    - host: "[::1]"
      ports: [8443]
    - host: "*.apple.com"
    - host: api.openai.com
      json_deny:
        - path: /tools/*/type
          values: ["web_search", "web_search_preview*"]
        - path: "/a~1b/~0c"
  deny:
    - host: gist.github.com
    - cidr: 169.254.0.0/16
  tls_passthrough: ["*.apple.com"]
secrets:
  GH_TOKEN:
    env: GH_TOKEN
    hosts: [api.github.com, github.com, "*.githubusercontent.com"]
    headers: [Authorization]
  OPENAI_API_KEY:
    value: "sk-: 'quoted' # not a comment\nsecond line"
    hosts: [api.openai.com]
    inject: {header: Authorization, format: "Bearer {value}"}
    foreign: allow
  NPM_TOKEN:
    file: /run/secrets/npm
    hosts: [registry.npmjs.org]
    surrogate: "npm_0000000000000000000000000000000000000"
    body: true
  VAULT_TOKEN:
    command: [pass, show, "yes"]
    hosts: [vault.example.com]
mcp:
  - host: mcp.example.com
    path: /mcp
    tools: {allow: [read_file], deny: [write_file, run_command]}
  - host: args.mcp.example
    path: /mcp
    tools:
      args:
        read_file: {path: ["/workspace/**", {regex: "/tmp/[a-z]+"}], opts.dir: {regex: "x|y"}}
        fetch: {url: ["https://docs.example.com/**"]}
  - host: "*.mcp.example"
    path: /**
    tools: {deny: ["true"]}
routes:
  - prefix: /llm/openrouter/
    upstream: https://openrouter.ai/api/v1/
    secret: OPENAI_API_KEY
  - prefix: /plain/
    upstream: https://example.com/base/
"#;

#[test]
fn every_field_survives_emit_and_load() {
    let policy = load_str("everything.yaml", EVERYTHING).unwrap_or_else(|e| panic!("{e}"));
    let yaml = to_yaml(&policy);
    assert!(yaml.starts_with("version: 1\n"), "{yaml}");
    let again = load_str("emitted.yaml", &yaml).unwrap_or_else(|e| panic!("{e}\n---\n{yaml}"));
    assert_eq!(again, policy, "{yaml}");
    // Emitting is stable.
    assert_eq!(to_yaml(&again), yaml);
}

#[test]
fn empty_policy_loads_back_empty() {
    let policy = load_str("empty.yaml", "version: 1\n").unwrap_or_else(|e| panic!("{e}"));
    let yaml = to_yaml(&policy);
    assert_eq!(yaml.trim_end(), "version: 1");
    assert_eq!(load_str("emitted.yaml", &yaml).unwrap(), policy);
}
