//! What the retention loop owns beside the shared part: the counts of what it did in this
//! broker, which `/metrics` renders.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::engine::Shared;

pub struct RetentionState {
    shared: Arc<Shared>,
    pub counters: RetentionCounters,
}

impl RetentionState {
    pub fn new(shared: Arc<Shared>) -> Self {
        RetentionState {
            shared,
            counters: RetentionCounters::default(),
        }
    }
}

impl Deref for RetentionState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// What the retention loop (docs/engine.md §10) did in this broker since it started; only the
/// broker holding the runner lock deletes anything.
#[derive(Default)]
pub struct RetentionCounters {
    pub runner: AtomicBool,
    pub takeovers: AtomicU64,
    pub runs: AtomicU64,
    pub last_run_ms: AtomicU64,
    pub segments_deleted: AtomicU64,
    pub messages_deleted: AtomicU64,
    pub segments_evicted: AtomicU64,
    pub messages_evicted: AtomicU64,
    pub sidecar_rows_purged: AtomicU64,
    pub partitions_cleaned: AtomicU64,
    pub watermarks_repaired: AtomicU64,
    pub lock_skips: AtomicU64,
    pub errors: AtomicU64,
}

/// A plain copy of [`RetentionCounters`] for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionSnapshot {
    /// This broker holds the runner lock.
    pub runner: bool,
    /// Times this broker took the runner lock.
    pub takeovers: u64,
    /// Completed runs, and the duration of the last one.
    pub runs: u64,
    pub last_run_ms: u64,
    /// Rules 1 and 2.
    pub segments_deleted: u64,
    pub messages_deleted: u64,
    /// Max-wait eviction.
    pub segments_evicted: u64,
    pub messages_evicted: u64,
    pub sidecar_rows_purged: u64,
    pub partitions_cleaned: u64,
    pub watermarks_repaired: u64,
    /// Steps that found their partition held by a writer and left it for later.
    pub lock_skips: u64,
    /// Runs or steps that failed (logged).
    pub errors: u64,
}

impl RetentionCounters {
    pub fn snapshot(&self) -> RetentionSnapshot {
        RetentionSnapshot {
            runner: self.runner.load(Relaxed),
            takeovers: self.takeovers.load(Relaxed),
            runs: self.runs.load(Relaxed),
            last_run_ms: self.last_run_ms.load(Relaxed),
            segments_deleted: self.segments_deleted.load(Relaxed),
            messages_deleted: self.messages_deleted.load(Relaxed),
            segments_evicted: self.segments_evicted.load(Relaxed),
            messages_evicted: self.messages_evicted.load(Relaxed),
            sidecar_rows_purged: self.sidecar_rows_purged.load(Relaxed),
            partitions_cleaned: self.partitions_cleaned.load(Relaxed),
            watermarks_repaired: self.watermarks_repaired.load(Relaxed),
            lock_skips: self.lock_skips.load(Relaxed),
            errors: self.errors.load(Relaxed),
        }
    }
}
