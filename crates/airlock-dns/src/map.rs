//! The session's name ↔ address map: one stable pool address per name, and the way back
//! from an address to the name it was handed out for.
//!
//! See [`NameMap`] for how addresses are handed out and recycled.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ipnet::Ipv4Net;

/// The most names a map holds at once, whatever the pool size (bounds memory: a name is at
/// most 253 bytes and held once, so a full map stays under about 25 MiB).
pub const MAX_MAPPINGS: u32 = 65_536;

/// The default pool: `198.18.0.0/16`, the first half of the benchmarking range
/// `198.18.0.0/15` (RFC 2544), which is never routed on real networks.
pub fn default_pool() -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(198, 18, 0, 0), 16)
}

/// The name ↔ address map of one session. Thread-safe; clones share the same map.
///
/// Addresses are handed out in order from the pool (its network and broadcast addresses
/// are skipped, as [`Ipv4Net::hosts`] does). At most [`MAX_MAPPINGS`] names are held at
/// once; when the pool (or that bound) is used up, the least recently used mapping — by
/// [`NameMap::address_for`] or [`NameMap::name_for`] — is forgotten and its address goes to
/// the new name. A client that kept the old answer past its TTL then reaches the *new*
/// name at that address; the proxy decides on the name [`NameMap::name_for`] gives, so
/// recycling can redirect a stale client but never widens what the policy allows.
#[derive(Clone, Debug)]
pub struct NameMap {
    pool: Ipv4Net,
    table: Arc<Mutex<Table>>,
}

/// The state behind the lock. Addresses are kept as offsets from `first`.
#[derive(Debug)]
struct Table {
    /// The first address handed out.
    first: u32,
    /// How many addresses may be handed out (pool size bounded by [`MAX_MAPPINGS`]).
    capacity: u32,
    /// `entries[offset]` is the mapping of address `first + offset`; grows up to `capacity`.
    entries: Vec<Entry>,
    /// Name → offset (the name shared with its entry).
    offsets: HashMap<Arc<str>, u32>,
    /// Last use → offset, oldest first.
    recency: BTreeMap<u64, u32>,
    /// Advances on every use; never repeats.
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    name: Arc<str>,
    last_used: u64,
}

impl NameMap {
    /// An empty map handing out addresses of `pool` (host addresses only, as
    /// [`Ipv4Net::hosts`] lists them; a `/31` or `/32` pool gives all its addresses).
    pub fn new(pool: Ipv4Net) -> Self {
        let pool = pool.trunc();
        let (first, count) = match pool.prefix_len() {
            32 => (u32::from(pool.network()), 1_u64),
            31 => (u32::from(pool.network()), 2),
            prefix => (
                u32::from(pool.network()).saturating_add(1),
                (1_u64 << (32 - prefix)) - 2,
            ),
        };
        let capacity = u32::try_from(count.min(u64::from(MAX_MAPPINGS))).unwrap_or(MAX_MAPPINGS);
        NameMap {
            pool,
            table: Arc::new(Mutex::new(Table {
                first,
                capacity,
                entries: Vec::new(),
                offsets: HashMap::new(),
                recency: BTreeMap::new(),
                clock: 0,
            })),
        }
    }

    /// The pool addresses are handed out from.
    pub fn pool(&self) -> Ipv4Net {
        self.pool
    }

    /// The address of `name` for this session: the one handed out before if the name is
    /// still mapped, otherwise the next free pool address (or the least recently used one,
    /// whose old name is forgotten). `name` should be canonical
    /// ([`airlock_policy::canonical::canonical_host`]); ASCII case and one trailing dot are
    /// ignored here as well.
    pub fn address_for(&self, name: &str) -> Ipv4Addr {
        let name: Arc<str> = name
            .strip_suffix('.')
            .unwrap_or(name)
            .to_ascii_lowercase()
            .into();
        let mut table = self.lock();
        let now = table.tick();
        if let Some(&offset) = table.offsets.get(&name) {
            table.touch(offset, now);
            return table.address(offset);
        }
        let offset = table.claim_offset();
        table.recency.insert(now, offset);
        let entry = Entry {
            name: Arc::clone(&name),
            last_used: now,
        };
        match table.entries.get_mut(offset as usize) {
            Some(slot) => *slot = entry,
            None => table.entries.push(entry),
        }
        table.offsets.insert(name, offset);
        table.address(offset)
    }

