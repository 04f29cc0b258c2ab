//! Ack registry (docs/engine.md §6.4, docs/spec/ack-internals.md "Accelerator one: the ack
//! registry"): per (partition, consumer group), the lease a pop of this broker served — its
//! worker (the leaseId), the inclusive `batch_end`, the number of frames and the distinct set
//! of transactionId hashes delivered. An ack that covers exactly that set, all `completed`,
//! under that lease, is then one positional cursor advance instead of a hash resolution.
//!
//! A hint, never an authority: the positional call re-validates the lease and the span under
//! the cursor row's lock (`log_ack_at_v1`'s cover form, sql/functions/ack_at.sql) and a refusal
//! sends the ack down the hash path. So an entry can only be stale in excess: it costs at
//! most one refused statement, never a wrong cursor.
//!
//! An entry dies when an ack of its (partition, group) under its lease arrives (a hit, or any
//! other ack, which takes the hash path), when the hash path runs for its (partition, group)
//! without a lease ([`AckRegistry::forget`]), at its deadline (the lease's expiry plus
//! [`TTL_MARGIN`], pushed later by lease renewals), or to least-recently-used eviction under
//! the byte budget (`QUEEN_ACK_REGISTRY_MB`). Expired entries are swept on insert at most
//! every [`SWEEP_EVERY`], so no task is needed. The deadline bounds memory; it is not what
//! protects a late ack — PostgreSQL's lease check is.
//!
//! One global mutex: the work under it is one map lookup, one set comparison against a set
//! the caller built beforehand, and one removal (a renewal scans the map, and renewals are
//! rare). The ack rate is the message rate divided by the batch size, which is small.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::accel::heap::{heap_bytes, table_bytes};

/// `xxh3_128(transactionId)`, big-endian, as the ack path hashes it.
pub type TxnHash = [u8; 16];

/// How long an entry outlives its lease.
pub const TTL_MARGIN: Duration = Duration::from_secs(10);

/// Expired entries are swept (on insert) at most this often.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// One leased batch a pop of this broker delivered.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub partition_id: i64,
    pub group: String,
    /// The leaseId (`worker_id` in SQL).
    pub worker: String,
    /// The last delivered offset (inclusive).
    pub batch_end: i64,
    /// Frames delivered (a transactionId carried twice counts twice).
    pub frames: i32,
    /// The distinct hashes of the delivered transactionIds.
    pub hashes: HashSet<TxnHash>,
    /// When the lease runs out.
    pub lease_until: Instant,
}

/// What a hit proves: the whole batch up to `batch_end`, `frames` frames, was acked
/// `completed` under its own lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cover {
    pub batch_end: i64,
    pub frames: i32,
}

/// The registry; share it behind an `Arc`.
pub struct AckRegistry {
    enabled: bool,
    budget_bytes: usize,
    state: Mutex<State>,
    stats: Stats,
}

type Key = (i64, String);

struct Slot {
    worker: String,
    batch_end: i64,
    frames: i32,
    hashes: HashSet<TxnHash>,
    deadline: Instant,
    tick: u64,
    bytes: usize,
}

struct State {
    entries: HashMap<Key, Slot>,
    /// Insertion ticks, oldest first: the eviction order.
    lru: BTreeMap<u64, Key>,
    tick: u64,
    bytes: usize,
    last_sweep: Instant,
}

#[derive(Default)]
struct Stats {
    born: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    mismatches: AtomicU64,
    refusals: AtomicU64,
    expirations: AtomicU64,
    evictions: AtomicU64,
    forgotten: AtomicU64,
    extensions: AtomicU64,
}

