//! The `airlock-sandbox` crate as an orchestrator uses it: a [`LocalProvider`] over a
//! private state root, with the real `airlock` binary as the daemon. `ensure_running` is
//! idempotent, `exec` streams events in order and ends with the report, `health` follows
//! the sandbox's life, and `teardown` removes it.

use crate::support::run::namespaces_available;
use airlock_sandbox::{
    CreateOptions, ExecEvent, ExecRequest, Health, LocalProvider, Provider, ProviderKind,
    SandboxError, SandboxName, Sandboxes,
};

#[test]
fn an_orchestrator_drives_a_local_sandbox_through_the_provider_trait() {
    if !namespaces_available("an_orchestrator_drives_a_local_sandbox") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sandboxes = Sandboxes::open(dir.path().join("root"), env!("CARGO_BIN_EXE_airlock"))
        .expect("state root");
    let provider = LocalProvider::new(sandboxes.clone());
    let name = SandboxName::parse("lib-1").expect("name");
    let mut options = CreateOptions::new(name.clone(), ProviderKind::Local);
    options.secrets = vec!["LIB_TOKEN@api.example.com".into()];
    options.daemon_env = vec![
        (
            "AIRLOCK_HOME".into(),
            dir.path().join("home").display().to_string(),
        ),
        (
            "LIB_TOKEN".into(),
            "sk-library-real-value-0000000000".into(),
        ),
    ];
    provider.ensure_running(&options).expect("create");
    provider
        .ensure_running(&options)
        .expect("a running sandbox is left as it is");
    assert_eq!(provider.health(&name).expect("health"), Health::Running);

    let mut request = ExecRequest::new([
        "sh",
        "-c",
        "echo one; echo two >&2; echo \"$LIB_TOKEN\"; exit 4",
    ]);
    request.timeout = Some(std::time::Duration::from_secs(60));
    let events: Vec<ExecEvent> = provider.exec(&name, request).expect("exec").collect();
    let Some(ExecEvent::Exit(report)) = events.last() else {
        panic!("the last event is not the report: {events:?}");
    };
    assert_eq!(report.status, 4);
    assert!(
        events.contains(&ExecEvent::Stdout("one".into())),
        "{events:?}"
    );
    assert!(
        events.contains(&ExecEvent::Stderr("two".into())),
        "{events:?}"
    );
    let surrogate = events
        .iter()
        .filter_map(|e| match e {
            ExecEvent::Stdout(line) if line.starts_with("sk-") => Some(line.clone()),
            _ => None,
        })
        .next()
        .expect("the surrogate line");
    assert_ne!(surrogate, "sk-library-real-value-0000000000");
    assert_eq!(surrogate.len(), "sk-library-real-value-0000000000".len());

    provider.teardown(&name).expect("teardown");
    provider.teardown(&name).expect("teardown is idempotent");
    assert!(matches!(
        provider.health(&name),
        Err(SandboxError::NotFound(_))
    ));
    assert!(!sandboxes.dir(&name).exists());
}
