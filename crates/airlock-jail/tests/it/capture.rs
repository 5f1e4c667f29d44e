//! `capture_network_namespace` on a real, existing network namespace: a
//! throwaway one the test creates with `ip netns add` (loopback only). Traffic
//! from inside it to any address lands on the returned listeners with its
//! original destination; a namespace with another interface is refused; a
//! namespace can be captured again once the first listeners are closed.
//!
//! Needs root (entering and configuring a namespace airlock did not create)
//! and `ip`; without them the tests say why and return (and fail under
//! `AIRLOCK_TEST_REQUIRE`, as in CI).

#![cfg(target_os = "linux")]

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Instant;

use airlock_jail::{JailError, Protocol, SetupStep, capture_network_namespace};

use crate::support::{ANY_ADDRESS_CLIENT, BOUND, expect_any_address_traffic};

/// A network namespace made with `ip netns add`, deleted on drop.
struct ThrowawayNamespace {
    name: String,
}

impl ThrowawayNamespace {
    /// Creates the namespace, or says why it cannot and returns `None`.
    fn create(purpose: &str) -> Option<ThrowawayNamespace> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            crate::support::skip_or_fail("capturing a network namespace needs root: run as root");
            return None;
        }
        let name = format!("airlock-capture-{purpose}-{}", std::process::id());
        let created = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .map_err(|error| error.to_string())
            .and_then(|status| {
                status
                    .success()
                    .then_some(())
                    .ok_or_else(|| status.to_string())
            });
        match created {
            Ok(()) => Some(ThrowawayNamespace { name }),
            Err(why) => {
                crate::support::skip_or_fail(&format!(
                    "`ip netns add` failed here (needs root and iproute2): {why}"
                ));
                None
            }
        }
    }

    fn open(&self) -> File {
        File::open(format!("/run/netns/{}", self.name)).expect("open the namespace")
    }

    /// `ip -n NAME ARGS...`, which must succeed.
    fn ip(&self, arguments: &[&str]) -> std::process::Output {
        let output = Command::new("ip")
            .args(["-n", &self.name])
            .args(arguments)
            .output()
            .expect("run ip");
        assert!(output.status.success(), "ip {arguments:?}: {output:?}");
        output
    }
}

impl Drop for ThrowawayNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

#[test]
fn traffic_to_any_address_in_the_namespace_lands_on_the_listeners() {
    let Some(namespace) = ThrowawayNamespace::create("any") else {
        return;
    };
    let mut listeners = capture_network_namespace(&namespace.open(), &[443, 80]).expect("capture");
    let ipv6 = listeners.iter().any(|listener| listener.addr.is_ipv6());
    // TCP 53, 80, 443 and UDP 53 per family, all on the wildcard address.
    assert_eq!(listeners.len(), if ipv6 { 8 } else { 4 });
    assert!(listeners.iter().all(|l| l.addr.ip().is_unspecified()));
    assert_eq!(
        listeners
            .iter()
            .filter(|l| l.proto == Protocol::Udp)
            .count(),
        if ipv6 { 2 } else { 1 }
    );

    let routes = namespace.ip(&["route", "show", "table", "local"]);
    assert!(
        String::from_utf8_lossy(&routes.stdout).contains("local default dev lo"),
        "{routes:?}"
    );

    let family = if ipv6 { "v6" } else { "v4" };
    let mut client = Command::new("ip")
        .args(["netns", "exec", &namespace.name, "python3", "-c"])
        .args([ANY_ADDRESS_CLIENT, family])
        .stdin(Stdio::null())
        .spawn()
        .expect("start the client in the namespace");
    expect_any_address_traffic(&mut listeners, ipv6);
    let deadline = Instant::now() + BOUND;
    let status = loop {
        if let Some(status) = client.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = client.kill();
            let _ = client.wait();
            panic!("the client did not end within {BOUND:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "client: {status}");

    // The listeners are this process's: once closed, the namespace can be
    // captured again (the routes are replaced, not duplicated).
    drop(listeners);
    let again = capture_network_namespace(&namespace.open(), &[443]).expect("capture again");
    assert_eq!(again.len(), if ipv6 { 6 } else { 3 });
}

#[test]
fn a_namespace_with_another_interface_is_refused() {
    let Some(namespace) = ThrowawayNamespace::create("iface") else {
        return;
    };
    // A veth pair (both ends inside): what a container network would add.
    namespace.ip(&[
        "link",
        "add",
        "airlock-v0",
        "type",
        "veth",
        "peer",
        "name",
        "airlock-v1",
    ]);
    let refused = capture_network_namespace(&namespace.open(), &[443]);
    match refused {
        Err(JailError::UnexpectedInterfaces { mut names }) => {
            names.sort();
            assert_eq!(names, ["airlock-v0", "airlock-v1"]);
        }
        other => panic!("expected UnexpectedInterfaces, got {other:?}"),
    }
    // Nothing was changed: lo is still down (so no route was added either).
    let loopback = namespace.ip(&["-o", "link", "show", "lo"]);
    assert!(
        String::from_utf8_lossy(&loopback.stdout).contains("<LOOPBACK>"),
        "{loopback:?}"
    );
}

#[test]
fn a_file_that_is_no_network_namespace_is_refused() {
    let not_a_namespace = File::open("/dev/null").expect("open /dev/null");
    let refused = capture_network_namespace(&not_a_namespace, &[443]);
    assert!(
        matches!(
            refused,
            Err(JailError::Capture {
                step: SetupStep::EnterNetworkNamespace,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(matches!(
        capture_network_namespace(&not_a_namespace, &[0]),
        Err(JailError::InvalidSpec(_))
    ));
}
