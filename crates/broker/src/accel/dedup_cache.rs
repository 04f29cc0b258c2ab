//! Dedup cache (docs/engine.md §4.2): per partition, every transactionId hash committed up to an
//! offset, so a push can vouch that its hashes are absent up to there and SQL probes only the
//! tail of the dedup window (`p_verified`) instead of exploding the whole window's sidecar
//! rows on every push.
//!
//! An optimisation only; PostgreSQL stays the authority. The invariant behind a vouch: the
//! entry holds every hash of the partition at offsets `<= verified_upto` committed at or after
//! `known_since` (database clock), and `known_since` is no later than the oldest commit time
//! the SQL probe could still consider (`now - window`). It is established by hydration (one
//! snapshot of the in-window sidecar rows, with 5 s of slack) and kept by extending only with
//! a commit that starts right at `verified_upto + 1` — any other base offset means another
//! writer interleaved, and the entry is "behind" (no vouch) until a catch-up read of the rows
//! after `verified_upto`. Expiry drops whole blocks only once they are older than window +
//! slack, and raises `known_since` past them. Eviction drops whole entries. When in doubt:
//! `p_verified = -1`, the full-window probe, which is always correct. A hash found locally is
//! only a hint: the push sends -1 so SQL gives the verdict and the original's offset.
//!
//! Partition metadata (id, window) is trusted for [`META_TTL`]; past it the next push
//! refreshes it with a catch-up read, and a changed id or window rehydrates from scratch.
//! `log_push_one_v1` ignores `p_verified` for 120 s after a window raise or a queue deletion
//! (`queen.log_dedup_resets`, sql/migrations/0001_baseline.sql), which covers changes made
//! while this metadata was still trusted.
//!
//! Memory: a global byte budget (`QUEEN_DEDUP_CACHE_MB`) with least-recently-used eviction of
//! partitions, charged with what the cache really holds on the heap: 8 bytes per hash (its key,
//! `queen_proto::sidecar::key`; a key shared by two hashes is a hit, which is only a hint), every
//! allocation as the allocator sizes it, and each partition's slots in the map and the LRU
//! order with its key's names. A read asks for at most [`Limits::read_hashes`] hashes (the
//! budget's worth of keys), so hydrating cannot itself hold more than that in flight. A
//! partition that cannot fit even alone, whose read would exceed that limit, or whose read
//! failed, is "suppressed" (not hydrated) for [`SUPPRESS_FOR`]: pushes to one too large scan
//! its window instead ([`Plan::Scan`]), pushes after a failed read send -1.

use std::collections::{BTreeMap, HashMap};
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use queen_proto::sidecar::KEY_LEN;
pub use queen_proto::sidecar::{HashRow, Hydration};

mod entry;
mod ring;
use crate::accel::heap::heap_bytes;
use entry::{DbClock, Entry, Verdict};

/// How long partition metadata is trusted without a refresh.
pub const META_TTL: Duration = Duration::from_secs(30);

/// How long a partition that does not fit the budget (or whose read failed) is left
/// unhydrated.
pub const SUPPRESS_FOR: Duration = Duration::from_secs(30);

/// Sizing of a cache.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub budget_bytes: usize,
    pub meta_ttl: Duration,
    pub suppress_for: Duration,
}

impl Limits {
    /// The production limits with a budget of `mb` MiB.
    pub fn with_budget_mb(mb: usize) -> Self {
        Limits {
            budget_bytes: mb.saturating_mul(1 << 20),
            meta_ttl: META_TTL,
            suppress_for: SUPPRESS_FOR,
        }
    }

    /// Most hashes one read (all the partitions of one write together) may answer: the
    /// budget in keys (8 bytes each). A read is kept whole until it is installed, so this
    /// bounds what a hydration holds beside the cache; more could not be cached anyway.
    pub fn read_hashes(&self) -> i64 {
        i64::try_from(self.budget_bytes / KEY_LEN).unwrap_or(i64::MAX)
    }
}

/// What a push should do for one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Send this `p_verified` (-1: the full-window probe).
    Send(i64),
    /// Read the partition's hash rows after `ticket.after` first, [`DedupCache::install`]
    /// them, then plan again.
    Fetch(Ticket),
    /// The partition is too large to cache: look for the segment's hashes in a read of its
    /// whole window that keeps nothing, and send what [`DedupCache::scanned`] makes of it.
    /// Asked for whatever `may_fetch` says: it is the one read such a push makes.
    Scan,
}

