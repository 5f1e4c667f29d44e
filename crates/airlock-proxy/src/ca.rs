//! The local certificate authority that signs interception certificates.
//!
//! This module owns the CA's files (`ca.pem`, `ca-key.pem` in [`default_dir`]), loading an
//! operator-supplied CA (`--ca-cert` / `--ca-key`), minting one short-lived leaf
//! certificate per canonical host (cached, so the hot path is one hash lookup) and the
//! rustls [`ServerConfig`]s that present those leaves: one that picks the leaf from SNI, and
//! one per connection for a fixed host (clients that send no SNI).
//!
//! Every leaf of a process carries the same key ([`prepare_leaf_key`], made once per run on
//! a thread of its own as the session starts); each host still gets its own certificate.
//!
//! Every failure is an error, never a fallback: a handshake whose SNI cannot be
//! canonicalised or whose leaf cannot be minted is aborted.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_policy::canonical::{Host, canonical_host};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use rustls::ServerConfig;
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

mod leaf_key;

pub use leaf_key::prepare as prepare_leaf_key;

/// File name of the CA certificate (PEM) inside the CA directory.
pub const CERT_FILE: &str = "ca.pem";
/// File name of the CA private key (PEM, mode 0600) inside the CA directory.
pub const KEY_FILE: &str = "ca-key.pem";

/// How many leaf certificates are kept; beyond that the least recently used is evicted.
pub const LEAF_CACHE_CAPACITY: usize = 4096;

/// How many leaves [`CertificateAuthority::premint`] makes at most: each costs a signature
/// by the CA key (about ten million instructions with an RSA-2048 CA), taken while the
/// first requests may already need the CPU.
pub const PREMINT_LEAVES: usize = 8;

/// Leaves are valid from this long before they are minted (clock skew).
const LEAF_BACKDATE: Duration = Duration::from_secs(60 * 60);
/// Leaves are valid this long after they are minted.
const LEAF_LIFETIME: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// A cached leaf this close to its expiry is minted again.
const LEAF_RENEW_MARGIN: Duration = Duration::from_secs(24 * 60 * 60);
/// The generated CA is valid from this long before its creation.
const CA_BACKDATE: Duration = Duration::from_secs(24 * 60 * 60);
/// The generated CA is valid this long after its creation (about ten years).
const CA_LIFETIME: Duration = Duration::from_secs(3650 * 24 * 60 * 60);

/// Everything that can go wrong with the CA.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Neither `AIRLOCK_HOME`, `XDG_DATA_HOME` nor `HOME` is set.
    #[error("cannot find a home for the CA: set AIRLOCK_HOME, XDG_DATA_HOME or HOME")]
    NoHome,
    /// The current directory could not be determined to make a relative path absolute.
    #[error("cannot make {path} absolute: {source}")]
    Absolute {
        /// The relative path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The CA directory holds no CA (or only half of one).
    #[error("no CA in {dir}: run `airlock ca init`")]
    Missing {
        /// The directory looked in.
        dir: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A file or directory could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The key file is accessible by group or others.
    #[error(
        "CA key {path} has mode {mode:04o}, so group or others can access it: run `chmod 600 {path}`"
    )]
    KeyPermissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The certificate text holds no usable certificate.
    #[error("the CA certificate is not a PEM certificate: {0}")]
    InvalidCertificate(String),
    /// The key text holds no usable private key.
    #[error("the CA key is not a usable PEM private key: {0}")]
    InvalidKey(String),
    /// The private key does not belong to the certificate.
    #[error("the CA key does not match the CA certificate")]
    KeyMismatch,
    /// Generating or signing a certificate failed.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused a key or a configuration.
    #[error("TLS setup failed: {0}")]
    Tls(#[from] rustls::Error),
}

/// The PEM text of a freshly generated CA.
pub struct CaFiles {
    /// The certificate (`-----BEGIN CERTIFICATE-----`).
    pub cert_pem: String,
    /// The PKCS#8 private key (`-----BEGIN PRIVATE KEY-----`). Secret.
    pub key_pem: String,
}

impl fmt::Debug for CaFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaFiles")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"[elided]")
            .finish()
    }
}

