//! Test PKI: an upstream CA with one leaf certificate covering every test name, and a
//! separate proxy CA whose certificate and key (mode 0600) the proxy is started with.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Names the upstream leaf certificate is valid for.
pub const UPSTREAM_NAMES: &[&str] = &[
    "localhost",
    "allowed.test",
    "other.test",
    "127.0.0.1",
    "api.openai.com",
    "api.anthropic.com",
    "chatgpt.com",
    "platform.claude.com",
    "console.anthropic.com",
    "auth.openai.com",
    "api.github.com",
];

/// The certificates and keys of one test, written under a private temporary directory.
pub struct TestPki {
    /// Holds the files (removed when the `TestPki` is dropped).
    _dir: tempfile::TempDir,
    /// PEM certificate of the CA the proxy signs interception certificates with.
    pub proxy_ca_cert: PathBuf,
    /// PEM private key of the proxy CA (mode 0600).
    pub proxy_ca_key: PathBuf,
    /// PEM certificate of the CA that signed the upstream servers' certificate.
    pub upstream_ca_cert: PathBuf,
    /// PEM certificate of the upstream leaf (for servers run as subprocesses).
    pub upstream_leaf_cert: PathBuf,
    /// PEM private key of the upstream leaf.
    pub upstream_leaf_key: PathBuf,
    proxy_ca_der: CertificateDer<'static>,
    upstream_leaf_der: CertificateDer<'static>,
    upstream_leaf_key_der: Vec<u8>,
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params
}

fn write_private(path: &Path, contents: &str) {
    fs::write(path, contents).expect("write key file");
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod 0600");
}

/// The crypto provider every test TLS endpoint uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl TestPki {
    /// Generates both CAs and the upstream leaf (ECDSA P-256) into a new temporary directory.
    pub fn new() -> TestPki {
        let dir = tempfile::tempdir().expect("tempdir");

        let proxy_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("proxy CA key");
        let proxy_cert = ca_params("airlock test proxy CA")
            .self_signed(&proxy_key)
            .expect("proxy CA cert");
        let proxy_ca_cert = dir.path().join("proxy-ca.pem");
        let proxy_ca_key = dir.path().join("proxy-ca.key");
        fs::write(&proxy_ca_cert, proxy_cert.pem()).expect("write proxy CA");
        write_private(&proxy_ca_key, &proxy_key.serialize_pem());

        let upstream_ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("CA key");
        let upstream_ca_params = ca_params("airlock test upstream CA");
        let upstream_ca = upstream_ca_params
            .self_signed(&upstream_ca_key)
            .expect("upstream CA cert");
        let upstream_ca_cert = dir.path().join("upstream-ca.pem");
        fs::write(&upstream_ca_cert, upstream_ca.pem()).expect("write upstream CA");
        let issuer = Issuer::new(upstream_ca_params, upstream_ca_key);

        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("leaf key");
        let names: Vec<String> = UPSTREAM_NAMES.iter().map(|n| n.to_string()).collect();
        let mut leaf_params = CertificateParams::new(names).expect("leaf params");
        let mut leaf_name = DistinguishedName::new();
        leaf_name.push(DnType::CommonName, "airlock test upstream");
        leaf_params.distinguished_name = leaf_name;
        let leaf = leaf_params
            .signed_by(&leaf_key, &issuer)
            .expect("leaf cert");
        let upstream_leaf_cert = dir.path().join("upstream-leaf.pem");
        let upstream_leaf_key = dir.path().join("upstream-leaf.key");
        fs::write(&upstream_leaf_cert, leaf.pem()).expect("write leaf");
        write_private(&upstream_leaf_key, &leaf_key.serialize_pem());

        TestPki {
            proxy_ca_der: proxy_cert.der().clone(),
            upstream_leaf_der: leaf.der().clone(),
            upstream_leaf_key_der: leaf_key.serialize_der(),
            _dir: dir,
            proxy_ca_cert,
            proxy_ca_key,
            upstream_ca_cert,
            upstream_leaf_cert,
            upstream_leaf_key,
        }
    }

    /// A TLS server configuration for the upstream leaf, offering `alpn` in order.
    pub fn upstream_server_config(&self, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
        let key =
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.upstream_leaf_key_der.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![self.upstream_leaf_der.clone()], key)
            .expect("server cert");
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// A TLS client configuration trusting only the proxy CA, offering `alpn`.
    pub fn client_config_trusting_proxy(&self, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.proxy_ca_der.clone())
            .expect("proxy CA into root store");
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}
