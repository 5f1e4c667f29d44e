//! Tokens replaced by an OAuth refresh (docs/secrets.md, "Refreshes"): the store with
//! new real values *and* new surrogates for some secrets, every option of theirs (hosts,
//! headers, body) kept, the old values and surrogates retired (still redacted and
//! scrubbed, still counted as their secret's by the outbound guard).

use crate::{CredentialError, Credentials};

/// Retired values kept at most: the oldest go first once a long session refreshed this
/// often (a retired value is an expired or superseded token).
const MAX_RETIRED: usize = 512;

/// One secret's new value: its name, the new real value and the new surrogate.
pub struct Refresh {
    /// The secret's name.
    pub name: String,
    /// The new real value.
    pub real: String,
    /// The new surrogate (the caller makes it, format-preserving).
    pub surrogate: String,
}

impl std::fmt::Debug for Refresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refresh")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// Whether a secret named `name` is in the store.
    pub fn has_secret(&self, name: &str) -> bool {
        self.entries.iter().any(|entry| entry.name == name)
    }

    /// `(NAME, SURROGATE)` of every retired value (replaced by a refresh or a rotation),
    /// oldest first: a request carrying one of these holds a superseded token.
    pub fn retired_surrogates(&self) -> impl Iterator<Item = (&str, &str)> {
        self.retired
            .iter()
            .map(|(name, _, surrogate)| (name.as_str(), surrogate.as_str()))
    }

    /// The same store with each of `refreshes` in place: the named secret gets the new
    /// real value and the new surrogate; its old pair is retired. A name not in the store
    /// is ignored.
    pub fn refreshed(&self, refreshes: &[Refresh]) -> Result<Self, CredentialError> {
        let mut retired = self.retired.clone();
        let secrets = self
            .secrets
            .iter()
            .zip(&self.entries)
            .map(|(secret, entry)| {
                let mut secret = secret.clone();
                match refreshes.iter().find(|r| r.name == entry.name) {
                    Some(refresh) => {
                        retired.push((
                            entry.name.clone(),
                            entry.real.clone(),
                            entry.surrogate.clone(),
                        ));
                        secret.surrogate = Some(refresh.surrogate.clone());
                        (secret, refresh.real.clone())
                    }
                    None => {
                        secret.surrogate = Some(entry.surrogate.clone());
                        (secret, entry.real.clone())
                    }
                }
            })
            .collect();
        if retired.len() > MAX_RETIRED {
            retired.drain(..retired.len() - MAX_RETIRED);
        }
        let mut refreshed = Self::assemble(secrets, retired)?;
        // Surrogates that were generated stay "generated" for a later rotation.
        refreshed.secrets = self.secrets.clone();
        Ok(refreshed)
    }
}

#[cfg(test)]
mod tests {
    use airlock_policy::model::{Secret, SecretSource};

    use super::*;

    fn store() -> Credentials {
        let mut access = Secret::new("file:claude:accessToken", SecretSource::Value("x".into()));
        access.surrogate = Some("sk-ant-oat01-SURROGATE-OLD".into());
        let mut refresh = Secret::new("file:claude:refreshToken", SecretSource::Value("y".into()));
        refresh.surrogate = Some("sk-ant-ort01-SURROGATE-OLD".into());
        refresh.body = true;
        Credentials::new(vec![
            (access, "sk-ant-oat01-REAL-OLD".into()),
            (refresh, "sk-ant-ort01-REAL-OLD".into()),
        ])
        .expect("store")
    }

    #[test]
    fn a_refresh_replaces_value_and_surrogate_and_keeps_the_old_redacted() {
        let old = store();
        let new = old
            .refreshed(&[Refresh {
                name: "file:claude:accessToken".into(),
                real: "sk-ant-oat01-REAL-NEW".into(),
                surrogate: "sk-ant-oat01-SURROGATE-NEW".into(),
            }])
            .expect("refreshed");
        let surrogates = new.surrogates();
        assert_eq!(surrogates[0].1, "sk-ant-oat01-SURROGATE-NEW");
        assert_eq!(surrogates[1].1, "sk-ant-ort01-SURROGATE-OLD");
        let redacted = new
            .redactor()
            .redact("a sk-ant-oat01-REAL-OLD b sk-ant-oat01-REAL-NEW")
            .into_owned();
        assert!(!redacted.contains("REAL"), "{redacted}");
        let scrubbed = new.scrubber().scrub(b"sk-ant-oat01-REAL-NEW").into_owned();
        assert_eq!(scrubbed, b"sk-ant-oat01-SURROGATE-NEW");
        assert!(new.has_secret("file:claude:refreshToken") && !new.has_secret("nope"));
    }
}