/// What [`init`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitOutcome {
    /// A new CA was written (none existed, only half of one did, or `force` was set).
    Created,
    /// A CA already existed and was kept.
    Kept,
}

/// A loaded CA: signs leaf certificates and builds rustls server configurations.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    leaves: Mutex<LeafCache>,
    tls_template: ServerConfig,
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("fingerprint_sha256", &self.fingerprint_sha256())
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Generates a new CA: ECDSA P-256, CN `airlock local CA <id>`, `CA:TRUE, pathlen:0`,
    /// `keyCertSign`, valid about ten years. Returns it with its PEM files.
    pub fn generate() -> Result<(Self, CaFiles), CaError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let short_id: String = Sha256::digest(key.public_key_raw())
            .iter()
            .take(4)
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("airlock local CA {short_id}"));
        params
            .distinguished_name
            .push(DnType::OrganizationName, "airlock");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, CA_BACKDATE, CA_LIFETIME);
        let cert = params.self_signed(&key)?;
        let files = CaFiles {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        let ca = Self::from_pem(&files.cert_pem, &files.key_pem)?;
        Ok((ca, files))
    }

    /// Builds a CA from a PEM certificate (the first one in the text) and a PEM private key
    /// (PKCS#8, SEC1 or PKCS#1). The key must belong to the certificate.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|err| CaError::InvalidCertificate(err.to_string()))?;
        let key_der = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|err| CaError::InvalidKey(err.to_string()))?;
        let cert_pem = first_certificate_block(cert_pem)
            .ok_or_else(|| CaError::InvalidCertificate("no CERTIFICATE block".to_owned()))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let checked =
            match CertifiedKey::from_der(vec![cert_der.clone()], key_der.clone_key(), &provider) {
                Ok(checked) => checked,
                Err(rustls::Error::InconsistentKeys(_)) => return Err(CaError::KeyMismatch),
                Err(err) => return Err(CaError::InvalidKey(err.to_string())),
            };
        let key = issuing_key(&key_der, checked.key.algorithm())
            .map_err(|err| CaError::InvalidKey(err.to_string()))?;
        let issuer = Issuer::from_ca_cert_der(&cert_der, key)
            .map_err(|err| CaError::InvalidCertificate(err.to_string()))?;
        let tls_template = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCertificate));
        Ok(Self {
            issuer,
            cert_pem,
            cert_der,
            leaves: Mutex::new(LeafCache::default()),
            tls_template,
        })
    }

    /// Loads a CA from its two files. Refuses a key file that group or others can access.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, CaError> {
        let key_mode = fs::metadata(key_path)
            .map_err(|source| CaError::Read {
                path: key_path.to_owned(),
                source,
            })?
            .permissions()
            .mode()
            & 0o7777;
        if key_mode & 0o077 != 0 {
            return Err(CaError::KeyPermissions {
                path: key_path.to_owned(),
                mode: key_mode,
            });
        }
        let cert_pem = read_text(cert_path)?;
        let key_pem = read_text(key_path)?;
        Self::from_pem(&cert_pem, &key_pem)
    }

    /// Loads the CA kept in `dir` (as written by [`init`]); [`CaError::Missing`] if there is none.
    pub fn load_dir(dir: &Path) -> Result<Self, CaError> {
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        if !cert_path.is_file() || !key_path.is_file() {
            return Err(CaError::Missing {
                dir: dir.to_owned(),
            });
        }
        Self::load(&cert_path, &key_path)
    }

    /// The CA certificate in PEM form.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate in DER form (for trust stores).
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// SHA-256 of the certificate's DER, as colon-separated upper-case hex (`AA:BB:..`).
    pub fn fingerprint_sha256(&self) -> String {
        fingerprint_sha256(&self.cert_der)
    }

    /// A server configuration that presents, for each handshake, a leaf for the SNI name
    /// (canonicalised). A handshake without a usable SNI is aborted; see
    /// [`Self::server_config_for_host`] for those.
    pub fn server_config(self: &Arc<Self>, alpn: Vec<Vec<u8>>) -> Arc<ServerConfig> {
        let mut config = self.tls_template.clone();
        config.cert_resolver = Arc::new(SniResolver {
            ca: Arc::clone(self),
        });
        config.alpn_protocols = alpn;
        Arc::new(config)
    }

    /// A server configuration that always presents the leaf of `host`, whatever SNI the
    /// client sends (meant for one connection whose destination is already known).
    pub fn server_config_for_host(
        self: &Arc<Self>,
        host: &Host,
        alpn: Vec<Vec<u8>>,
    ) -> Result<Arc<ServerConfig>, CaError> {
        let leaf = self.leaf_for(host)?;
        let mut config = self.tls_template.clone();
        config.cert_resolver = Arc::new(FixedResolver { leaf });
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.alpn_protocols = alpn;
        Ok(Arc::new(config))
    }

    /// The leaf certificate and key for `host`, chain `[leaf, CA]`. Cached: a second call
    /// returns the same `Arc` until the leaf is within a day of expiry or evicted.
    pub fn leaf_for(&self, host: &Host) -> Result<Arc<CertifiedKey>, CaError> {
        let now = unix_now();
        if let Some(leaf) = self.cache().get(host, now) {
            return Ok(leaf);
        }
        // Mint outside the lock: signing takes about a millisecond.
        let minted = self.mint_leaf(host, now)?;
        Ok(self.cache().insert(host.clone(), minted, now))
    }

    /// Mints the leaves of `hosts` (the first [`PREMINT_LEAVES`]) on a thread of its own and
    /// returns at once, so that a first handshake with one of them finds its leaf made:
    /// with an RSA CA, the leaf's signature is most of a first handshake's CPU
    /// (docs/benchmarks.md, "Start-up, phase by phase"). A leaf that cannot be minted is
    /// left out; the handshake that needs it meets the error again and is aborted.
    /// Returns the thread's handle (callers may drop it; it ends by itself).
    pub fn premint(self: &Arc<Self>, mut hosts: Vec<Host>) -> Option<JoinHandle<()>> {
        hosts.truncate(PREMINT_LEAVES);
        if hosts.is_empty() {
            return None;
        }
        let ca = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("airlock-leaves".into())
            .spawn(move || {
                for host in hosts {
                    if let Err(error) = ca.leaf_for(&host) {
                        tracing::debug!("cannot mint the leaf of {host} ahead of time: {error}");
                    }
                }
            });
        spawned
            .map_err(|error| tracing::debug!("cannot start the leaf-minting thread: {error}"))
            .ok()
    }

    /// How many leaf certificates are cached (a metrics gauge).
    pub fn cached_leaves(&self) -> usize {
        self.cache().entries.len()
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, LeafCache> {
        // The cache holds no invariant a panicking holder could break halfway.
        self.leaves.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn mint_leaf(&self, host: &Host, now: Duration) -> Result<CachedLeaf, CaError> {
        let host_text = match host {
            Host::Name(name) => name.clone(),
            Host::Ip(addr) => addr.to_string(),
        };
        let key = leaf_key::run_key()?;
        let mut params = CertificateParams::new(vec![host_text.clone()])?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, host_text);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, LEAF_BACKDATE, LEAF_LIFETIME);
        let cert = params.signed_by(&key.pair, &self.issuer)?;
        let chain = vec![cert.der().clone(), self.cert_der.clone()];
        // The certificate was issued for this key's public half: no consistency check needed.
        let certified = CertifiedKey::new(chain, Arc::clone(&key.signing));
        Ok(CachedLeaf {
            leaf: Arc::new(certified),
            renew_at: now + LEAF_LIFETIME.saturating_sub(LEAF_RENEW_MARGIN),
            last_used: 0,
        })
    }
}