    /// The name `addr` was handed out for, if it is a pool address currently mapped (and
    /// marks the mapping as used). `None` for every other address.
    pub fn name_for(&self, addr: Ipv4Addr) -> Option<String> {
        let mut table = self.lock();
        let offset = u32::from(addr).checked_sub(table.first)?;
        let name = table.entries.get(offset as usize)?.name.to_string();
        let now = table.tick();
        table.touch(offset, now);
        Some(name)
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Every update leaves the table consistent before anything can panic.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Table {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn address(&self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(self.first.wrapping_add(offset))
    }

    /// Marks the mapping at `offset` as used at `now`.
    fn touch(&mut self, offset: u32, now: u64) {
        if let Some(entry) = self.entries.get_mut(offset as usize) {
            self.recency.remove(&entry.last_used);
            entry.last_used = now;
            self.recency.insert(now, offset);
        }
    }

    /// An offset for a new name: the next never-used one, or the least recently used one
    /// (whose name is unmapped). Its recency record is removed.
    fn claim_offset(&mut self) -> u32 {
        let used = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        if used < self.capacity {
            return used;
        }
        // The map is full, so `recency` holds one record per entry and is not empty;
        // should it be, offset 0 is overwritten, which keeps the table consistent.
        let offset = self.recency.pop_first().map_or(0, |(_, offset)| offset);
        if let Some(entry) = self.entries.get(offset as usize) {
            self.offsets.remove(&*entry.name);
        }
        offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(text: &str) -> Ipv4Net {
        text.parse().expect("pool")
    }

    #[test]
    fn names_get_stable_distinct_pool_addresses() {
        let map = NameMap::new(default_pool());
        let github = map.address_for("github.com");
        let example = map.address_for("example.com");
        assert_eq!(github, Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(example, Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(map.address_for("github.com"), github);
        assert_eq!(map.address_for("GitHub.COM."), github);
        assert_eq!(map.name_for(github).as_deref(), Some("github.com"));
        assert_eq!(map.name_for(example).as_deref(), Some("example.com"));
    }

    #[test]
    fn addresses_outside_the_mapped_range_have_no_name() {
        let map = NameMap::new(default_pool());
        let github = map.address_for("github.com");
        assert_eq!(map.name_for(Ipv4Addr::new(198, 18, 0, 2)), None);
        assert_eq!(map.name_for(Ipv4Addr::new(198, 18, 0, 0)), None);
        assert_eq!(map.name_for(Ipv4Addr::new(8, 8, 8, 8)), None);
        assert_eq!(map.name_for(Ipv4Addr::new(0, 0, 0, 0)), None);
        assert_eq!(map.name_for(Ipv4Addr::BROADCAST), None);
        assert_eq!(map.name_for(github).as_deref(), Some("github.com"));
    }

    #[test]
    fn a_full_pool_recycles_the_least_recently_used_mapping() {
        // A /30 has two host addresses: .1 and .2.
        let map = NameMap::new(pool("10.9.8.0/30"));
        let a = map.address_for("a.test");
        let b = map.address_for("b.test");
        assert_eq!(
            (a, b),
            (Ipv4Addr::new(10, 9, 8, 1), Ipv4Addr::new(10, 9, 8, 2))
        );
        // Using `a` (by reverse lookup) makes `b` the oldest.
        assert_eq!(map.name_for(a).as_deref(), Some("a.test"));
        let c = map.address_for("c.test");
        assert_eq!(c, b);
        assert_eq!(map.name_for(b).as_deref(), Some("c.test"));
        assert_eq!(map.address_for("a.test"), a);
        // `b.test` was forgotten: asked again, it gets the oldest slot, now `c`'s.
        let b_again = map.address_for("b.test");
        assert_eq!(b_again, c);
        assert_eq!(map.name_for(a).as_deref(), Some("a.test"));
        assert_eq!(map.name_for(c).as_deref(), Some("b.test"));
    }

    #[test]
    fn eviction_keeps_memory_bounded_by_the_pool() {
        let map = NameMap::new(pool("10.0.0.0/29"));
        for round in 0..1_000 {
            let name = format!("n{round}.exfil.test");
            let addr = map.address_for(&name);
            assert!(map.pool().contains(&addr));
            assert_ne!(addr, Ipv4Addr::new(10, 0, 0, 0));
            assert_ne!(addr, Ipv4Addr::new(10, 0, 0, 7));
            assert_eq!(map.name_for(addr), Some(name));
        }
        let table = map.lock();
        assert_eq!(table.entries.len(), 6);
        assert_eq!(table.offsets.len(), 6);
        assert_eq!(table.recency.len(), 6);
    }

    #[test]
    fn tiny_pools_use_every_address() {
        let single = NameMap::new(pool("192.0.2.7/32"));
        assert_eq!(single.address_for("a.test"), Ipv4Addr::new(192, 0, 2, 7));
        assert_eq!(single.address_for("b.test"), Ipv4Addr::new(192, 0, 2, 7));
        assert_eq!(
            single.name_for(Ipv4Addr::new(192, 0, 2, 7)).as_deref(),
            Some("b.test")
        );
        let pair = NameMap::new(pool("192.0.2.6/31"));
        assert_eq!(pair.address_for("a.test"), Ipv4Addr::new(192, 0, 2, 6));
        assert_eq!(pair.address_for("b.test"), Ipv4Addr::new(192, 0, 2, 7));
    }

    #[test]
    fn huge_pools_are_bounded_by_max_mappings() {
        let map = NameMap::new(pool("0.0.0.0/0"));
        assert_eq!(map.lock().capacity, MAX_MAPPINGS);
        assert_eq!(map.address_for("a.test"), Ipv4Addr::new(0, 0, 0, 1));
        // A pool given with host bits set is truncated to its network.
        let map = NameMap::new(pool("198.18.77.9/16"));
        assert_eq!(map.address_for("a.test"), Ipv4Addr::new(198, 18, 0, 1));
    }

    #[test]
    fn clones_share_the_map_across_threads() {
        let map = NameMap::new(default_pool());
        let handles: Vec<_> = (0..4)
            .map(|thread| {
                let map = map.clone();
                std::thread::spawn(move || {
                    (0..100)
                        .map(|n| map.address_for(&format!("host{}.test", (n + thread * 7) % 50)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("thread");
        }
        let mut seen = std::collections::HashSet::new();
        for n in 0..50 {
            let addr = map.address_for(&format!("host{n}.test"));
            assert!(seen.insert(addr), "two names share {addr}");
            assert_eq!(map.name_for(addr), Some(format!("host{n}.test")));
        }
    }
}
