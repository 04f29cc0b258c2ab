//! One partition's cached hash keys (docs/engine.md §4.2 storage; a key is the first 8 bytes
//! of a hash, `queen_proto::sidecar::key`): a ring of immutable sorted runs, oldest first, plus
//! one hot buffer that takes new keys and is sealed into a run of one block (about 4096 keys)
//! when full. Runs of equal size at the back merge, like a binary counter, up to
//! [`MAX_RUN_BLOCKS`] blocks: a lookup searches a handful of runs rather than every block (a
//! full 16 MiB cache is 512 blocks, and a 700-message segment looked up in each of 256 took
//! milliseconds), each through a table of the run's hashes by their top bits. The hot buffer is
//! a sorted prefix and a short unsorted tail: a lookup scans the tail, and only a tail past
//! [`HOT_TAIL_MAX`] is merged in, so one-message segments do not re-sort it per push. Expiry drops
//! whole runs, never single keys, so it is a pop from the front; a merged run stays until its
//! newest key expires, which only keeps keys longer than needed.

use std::collections::VecDeque;
use std::mem::size_of;

use crate::accel::heap::heap_bytes;

/// Bytes the ring holds per cached hash.
const KEY_BYTES: usize = size_of::<u64>();

/// Hashes per sealed block (a block holds at least this many: a segment is never split).
pub const BLOCK_HASHES: usize = 4096;

/// Blocks a run grows to by merging at most: bounds how long expired hashes stay.
pub const MAX_RUN_BLOCKS: usize = 32;

/// Unsorted hot hashes a lookup scans before it sorts them into the prefix: the merge of up
/// to [`BLOCK_HASHES`] keys is paid once per this many adds, not per lookup (docs/engine.md §4.2).
pub const HOT_TAIL_MAX: usize = 32;

pub struct HashRing {
    runs: VecDeque<Run>,
    /// The newest hashes: `hot[..hot_sorted]` sorted, the rest in arrival order.
    hot: Vec<u64>,
    hot_sorted: usize,
    /// Newest commit time (µs, database clock) among the hot hashes; `i64::MIN` when empty.
    hot_newest_us: i64,
}

struct Run {
    hashes: Box<[u64]>,
    /// `starts[b]..starts[b + 1]` are the positions of the hashes whose top bits are `b`.
    starts: Box<[u32]>,
    /// Right shift that leaves a hash's top bits: `64 - log2(starts.len() - 1)`.
    shift: u32,
    /// Blocks merged into this run.
    blocks: usize,
    /// Newest commit time among the run's hashes (µs, database clock).
    newest_us: i64,
}

/// Hashes per bucket of a run's [`Run::starts`] table, on average (rounded to a power of two
/// of buckets). The table costs 4 bytes per this many 8-byte keys.
const HASHES_PER_BUCKET: usize = 8;

impl Run {
    /// A run of `hashes`, sorted, with its bucket table. Keys are hash prefixes, uniform over
    /// `u64`, so a bucket holds a handful: a lookup costs two cache misses, not the seventeen of
    /// a bisection of the run (ten times faster on a full cache of 16 runs).
    fn new(hashes: Box<[u64]>, blocks: usize, newest_us: i64) -> Run {
        let bits = (hashes.len() / HASHES_PER_BUCKET).max(1).ilog2();
        let shift = 64 - bits;
        let mut starts = vec![0u32; (1 << bits) + 1];
        for &h in hashes.iter() {
            starts[bucket(h, shift) + 1] += 1;
        }
        for b in 1..starts.len() {
            starts[b] += starts[b - 1];
        }
        Run {
            hashes,
            starts: starts.into_boxed_slice(),
            shift,
            blocks,
            newest_us,
        }
    }

    /// Bisects the hash's bucket only: keys chosen to share top bits cost a bisection of
    /// the run at worst.
    fn contains(&self, h: u64) -> bool {
        let b = bucket(h, self.shift);
        let (from, to) = (self.starts[b] as usize, self.starts[b + 1] as usize);
        self.hashes[from..to].binary_search(&h).is_ok()
    }