/// What [`AckRegistry::metrics`] reports: the registry's size now and its counters since
/// start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRegistrySnapshot {
    pub enabled: bool,
    pub budget_bytes: u64,
    pub bytes: u64,
    pub entries: u64,
    /// Entries stored by leasing pops.
    pub born: u64,
    /// Acks that took the fast path.
    pub hits: u64,
    /// Qualifying acks (all completed, under a lease) that found no usable entry.
    pub misses: u64,
    /// Of the misses: an entry of that lease whose hash set differed from the ack's.
    pub mismatches: u64,
    /// Hits PostgreSQL refused (the lease or the batch changed): they took the hash path.
    pub refusals: u64,
    /// Entries found or swept past their deadline.
    pub expirations: u64,
    /// Entries evicted (or never stored) for the byte budget.
    pub evictions: u64,
    /// Entries dropped because the hash path ran for their (partition, group).
    pub forgotten: u64,
    /// Entry deadlines pushed later by lease renewals.
    pub extensions: u64,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The heap an entry takes: its slot in the map (hashbrown keeps at most 7/8 of its buckets
/// full, plus a control byte each), its place in the eviction index (B-tree nodes are about
/// two-thirds full), both copies of the group name (map key, eviction index), the leaseId and
/// the hash set's table.
fn footprint(group: &str, worker: &str, hashes: &HashSet<TxnHash>) -> usize {
    let slot = (size_of::<(Key, Slot)>() + 1) * 8 / 7;
    let lru = size_of::<(u64, Key)>() * 3 / 2;
    slot + lru
        + 2 * heap_bytes(group.len())
        + heap_bytes(worker.len())
        + table_bytes(hashes.capacity(), size_of::<TxnHash>())
}

impl AckRegistry {
    pub fn new(enabled: bool, budget_bytes: usize) -> Self {
        AckRegistry {
            enabled,
            budget_bytes,
            state: Mutex::new(State {
                entries: HashMap::new(),
                lru: BTreeMap::new(),
                tick: 0,
                bytes: 0,
                last_sweep: Instant::now(),
            }),
            stats: Stats::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Stores what a leasing pop delivered, replacing the (partition, group)'s older entry.
    pub fn born(&self, delivered: Delivered) {
        self.born_at(delivered, Instant::now());
    }

    fn born_at(&self, d: Delivered, now: Instant) {
        if !self.enabled {
            return;
        }
        let key = (d.partition_id, d.group);
        let bytes = footprint(&key.1, &d.worker, &d.hashes);
        let mut st = lock(&self.state);
        if now.saturating_duration_since(st.last_sweep) >= SWEEP_EVERY {
            st.last_sweep = now;
            let expired = st.sweep(now);
            self.stats.expirations.fetch_add(expired, Relaxed);
        }
        st.remove(&key);
        if bytes > self.budget_bytes {
            self.stats.evictions.fetch_add(1, Relaxed);
            return;
        }
        while st.bytes + bytes > self.budget_bytes && st.evict_oldest() {
            self.stats.evictions.fetch_add(1, Relaxed);
        }
        st.tick += 1;
        let tick = st.tick;
        st.lru.insert(tick, key.clone());
        st.bytes += bytes;
        let slot = Slot {
            worker: d.worker,
            batch_end: d.batch_end,
            frames: d.frames,
            hashes: d.hashes,
            deadline: d.lease_until + TTL_MARGIN,
            tick,
            bytes,
        };
        st.entries.insert(key, slot);
        self.stats.born.fetch_add(1, Relaxed);
    }

    /// The fast path's question for an ack of (partition, group) under `worker`, all
    /// `completed`, acking `acked`: `Some` when the entry of that lease holds exactly that set
    /// and is within its deadline. The entry of that lease dies either way (the ack
    /// consumes it, or the hash path is about to run for it); another lease's is kept.
    pub fn take(
        &self,
        partition_id: i64,
        group: &str,
        worker: &str,
        acked: &HashSet<TxnHash>,
    ) -> Option<Cover> {
        self.take_at(partition_id, group, worker, acked, Instant::now())
    }

    fn take_at(
        &self,
        partition_id: i64,
        group: &str,
        worker: &str,
        acked: &HashSet<TxnHash>,
        now: Instant,
    ) -> Option<Cover> {
        if !self.enabled {
            return None;
        }
        let key = (partition_id, group.to_string());
        let found = {
            let mut st = lock(&self.state);
            match st.entries.get(&key) {
                Some(slot) if slot.worker == worker => st.remove(&key),
                _ => None,
            }
        };
        let verdict = match found {
            None => None,
            Some(slot) if slot.deadline <= now => {
                self.stats.expirations.fetch_add(1, Relaxed);
                None
            }
            Some(slot) if slot.hashes != *acked => {
                self.stats.mismatches.fetch_add(1, Relaxed);
                None
            }
            Some(slot) => Some(Cover {
                batch_end: slot.batch_end,
                frames: slot.frames,
            }),
        };
        let counter = match verdict {
            Some(_) => &self.stats.hits,
            None => &self.stats.misses,
        };
        counter.fetch_add(1, Relaxed);
        verdict
    }

    /// The hash path is about to run for (partition, group) under `worker` (`""`: without a
    /// lease): the entry of that lease, or with no lease any entry, is no longer trusted. A
    /// lease-less ack may move the cursor or end the lease behind the entry's back.
    pub fn forget(&self, partition_id: i64, group: &str, worker: &str) {
        if !self.enabled {
            return;
        }
        let key = (partition_id, group.to_string());
        let mut st = lock(&self.state);
        let doubtful = st
            .entries
            .get(&key)
            .is_some_and(|slot| worker.is_empty() || slot.worker == worker);
        if doubtful {
            st.remove(&key);
            self.stats.forgotten.fetch_add(1, Relaxed);
        }
    }

    /// A renewal extended every live lease of `worker` to at least now + `lease`: its entries
    /// live until then plus the margin (never shorter than before, like the renewal).
    pub fn extend(&self, worker: &str, lease: Duration) {
        self.extend_at(worker, lease, Instant::now());
    }

    fn extend_at(&self, worker: &str, lease: Duration, now: Instant) {
        if !self.enabled {
            return;
        }
        let deadline = now + lease + TTL_MARGIN;
        let mut st = lock(&self.state);
        let mut extended = 0;
        for slot in st.entries.values_mut().filter(|s| s.worker == worker) {
            if slot.deadline < deadline {
                slot.deadline = deadline;
                extended += 1;
            }
        }
        self.stats.extensions.fetch_add(extended, Relaxed);
    }

    /// PostgreSQL refused a hit: it took the hash path.
    pub fn refused(&self) {
        self.stats.refusals.fetch_add(1, Relaxed);
    }

    pub fn metrics(&self) -> AckRegistrySnapshot {
        let (bytes, entries) = {
            let st = lock(&self.state);
            (st.bytes, st.entries.len())
        };
        let s = &self.stats;
        let n = |c: &AtomicU64| c.load(Relaxed);
        AckRegistrySnapshot {
            enabled: self.enabled,
            budget_bytes: self.budget_bytes as u64,
            bytes: bytes as u64,
            entries: entries as u64,
            born: n(&s.born),
            hits: n(&s.hits),
            misses: n(&s.misses),
            mismatches: n(&s.mismatches),
            refusals: n(&s.refusals),
            expirations: n(&s.expirations),
            evictions: n(&s.evictions),
            forgotten: n(&s.forgotten),
            extensions: n(&s.extensions),
        }
    }
}

impl State {
    fn remove(&mut self, key: &Key) -> Option<Slot> {
        let slot = self.entries.remove(key)?;
        self.lru.remove(&slot.tick);
        self.bytes -= slot.bytes;
        Some(slot)
    }

    /// Evicts the oldest entry; false when there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, key)) = self.lru.pop_first() else {
            return false;
        };
        if let Some(slot) = self.entries.remove(&key) {
            self.bytes -= slot.bytes;
        }
        true
    }

    /// Removes every entry past its deadline; how many.
    fn sweep(&mut self, now: Instant) -> u64 {
        let expired: Vec<Key> = self
            .entries
            .iter()
            .filter(|(_, slot)| slot.deadline <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in &expired {
            self.remove(key);
        }
        expired.len() as u64
    }
}

#[cfg(test)]
mod tests;