/// A read the cache asked for; hand it back with the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// Offset after which rows are wanted; -1 hydrates from scratch.
    pub after: i64,
    epoch: u64,
    /// Taken before the read: metadata counts as fetched then, never later.
    started: Instant,
}

/// Outcome of [`DedupCache::install`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    Done,
    /// The partition changed identity or window under a catch-up: hydrate from scratch.
    NeedsFull(Ticket),
}

/// The broker's dedup cache; share it behind an `Arc`.
///
/// Locking: one global mutex for the partition map, LRU order, byte accounting, suppression
/// and the clock; one mutex per entry for its hashes, so lookups and reads of one partition
/// never hold up the others. An entry lock may be held while taking the global one, never
/// the reverse, and the global lock is never held across a lookup or a hydration build.
pub struct DedupCache {
    enabled: bool,
    limits: Limits,
    state: Mutex<State>,
    stats: Stats,
}

type Key = (String, String);

fn key(queue: &str, partition: &str) -> Key {
    (queue.to_string(), partition.to_string())
}

type Shared = Arc<Mutex<Entry>>;

/// Heap bytes a cached partition costs besides its entry: its slot in the map (hashbrown keeps
/// at most 7/8 of its buckets full, plus one control byte each), its place in the LRU order
/// (B-tree nodes are about two-thirds full on average), and both copies of its key's names
/// (the map's and the LRU order's).
fn slot_bytes(key: &Key) -> usize {
    let map = (size_of::<(Key, Slot)>() + 1) * 8 / 7;
    let lru = size_of::<(u64, Key)>() * 3 / 2;
    map + lru + 2 * (heap_bytes(key.0.len()) + heap_bytes(key.1.len()))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Slot>,
    /// Entries by last use (a tick), oldest first: the eviction order.
    lru: BTreeMap<u64, Key>,
    tick: u64,
    next_epoch: u64,
    /// Sum of the slots' `bytes`.
    used: usize,
    suppressed: HashMap<Key, Suppressed>,
    clock: DbClock,
}

/// A partition left unhydrated until `until`: one too large for the budget (`oversized`, its
/// pushes scan) or whose read failed (its pushes take the full-window probe).
#[derive(Clone, Copy)]
struct Suppressed {
    until: Instant,
    oversized: bool,
}

/// A cached partition as the global state sees it: its entry and its last measured size.
struct Slot {
    entry: Shared,
    bytes: usize,
    hashes: usize,
    tick: u64,
}