    /// `older` and `newer` as one sorted run.
    fn merge(older: Run, newer: Run) -> Run {
        let mut hashes = Vec::with_capacity(older.hashes.len() + newer.hashes.len());
        let (mut a, mut b) = (
            older.hashes.iter().peekable(),
            newer.hashes.iter().peekable(),
        );
        while let (Some(&&x), Some(&&y)) = (a.peek(), b.peek()) {
            if x <= y {
                hashes.push(x);
                a.next();
            } else {
                hashes.push(y);
                b.next();
            }
        }
        hashes.extend(a);
        hashes.extend(b);
        Run::new(
            hashes.into_boxed_slice(),
            older.blocks + newer.blocks,
            older.newest_us.max(newer.newest_us),
        )
    }
}

/// The bucket of `h`: its top `64 - shift` bits (none when `shift` is 64).
fn bucket(h: u64, shift: u32) -> usize {
    h.checked_shr(shift).unwrap_or(0) as usize
}

impl HashRing {
    pub fn new() -> Self {
        HashRing {
            runs: VecDeque::new(),
            hot: Vec::new(),
            hot_sorted: 0,
            hot_newest_us: i64::MIN,
        }
    }

    /// Adds one segment's hash keys, committed at `created_us`.
    pub fn add(&mut self, hashes: impl IntoIterator<Item = u64>, created_us: i64) {
        let before = self.hot.len();
        self.hot.extend(hashes);
        if self.hot.len() == before {
            return;
        }
        self.hot_newest_us = self.hot_newest_us.max(created_us);
        if self.hot.len() >= BLOCK_HASHES {
            // The next hot buffer grows on demand: most partitions never fill one.
            let mut sealed = std::mem::take(&mut self.hot);
            sealed.sort_unstable();
            self.runs
                .push_back(Run::new(sealed.into_boxed_slice(), 1, self.hot_newest_us));
            self.hot_sorted = 0;
            self.hot_newest_us = i64::MIN;
            self.merge_back();
        }
    }

    /// Merges the two newest runs while they are equally large and the result stays within
    /// [`MAX_RUN_BLOCKS`].
    fn merge_back(&mut self) {
        while let [.., older, newer] = self.runs.make_contiguous() {
            if older.blocks != newer.blocks || older.blocks * 2 > MAX_RUN_BLOCKS {
                return;
            }
            let (Some(newer), Some(older)) = (self.runs.pop_back(), self.runs.pop_back()) else {
                return;
            };
            self.runs.push_back(Run::merge(older, newer));
        }
    }

    /// Whether any of `hashes` is cached. Merges the hot tail into the sorted prefix first
    /// once it is longer than [`HOT_TAIL_MAX`] (a stable sort merges a sorted prefix with the
    /// new run in linear time).
    pub fn contains_any(&mut self, hashes: impl IntoIterator<Item = u64>) -> bool {
        if self.hot.len() - self.hot_sorted > HOT_TAIL_MAX {
            self.hot.sort();
            self.hot_sorted = self.hot.len();
        }
        let (sorted, tail) = self.hot.split_at(self.hot_sorted);
        hashes.into_iter().any(|h| {
            tail.contains(&h)
                || sorted.binary_search(&h).is_ok()
                || self.runs.iter().any(|r| r.contains(h))
        })
    }

    /// Drops every run whose newest hash was committed before `cutoff_us`, and the hot
    /// buffer too once it is that old; returns the newest commit time dropped, if any.
    pub fn expire(&mut self, cutoff_us: i64) -> Option<i64> {
        let mut dropped = None;
        while let Some(front) = self.runs.front() {
            if front.newest_us >= cutoff_us {
                return dropped;
            }
            dropped = Some(front.newest_us);
            self.runs.pop_front();
        }
        if !self.hot.is_empty() && self.hot_newest_us < cutoff_us {
            dropped = Some(self.hot_newest_us);
            self.hot = Vec::new();
            self.hot_sorted = 0;
            self.hot_newest_us = i64::MIN;
        }
        dropped
    }

    /// Hashes held.
    pub fn hash_count(&self) -> usize {
        self.hot.len() + self.runs.iter().map(|r| r.hashes.len()).sum::<usize>()
    }

    /// Heap bytes held: the hot buffer at its capacity, the run slots at theirs, each run's
    /// keys, and the allocator's header on each of those allocations.
    pub fn bytes(&self) -> usize {
        heap_bytes(self.hot.capacity() * KEY_BYTES)
            + heap_bytes(self.runs.capacity() * size_of::<Run>())
            + self
                .runs
                .iter()
                .map(|r| {
                    heap_bytes(r.hashes.len() * KEY_BYTES)
                        + heap_bytes(r.starts.len() * size_of::<u32>())
                })
                .sum::<usize>()
    }
}
