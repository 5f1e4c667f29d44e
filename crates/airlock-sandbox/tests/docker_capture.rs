//! The docker provider's network capture, end to end with a real engine: a
//! container started by `Docker::run_detached` (`--network none`), its network
//! namespace captured with `airlock_jail::capture_network_namespace`, then
//! `curl` and `nslookup` run in it with `docker exec`. Their connection and
//! query must arrive at the listeners with the addresses they dialled, and the
//! container must have no interface but `lo`. Also the rest of the CLI
//! wrapper: workspace mount, `docker cp`, exec environment and working
//! directory, labels, removal.
//!
//! Needs root and a working docker (or podman); without them the test says
//! why and returns, and fails under `AIRLOCK_TEST_REQUIRE` (as in CI). The image is built locally by
//! `crates/airlock/tests/fixtures/build_sandbox_image.sh` (no registry).

#![cfg(target_os = "linux")]

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use airlock_dns::{NameMap, default_pool};
use airlock_jail::{
    HandedListener, Protocol, capture_network_namespace, original_destination, recv_datagram,
    send_datagram_from,
};
use airlock_sandbox::docker::{ContainerId, Docker, DockerError, RunSpec, WORKSPACE_MOUNT};

mod support;

/// Upper bound of every wait in this test.
const BOUND: Duration = Duration::from_secs(60);
/// The image the build script makes.
const IMAGE: &str = "airlock-test-sandbox:1";
/// Label marking this test's containers.
const TEST_LABEL: &str = "airlock.test";

/// Removes the container when the test ends, whether it passed or not.
struct RemoveOnDrop<'a> {
    docker: &'a Docker,
    id: ContainerId,
}

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        if let Err(error) = self.docker.remove(&self.id) {
            eprintln!("could not remove container {}: {error}", self.id);
        }
    }
}

/// The engine, or `None` after saying why it cannot be used ([`support::skip_or_fail`]).
fn docker_or_skip() -> Option<Docker> {
    if !nix::unistd::geteuid().is_root() {
        crate::support::skip_or_fail(
            "entering a container's network namespace needs root: run as root",
        );
        return None;
    }
    match Docker::detect() {
        Ok(docker) => Some(docker),
        Err(error) => {
            crate::support::skip_or_fail(&format!(
                "no usable container engine (install docker.io and start dockerd): {error}"
            ));
            None
        }
    }
}

/// Runs `command` to its end on a thread; its output arrives on the channel.
fn spawn_output(mut command: Command) -> mpsc::Receiver<std::io::Result<Output>> {
    command.stdin(Stdio::null());
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(command.output());
    });
    receiver
}

/// The output of a command run with [`spawn_output`], waited for at most [`BOUND`].
fn wait_output(receiver: mpsc::Receiver<std::io::Result<Output>>) -> Output {
    receiver
        .recv_timeout(BOUND)
        .expect("command did not end in time")
        .expect("run command")
}

/// Runs `command`, waiting at most [`BOUND`] for its output.
fn output_bounded(command: Command) -> Output {
    wait_output(spawn_output(command))
}

/// Runs `script` with `sh -c` in the container.
fn exec_sh(docker: &Docker, id: &ContainerId, script: &str) -> Output {
    let argv = ["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    output_bounded(docker.exec_command(id, "/", &[], &argv).expect("exec"))
}

fn take(listeners: &mut Vec<HandedListener>, proto: Protocol, port: u16) -> HandedListener {
    let position = listeners
        .iter()
        .position(|l| l.proto == proto && l.addr.port() == port && l.addr.is_ipv4())
        .expect("listener");
    listeners.swap_remove(position)
}

#[test]
fn a_containers_traffic_lands_on_the_captured_listeners() {
    let Some(docker) = docker_or_skip() else {
        return;
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../airlock/tests/fixtures/build_sandbox_image.sh"
    );
    let built = output_bounded({
        let mut command = Command::new("bash");
        command.args([script, IMAGE]);
        command
    });
    assert!(built.status.success(), "building {IMAGE}: {built:?}");

    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("note.txt"), "from the host\n").expect("write");
    let name = format!("airlock-test-capture-{}", std::process::id());
    let spec = RunSpec {
        name: name.clone(),
        image: IMAGE.into(),
        labels: vec![
            ("airlock.sandbox".into(), name.clone()),
            (TEST_LABEL.into(), "docker_capture".into()),
        ],
        memory_bytes: Some(256 << 20),
        cpus: Some(1.0),
        pids_limit: Some(128),
        workspace: Some(workspace.path().to_path_buf()),
    };
    let id = docker.run_detached(&spec).expect("run the container");
    let container = RemoveOnDrop {
        docker: &docker,
        id: id.clone(),
    };
    assert!(docker.is_running(&id).expect("is_running"));

    let pid = docker.init_pid(&id).expect("init pid");
    let netns = File::open(format!("/proc/{pid}/ns/net")).expect("open the network namespace");
    let mut listeners = capture_network_namespace(&netns, &[80, 443]).expect("capture");
    let https = take(&mut listeners, Protocol::Tcp, 443)
        .into_tcp_listener()
        .expect("tcp");
    let dns = take(&mut listeners, Protocol::Udp, 53)
        .into_udp_socket()
        .expect("udp");

    assert_only_lo(&docker, &id);
    assert_https_is_captured(&docker, &id, &https);
    assert_dns_is_captured(&docker, &id, &dns);
    assert_workspace_copy_and_exec(&docker, &id, workspace.path());

    let labelled = docker.list_labelled(TEST_LABEL).expect("list");
    let summary = labelled
        .iter()
        .find(|summary| summary.id == id)
        .expect("listed");
    assert_eq!(summary.name, name);
    assert!(summary.running);
    assert_eq!(
        summary.labels.get("airlock.sandbox").map(String::as_str),
        Some(name.as_str())
    );

    drop(container);
    assert!(!docker.is_running(&id).expect("is_running"));
    docker.remove(&id).expect("removing twice is fine");
    assert!(docker.init_pid(&id).is_err());
    assert!(
        !docker
            .list_labelled(TEST_LABEL)
            .expect("list")
            .iter()
            .any(|summary| summary.id == id)
    );
}

