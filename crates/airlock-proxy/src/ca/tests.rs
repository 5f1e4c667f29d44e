//! Tests of the CA: generation, loading, leaves, the cache and the TLS configurations.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConnection};
use rustls_pki_types::{ServerName, UnixTime};

use super::*;

fn name(text: &str) -> Host {
    Host::Name(text.to_owned())
}

fn roots(ca: &CertificateAuthority) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots
        .add(ca.cert_der().clone())
        .expect("CA is a valid anchor");
    Arc::new(roots)
}

/// Verifies `leaf` for `server_name` the way a client trusting only `ca` would.
fn verify_leaf(
    ca: &CertificateAuthority,
    leaf: &CertifiedKey,
    server_name: &str,
) -> Result<(), rustls::Error> {
    let verifier = WebPkiServerVerifier::builder_with_provider(
        roots(ca),
        Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
    )
    .build()
    .map_err(|err| rustls::Error::General(err.to_string()))?;
    let server_name = ServerName::try_from(server_name.to_owned())
        .map_err(|err| rustls::Error::General(err.to_string()))?;
    verifier.verify_server_cert(
        &leaf.cert[0],
        &leaf.cert[1..],
        &server_name,
        &[],
        UnixTime::now(),
    )?;
    Ok(())
}

fn client_config(ca: &CertificateAuthority, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("default versions")
    .with_root_certificates(roots(ca))
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// Runs a TLS handshake in memory; bounded in rounds.
fn handshake(
    client: &mut ClientConnection,
    server: &mut ServerConnection,
) -> Result<(), rustls::Error> {
    let io_error = |err: io::Error| rustls::Error::General(err.to_string());
    for _ in 0..16 {
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
        let mut wire = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut wire).map_err(io_error)?;
        }
        let mut rest = &wire[..];
        while !rest.is_empty() {
            server.read_tls(&mut rest).map_err(io_error)?;
            server.process_new_packets()?;
        }
        wire.clear();
        while server.wants_write() {
            server.write_tls(&mut wire).map_err(io_error)?;
        }
        let mut rest = &wire[..];
        while !rest.is_empty() {
            client.read_tls(&mut rest).map_err(io_error)?;
            client.process_new_packets()?;
        }
    }
    Err(rustls::Error::General("handshake made no progress".into()))
}

#[test]
fn generated_ca_has_expected_identity() {
    let (ca, files) = CertificateAuthority::generate().expect("generate");
    assert!(files.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(files.key_pem.contains("PRIVATE KEY"));
    assert_eq!(ca.cert_pem(), files.cert_pem);
    let fingerprint = ca.fingerprint_sha256();
    assert_eq!(fingerprint.len(), 32 * 3 - 1);
    assert!(fingerprint.split(':').all(|byte| {
        byte.len() == 2
            && byte
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
    }));
    let (other, _) = CertificateAuthority::generate().expect("generate");
    assert_ne!(ca.fingerprint_sha256(), other.fingerprint_sha256());
    assert!(!format!("{files:?}").contains(&files.key_pem));
}

#[test]
fn pem_round_trip_keeps_the_certificate() {
    let (ca, files) = CertificateAuthority::generate().expect("generate");
    let noisy = format!("comment line\n{}trailing\n", files.cert_pem);
    let loaded = CertificateAuthority::from_pem(&noisy, &files.key_pem).expect("load");
    assert_eq!(loaded.fingerprint_sha256(), ca.fingerprint_sha256());
    assert_eq!(loaded.cert_pem(), files.cert_pem);
    let leaf = loaded.leaf_for(&name("example.com")).expect("leaf");
    verify_leaf(&ca, &leaf, "example.com").expect("leaf of reloaded CA verifies");
}

#[test]
fn bad_inputs_are_refused() {
    let (_, files) = CertificateAuthority::generate().expect("generate");
    let (_, other) = CertificateAuthority::generate().expect("generate");
    assert!(matches!(
        CertificateAuthority::from_pem(&files.cert_pem, &other.key_pem),
        Err(CaError::KeyMismatch)
    ));
    assert!(matches!(
        CertificateAuthority::from_pem("not pem", &files.key_pem),
        Err(CaError::InvalidCertificate(_))
    ));
    assert!(matches!(
        CertificateAuthority::from_pem(&files.cert_pem, "not pem"),
        Err(CaError::InvalidKey(_))
    ));
}

#[test]
fn leaves_verify_for_names_and_addresses() {
    let (ca, _) = CertificateAuthority::generate().expect("generate");
    let leaf = ca.leaf_for(&name("api.github.com")).expect("leaf");
    assert_eq!(leaf.cert.len(), 2);
    assert_eq!(leaf.cert[1], *ca.cert_der());
    verify_leaf(&ca, &leaf, "api.github.com").expect("verifies for its name");
    assert!(verify_leaf(&ca, &leaf, "evil.example").is_err());

    let v4 = ca
        .leaf_for(&Host::Ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))))
        .expect("leaf");
    verify_leaf(&ca, &v4, "127.0.0.1").expect("verifies for its address");
    let v6 = ca
        .leaf_for(&Host::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)))
        .expect("leaf");
    verify_leaf(&ca, &v6, "::1").expect("verifies for its address");
    assert!(verify_leaf(&ca, &v6, "127.0.0.1").is_err());
}

