//! One leaf key per run (docs/security.md, "One leaf key per run"): the interception
//! certificates one `airlock proxy` presents for two hosts are two certificates, each for
//! its own host, carrying the same public key; a second run presents another key. Seen by
//! a real client, `openssl s_client` through the proxy's CONNECT.

use std::process::Command;
use std::time::Duration;

use crate::support::{Proxy, ProxyBuilder, TestPki, need, run_bounded};

const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);

/// What a client is shown for `host`: the leaf certificate and its public key (PEM).
struct Presented {
    cert: String,
    public_key: String,
}

/// Opens a CONNECT tunnel to `host:443` through `proxy` and completes a TLS handshake with
/// the interception certificate, verified against the proxy's CA.
fn presented(proxy: &Proxy, pki: &TestPki, host: &str) -> Presented {
    let mut client = Command::new("openssl");
    client
        .args(["s_client", "-proxy", &format!("127.0.0.1:{}", proxy.port())])
        .args(["-connect", &format!("{host}:443"), "-servername", host])
        .arg("-CAfile")
        .arg(&pki.proxy_ca_cert)
        .args(["-verify_return_error", "-verify_hostname", host]);
    let out = run_bounded(&mut client, CLIENT_TIMEOUT);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.is_some_and(|s| s.success()) && text.contains("Verify return code: 0 (ok)"),
        "openssl s_client to {host} through the proxy: {:?}\n{text}\n{}",
        out.status,
        out.stderr
    );
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = text[begin..]
        .find("-----END CERTIFICATE-----")
        .expect("its end")
        + begin;
    let cert = format!("{}-----END CERTIFICATE-----\n", &text[begin..end]);
    let cert_path = proxy.dir().join(format!("{host}.pem"));
    std::fs::write(&cert_path, &cert).expect("write the certificate");
    let mut pubkey = Command::new("openssl");
    pubkey
        .args(["x509", "-noout", "-pubkey", "-in"])
        .arg(&cert_path);
    let out = run_bounded(&mut pubkey, CLIENT_TIMEOUT);
    assert!(out.status.is_some_and(|s| s.success()), "{}", out.stderr);
    Presented {
        cert,
        public_key: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

fn start(pki: &TestPki) -> Proxy {
    ProxyBuilder::new(pki)
        .allow("a.example:443")
        .allow("b.example:443")
        .resolve_loopback("a.example")
        .resolve_loopback("b.example")
        .start()
}

#[test]
fn one_run_presents_one_key_in_a_certificate_per_host() {
    need("openssl");
    let pki = TestPki::new();
    let mut first = start(&pki);
    let a = presented(&first, &pki, "a.example");
    let b = presented(&first, &pki, "b.example");
    assert_ne!(a.cert, b.cert, "each host has its own certificate");
    assert!(
        a.public_key.contains("BEGIN PUBLIC KEY"),
        "{}",
        a.public_key
    );
    assert_eq!(a.public_key, b.public_key, "one leaf key per run");
    let again = presented(&first, &pki, "a.example");
    assert_eq!(again.cert, a.cert, "the certificate is cached");
    first.terminate(Duration::from_secs(5));

    let mut second = start(&pki);
    let next = presented(&second, &pki, "a.example");
    assert_ne!(
        next.public_key, a.public_key,
        "every run makes its own leaf key"
    );
    second.terminate(Duration::from_secs(5));
}