#[derive(Default)]
struct Stats {
    hydrations: AtomicU64,
    catch_ups: AtomicU64,
    fetch_errors: AtomicU64,
    vouched: AtomicU64,
    full_probes: AtomicU64,
    hits: AtomicU64,
    extensions: AtomicU64,
    invalidations: AtomicU64,
    evictions: AtomicU64,
    suppressions: AtomicU64,
    scans: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl DedupCache {
    pub fn new(enabled: bool, limits: Limits) -> Self {
        DedupCache {
            enabled,
            limits,
            state: Mutex::new(State::default()),
            stats: Stats::default(),
        }
    }

    /// The `p_verified` for a segment of `hashes` (16 bytes each) to (queue, partition), or
    /// the read to do first. With `may_fetch` false a needed read means -1.
    pub fn plan(&self, queue: &str, partition: &str, hashes: &[u8], may_fetch: bool) -> Plan {
        if !self.enabled {
            return Plan::Send(-1);
        }
        let plan = self.plan_enabled(&key(queue, partition), hashes, may_fetch);
        match plan {
            Plan::Send(v) if v >= 0 => bump(&self.stats.vouched),
            Plan::Send(_) => bump(&self.stats.full_probes),
            Plan::Fetch(_) | Plan::Scan => {}
        }
        plan
    }

    fn plan_enabled(&self, key: &Key, hashes: &[u8], may_fetch: bool) -> Plan {
        let now = Instant::now();
        let fetch = |after, epoch| match may_fetch {
            true => Plan::Fetch(Ticket {
                after,
                epoch,
                started: now,
            }),
            false => Plan::Send(-1),
        };
        let (shared, db_now) = {
            let mut st = lock(&self.state);
            if let Some(&s) = st.suppressed.get(key) {
                match (now < s.until, s.oversized) {
                    (true, true) => return Plan::Scan,
                    (true, false) => return Plan::Send(-1),
                    (false, _) => st.suppressed.remove(key),
                };
            }
            let Some(shared) = st.touch(key) else {
                return fetch(-1, 0);
            };
            (shared, st.clock.now_us(now))
        };
        let mut entry = lock(&shared);
        entry.expire(db_now);
        let plan = if entry.needs_read(now, self.limits.meta_ttl) {
            fetch(entry.verified_upto, entry.epoch)
        } else {
            match entry.verdict(hashes, db_now) {
                Verdict::Vouch(v) => Plan::Send(v),
                Verdict::Hit => {
                    bump(&self.stats.hits);
                    Plan::Send(-1)
                }
                Verdict::Unsafe => Plan::Send(-1),
            }
        };
        lock(&self.state).measure(key, &shared, &entry, &self.limits, &self.stats, now);
        plan
    }

    /// Takes in the answer to `ticket`: `None` when the partition does not exist.
    pub fn install(
        &self,
        queue: &str,
        partition: &str,
        ticket: Ticket,
        fetched: Option<Hydration>,
    ) -> Installed {
        if !self.enabled {
            return Installed::Done;
        }
        let now = Instant::now();
        let key = key(queue, partition);
        if let Some(h) = &fetched {
            lock(&self.state).clock.observe(h.now_us, now);
        }
        if ticket.after < 0 {
            bump(&self.stats.hydrations);
            // Built before any lock is taken: a hydration may hold millions of hashes.
            let mut entry = Entry::new(0, ticket.started);
            if let Some(h) = &fetched {
                entry.absorb(h, ticket.started);
            }
            lock(&self.state).put(key, entry, &self.limits, &self.stats, now);
            return Installed::Done;
        }
        bump(&self.stats.catch_ups);
        let Some(shared) = lock(&self.state).entries.get(&key).map(|s| s.entry.clone()) else {
            return Installed::Done; // evicted meanwhile: the next push hydrates
        };
        let mut entry = lock(&shared);
        if entry.epoch != ticket.epoch {
            return Installed::Done; // replaced meanwhile by a newer hydration
        }
        let changed = fetched.as_ref().is_none_or(|h| {
            entry.pid.is_some_and(|p| p != h.pid) || entry.window_s.is_some_and(|w| w != h.window_s)
        });
        match fetched {
            Some(h) if !changed => {
                entry.absorb(&h, ticket.started);
                lock(&self.state).measure(&key, &shared, &entry, &self.limits, &self.stats, now);
                Installed::Done
            }
            gone_or_changed => {
                bump(&self.stats.invalidations);
                lock(&self.state).remove_if(&key, &shared);
                if gone_or_changed.is_none() {
                    return Installed::Done; // deleted: nothing to hydrate
                }
                Installed::NeedsFull(Ticket {
                    after: -1,
                    epoch: 0,
                    started: now,
                })
            }
        }
    }

    /// The `p_verified` of a segment after its [`Plan::Scan`]: `found` if one of its hashes
    /// is in the window (a hint: -1, SQL finds the original), else the scanned `window`'s
    /// last offset, below which none is (`None`: no such partition, nothing to vouch). The
    /// read covered every row SQL could still probe: its `since` is the window's start when
    /// it ran, and the push's probe runs later.
    pub fn scanned(&self, found: bool, window: Option<&Hydration>) -> i64 {
        bump(&self.stats.scans);
        if let Some(h) = window {
            lock(&self.state).clock.observe(h.now_us, Instant::now());
        }
        let verified = match window {
            Some(h) if !found && h.window_s > 0 => h.last,
            _ => -1,
        };
        match (found, verified) {
            (true, _) => bump(&self.stats.hits),
            (false, v) if v >= 0 => bump(&self.stats.vouched),
            _ => {}
        }
        if verified < 0 {
            bump(&self.stats.full_probes);
        }
        verified
    }

    /// A scan of (queue, partition) counted `hashes` in its window: while that is more than a
    /// read may hold, the partition stays suppressed (scanning) for another
    /// [`SUPPRESS_FOR`], rather than being found too large again by a hydration read of the
    /// budget's worth of keys that is thrown away.
    pub fn still_oversized(&self, queue: &str, partition: &str, hashes: i64) {
        if hashes > self.limits.read_hashes() {
            let mut st = lock(&self.state);
            st.suppress(key(queue, partition), true, &self.limits, Instant::now());
        }
    }

    /// A read asked for by [`plan`](Self::plan) failed (the push goes on with -1): the
    /// partition is suppressed for a while, so a read that keeps failing (say, one that
    /// outlasts the statement timeout) is not retried by every push.
    pub fn fetch_failed(&self, queue: &str, partition: &str) {
        bump(&self.stats.fetch_errors);
        let key = key(queue, partition);
        let mut st = lock(&self.state);
        st.remove(&key);
        st.suppress(key, false, &self.limits, Instant::now());
    }

    /// A read asked for by [`plan`](Self::plan) found more rows than [`Limits::read_hashes`]:
    /// the partition is suppressed like one that cannot fit the budget.
    pub fn too_large(&self, queue: &str, partition: &str) {
        bump(&self.stats.suppressions);
        let key = key(queue, partition);
        let mut st = lock(&self.state);
        st.remove(&key);
        st.suppress(key, true, &self.limits, Instant::now());
    }

    /// The partition id a cached (queue, partition) had at its last read or commit: what lets a
    /// lone segment be pushed by id. Possibly stale (the partition deleted since); the SQL
    /// checks it.
    pub fn partition_id(&self, queue: &str, partition: &str) -> Option<i64> {
        if !self.enabled {
            return None;
        }
        let shared = lock(&self.state)
            .entries
            .get(&key(queue, partition))?
            .entry
            .clone();
        let pid = lock(&shared).pid;
        pid
    }

    /// Most hashes a read for this cache may answer (see [`Limits::read_hashes`]).
    pub fn read_hashes(&self) -> i64 {
        self.limits.read_hashes()
    }

    /// Reports a committed segment of `hashes` at `base` (any writer of this broker): it
    /// extends the entry when it starts right after `verified_upto`; a later start means some
    /// writer interleaved, so the entry is behind until caught up.
    pub fn committed(
        &self,
        queue: &str,
        partition: &str,
        pid: i64,
        base: i64,
        hashes: &[u8],
        created_us: i64,
    ) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let key = key(queue, partition);
        let shared = {
            let mut st = lock(&self.state);
            st.clock.observe(created_us, now);
            match st.entries.get(&key) {
                Some(slot) => slot.entry.clone(),
                None => return,
            }
        };
        let mut entry = lock(&shared);
        if entry.pid.is_some_and(|p| p != pid) {
            bump(&self.stats.invalidations);
            lock(&self.state).remove_if(&key, &shared);
            return;
        }
        entry.pid = Some(pid);
        let before = entry.verified_upto;
        if entry.extend(base, hashes, created_us) {
            bump(&self.stats.extensions);
            lock(&self.state).measure(&key, &shared, &entry, &self.limits, &self.stats, now);
        } else if base > before + 1 {
            bump(&self.stats.invalidations);
        }
    }

