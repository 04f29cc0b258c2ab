//! Dedup cache (engine.md §4.2): per partition, every transactionId hash committed up to an
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
//! (sql/007), which covers changes made while this metadata was still trusted.
//!
//! Memory: a global byte budget (`QUEEN_DEDUP_CACHE_MB`) with least-recently-used eviction of
//! partitions; a partition that cannot fit even alone is "suppressed" (not hydrated, pushes
//! send -1) for [`SUPPRESS_FOR`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod ring;
use ring::{hash_key, HashRing};

/// How long partition metadata is trusted without a refresh.
pub const META_TTL: Duration = Duration::from_secs(30);

/// How long a partition that does not fit the budget is left unhydrated.
pub const SUPPRESS_FOR: Duration = Duration::from_secs(30);

/// Clock-skew slack of expiry, matching the 5 s the hydration read adds (sql/007).
const SKEW_SLACK_US: i64 = 5_000_000;

/// Bytes charged per cached partition besides its hashes and key.
const ENTRY_OVERHEAD: usize = 192;

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
}

/// What a push should do for one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Send this `p_verified` (-1: the full-window probe).
    Send(i64),
    /// Read the partition's hash rows after `ticket.after` first, [`DedupCache::install`]
    /// them, then plan again.
    Fetch(Ticket),
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

/// A partition's sidecar rows as read by `queen.log_dedup_hydrate_v1`.
#[derive(Debug, Clone)]
pub struct Hydration {
    pub pid: i64,
    pub window_s: i32,
    /// The partition's last offset in the read's snapshot.
    pub last: i64,
    /// Rows committed at or after this (µs, database clock) are all included.
    pub since_us: i64,
    /// The database clock when the read ran (µs).
    pub now_us: i64,
    /// In offset order.
    pub rows: Vec<HashRow>,
}

/// One sidecar row: the hashes of offsets `base..`, 16 bytes each.
#[derive(Debug, Clone)]
pub struct HashRow {
    pub base: i64,
    pub created_us: i64,
    pub hashes: Vec<u8>,
}

/// Outcome of [`DedupCache::install`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    Done,
    /// The partition changed identity or window under a catch-up: hydrate from scratch.
    NeedsFull(Ticket),
}

/// The broker's dedup cache; share it behind an `Arc`.
pub struct DedupCache {
    enabled: bool,
    limits: Limits,
    state: Mutex<State>,
}

type Key = (String, String);

fn key(queue: &str, partition: &str) -> Key {
    (queue.to_string(), partition.to_string())
}

fn hashes_of(bytes: &[u8]) -> impl Iterator<Item = u128> + '_ {
    bytes.chunks_exact(16).filter_map(hash_key)
}

#[derive(Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Entries by last use (a tick), oldest first: the eviction order.
    lru: BTreeMap<u64, Key>,
    tick: u64,
    next_epoch: u64,
    used: usize,
    suppressed: HashMap<Key, Instant>,
    clock: DbClock,
    stats: Stats,
}

#[derive(Default)]
struct Stats {
    hydrations: u64,
    catch_ups: u64,
    fetch_errors: u64,
    vouched: u64,
    full_probes: u64,
    hits: u64,
    extensions: u64,
    invalidations: u64,
    evictions: u64,
    suppressions: u64,
}

/// An estimate of the database clock that never runs ahead of it: the newest database
/// timestamp seen plus the local time elapsed since it was received.
#[derive(Default)]
struct DbClock {
    anchor: Option<(i64, Instant)>,
}

impl DbClock {
    fn now_us(&self, at: Instant) -> Option<i64> {
        self.anchor.map(|(us, seen)| {
            let elapsed = at.saturating_duration_since(seen).as_micros();
            us.saturating_add(i64::try_from(elapsed).unwrap_or(i64::MAX))
        })
    }

    fn observe(&mut self, us: i64, at: Instant) {
        if self.now_us(at).is_none_or(|est| us > est) {
            self.anchor = Some((us, at));
        }
    }
}

struct Entry {
    epoch: u64,
    /// `None` while the partition did not exist at hydration and no commit named it yet.
    pid: Option<i64>,
    /// `None` like `pid`: then nothing ever expired and `known_since` is `i64::MIN`.
    window_s: Option<i32>,
    meta_at: Instant,
    verified_upto: i64,
    /// Highest offset known to be committed; above `verified_upto` the entry is behind.
    seen_upto: i64,
    known_since_us: i64,
    ring: HashRing,
    tick: u64,
    bytes: usize,
}

/// What an entry allows for one segment.
enum Verdict {
    Hit,
    Vouch(i64),
    Unsafe,
}

impl Entry {
    fn new(epoch: u64, meta_at: Instant) -> Self {
        Entry {
            epoch,
            pid: None,
            window_s: None,
            meta_at,
            verified_upto: -1,
            seen_upto: -1,
            known_since_us: i64::MIN,
            ring: HashRing::new(),
            tick: 0,
            bytes: 0,
        }
    }