#[test]
fn rsa_ca_from_another_tool_signs_leaves() {
    let key = KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)
        .expect("rsa key");
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("self-signed");
    let ca = CertificateAuthority::from_pem(&cert.pem(), &key.serialize_pem()).expect("load");
    let leaf = ca.leaf_for(&name("pypi.org")).expect("leaf");
    verify_leaf(&ca, &leaf, "pypi.org").expect("verifies");
}

#[test]
fn cache_returns_the_same_leaf() {
    let (ca, _) = CertificateAuthority::generate().expect("generate");
    let first = ca.leaf_for(&name("a.example")).expect("leaf");
    let again = ca.leaf_for(&name("a.example")).expect("leaf");
    let other = ca.leaf_for(&name("b.example")).expect("leaf");
    assert!(Arc::ptr_eq(&first, &again));
    assert!(!Arc::ptr_eq(&first, &other));
}

#[test]
fn leaves_of_every_host_and_ca_share_the_run_key() {
    let (ca, _) = CertificateAuthority::generate().expect("generate");
    let (other_ca, _) = CertificateAuthority::generate().expect("generate");
    let a = ca.leaf_for(&name("a.example")).expect("leaf");
    let b = ca.leaf_for(&name("b.example")).expect("leaf");
    let c = other_ca.leaf_for(&name("a.example")).expect("leaf");
    assert_ne!(a.cert[0], b.cert[0], "a certificate per host");
    assert!(Arc::ptr_eq(&a.key, &b.key) && Arc::ptr_eq(&a.key, &c.key));
    // Each certificate carries the signing key's public half.
    for leaf in [&a, &b, &c] {
        leaf.keys_match()
            .expect("the certificate is for the run key");
    }
    verify_leaf(&ca, &b, "b.example").expect("verifies");
    verify_leaf(&other_ca, &c, "a.example").expect("verifies");
}

#[test]
fn preparing_the_run_key_twice_makes_one() {
    prepare_leaf_key();
    prepare_leaf_key();
    let first = leaf_key::run_key().expect("key");
    let again = leaf_key::run_key().expect("key");
    assert!(Arc::ptr_eq(&first, &again));
}

#[test]
fn cache_evicts_least_recently_used_and_renews_near_expiry() {
    let (ca, _) = CertificateAuthority::generate().expect("generate");
    let now = unix_now();
    let template = ca.mint_leaf(&name("x.example"), now).expect("mint");
    let entry = |template: &CachedLeaf| CachedLeaf {
        leaf: Arc::clone(&template.leaf),
        renew_at: template.renew_at,
        last_used: 0,
    };
    let mut cache = LeafCache::default();
    for i in 0..LEAF_CACHE_CAPACITY {
        cache.insert(name(&format!("h{i}.example")), entry(&template), now);
    }
    // Touch the oldest so that h1 becomes the least recently used.
    assert!(cache.get(&name("h0.example"), now).is_some());
    cache.insert(name("new.example"), entry(&template), now);
    assert_eq!(cache.entries.len(), LEAF_CACHE_CAPACITY);
    assert!(cache.get(&name("h0.example"), now).is_some());
    assert!(cache.get(&name("h1.example"), now).is_none());
    assert!(cache.get(&name("new.example"), now).is_some());

    let near_expiry = template.renew_at;
    assert!(cache.get(&name("h0.example"), near_expiry).is_none());
    assert!(template.renew_at > now + Duration::from_secs(5 * 24 * 60 * 60));
}

