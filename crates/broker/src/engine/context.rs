//! The part of the engine every concept shares ([`Shared`]): configuration, the store, the
//! limiter, the wake gates, encryption, maintenance flags, counters, metrics, lifecycle; and the
//! process-wide counters. A concept's state (`pop/state.rs`, `push/state.rs`, `ack/state.rs`)
//! holds it behind an `Arc` and derefs to it; the broker's `Engine` (`engine/mod.rs`) holds it
//! beside those states. This module depends on no concept of the engine but one: the encryption
//! state (`engine/encryption.rs`), which itself uses no engine type.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use crate::accel::admission::Admission;
use crate::accel::maintenance::MaintenanceFlags;
use crate::accel::wake::WakeGates;
use crate::config::Config;
use crate::engine::encryption::Encryption;
use crate::store::Store;
use crate::telemetry::Telemetry;

/// What every concept shares: configuration, the store, the limiter, the wake gates, the
/// encryption key and flags, the maintenance flags, counters, metrics and the broker's
/// lifecycle. A concept's state holds it behind an `Arc` and derefs to it.
pub struct Shared {
    pub cfg: Config,
    pub store: Store,
    pub wake: Arc<WakeGates>,
    /// The one limiter every push, pop claim and ack passes before its connection (§9).
    pub admission: Admission,
    /// The maintenance flags as last read (docs/engine.md §2.9).
    pub maintenance: MaintenanceFlags,
    /// The at-rest encryption key and which queues to seal (docs/engine.md §3.1).
    pub encryption: Arc<Encryption>,
    pub counters: Arc<Counters>,
    /// The live Prometheus series (requests per route, acknowledgements).
    pub telemetry: Telemetry,
    pub started: Instant,
    /// Identifies this broker in cross-broker wake notifications.
    pub broker_id: uuid::Uuid,
    /// Flips to true when the broker starts shutting down; parked long-polls watch it.
    pub closing: tokio::sync::watch::Sender<bool>,
}

/// Process-wide counters rendered by `/metrics`.
#[derive(Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub messages_pushed: AtomicU64,
    pub messages_popped: AtomicU64,
    /// Push segments written as built ahead by the pipeline (accel/push_fusion.rs).
    pub segments_prepared: AtomicU64,
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
