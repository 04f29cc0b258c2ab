//! What the pop path remembers between requests, gathered for the engine: the minimum pop
//! wait of each queue (`min_pop_wait.rs`), the per-queue delivery metrics (`deliveries.rs`)
//! and the long-poll's counters. The pop maintenance flag lives in `maintenance.rs`, beside
//! the push flag it is read with; the hot-list ring (`hotlist/`) is the pop path's other
//! memory, with its own switch.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::accel::deliveries::{Deliveries, QueueDeliveries};
use crate::accel::min_pop_wait::MinPopWait;

/// Per-broker pop state: the learned minimum pop waits, the long-poll's counters and the
/// per-queue delivery metrics.
#[derive(Default)]
pub struct PopCache {
    pub min_wait: MinPopWait,
    pub stats: PopStats,
    pub deliveries: Deliveries,
}

impl PopCache {
    /// Drops what this broker remembers of a deleted queue, so a stream of created and deleted
    /// names leaves nothing behind.
    pub fn forget(&self, queue: &str) {
        self.deliveries.forget(queue);
        self.min_wait.learn(queue, 0);
    }

    /// The pop path's counters and per-queue deliveries, for the `pop` section of `/metrics`
    /// (rendered by the http floor).
    pub fn metrics(&self) -> PopSnapshot {
        PopSnapshot {
            hint_claims: self.stats.hint_claims.load(Relaxed),
            hint_fallthroughs: self.stats.hint_fallthroughs.load(Relaxed),
            deadline_margin_skips: self.stats.deadline_margin_skips.load(Relaxed),
            queues: self.deliveries.snapshot(),
        }
    }
}

/// What [`PopCache::metrics`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopSnapshot {
    pub hint_claims: u64,
    pub hint_fallthroughs: u64,
    pub deadline_margin_skips: u64,
    /// Per queue that delivered since start (and was not deleted here), by name.
    pub queues: Vec<(String, QueueDeliveries)>,
}

/// How woken pops were scheduled, so the cheaper paths can be seen working.
#[derive(Default)]
pub struct PopStats {
    /// Woken wildcard pops served from their pushed-partition hints.
    pub hint_claims: AtomicU64,
    /// Hinted claims that delivered nothing and fell through to the wildcard scan.
    pub hint_fallthroughs: AtomicU64,
    /// Waiting pops that answered 204 instead of starting a claim inside the deadline margin.
    pub deadline_margin_skips: AtomicU64,
}