/// The container has only `lo`, and every address is local on it.
fn assert_only_lo(docker: &Docker, id: &ContainerId) {
    // Only lo, and every address local on it.
    let links = exec_sh(docker, id, "ip -o link");
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    assert_eq!(links.lines().count(), 1, "{links}");
    assert!(links.starts_with("1: lo:"), "{links}");
    let routes = exec_sh(docker, id, "ip route show table local");
    assert!(
        String::from_utf8_lossy(&routes.stdout).contains("local default dev lo"),
        "{routes:?}"
    );
}

/// HTTPS to an address on no network is accepted by the captured listener, with the
/// address curl dialled.
fn assert_https_is_captured(docker: &Docker, id: &ContainerId, https: &std::net::TcpListener) {
    // HTTPS to an address on no network: accepted by our listener.
    https.set_nonblocking(true).expect("nonblocking");
    let curl = spawn_output(
        docker
            .exec_command(
                id,
                "/",
                &[],
                &["curl", "-sk", "--max-time", "20", "https://203.0.113.9/"].map(String::from),
            )
            .expect("exec"),
    );
    let deadline = Instant::now() + BOUND;
    let stream = loop {
        match https.accept() {
            Ok((stream, _)) => break stream,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "curl never connected");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("accept: {error}"),
        }
    };
    assert_eq!(
        original_destination(&stream).expect("original destination"),
        SocketAddr::from((Ipv4Addr::new(203, 0, 113, 9), 443))
    );
    drop(stream);
    let curl = wait_output(curl);
    assert!(
        !curl.status.success(),
        "curl cannot have completed TLS: {curl:?}"
    );
}

/// DNS to an outside resolver address arrives here, with the resolver's address, and is
/// answered from the pool.
fn assert_dns_is_captured(docker: &Docker, id: &ContainerId, dns: &std::net::UdpSocket) {
    // DNS to an outside resolver address: answered here from the pool.
    let nslookup = spawn_output(
        docker
            .exec_command(
                id,
                "/",
                &[],
                &["nslookup", "example.com", "198.51.100.2"].map(String::from),
            )
            .expect("exec"),
    );
    dns.set_read_timeout(Some(BOUND)).expect("timeout");
    let mut buffer = [0u8; 512];
    let datagram = recv_datagram(&dns, &mut buffer).expect("a DNS query");
    let resolver = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2));
    assert_eq!(datagram.original_destination, Some(resolver));
    let names = NameMap::new(default_pool());
    let (reply, info) = airlock_dns::answer(&buffer[..datagram.len], &names).expect("answer");
    assert_eq!(info.name.as_deref(), Some("example.com"));
    send_datagram_from(&dns, &reply, datagram.source, resolver).expect("reply");
    let looked_up = wait_output(nslookup);
    let pool_address = names.address_for("example.com").to_string();
    assert!(
        String::from_utf8_lossy(&looked_up.stdout).contains(&pool_address),
        "{looked_up:?}"
    );
}

/// The workspace mount, `docker cp`, and the exec environment and directory.
fn assert_workspace_copy_and_exec(docker: &Docker, id: &ContainerId, workspace: &std::path::Path) {
    // The workspace, docker cp, and the exec environment and directory.
    let copied = workspace.join("copied.txt");
    std::fs::write(&copied, "copied in\n").expect("write");
    docker
        .copy_into(id, &copied, "/tmp/copied.txt")
        .expect("copy_into");
    let env = [("AIRLOCK_PROBE".to_owned(), "surrogate-1".to_owned())];
    let argv = [
        "sh",
        "-c",
        "pwd; echo $AIRLOCK_PROBE; cat note.txt /tmp/copied.txt",
    ]
    .map(String::from);
    let shown = output_bounded(
        docker
            .exec_command(id, WORKSPACE_MOUNT, &env, &argv)
            .expect("exec"),
    );
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout),
        "/workspace\nsurrogate-1\nfrom the host\ncopied in\n"
    );
}

#[test]
fn a_missing_image_is_a_failure_with_the_engines_message() {
    let Some(docker) = docker_or_skip() else {
        return;
    };
    let spec = RunSpec {
        name: format!("airlock-test-missing-{}", std::process::id()),
        image: "airlock-test-no-such-image:0".into(),
        labels: vec![(TEST_LABEL.into(), "missing".into())],
        ..RunSpec::default()
    };
    match docker.run_detached(&spec) {
        Err(DockerError::Failed {
            command, stderr, ..
        }) => {
            assert!(command.contains("--network none"), "{command}");
            assert!(!stderr.is_empty());
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}
