//! The segment cache (docs/engine.md §5.8): the frames of segments this broker committed lately,
//! so a pop that claims them soon after does not decompress what this broker just compressed.
//! Only segments of queues a pop claimed from in the last [`CONSUMED_FOR`] are kept (a queue
//! nobody consumes costs nothing), within a byte budget, oldest out first.
//!
//! PostgreSQL's blob stays the authority: an entry answers only for a blob equal, byte for
//! byte, to the one it was stored with (the writer's blob is shared, and comparing costs less
//! than hashing), so a stale or foreign entry costs one decompression, never a wrong answer.
//! Segments are never rewritten in place, and an entry is stored only after its commit.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// How long after its last claim a queue's new segments are still kept.
pub const CONSUMED_FOR: Duration = Duration::from_secs(5);

/// A segment: (partition id, base offset).
type Key = (i64, i64);

/// See the module doc. A budget of 0 turns it off: every pop decompresses.
pub struct SegmentCache {
    budget: usize,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// Keys in the order stored, to evict the oldest first.
    order: VecDeque<Key>,
    bytes: usize,
    /// Stored queue name → when a pop last claimed from it.
    consumed: HashMap<String, Instant>,
}

struct Entry {
    /// The stored blob.
    blob: Bytes,
    frames: Bytes,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.blob.len() + self.frames.len()
    }
}

/// How often the cache answered, for `/metrics/prometheus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub hits: u64,
    pub misses: u64,
}

impl SegmentCache {
    pub fn new(budget_bytes: usize) -> Self {
        SegmentCache {
            budget: budget_bytes,
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// A committed segment of `queue` at `key`: (the blob as stored, the frames it
    /// compresses). Kept when a pop claimed from `queue` lately and it fits the budget at all.
    pub fn stored(&self, queue: &str, key: Key, (blob, frames): (Bytes, Bytes)) {
        let entry = Entry { blob, frames };
        if entry.bytes() > self.budget {
            return;
        }
        let mut inner = self.inner.lock().expect("segment cache lock");
        let stale = |at: &Instant| at.elapsed() >= CONSUMED_FOR;
        if inner.consumed.get(queue).is_none_or(stale) {
            return;
        }
        inner.bytes += entry.bytes();
        if let Some(old) = inner.entries.insert(key, entry) {
            inner.bytes -= old.bytes();
        } else {
            inner.order.push_back(key);
        }
        inner.evict(self.budget);
    }

    /// The frames of the segment at `key` when the cache holds them for exactly `blob`; notes
    /// that `queue` is consumed either way.
    pub fn frames(&self, queue: &str, key: Key, blob: &[u8]) -> Option<Bytes> {
        if self.budget == 0 {
            return None;
        }
        let found = {
            let mut inner = self.inner.lock().expect("segment cache lock");
            inner.consume(queue);
            inner
                .entries
                .get(&key)
                .map(|e| (e.blob.clone(), e.frames.clone()))
        };
        let hit = found.and_then(|(stored, frames)| (stored == blob).then_some(frames));
        let counter = if hit.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Relaxed);
        hit
    }

    pub fn tally(&self) -> Tally {
        Tally {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
        }
    }

    /// Bytes of frames held.
    pub fn bytes(&self) -> usize {
        self.inner.lock().expect("segment cache lock").bytes
    }
}

impl Inner {
    fn consume(&mut self, queue: &str) {
        match self.consumed.get_mut(queue) {
            Some(at) => *at = Instant::now(),
            None => {
                // Queues that stopped being consumed leave with the next newcomer.
                self.consumed.retain(|_, at| at.elapsed() < CONSUMED_FOR);
                self.consumed.insert(queue.to_string(), Instant::now());
            }
        }
    }

    fn evict(&mut self, budget: usize) {
        while self.bytes > budget {
            let Some(key) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.entries.remove(&key) {
                self.bytes -= old.bytes();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(n: usize, byte: u8) -> Bytes {
        Bytes::from(vec![byte; n])
    }

    #[test]
    fn keeps_only_segments_of_consumed_queues() {
        let cache = SegmentCache::new(1 << 20);
        cache.stored("q", (1, 0), (Bytes::from_static(b"blob"), frames(10, 1)));
        assert_eq!(
            cache.frames("q", (1, 0), b"blob"),
            None,
            "q was not consumed"
        );
        cache.stored("q", (1, 0), (Bytes::from_static(b"blob"), frames(10, 1)));
        assert_eq!(cache.frames("q", (1, 0), b"blob"), Some(frames(10, 1)));
        cache.stored(
            "other",
            (2, 0),
            (Bytes::from_static(b"blob"), frames(10, 2)),
        );
        assert_eq!(cache.frames("other", (2, 0), b"blob"), None);
        assert_eq!(cache.tally(), Tally { hits: 1, misses: 2 });
    }

    #[test]
    fn answers_only_for_the_blob_it_was_stored_with() {
        let cache = SegmentCache::new(1 << 20);
        cache.frames("q", (1, 0), b"");
        cache.stored("q", (1, 0), (Bytes::from_static(b"first"), frames(10, 1)));
        assert_eq!(cache.frames("q", (1, 0), b"second"), None);
        assert_eq!(cache.frames("q", (1, 1), b"first"), None);
        assert_eq!(cache.frames("q", (1, 0), b"first"), Some(frames(10, 1)));
    }

    #[test]
    fn evicts_the_oldest_beyond_its_budget() {
        let cache = SegmentCache::new(25);
        cache.frames("q", (1, 0), b"");
        for base in 0..3 {
            cache.stored("q", (1, base), (Bytes::from_static(b"b"), frames(9, 0)));
        }
        assert_eq!(cache.bytes(), 20, "blob and frames count");
        assert_eq!(cache.frames("q", (1, 0), b"b"), None);
        assert!(cache.frames("q", (1, 1), b"b").is_some());
        assert!(cache.frames("q", (1, 2), b"b").is_some());
        cache.stored("q", (1, 3), (Bytes::from_static(b"b"), frames(30, 0)));
        assert_eq!(cache.bytes(), 20, "larger than the budget: not kept");
    }

    #[test]
    fn a_zero_budget_keeps_nothing() {
        let cache = SegmentCache::new(0);
        cache.frames("q", (1, 0), b"");
        cache.stored("q", (1, 0), (Bytes::from_static(b"b"), frames(0, 0)));
        assert_eq!(cache.frames("q", (1, 0), b"b"), None);
        assert_eq!(cache.tally(), Tally { hits: 0, misses: 0 });
    }
}
