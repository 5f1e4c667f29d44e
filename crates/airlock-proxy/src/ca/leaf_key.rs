//! The run's one leaf key: every interception certificate the process mints (one per host)
//! carries the same ECDSA P-256 public key, generated once per process from aws-lc's
//! generator (docs/security.md, "One leaf key per run").
//!
//! Generating it is the first thing that needs random numbers, so it is also what seeds
//! aws-lc's generator (CPU jitter entropy plus the operating system's: 30–55 ms of CPU on
//! first use, measured). [`prepare`] starts both on a thread of its own as soon as a session
//! starts, so that the first client's handshake finds the generator seeded and the key made
//! (docs/benchmarks.md, "Start-up: one leaf key per run").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256};
use rustls::sign::SigningKey;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use super::CaError;

/// The key pair every leaf of this process is issued for, in the two forms minting needs.
pub(super) struct LeafKey {
    /// The public half goes into each leaf (rcgen reads it from the pair).
    pub(super) pair: KeyPair,
    /// The private half, loaded once into rustls' signer for the handshakes.
    pub(super) signing: Arc<dyn SigningKey>,
}

/// The key, once made.
static RUN_KEY: OnceLock<Arc<LeafKey>> = OnceLock::new();
/// Held while the key is being made, so that it is made once (a failure is not kept: the
/// next caller tries again).
static MAKING: Mutex<()> = Mutex::new(());
/// Whether [`prepare`] has started its thread.
static PREPARING: AtomicBool = AtomicBool::new(false);

/// Starts making the run's leaf key (and so seeding aws-lc's generator) on a thread of its
/// own; returns at once. Calling it again, or after the key exists, does nothing.
pub fn prepare() {
    if RUN_KEY.get().is_some() || PREPARING.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("airlock-leaf-key".into())
        .spawn(|| {
            // A failure here is met again, and reported, by the handshake that needs it.
            if let Err(error) = run_key() {
                tracing::debug!("cannot make the leaf key ahead of time: {error}");
            }
        });
    if let Err(error) = spawned {
        PREPARING.store(false, Ordering::Release);
        tracing::debug!("cannot start the leaf-key thread: {error}");
    }
}

/// The run's leaf key, made now if no one has made it yet (waiting for [`prepare`]'s thread
/// when it is making it).
pub(super) fn run_key() -> Result<Arc<LeafKey>, CaError> {
    if let Some(key) = RUN_KEY.get() {
        return Ok(Arc::clone(key));
    }
    // Nothing guarded by the lock can be left half-done by a panicking holder.
    let _making = MAKING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(key) = RUN_KEY.get() {
        return Ok(Arc::clone(key));
    }
    let key = Arc::new(LeafKey::generate()?);
    Ok(Arc::clone(RUN_KEY.get_or_init(|| key)))
}

impl LeafKey {
    /// A fresh ECDSA P-256 key from aws-lc's generator, loaded into rustls' signer.
    fn generate() -> Result<LeafKey, CaError> {
        let pair = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.serialize_der()));
        // The key provider of the CA's configurations (aws-lc-rs).
        let signing = rustls::crypto::aws_lc_rs::default_provider()
            .key_provider
            .load_private_key(der)?;
        Ok(LeafKey { pair, signing })
    }
}
