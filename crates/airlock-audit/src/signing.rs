//! The Ed25519 key that signs the audit chain's checkpoints ([`crate::checkpoint`]).
//!
//! The key lives beside the CA, in airlock's state directory, which the jail hides from the
//! command (docs/security.md): [`KEY_FILE`] (PKCS#8, PEM, mode 0600) and [`PUBLIC_FILE`]
//! (SubjectPublicKeyInfo, PEM, mode 0644, what `airlock audit verify` checks with). Both are
//! created on first use ([`Signer::load_or_create`]); a key file is never overwritten.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The private key's file name, in the CA's directory.
pub const KEY_FILE: &str = "audit-key.pem";

/// The public key's file name, in the CA's directory.
pub const PUBLIC_FILE: &str = "audit-key.pub.pem";

/// The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410), before the 32 key bytes.
const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Signs checkpoints.
pub struct Signer {
    pair: Ed25519KeyPair,
    id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("id", &self.id).finish()
    }
}

impl Signer {
    /// The key in `dir` ([`KEY_FILE`]), created with its public half if absent.
    pub fn load_or_create(dir: &Path) -> Result<Signer, String> {
        let path = dir.join(KEY_FILE);
        let signer = match fs::read_to_string(&path) {
            Ok(pem) => Self::from_pem(&pem).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => create(&path)?,
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let public = dir.join(PUBLIC_FILE);
        if !public.exists() {
            write_new(&public, signer.public_pem().as_bytes(), 0o644)
                .or_else(|e| if public.exists() { Ok(()) } else { Err(e) })
                .map_err(|e| format!("cannot write {}: {e}", public.display()))?;
        }
        Ok(signer)
    }

    /// A key from its PKCS#8 PEM.
    pub fn from_pem(pem: &str) -> Result<Signer, String> {
        let der = pem_body(pem, "PRIVATE KEY").ok_or("not a PEM private key")?;
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der)
            .map_err(|e| format!("not an Ed25519 key: {e}"))?;
        let id = key_id(pair.public_key().as_ref());
        Ok(Signer { pair, id })
    }

    /// The key's id: the first 16 hex digits of the SHA-256 of its public key.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }

    /// The public key as a SubjectPublicKeyInfo PEM.
    pub fn public_pem(&self) -> String {
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(self.pair.public_key().as_ref());
        to_pem("PUBLIC KEY", &der)
    }
}

/// A public key checkpoints are verified with.
#[derive(Clone, Debug)]
pub struct PublicKey {
    bytes: Vec<u8>,
    id: String,
}

impl PublicKey {
    /// Reads a SubjectPublicKeyInfo PEM ([`PUBLIC_FILE`]).
    pub fn read(path: &Path) -> Result<PublicKey, String> {
        let pem = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_pem(&pem).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A public key from its SubjectPublicKeyInfo PEM.
    pub fn from_pem(pem: &str) -> Result<PublicKey, String> {
        let der = pem_body(pem, "PUBLIC KEY").ok_or("not a PEM public key")?;
        let bytes = der
            .strip_prefix(&SPKI_PREFIX[..])
            .filter(|key| key.len() == 32)
            .ok_or("not an Ed25519 public key")?
            .to_vec();
        let id = key_id(&bytes);
        Ok(PublicKey { bytes, id })
    }

    /// The key's id ([`Signer::id`]).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether `signature` is this key's over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.bytes)
            .verify(message, signature)
            .is_ok()
    }
}

/// Where the public key sits beside a CA directory.
pub fn public_path(dir: &Path) -> PathBuf {
    dir.join(PUBLIC_FILE)
}

fn key_id(public: &[u8]) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, public);
    let mut head = [0u8; 32];
    head.copy_from_slice(digest.as_ref());
    crate::chain::to_hex(&head)[..16].to_owned()
}

/// Creates a key at `path` (mode 0600); when another process created it first, loads
/// theirs.
fn create(path: &Path) -> Result<Signer, String> {
    let document = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
        .map_err(|_| "cannot generate an Ed25519 key".to_owned())?;
    let pem = to_pem("PRIVATE KEY", document.as_ref());
    match write_new(path, pem.as_bytes(), 0o600) {
        Ok(()) => Signer::from_pem(&pem),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            let theirs = fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            Signer::from_pem(&theirs).map_err(|e| format!("{}: {e}", path.display()))
        }
        Err(error) => Err(format!("cannot write {}: {error}", path.display())),
    }
}

/// Writes `contents` to a new file at `path` (never replacing one): written whole to a
/// temporary file, then linked into place.
fn write_new(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let temp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let _ = fs::remove_file(&temp);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::hard_link(&temp, path)
    })();
    let _ = fs::remove_file(&temp);
    result
}

fn to_pem(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(chunk));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem[start..].find(&end)?;
    let body: String = pem[start..stop].split_whitespace().collect();
    STANDARD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_created_once_with_private_modes_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::load_or_create(dir.path()).expect("created");
        let mode = |name: &str| {
            fs::metadata(dir.path().join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(KEY_FILE), 0o600);
        assert_eq!(mode(PUBLIC_FILE), 0o644);
        let again = Signer::load_or_create(dir.path()).expect("loaded");
        assert_eq!(signer.id(), again.id());
        let public = PublicKey::read(&public_path(dir.path())).expect("public key");
        assert_eq!(public.id(), signer.id());
        let signature = again.sign(b"message");
        assert!(public.verify(b"message", &signature));
        assert!(!public.verify(b"massage", &signature));
        let other = tempfile::tempdir().unwrap();
        let stranger = Signer::load_or_create(other.path()).unwrap();
        assert!(!public.verify(b"message", &stranger.sign(b"message")));
    }

    #[test]
    fn bad_pem_is_refused() {
        assert!(PublicKey::from_pem("nothing").is_err());
        assert!(
            Signer::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
                .is_err()
        );
    }
}