/// The directory that keeps the CA: `$AIRLOCK_HOME` if set, else `$XDG_DATA_HOME/airlock`,
/// else `$HOME/.local/share/airlock`; always absolute.
pub fn default_dir() -> Result<PathBuf, CaError> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let dir = if let Some(home) = non_empty("AIRLOCK_HOME") {
        PathBuf::from(home)
    } else if let Some(data) = non_empty("XDG_DATA_HOME").filter(|v| Path::new(v).is_absolute()) {
        PathBuf::from(data).join("airlock")
    } else if let Some(home) = non_empty("HOME") {
        PathBuf::from(home).join(".local/share/airlock")
    } else {
        return Err(CaError::NoHome);
    };
    std::path::absolute(&dir).map_err(|source| CaError::Absolute { path: dir, source })
}

/// File name of the lock taken while a CA is created in the CA directory.
pub const LOCK_FILE: &str = ".ca.lock";

/// How long [`init`] waits for another process creating the CA in the same directory.
const LOCK_WAIT: Duration = Duration::from_secs(20);

/// Creates a CA in `dir` unless a complete one is there (then it is kept, unless `force`).
/// The directory is created with mode 0700; `ca-key.pem` (0600) and `ca.pem` (0644) are each
/// written to a temporary file and renamed into place, so neither is ever half-written.
/// Creation holds an exclusive lock (`flock` on [`LOCK_FILE`] in `dir`, waited for at most
/// 20 s) and looks for a complete CA again under it, so that runs starting at once on a
/// fresh directory all use the one CA the first of them wrote, never a key of one and
/// the certificate of another.
pub fn init(dir: &Path, force: bool) -> Result<InitOutcome, CaError> {
    let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    if !force && cert_path.is_file() && key_path.is_file() {
        return Ok(InitOutcome::Kept);
    }
    if let Some(parent) = dir.parent() {
        fs::create_dir_all(parent).map_err(|source| CaError::Write {
            path: parent.to_owned(),
            source,
        })?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(source) => {
            return Err(CaError::Write {
                path: dir.to_owned(),
                source,
            });
        }
    }
    let _lock = lock_dir(dir)?;
    if !force && cert_path.is_file() && key_path.is_file() {
        return Ok(InitOutcome::Kept);
    }
    let (_, files) = CertificateAuthority::generate()?;
    // Key first: a crash in between leaves no certificate, which `init` treats as no CA.
    write_atomically(&key_path, files.key_pem.as_bytes(), 0o600)?;
    write_atomically(&cert_path, files.cert_pem.as_bytes(), 0o644)?;
    Ok(InitOutcome::Created)
}

