//! JSON input: the same structure as the YAML, with locations for syntax and validation
//! errors alike.

use airlock_policy::load::load_str;

#[test]
fn json_loads_like_the_equivalent_yaml() {
    let json = r#"{
  "version": 1,
  "network": {
    "allow": [
      {"host": "API.github.com", "methods": ["get"], "paths": ["/repos/**"], "ports": [443]},
      {"cidr": "10.20.0.0/16", "ports": [5432]}
    ],
    "deny": [{"host": "gist.github.com"}],
    "tls_passthrough": ["api.github.com"]
  },
  "secrets": {
    "GH_TOKEN": {"env": "GH_TOKEN", "hosts": ["api.github.com"], "headers": ["Authorization"],
                 "inject": {"header": "Authorization", "format": "token {value}"},
                 "body": false, "foreign": "deny"}
  },
  "mcp": [{"host": "mcp.example.com", "path": "/mcp", "tools": {"allow": [], "deny": ["x"]}}],
  "routes": [{"prefix": "/gh/", "upstream": "https://api.github.com/", "secret": "GH_TOKEN"}]
}"#;
    let yaml = "\
version: 1
network:
  allow:
    - host: api.github.com
      methods: [GET]
      paths: [/repos/**]
      ports: [443]
    - cidr: 10.20.0.0/16
      ports: [5432]
  deny:
    - host: gist.github.com
  tls_passthrough: [api.github.com]
secrets:
  GH_TOKEN:
    env: GH_TOKEN
    hosts: [api.github.com]
    headers: [authorization]
    inject: {header: Authorization, format: \"token {value}\"}
mcp:
  - host: mcp.example.com
    path: /mcp
    tools: {deny: [x]}
routes:
  - prefix: /gh/
    upstream: https://api.github.com/
    secret: GH_TOKEN
";
    let from_json = load_str("p.json", json).unwrap_or_else(|e| panic!("{e}"));
    let from_yaml = load_str("p.yaml", yaml).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(from_json, from_yaml);
    assert_eq!(from_json.network.allow.len(), 2);
}

#[test]
fn json_syntax_error_is_located() {
    let error = load_str(
        "p.json",
        "{\"version\": 1,\n \"network\": {\"allow\": [}}\n",
    )
    .expect_err("bad JSON");
    assert_eq!(error.errors.len(), 1, "{error}");
    let located = &error.errors[0];
    assert_eq!((located.line, located.column), (2, 23), "{error}");
    assert!(located.message.starts_with("syntax error"), "{error}");
    assert!(error.to_string().starts_with("p.json:2:23: "), "{error}");
}

#[test]
fn json_validation_errors_are_located() {
    let text = "{\"version\": 1, \"network\": {\"allow\": [{\"host\": \"a.com:443\"},\n  {\"cidr\": \"10.0.0.1/8\", \"port\": [1]}]}}";
    let error = load_str("p.json", text).expect_err("invalid");
    let found: Vec<(u32, u32)> = error.errors.iter().map(|e| (e.line, e.column)).collect();
    assert_eq!(found, vec![(1, 47), (2, 12), (2, 26)], "{error}");
    assert!(error.errors[0].message.contains("`ports:`"));
    assert!(error.errors[1].message.contains("`10.0.0.0/8`"));
    assert!(error.errors[2].message.contains("did you mean `ports`?"));
}

#[test]
fn json_without_version_is_refused() {
    let error = load_str("p.json", "{}").expect_err("no version");
    assert_eq!((error.errors[0].line, error.errors[0].column), (1, 1));
    assert!(error.errors[0].message.contains("`version` is missing"));
}