    /// Adds the hashes of `row` at offsets above `verified_upto` (a straddling row comes
    /// whole from SQL). Window 0 disables dedup: nothing to remember.
    fn add_row(&mut self, row: &HashRow) {
        if self.window_s == Some(0) {
            return;
        }
        let skip = usize::try_from(self.verified_upto + 1 - row.base).unwrap_or(0);
        self.ring
            .add(hashes_of(&row.hashes).skip(skip), row.created_us);
    }

    /// Takes in a read of the rows after `verified_upto` (a hydration when it is -1).
    fn absorb(&mut self, h: &Hydration, started: Instant) {
        self.pid = Some(h.pid);
        self.window_s = Some(h.window_s);
        self.meta_at = started;
        for row in &h.rows {
            self.add_row(row);
        }
        self.verified_upto = self.verified_upto.max(h.last);
        self.seen_upto = self.seen_upto.max(h.last);
        // Rows older than `since` were not read: from here on only newer ones are vouched for.
        self.known_since_us = self.known_since_us.max(h.since_us);
    }

    fn expire(&mut self, db_now: Option<i64>) {
        let (Some(window), Some(now)) = (self.window_s, db_now) else {
            return;
        };
        if window <= 0 {
            return;
        }
        let cutoff = now - i64::from(window) * 1_000_000 - SKEW_SLACK_US;
        if let Some(newest) = self.ring.expire(cutoff) {
            self.known_since_us = self.known_since_us.max(newest.saturating_add(1));
        }
    }

    fn verdict(&mut self, hashes: &[u8], db_now: Option<i64>) -> Verdict {
        if self.window_s == Some(0) {
            return Verdict::Unsafe; // no dedup at all: SQL probes nothing either way
        }
        if self.ring.contains_any(hashes_of(hashes)) {
            return Verdict::Hit;
        }
        if self.verified_upto < 0 {
            return Verdict::Unsafe;
        }
        let covered = self.known_since_us == i64::MIN
            || match (self.window_s, db_now) {
                (Some(w), Some(now)) => self.known_since_us <= now - i64::from(w) * 1_000_000,
                _ => false,
            };
        if covered {
            Verdict::Vouch(self.verified_upto)
        } else {
            Verdict::Unsafe
        }
    }

    fn size(&self, key: &Key) -> usize {
        ENTRY_OVERHEAD + key.0.len() + key.1.len() + self.ring.bytes()
    }
}