/// The exclusive lock of the CA directory `dir` ([`LOCK_FILE`], created 0600, not
/// followed if a link), waited for at most [`LOCK_WAIT`]; released when dropped.
fn lock_dir(dir: &Path) -> Result<Flock<fs::File>, CaError> {
    let path = dir.join(LOCK_FILE);
    let error = |source| CaError::Write {
        path: path.clone(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(error)?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((back, Errno::EWOULDBLOCK)) if std::time::Instant::now() < deadline => {
                file = back;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(error(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "another process held the CA directory's lock for 20 s",
                )));
            }
            Err((_, errno)) => return Err(error(io::Error::from(errno))),
        }
    }
}

/// SHA-256 of `der` as colon-separated upper-case hex.
pub fn fingerprint_sha256(der: &[u8]) -> String {
    Sha256::digest(der)
        .iter()
        .map(|byte| format!("{byte:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn read_text(path: &Path) -> Result<String, CaError> {
    fs::read_to_string(path).map_err(|source| CaError::Read {
        path: path.to_owned(),
        source,
    })
}

fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), CaError> {
    let write_error = |source| CaError::Write {
        path: path.to_owned(),
        source,
    };
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp_path = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    // A stale temporary file from a crashed run is ours to replace.
    match fs::remove_file(&temp_path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(write_error(source)),
    }
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp_path)?;
        // The umask may have narrowed the mode: set it exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&temp_path, path)
    })();
    if result.is_err() {
        // Best effort: the error that matters is the one reported below.
        let _ = fs::remove_file(&temp_path);
    }
    result.map_err(write_error)
}