#[test]
fn sni_config_presents_the_leaf_of_the_sni_name() {
    let (ca, _) = CertificateAuthority::generate().expect("generate");
    let ca = Arc::new(ca);
    let server_config = ca.server_config(vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    let mut client = ClientConnection::new(
        client_config(&ca, &[b"h2"]),
        ServerName::try_from("API.GitHub.com").expect("name"),
    )
    .expect("client");
    let mut server = ServerConnection::new(server_config.clone()).expect("server");
    handshake(&mut client, &mut server).expect("handshake");
    assert_eq!(client.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(server.server_name(), Some("api.github.com"));
    let cached = ca.leaf_for(&name("api.github.com")).expect("leaf");
    assert_eq!(
        client.peer_certificates().map(|chain| chain[0].clone()),
        Some(cached.cert[0].clone())
    );

    // An IP server name sends no SNI: the SNI config refuses the handshake.
    let mut client = ClientConnection::new(
        client_config(&ca, &[]),
        ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()),
    )
    .expect("client");
    let mut server = ServerConnection::new(server_config).expect("server");
    assert!(handshake(&mut client, &mut server).is_err());
}

#[test]
fn fixed_host_config_serves_clients_without_sni() {
    let (ca, _) = CertificateAuthority::generate().expect("generate");
    let ca = Arc::new(ca);
    let host = Host::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let config = ca
        .server_config_for_host(&host, vec![b"http/1.1".to_vec()])
        .expect("config");
    let mut client = ClientConnection::new(
        client_config(&ca, &[b"http/1.1"]),
        ServerName::IpAddress(Ipv4Addr::LOCALHOST.into()),
    )
    .expect("client");
    let mut server = ServerConnection::new(config).expect("server");
    handshake(&mut client, &mut server).expect("handshake");
    assert_eq!(client.alpn_protocol(), Some(&b"http/1.1"[..]));
}

#[test]
fn init_creates_keeps_and_replaces() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = home.path().join("nested/airlock");
    assert!(matches!(
        CertificateAuthority::load_dir(&dir),
        Err(CaError::Missing { .. })
    ));
    assert_eq!(init(&dir, false).expect("init"), InitOutcome::Created);
    let mode = |path: &Path| fs::metadata(path).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
    assert_eq!(mode(&dir.join(CERT_FILE)), 0o644);
    let first = CertificateAuthority::load_dir(&dir)
        .expect("load")
        .fingerprint_sha256();

    assert_eq!(init(&dir, false).expect("init"), InitOutcome::Kept);
    let kept = CertificateAuthority::load_dir(&dir)
        .expect("load")
        .fingerprint_sha256();
    assert_eq!(first, kept);

    assert_eq!(init(&dir, true).expect("init"), InitOutcome::Created);
    let replaced = CertificateAuthority::load_dir(&dir)
        .expect("load")
        .fingerprint_sha256();
    assert_ne!(first, replaced);
    let leftovers: Vec<_> = fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .filter(|file| file != CERT_FILE && file != KEY_FILE && file != LOCK_FILE)
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    // Half a CA (the certificate lost) is replaced, not kept.
    fs::remove_file(dir.join(CERT_FILE)).expect("remove");
    assert_eq!(init(&dir, false).expect("init"), InitOutcome::Created);
}

/// Runs starting at once on a fresh directory (rereview35): one of them creates the CA,
/// every one loads that same pair (before the lock, one could read a key of one and the
/// certificate of another: "the CA key does not match the CA certificate").
#[test]
fn concurrent_inits_share_one_ca() {
    for _ in 0..5 {
        let home = tempfile::tempdir().expect("tempdir");
        let dir = home.path().join("airlock");
        let prints: Vec<String> = std::thread::scope(|scope| {
            let starts: Vec<_> = (0..8)
                .map(|_| {
                    scope.spawn(|| {
                        init(&dir, false).expect("init");
                        CertificateAuthority::load_dir(&dir)
                            .expect("load")
                            .fingerprint_sha256()
                    })
                })
                .collect();
            starts
                .into_iter()
                .map(|s| s.join().expect("join"))
                .collect()
        });
        assert!(prints.iter().all(|p| *p == prints[0]), "{prints:?}");
    }
}

#[test]
fn key_readable_by_others_is_refused() {
    let home = tempfile::tempdir().expect("tempdir");
    init(home.path(), false).expect("init");
    let key = home.path().join(KEY_FILE);
    fs::set_permissions(&key, fs::Permissions::from_mode(0o640)).expect("chmod");
    let err = CertificateAuthority::load_dir(home.path()).expect_err("must refuse");
    assert!(matches!(err, CaError::KeyPermissions { mode: 0o640, .. }));
    assert!(err.to_string().contains("chmod 600"), "{err}");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).expect("chmod");
    CertificateAuthority::load_dir(home.path()).expect("accepted at 0600");
}

/// A CA whose key is of `alg`, as PEM texts.
fn ca_pem(alg: &'static rcgen::SignatureAlgorithm) -> (String, String) {
    let key = if alg == &rcgen::PKCS_RSA_SHA256 {
        KeyPair::generate_rsa_for(alg, rcgen::RsaKeySize::_2048).expect("rsa key")
    } else {
        KeyPair::generate_for(alg).expect("key")
    };
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("self-signed");
    (cert.pem(), key.serialize_pem())
}