impl DedupCache {
    pub fn new(enabled: bool, limits: Limits) -> Self {
        DedupCache {
            enabled,
            limits,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The `p_verified` for a segment of `hashes` (16 bytes each) to (queue, partition), or
    /// the read to do first. With `may_fetch` false a needed read means -1.
    pub fn plan(&self, queue: &str, partition: &str, hashes: &[u8], may_fetch: bool) -> Plan {
        if !self.enabled {
            return Plan::Send(-1);
        }
        let now = Instant::now();
        let mut st = self.lock();
        let key = key(queue, partition);
        let plan = st.plan(&key, hashes, now, self.limits.meta_ttl, may_fetch);
        if let Plan::Send(v) = plan {
            if v >= 0 {
                st.stats.vouched += 1;
            } else {
                st.stats.full_probes += 1;
            }
        }
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
        let mut st = self.lock();
        if let Some(h) = &fetched {
            st.clock.observe(h.now_us, now);
        }
        let key = key(queue, partition);
        if ticket.after < 0 {
            st.stats.hydrations += 1;
            st.next_epoch += 1;
            let mut entry = Entry::new(st.next_epoch, ticket.started);
            if let Some(h) = &fetched {
                entry.absorb(h, ticket.started);
            }
            st.put(key, entry, &self.limits, now);
            return Installed::Done;
        }
        st.stats.catch_ups += 1;
        let Some(entry) = st.entries.get_mut(&key) else {
            return Installed::Done; // evicted meanwhile: the next push hydrates
        };
        if entry.epoch != ticket.epoch {
            return Installed::Done; // replaced meanwhile by a newer hydration
        }
        let changed = fetched.as_ref().is_none_or(|h| {
            entry.pid.is_some_and(|p| p != h.pid) || entry.window_s.is_some_and(|w| w != h.window_s)
        });
        match fetched {
            Some(h) if !changed => {
                entry.absorb(&h, ticket.started);
                st.refit(&key, &self.limits, now);
                Installed::Done
            }
            gone_or_changed => {
                st.stats.invalidations += 1;
                st.remove(&key);
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

    /// A read asked for by [`plan`](Self::plan) failed; the push goes on with -1.
    pub fn fetch_failed(&self) {
        self.lock().stats.fetch_errors += 1;
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
        let mut st = self.lock();
        st.clock.observe(created_us, now);
        let key = key(queue, partition);
        let Some(entry) = st.entries.get_mut(&key) else {
            return;
        };
        if entry.pid.is_some_and(|p| p != pid) {
            st.stats.invalidations += 1;
            st.remove(&key);
            return;
        }
        entry.pid = Some(pid);
        let count = i64::try_from(hashes.len() / 16).unwrap_or(i64::MAX);
        let end = base.saturating_add(count - 1);
        entry.seen_upto = entry.seen_upto.max(end);
        if base == entry.verified_upto + 1 {
            entry.add_row(&HashRow {
                base,
                created_us,
                hashes: hashes.to_vec(),
            });
            entry.verified_upto = end;
            st.stats.extensions += 1;
            st.refit(&key, &self.limits, now);
        } else if base > entry.verified_upto + 1 {
            st.stats.invalidations += 1;
        }
    }

    /// Drops what is known about (queue, partition): for a commit that cannot be reported.
    pub fn forget(&self, queue: &str, partition: &str) {
        if self.enabled {
            let mut st = self.lock();
            st.stats.invalidations += 1;
            st.remove(&key(queue, partition));
        }
    }

    /// The `dedupCache` object of `/metrics`.
    pub fn metrics(&self) -> Value {
        let st = self.lock();
        let s = &st.stats;
        json!({
            "enabled": self.enabled,
            "budgetBytes": self.limits.budget_bytes,
            "bytes": st.used,
            "partitions": st.entries.len(),
            "hashes": st.entries.values().map(|e| e.ring.hash_count()).sum::<usize>(),
            "suppressedPartitions": st.suppressed.len(),
            "hydrations": s.hydrations,
            "catchUps": s.catch_ups,
            "fetchErrors": s.fetch_errors,
            "vouchedPushes": s.vouched,
            "fullProbePushes": s.full_probes,
            "hits": s.hits,
            "extensions": s.extensions,
            "invalidations": s.invalidations,
            "evictions": s.evictions,
            "suppressions": s.suppressions,
        })
    }
}

impl State {
    fn plan(
        &mut self,
        key: &Key,
        hashes: &[u8],
        now: Instant,
        meta_ttl: Duration,
        may_fetch: bool,
    ) -> Plan {
        if let Some(&until) = self.suppressed.get(key) {
            if now < until {
                return Plan::Send(-1);
            }
            self.suppressed.remove(key);
        }
        let fetch = |after, epoch| {
            if may_fetch {
                Plan::Fetch(Ticket {
                    after,
                    epoch,
                    started: now,
                })
            } else {
                Plan::Send(-1)
            }
        };
        let db_now = self.clock.now_us(now);
        self.touch(key);
        let Some(entry) = self.entries.get_mut(key) else {
            return fetch(-1, 0);
        };
        let before = entry.bytes;
        entry.expire(db_now);
        entry.bytes = entry.size(key);
        self.used = self.used - before + entry.bytes;
        if now.saturating_duration_since(entry.meta_at) >= meta_ttl
            || entry.seen_upto > entry.verified_upto
        {
            return fetch(entry.verified_upto, entry.epoch);
        }
        match entry.verdict(hashes, db_now) {
            Verdict::Vouch(v) => Plan::Send(v),
            Verdict::Hit => {
                self.stats.hits += 1;
                Plan::Send(-1)
            }
            Verdict::Unsafe => Plan::Send(-1),
        }
    }

    /// Marks `key` most recently used (if cached).
    fn touch(&mut self, key: &Key) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        self.tick += 1;
        self.lru.remove(&entry.tick);
        entry.tick = self.tick;
        self.lru.insert(self.tick, key.clone());
    }

    fn remove(&mut self, key: &Key) {
        if let Some(entry) = self.entries.remove(key) {
            self.lru.remove(&entry.tick);
            self.used -= entry.bytes;
        }
    }

    fn put(&mut self, key: Key, entry: Entry, limits: &Limits, now: Instant) {
        self.remove(&key);
        self.entries.insert(key.clone(), entry);
        self.touch(&key);
        self.refit(&key, limits, now);
    }

    /// Re-measures `key`'s entry, then evicts least recently used partitions until the cache
    /// fits its budget; suppresses `key` itself when it cannot fit alone.
    fn refit(&mut self, key: &Key, limits: &Limits, now: Instant) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        let before = entry.bytes;
        entry.bytes = entry.size(key);
        self.used = self.used - before + entry.bytes;
        while self.used > limits.budget_bytes {
            let victim = self.lru.values().find(|k| *k != key).cloned();
            match victim {
                Some(victim) => {
                    self.stats.evictions += 1;
                    self.remove(&victim);
                }
                None => {
                    self.stats.suppressions += 1;
                    self.remove(key);
                    self.suppressed.retain(|_, until| *until > now);
                    self.suppressed
                        .insert(key.clone(), now + limits.suppress_for);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