/// The CA key as rcgen's signer, parsed once: the algorithm is the one rustls found in it
/// (rcgen's own guess parses an RSA key five times over, each time with aws-lc's full key
/// check: most of the instructions before `listen`, docs/benchmarks.md, "Start-up, phase
/// by phase"). The candidates and their order are the guess's own, so the result is
/// the same; a type rustls does not name falls back to the guess.
fn issuing_key(
    key_der: &PrivateKeyDer<'_>,
    algorithm: rustls::SignatureAlgorithm,
) -> Result<KeyPair, rcgen::Error> {
    let candidates: &[&'static rcgen::SignatureAlgorithm] = match algorithm {
        rustls::SignatureAlgorithm::RSA => &[&rcgen::PKCS_RSA_SHA256],
        rustls::SignatureAlgorithm::ECDSA => &[
            &PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_ECDSA_P521_SHA512,
        ],
        rustls::SignatureAlgorithm::ED25519 => &[&rcgen::PKCS_ED25519],
        _ => &[],
    };
    let mut first_error = None;
    for candidate in candidates {
        match KeyPair::from_der_and_sign_algo(key_der, candidate) {
            Ok(key) => return Ok(key),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    // The guess's own refusal is generic: aws-lc's reason for the type rustls found says more.
    KeyPair::try_from(key_der).map_err(|error| first_error.unwrap_or(error))
}

/// The first `CERTIFICATE` block of `pem` (the one [`CertificateDer::from_pem_slice`] reads).
fn first_certificate_block(pem: &str) -> Option<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = pem.find(BEGIN)?;
    let end = start + pem[start..].find(END)? + END.len();
    Some(format!("{}\n", &pem[start..end]))
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// Sets `params` valid from `backdate` ago to `lifetime` from now.
fn set_validity(params: &mut CertificateParams, backdate: Duration, lifetime: Duration) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = unix_now();
    params.not_before = epoch + now.saturating_sub(backdate);
    params.not_after = epoch + (now + lifetime);
}

struct CachedLeaf {
    leaf: Arc<CertifiedKey>,
    /// Time since the epoch after which the leaf is minted again.
    renew_at: Duration,
    /// Tick of the last lookup (for least-recently-used eviction).
    last_used: u64,
}

#[derive(Default)]
struct LeafCache {
    entries: HashMap<Host, CachedLeaf>,
    tick: u64,
}

impl LeafCache {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn get(&mut self, host: &Host, now: Duration) -> Option<Arc<CertifiedKey>> {
        let tick = self.next_tick();
        let entry = self.entries.get_mut(host)?;
        if now >= entry.renew_at {
            return None;
        }
        entry.last_used = tick;
        Some(Arc::clone(&entry.leaf))
    }

    /// Inserts a freshly minted leaf, unless another thread inserted a still-fresh one
    /// meanwhile (then that one is returned, so every caller shares one `Arc`).
    fn insert(&mut self, host: Host, minted: CachedLeaf, now: Duration) -> Arc<CertifiedKey> {
        if let Some(existing) = self.get(&host, now) {
            return existing;
        }
        if !self.entries.contains_key(&host) && self.entries.len() >= LEAF_CACHE_CAPACITY {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(host, _)| host.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        let tick = self.next_tick();
        let leaf = Arc::clone(&minted.leaf);
        self.entries.insert(
            host,
            CachedLeaf {
                last_used: tick,
                ..minted
            },
        );
        leaf
    }
}

/// Picks the leaf from the SNI name.
struct SniResolver {
    ca: Arc<CertificateAuthority>,
}

impl fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SniResolver").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(sni) = client_hello.server_name() else {
            tracing::debug!("TLS client sent no SNI: handshake refused");
            return None;
        };
        let host = match canonical_host(sni) {
            Ok(host) => host,
            Err(err) => {
                tracing::debug!(%sni, %err, "SNI is not a valid host: handshake refused");
                return None;
            }
        };
        match self.ca.leaf_for(&host) {
            Ok(leaf) => Some(leaf),
            Err(err) => {
                tracing::warn!(%sni, %err, "cannot mint a leaf certificate: handshake refused");
                None
            }
        }
    }
}

/// Always presents one leaf.
#[derive(Debug)]
struct FixedResolver {
    leaf: Arc<CertifiedKey>,
}

impl ResolvesServerCert for FixedResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.leaf))
    }
}

/// The resolver of the template configuration: never used for a handshake.
#[derive(Debug)]
struct NoCertificate;

impl ResolvesServerCert for NoCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        None
    }
}

#[cfg(test)]
mod tests;
