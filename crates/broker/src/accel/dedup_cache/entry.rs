//! One partition's entry of the dedup cache and the database clock estimate it expires by.
//! The invariant of a vouch lives here (see the parent module): every hash at offsets
//! `<= verified_upto` committed at or after `known_since` is in the ring, and `known_since` is
//! no later than the oldest commit time the SQL probe could consider.

use std::mem::size_of;
use std::sync::Mutex;
use std::time::Instant;

use super::ring::HashRing;
use super::Hydration;
use crate::accel::heap::heap_bytes;
use queen_proto::hash::HASH_LEN;
use queen_proto::sidecar::keys;

/// Clock-skew slack of expiry, matching the 5 s the hydration read adds
/// (sql/functions/dedup_cache.sql).
const SKEW_SLACK_US: i64 = 5_000_000;

/// An estimate of the database clock that never runs ahead of it: the newest database
/// timestamp seen plus the local time elapsed since it was received.
#[derive(Default)]
pub struct DbClock {
    anchor: Option<(i64, Instant)>,
}

impl DbClock {
    pub fn now_us(&self, at: Instant) -> Option<i64> {
        self.anchor.map(|(us, seen)| {
            let elapsed = at.saturating_duration_since(seen).as_micros();
            us.saturating_add(i64::try_from(elapsed).unwrap_or(i64::MAX))
        })
    }

    pub fn observe(&mut self, us: i64, at: Instant) {
        if self.now_us(at).is_none_or(|est| us > est) {
            self.anchor = Some((us, at));
        }
    }
}

pub struct Entry {
    /// Identifies this incarnation: a catch-up answers only the entry that asked for it.
    pub epoch: u64,
    /// `None` while the partition did not exist at hydration and no commit named it yet.
    pub pid: Option<i64>,
    /// `None` like `pid`: then nothing ever expired and `known_since` is `i64::MIN`.
    pub window_s: Option<i32>,
    pub meta_at: Instant,
    pub verified_upto: i64,
    /// Highest offset known to be committed; above `verified_upto` the entry is behind.
    pub seen_upto: i64,
    known_since_us: i64,
    ring: HashRing,
}

/// What an entry allows for one segment.
pub enum Verdict {
    /// An incoming hash is cached: only SQL can tell whether and where it is stored.
    Hit,
    /// The hashes are absent up to this offset.
    Vouch(i64),
    /// Nothing can be vouched for.
    Unsafe,
}

impl Entry {
    pub fn new(epoch: u64, meta_at: Instant) -> Self {
        Entry {
            epoch,
            pid: None,
            window_s: None,
            meta_at,
            verified_upto: -1,
            seen_upto: -1,
            known_since_us: i64::MIN,
            ring: HashRing::new(),
        }
    }

    /// Whether more was committed than the entry knows, or its metadata is too old.
    pub fn needs_read(&self, now: Instant, meta_ttl: std::time::Duration) -> bool {
        now.saturating_duration_since(self.meta_at) >= meta_ttl
            || self.seen_upto > self.verified_upto
    }

    /// Adds the keys of offsets `base..` committed at `created_us`, those above `verified_upto`
    /// (a straddling row comes whole from SQL). Window 0 disables dedup: nothing to remember.
    fn add(&mut self, base: i64, keys: impl Iterator<Item = u64>, created_us: i64) {
        if self.window_s == Some(0) {
            return;
        }
        let skip = usize::try_from(self.verified_upto + 1 - base).unwrap_or(0);
        self.ring.add(keys.skip(skip), created_us);
    }

    /// Takes in a read of the rows after `verified_upto` (a hydration when it is -1).
    pub fn absorb(&mut self, h: &Hydration, started: Instant) {
        self.pid = Some(h.pid);
        self.window_s = Some(h.window_s);
        self.meta_at = started;
        for row in &h.rows {
            self.add(row.base, row.keys.iter().copied(), row.created_us);
        }
        self.verified_upto = self.verified_upto.max(h.last);
        self.seen_upto = self.seen_upto.max(h.last);
        // Rows older than `since` were not read: from here on only newer ones are vouched for.
        self.known_since_us = self.known_since_us.max(h.since_us);
    }

    /// Extends with a commit of `hashes` at `base` if it starts right after `verified_upto`;
    /// returns whether it did. Any later start leaves the entry behind.
    pub fn extend(&mut self, base: i64, hashes: &[u8], created_us: i64) -> bool {
        let count = i64::try_from(hashes.len() / HASH_LEN).unwrap_or(i64::MAX);
        let end = base.saturating_add(count - 1);
        self.seen_upto = self.seen_upto.max(end);
        if base != self.verified_upto + 1 {
            return false;
        }
        self.add(base, keys(hashes), created_us);
        self.verified_upto = end;
        true
    }

    /// Drops the blocks older than window + slack and raises `known_since` past them.
    pub fn expire(&mut self, db_now: Option<i64>) {
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

    pub fn verdict(&mut self, hashes: &[u8], db_now: Option<i64>) -> Verdict {
        if self.window_s == Some(0) {
            return Verdict::Unsafe; // no dedup at all: SQL probes nothing either way
        }
        if self.ring.contains_any(keys(hashes)) {
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

    pub fn hash_count(&self) -> usize {
        self.ring.hash_count()
    }

    /// Heap bytes of this entry: its shared allocation (an `Arc`'s two counts around the
    /// mutex) and its ring.
    pub fn size(&self) -> usize {
        heap_bytes(2 * size_of::<usize>() + size_of::<Mutex<Entry>>()) + self.ring.bytes()
    }
}