    /// Drops what is known about (queue, partition): for a commit that cannot be reported.
    pub fn forget(&self, queue: &str, partition: &str) {
        if self.enabled {
            bump(&self.stats.invalidations);
            let mut st = lock(&self.state);
            let key = key(queue, partition);
            if let Some(shared) = st.entries.get(&key).map(|s| s.entry.clone()) {
                st.remove_if(&key, &shared);
            }
        }
    }

    /// The cache's size and counters, for the `dedupCache` object of `/metrics` (rendered by
    /// the http floor).
    pub fn metrics(&self) -> DedupSnapshot {
        let (bytes, partitions, hashes, suppressed) = {
            let st = lock(&self.state);
            let hashes: usize = st.entries.values().map(|s| s.hashes).sum();
            (st.used, st.entries.len(), hashes, st.suppressed.len())
        };
        let s = &self.stats;
        let n = |c: &AtomicU64| c.load(Relaxed);
        DedupSnapshot {
            enabled: self.enabled,
            budget_bytes: self.limits.budget_bytes as u64,
            bytes: bytes as u64,
            partitions: partitions as u64,
            hashes: hashes as u64,
            suppressed_partitions: suppressed as u64,
            hydrations: n(&s.hydrations),
            catch_ups: n(&s.catch_ups),
            fetch_errors: n(&s.fetch_errors),
            vouched_pushes: n(&s.vouched),
            full_probe_pushes: n(&s.full_probes),
            hits: n(&s.hits),
            extensions: n(&s.extensions),
            invalidations: n(&s.invalidations),
            evictions: n(&s.evictions),
            suppressions: n(&s.suppressions),
            scans: n(&s.scans),
        }
    }
}