#[test]
fn the_issuing_key_is_the_one_rcgen_would_guess_for_every_key_type() {
    for alg in [
        &rcgen::PKCS_RSA_SHA256,
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &rcgen::PKCS_ECDSA_P521_SHA512,
        &rcgen::PKCS_ED25519,
    ] {
        let (cert_pem, key_pem) = ca_pem(alg);
        assert_issuing_key_is_the_guess(&format!("{alg:?}"), &cert_pem, &key_pem);
    }
}

/// The key `issuing_key` gives for `key_pem` is rcgen's own guess (algorithm and public
/// key), and the CA loaded from the pair signs leaves that verify.
fn assert_issuing_key_is_the_guess(label: &str, cert_pem: &str, key_pem: &str) {
    let der = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key der");
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(der.clone_key())
        .expect("rustls loads it");
    let chosen = super::issuing_key(&der, signing.algorithm()).expect("issuing key");
    let guessed = KeyPair::try_from(&der).expect("rcgen's guess");
    assert_eq!(chosen.algorithm(), guessed.algorithm(), "{label}");
    assert_eq!(chosen.public_key_raw(), guessed.public_key_raw(), "{label}");
    let ca = CertificateAuthority::from_pem(cert_pem, key_pem).expect("load");
    let leaf = ca.leaf_for(&name("pypi.org")).expect("leaf");
    verify_leaf(&ca, &leaf, "pypi.org").unwrap_or_else(|e| panic!("{label}: {e}"));
}

#[test]
fn premint_makes_the_first_leaves_and_no_more() {
    let (ca, _) = CertificateAuthority::generate().expect("generate");
    let ca = Arc::new(ca);
    let hosts: Vec<Host> = (0..PREMINT_LEAVES + 3)
        .map(|i| name(&format!("h{i}.example")))
        .collect();
    ca.premint(hosts.clone())
        .expect("a thread")
        .join()
        .expect("minting ends");
    let now = unix_now();
    for (i, host) in hosts.iter().enumerate() {
        let cached = ca.cache().get(host, now).is_some();
        assert_eq!(cached, i < PREMINT_LEAVES, "{host}");
    }
    // The premade leaf is the one a handshake gets, and it verifies.
    let leaf = ca.leaf_for(&hosts[0]).expect("leaf");
    assert!(Arc::ptr_eq(
        &leaf,
        &ca.cache().get(&hosts[0], now).expect("cached")
    ));
    verify_leaf(&ca, &leaf, "h0.example").expect("verifies");
    assert_eq!(ca.cached_leaves(), PREMINT_LEAVES);
    assert!(
        ca.premint(Vec::new()).is_none(),
        "nothing to mint, no thread"
    );
}

/// The encodings older tools write (`openssl genrsa -traditional`, `openssl ecparam`):
/// fixtures/README.md.
const OPENSSL_CAS: [(&str, &str, &str); 3] = [
    (
        "rsa-pkcs1",
        include_str!("fixtures/rsa-pkcs1.crt"),
        include_str!("fixtures/rsa-pkcs1.key"),
    ),
    (
        "p256-sec1",
        include_str!("fixtures/p256-sec1.crt"),
        include_str!("fixtures/p256-sec1.key"),
    ),
    (
        "p384-sec1",
        include_str!("fixtures/p384-sec1.crt"),
        include_str!("fixtures/p384-sec1.key"),
    ),
];

#[test]
fn pkcs1_and_sec1_ca_keys_get_the_key_rcgen_would_guess() {
    for (label, cert_pem, key_pem) in OPENSSL_CAS {
        let der = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key der");
        assert!(!matches!(der, PrivateKeyDer::Pkcs8(_)), "{label}");
        assert_issuing_key_is_the_guess(label, cert_pem, key_pem);
    }
}

#[test]
fn a_type_rustls_names_wrongly_or_not_at_all_falls_back_to_the_guess() {
    let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let der = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).expect("der");
    for algorithm in [
        rustls::SignatureAlgorithm::RSA,
        rustls::SignatureAlgorithm::ECDSA,
        rustls::SignatureAlgorithm::Unknown(0xff),
    ] {
        let chosen = super::issuing_key(&der, algorithm).expect("the guess finds it");
        assert_eq!(chosen.algorithm(), &rcgen::PKCS_ED25519, "{algorithm:?}");
    }
    // A key no candidate and no guess can read is refused.
    let garbage = PrivateKeyDer::Pkcs8(vec![0x30, 0x03, 0x02, 0x01, 0x00].into());
    assert!(super::issuing_key(&garbage, rustls::SignatureAlgorithm::RSA).is_err());
    assert!(super::issuing_key(&garbage, rustls::SignatureAlgorithm::Unknown(0)).is_err());
}
