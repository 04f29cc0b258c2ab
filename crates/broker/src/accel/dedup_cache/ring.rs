//! One partition's cached hashes (docs/engine.md §4.2 storage): a ring of immutable sorted blocks
//! of about 4096 hashes, oldest first, plus one hot buffer that takes new hashes and is
//! sealed into a block when full. Expiry drops whole blocks, never single hashes, so it is a
//! pop from the front.

use std::collections::VecDeque;
use std::mem::size_of;

use crate::accel::heap::heap_bytes;

/// Bytes the ring holds per cached hash.
const HASH_BYTES: usize = size_of::<u128>();

/// Hashes per sealed block (a block holds at least this many: a segment is never split).
pub const BLOCK_HASHES: usize = 4096;

/// A transactionId hash as stored: the 16 sidecar bytes read big-endian.
pub fn hash_key(bytes: &[u8]) -> Option<u128> {
    <[u8; 16]>::try_from(bytes).ok().map(u128::from_be_bytes)
}

pub struct HashRing {
    blocks: VecDeque<Block>,
    /// The newest hashes; sorted only while `hot_sorted` holds.
    hot: Vec<u128>,
    hot_sorted: bool,
    /// Newest commit time (µs, database clock) among the hot hashes; `i64::MIN` when empty.
    hot_newest_us: i64,
}

struct Block {
    hashes: Box<[u128]>,
    /// Newest commit time among the block's hashes (µs, database clock).
    newest_us: i64,
}

impl HashRing {
    pub fn new() -> Self {
        HashRing {
            blocks: VecDeque::new(),
            hot: Vec::new(),
            hot_sorted: true,
            hot_newest_us: i64::MIN,
        }
    }

    /// Adds one segment's hashes (16 bytes each), committed at `created_us`.
    pub fn add(&mut self, hashes: impl IntoIterator<Item = u128>, created_us: i64) {
        let before = self.hot.len();
        self.hot.extend(hashes);
        if self.hot.len() == before {
            return;
        }
        self.hot_sorted = false;
        self.hot_newest_us = self.hot_newest_us.max(created_us);
        if self.hot.len() >= BLOCK_HASHES {
            // The next hot buffer grows on demand: most partitions never fill one.
            let mut sealed = std::mem::take(&mut self.hot);
            sealed.sort_unstable();
            self.blocks.push_back(Block {
                hashes: sealed.into_boxed_slice(),
                newest_us: self.hot_newest_us,
            });
            self.hot_sorted = true;
            self.hot_newest_us = i64::MIN;
        }
    }

    /// Whether any of `hashes` is cached. Sorts the hot buffer first if adds left it
    /// unsorted (a stable sort merges the sorted prefix with the new run in linear time).
    pub fn contains_any(&mut self, hashes: impl IntoIterator<Item = u128>) -> bool {
        if !self.hot_sorted {
            self.hot.sort();
            self.hot_sorted = true;
        }
        hashes.into_iter().any(|h| {
            self.hot.binary_search(&h).is_ok()
                || self
                    .blocks
                    .iter()
                    .any(|b| b.hashes.binary_search(&h).is_ok())
        })
    }

    /// Drops every block whose newest hash was committed before `cutoff_us`, and the hot
    /// buffer too once it is that old; returns the newest commit time dropped, if any.
    pub fn expire(&mut self, cutoff_us: i64) -> Option<i64> {
        let mut dropped = None;
        while let Some(front) = self.blocks.front() {
            if front.newest_us >= cutoff_us {
                return dropped;
            }
            dropped = Some(front.newest_us);
            self.blocks.pop_front();
        }
        if !self.hot.is_empty() && self.hot_newest_us < cutoff_us {
            dropped = Some(self.hot_newest_us);
            self.hot = Vec::new();
            self.hot_sorted = true;
            self.hot_newest_us = i64::MIN;
        }
        dropped
    }

    /// Hashes held.
    pub fn hash_count(&self) -> usize {
        self.hot.len() + self.blocks.iter().map(|b| b.hashes.len()).sum::<usize>()
    }

    /// Heap bytes held: the hot buffer at its capacity, the block slots at theirs, each
    /// block's keys, and the allocator's header on each of those allocations.
    pub fn bytes(&self) -> usize {
        heap_bytes(self.hot.capacity() * HASH_BYTES)
            + heap_bytes(self.blocks.capacity() * size_of::<Block>())
            + self
                .blocks
                .iter()
                .map(|b| heap_bytes(b.hashes.len() * HASH_BYTES))
                .sum::<usize>()
    }
}
