//! The inspection memory budget (`limits.buffer_memory`): every byte the proxy holds to
//! inspect a body whole, and every decoded byte of a compressed request body with its
//! decoder's memory (`crate::metered`), is taken from one proxy-wide [`Budget`] before it
//! is buffered and given back when its [`Held`] is dropped. A body that waits longer than the
//! back-pressure bound for its bytes, or that could never fit, is refused as
//! [`Overloaded`] (503 `overloaded`, docs/contract.md §4). Also the per-client connection
//! cap (`limits.connections_per_client`, at most a quarter of `limits.connections`):
//! [`PerClient`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a body waits for budget (back-pressure) before it is refused.
pub(crate) const BACKPRESSURE_WAIT: Duration = Duration::from_secs(1);

/// The budget is taken: the body is refused (503 `overloaded`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overloaded;

/// The bytes that may be held for inspection at once, across every request.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    bytes: Arc<Semaphore>,
    total: usize,
    wait: Duration,
}

/// Bytes taken from a [`Budget`]; given back when dropped.
#[derive(Debug, Default)]
pub(crate) struct Held {
    permit: Option<OwnedSemaphorePermit>,
}

impl Held {
    /// The bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.permit
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// Adds the bytes `other` holds to these.
    pub(crate) fn merge(&mut self, other: Held) {
        match (&mut self.permit, other.permit) {
            (Some(existing), Some(permit)) => existing.merge(permit),
            (none @ None, permit) => *none = permit,
            (Some(_), None) => {}
        }
    }

    /// Moves `bytes` of these (all of them, if fewer are held) into a new [`Held`].
    pub(crate) fn split(&mut self, bytes: usize) -> Held {
        let bytes = bytes.min(self.bytes());
        if bytes == 0 {
            return Held::default();
        }
        Held {
            permit: self.permit.as_mut().and_then(|permit| permit.split(bytes)),
        }
    }
}

impl Budget {
    /// A budget of `total` bytes (capped at what a semaphore can count); bodies wait up to
    /// `wait` for their bytes.
    pub(crate) fn new(total: u64, wait: Duration) -> Budget {
        let total = usize::try_from(total)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Budget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
            wait,
        }
    }

    /// Whether `bytes` could ever be held at once.
    pub(crate) fn fits(&self, bytes: u64) -> bool {
        usize::try_from(bytes).is_ok_and(|bytes| bytes <= self.total)
    }

    /// Bytes free now.
    #[cfg(test)]
    fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Adds `bytes` to `held`, waiting up to the back-pressure bound; `Err` when they
    /// would take `held` over the whole budget or did not come free in time.
    pub(crate) async fn take(&self, held: &mut Held, bytes: usize) -> Result<(), Overloaded> {
        if bytes == 0 {
            return Ok(());
        }
        if held.bytes().saturating_add(bytes) > self.total {
            return Err(Overloaded);
        }
        let count = u32::try_from(bytes).map_err(|_| Overloaded)?;
        let acquire = self.bytes.clone().acquire_many_owned(count);
        let permit = match tokio::time::timeout(self.wait, acquire).await {
            Ok(Ok(permit)) => permit,
            // Closed (never done) or timed out: refused either way.
            _ => return Err(Overloaded),
        };
        held.merge(Held {
            permit: Some(permit),
        });
        Ok(())
    }

    /// Takes `bytes` more for a holder that already holds `holding`: a new [`Held`], as
    /// [`Budget::take`] takes them (owned, so that a body can keep the wait between
    /// polls).
    pub(crate) async fn take_more(self, holding: usize, bytes: usize) -> Result<Held, Overloaded> {
        if !self.fits(holding.saturating_add(bytes) as u64) {
            return Err(Overloaded);
        }
        let mut held = Held::default();
        self.take(&mut held, bytes).await?;
        Ok(held)
    }
}

/// Concurrent connections per client address.
#[derive(Debug)]
pub(crate) struct PerClient {
    cap: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection of a client; its slot is given back when dropped.
#[derive(Debug)]
pub(crate) struct ClientSlot {
    owner: Arc<PerClient>,
    client: IpAddr,
}

impl PerClient {
    /// At most `cap` connections per address.
    pub(crate) fn new(cap: u32) -> Arc<PerClient> {
        Arc::new(PerClient {
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a new connection from `client`; `None` when it already holds `cap`.
    pub(crate) fn admit(self: &Arc<Self>, client: IpAddr) -> Option<ClientSlot> {
        // A poisoned lock only means a panic elsewhere: the counts are still sound.
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(client).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            owner: self.clone(),
            client,
        })
    }

    /// Connections open from `client`.
    #[cfg(test)]
    fn open(&self, client: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&client).copied().unwrap_or(0)
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.owner.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(total: u64) -> Budget {
        Budget::new(total, Duration::from_millis(50))
    }

    #[tokio::test]
    async fn bytes_are_given_back_when_the_holder_drops() {
        let budget = budget(100);
        let mut held = Held::default();
        budget.take(&mut held, 60).await.unwrap();
        budget.take(&mut held, 40).await.unwrap();
        assert_eq!((held.bytes(), budget.available()), (100, 0));
        let mut other = Held::default();
        assert_eq!(budget.take(&mut other, 1).await, Err(Overloaded));
        drop(held);
        assert_eq!(budget.available(), 100);
        budget.take(&mut other, 1).await.unwrap();
    }

    #[tokio::test]
    async fn what_can_never_fit_is_refused_at_once() {
        let budget = Budget::new(100, Duration::from_secs(3600));
        let mut held = Held::default();
        budget.take(&mut held, 90).await.unwrap();
        assert_eq!(budget.take(&mut held, 11).await, Err(Overloaded));
        assert!(budget.fits(100) && !budget.fits(101));
        assert_eq!(held.bytes(), 90);
    }

    #[tokio::test]
    async fn a_waiting_body_gets_bytes_freed_within_the_bound() {
        let budget = Budget::new(10, Duration::from_secs(5));
        let mut first = Held::default();
        budget.take(&mut first, 10).await.unwrap();
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move {
                let mut held = Held::default();
                budget.take(&mut held, 5).await.map(|()| held.bytes())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        assert_eq!(waiter.await.unwrap(), Ok(5));
    }

    #[tokio::test]
    async fn held_bytes_split_and_merge_without_loss() {
        let budget = budget(100);
        let mut held = Held::default();
        budget.take(&mut held, 60).await.unwrap();
        let part = held.split(25);
        assert_eq!((held.bytes(), part.bytes()), (35, 25));
        assert_eq!(held.split(0).bytes(), 0);
        let more = budget.clone().take_more(35, 40).await.unwrap();
        held.merge(more);
        assert_eq!((held.bytes(), budget.available()), (75, 0));
        assert_eq!(
            budget.clone().take_more(75, 26).await.unwrap_err(),
            Overloaded
        );
        drop(part);
        assert_eq!(budget.available(), 25);
        drop(held);
        assert_eq!(budget.available(), 100);
    }

    #[test]
    fn clients_are_capped_per_address_and_slots_come_back() {
        let cap = PerClient::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let one = cap.admit(a).unwrap();
        let two = cap.admit(a).unwrap();
        assert!(cap.admit(a).is_none());
        let other = cap.admit(b).unwrap();
        drop(one);
        assert_eq!(cap.open(a), 1);
        let three = cap.admit(a).unwrap();
        drop((two, three, other));
        assert_eq!((cap.open(a), cap.open(b)), (0, 0));
    }
}