/// What [`DedupCache::metrics`] reports: the cache's size now and its counters since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupSnapshot {
    pub enabled: bool,
    pub budget_bytes: u64,
    pub bytes: u64,
    pub partitions: u64,
    pub hashes: u64,
    pub suppressed_partitions: u64,
    pub hydrations: u64,
    pub catch_ups: u64,
    pub fetch_errors: u64,
    pub vouched_pushes: u64,
    pub full_probe_pushes: u64,
    pub hits: u64,
    pub extensions: u64,
    pub invalidations: u64,
    pub evictions: u64,
    pub suppressions: u64,
    pub scans: u64,
}

impl State {
    /// Marks `key` most recently used; its entry, if cached.
    fn touch(&mut self, key: &Key) -> Option<Shared> {
        let slot = self.entries.get_mut(key)?;
        self.tick += 1;
        self.lru.remove(&slot.tick);
        slot.tick = self.tick;
        self.lru.insert(self.tick, key.clone());
        Some(slot.entry.clone())
    }

    /// Removes `key` if it still holds `shared` (not a newer incarnation).
    fn remove_if(&mut self, key: &Key, shared: &Shared) {
        if self
            .entries
            .get(key)
            .is_some_and(|s| Arc::ptr_eq(&s.entry, shared))
        {
            self.remove(key);
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(slot) = self.entries.remove(key) {
            self.lru.remove(&slot.tick);
            self.used -= slot.bytes;
        }
    }

    fn put(&mut self, key: Key, mut entry: Entry, limits: &Limits, stats: &Stats, now: Instant) {
        self.remove(&key);
        self.next_epoch += 1;
        entry.epoch = self.next_epoch;
        let (bytes, hashes) = (entry.size() + slot_bytes(&key), entry.hash_count());
        let slot = Slot {
            entry: Arc::new(Mutex::new(entry)),
            bytes: 0,
            hashes,
            tick: 0,
        };
        self.entries.insert(key.clone(), slot);
        self.touch(&key);
        self.resize(&key, bytes, hashes);
        self.fit(&key, limits, stats, now);
    }

    /// Records the size of `entry` (the entry `key` holds, locked by the caller) and
    /// enforces the budget.
    fn measure(
        &mut self,
        key: &Key,
        shared: &Shared,
        entry: &Entry,
        limits: &Limits,
        stats: &Stats,
        now: Instant,
    ) {
        if !self
            .entries
            .get(key)
            .is_some_and(|s| Arc::ptr_eq(&s.entry, shared))
        {
            return; // evicted or replaced meanwhile
        }
        let bytes = entry.size() + slot_bytes(key);
        self.resize(key, bytes, entry.hash_count());
        self.fit(key, limits, stats, now);
    }

    fn resize(&mut self, key: &Key, bytes: usize, hashes: usize) {
        if let Some(slot) = self.entries.get_mut(key) {
            self.used = self.used - slot.bytes + bytes;
            slot.bytes = bytes;
            slot.hashes = hashes;
        }
    }

    /// Leaves `key` unhydrated for `limits.suppress_for`.
    fn suppress(&mut self, key: Key, oversized: bool, limits: &Limits, now: Instant) {
        self.suppressed.retain(|_, s| s.until > now);
        let until = now + limits.suppress_for;
        self.suppressed.insert(key, Suppressed { until, oversized });
    }

    /// Evicts least recently used partitions until the cache fits its budget; suppresses
    /// `key` itself when it cannot fit alone.
    fn fit(&mut self, key: &Key, limits: &Limits, stats: &Stats, now: Instant) {
        while self.used > limits.budget_bytes {
            match self.lru.values().find(|k| *k != key).cloned() {
                Some(victim) => {
                    bump(&stats.evictions);
                    self.remove(&victim);
                }
                None => {
                    bump(&stats.suppressions);
                    self.remove(key);
                    self.suppress(key.clone(), true, limits, now);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
