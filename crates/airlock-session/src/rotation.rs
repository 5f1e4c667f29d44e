//! Rotation of `file:` secrets: while a proxy runs, each such file is looked at every
//! [`POLL_INTERVAL`]; when its modification time or length changes it is re-read and the
//! proxy's credentials are swapped for a store with the new real value and the *same*
//! surrogates ([`Credentials::rotated`]), so the sandbox notices nothing. A file that
//! cannot be read or is empty keeps the previous value and says so on stderr (the secret's
//! name and path, never a value).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_credentials::Credentials;
use airlock_policy::model::{Secret, SecretSource};
use airlock_proxy::Proxy;
use arc_swap::ArcSwap;

use crate::secret_sources::read_one;

/// How often the files are looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What a file looked like when last read.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Starts watching the `file:` secrets of the policy `proxy` runs with.
pub fn watch_proxy(proxy: &Proxy) {
    let secrets = proxy.policy().load().policy().secrets.clone();
    watch(&secrets, proxy.credentials().clone());
}

/// Starts watching the `file:` secrets among `secrets` (nothing to do without any); the
/// task ends when the runtime does.
pub fn watch(secrets: &[Secret], credentials: Arc<ArcSwap<Credentials>>) {
    let mut watched: Vec<(Secret, PathBuf, Option<Stamp>)> = secrets
        .iter()
        .filter_map(|secret| match &secret.source {
            SecretSource::File(path) => Some((secret.clone(), path.clone(), stamp(path))),
            _ => None,
        })
        .collect();
    if watched.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(POLL_INTERVAL);
        loop {
            ticks.tick().await;
            for (secret, path, last) in &mut watched {
                let now = stamp(path);
                if now == *last {
                    continue;
                }
                *last = now;
                reread(secret, path, &credentials);
            }
        }
    });
}

fn reread(secret: &Secret, path: &Path, credentials: &ArcSwap<Credentials>) {
    let name = &secret.name;
    let value = match read_one(secret) {
        Ok(value) => value,
        Err(e) => {
            eprintln!("airlock: secret {name}: {e}; keeping the previous value");
            return;
        }
    };
    match credentials.load().rotated(name, value) {
        Ok(rotated) => {
            credentials.store(Arc::new(rotated));
            eprintln!("airlock: secret {name} re-read from {}", path.display());
        }
        Err(e) => eprintln!("airlock: secret {name}: {e}; keeping the previous value"),
    }
}
