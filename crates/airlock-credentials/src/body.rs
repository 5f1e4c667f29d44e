//! Request bodies that arrive in chunks: [`BodySwap`] replaces the surrogates of in-scope
//! `body: true` secrets by their real values and trips on the surrogate of any secret whose
//! hosts do not include the destination, holding back at most the longest surrogate minus
//! one byte between chunks so that a surrogate split across chunk borders is still seen.

use std::sync::Arc;

use airlock_policy::Reason;

use crate::Credentials;

/// What a secret's surrogate found in a body leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// In scope and `body: true`: replaced by the real value.
    Swap,
    /// In scope without `body: true`: left as it is.
    Keep,
    /// Out of scope: the request is refused (`secret_out_of_scope`).
    Trip,
}

/// Scans and rewrites one request body ([`Credentials::body_swap`]).
pub struct BodySwap {
    credentials: Arc<Credentials>,
    actions: Vec<Action>,
    used: Vec<bool>,
    longest: usize,
    carry: Vec<u8>,
}

impl Credentials {
    /// Whether any secret asks for body swapping; only then are request bodies scanned.
    pub fn scans_bodies(&self) -> bool {
        self.entries.iter().any(|entry| entry.body)
    }

    /// A scanner for the body of a request to a host where `in_scope` secrets apply, or
    /// `None` when bodies are not scanned ([`Credentials::scans_bodies`]).
    pub fn body_swap(self: &Arc<Self>, in_scope: &[&str]) -> Option<BodySwap> {
        if !self.scans_bodies() {
            return None;
        }
        let actions: Vec<Action> = self
            .entries
            .iter()
            .map(
                |entry| match (in_scope.contains(&entry.name.as_str()), entry.body) {
                    (true, true) => Action::Swap,
                    (true, false) => Action::Keep,
                    (false, _) => Action::Trip,
                },
            )
            .collect();
        let longest = self
            .entries
            .iter()
            .map(|entry| entry.surrogate.len())
            .max()
            .unwrap_or(1);
        Some(BodySwap {
            used: vec![false; actions.len()],
            actions,
            longest,
            credentials: Arc::clone(self),
            carry: Vec::new(),
        })
    }
}

impl BodySwap {
    /// Whether the body's length can change (a swapped secret's surrogate and real value
    /// differ in length): then a `Content-Length` must not be forwarded.
    pub fn may_change_length(&self) -> bool {
        self.credentials
            .entries
            .iter()
            .zip(&self.actions)
            .any(|(entry, action)| {
                *action == Action::Swap && entry.real.len() != entry.surrogate.len()
            })
    }

    /// Takes the next chunk; returns what can be forwarded now, or the refusal when an
    /// out-of-scope surrogate appears (nothing of it is released).
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<u8>, Reason> {
        let mut pending = std::mem::take(&mut self.carry);
        pending.extend_from_slice(chunk);
        let (out, done) = self.rewrite(&pending, false)?;
        let hold_from = done.max(pending.len().saturating_sub(self.longest - 1));
        let mut out = out;
        out.extend_from_slice(&pending[done..hold_from]);
        self.carry = pending.split_off(hold_from);
        Ok(out)
    }

    /// Ends the body: returns what was held back, rewritten.
    pub fn finish(&mut self) -> Result<Vec<u8>, Reason> {
        let pending = std::mem::take(&mut self.carry);
        let (mut out, done) = self.rewrite(&pending, true)?;
        out.extend_from_slice(&pending[done..]);
        Ok(out)
    }

    /// The secrets swapped so far, in policy order.
    pub fn swapped(&self) -> Vec<String> {
        self.credentials
            .entries
            .iter()
            .zip(&self.used)
            .filter(|(_, used)| **used)
            .map(|(entry, _)| entry.name.clone())
            .collect()
    }

    /// Rewrites the matches in `pending` that no further data could change (all of them at
    /// the end of the body); returns the output and where the rewritten part ends.
    fn rewrite(&mut self, pending: &[u8], at_end: bool) -> Result<(Vec<u8>, usize), Reason> {
        let mut out = Vec::with_capacity(pending.len());
        let mut done = 0;
        let Some(matcher) = &self.credentials.surrogates else {
            return Ok((out, 0));
        };
        for found in matcher.find_iter(pending) {
            if !at_end && found.start + self.longest > pending.len() {
                break;
            }
            let index = found.pattern;
            match self.actions[index] {
                Action::Trip => return Err(Reason::SecretOutOfScope),
                Action::Keep => {}
                Action::Swap => {
                    out.extend_from_slice(&pending[done..found.start]);
                    out.extend_from_slice(self.credentials.entries[index].real.as_bytes());
                    done = found.end;
                    self.used[index] = true;
                }
            }
        }
        Ok((out, done))
    }
}
