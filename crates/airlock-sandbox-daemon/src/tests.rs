//! The daemon-side provider dispatch and the environment each provider gives commands,
//! in memory (no sockets, no jail, no container).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use airlock_sandbox::ProviderKind;

use crate::for_kind;
use crate::plan::command_env;

fn session_env() -> Vec<(OsString, OsString)> {
    [
        ("PATH", "/host/bin"),
        ("HOME", "/home/me"),
        ("AIRLOCK", "1"),
        ("API_KEY", "surrogate-value"),
        ("UNRELATED", "x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect()
}

fn names(env: &[(String, String)]) -> Vec<&str> {
    env.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn each_kind_gets_its_own_daemon_provider() {
    for kind in [ProviderKind::Local, ProviderKind::Docker] {
        assert_eq!(for_kind(kind).kind(), kind);
    }
}

#[test]
fn a_local_sandbox_sees_the_host_paths_and_keeps_the_creators_variables() {
    let local = for_kind(ProviderKind::Local);
    let host = Path::new("/state/task-1/workspace");
    assert_eq!(local.workspace_inside(host), host);
    let bundle = Path::new("/tmp/airlock-run/ca-bundle.pem");
    let surrogates = vec!["API_KEY".to_owned()];
    let env = command_env(local.as_ref(), &session_env(), &surrogates, bundle, &[]);
    let names = names(&env);
    assert_eq!(&names[..4], ["PATH", "HOME", "AIRLOCK", "API_KEY"]);
    assert!(!names.contains(&"UNRELATED"));
    let ca: Vec<_> = env.iter().skip(4).collect();
    assert!(!ca.is_empty());
    assert!(
        ca.iter()
            .all(|(_, v)| v == "/tmp/airlock-run/ca-bundle.pem")
    );
}

#[test]
fn a_container_gets_its_own_path_home_and_bundle() {
    let docker = for_kind(ProviderKind::Docker);
    assert_eq!(
        docker.workspace_inside(Path::new("/state/task-1/workspace")),
        PathBuf::from("/workspace")
    );
    let bundle = Path::new("/tmp/airlock-run/ca-bundle.pem");
    let surrogates = vec!["API_KEY".to_owned()];
    let env = command_env(docker.as_ref(), &session_env(), &surrogates, bundle, &[]);
    let names = names(&env);
    // The creator's PATH and HOME are not the container's.
    assert_eq!(&names[..4], ["AIRLOCK", "API_KEY", "PATH", "HOME"]);
    assert_eq!(env[2].1, crate::docker::CONTAINER_PATH);
    assert_eq!(env[3].1, "/root");
    assert!(
        env.iter()
            .skip(4)
            .all(|(_, v)| v == "/etc/airlock-ca-bundle.pem")
    );
}

#[test]
fn git_credentials_come_last_for_every_provider() {
    let secrets = vec![("API_KEY".to_owned(), vec!["git.example.com".to_owned()])];
    for kind in [ProviderKind::Local, ProviderKind::Docker] {
        let provider = for_kind(kind);
        let env = command_env(
            provider.as_ref(),
            &session_env(),
            &[],
            Path::new("/b.pem"),
            &secrets,
        );
        let expected = airlock_sandbox::workspace::git_credential_env(&secrets);
        assert!(!expected.is_empty());
        assert_eq!(&env[env.len() - expected.len()..], &expected[..]);
    }
}
