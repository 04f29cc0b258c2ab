//! The engine's context: everything one broker process shares between requests (configuration,
//! the store, the accelerators, counters, metrics). Every engine function takes it; the HTTP
//! floor holds it as its router state. It is assembled in `engine/mod.rs`, so this module
//! depends on no concept of the engine but one: the encryption state (`engine/encryption.rs`),
//! which itself uses no engine type, so no concept loops back here through it.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use crate::accel::ack_fusion::AckFusion;
use crate::accel::ack_registry::AckRegistry;
use crate::accel::admission::Admission;
use crate::accel::dedup_cache::DedupCache;
use crate::accel::flow::Flow;
use crate::accel::hotlist::HotList;
use crate::accel::maintenance::MaintenanceFlags;
use crate::accel::one_flight::OneFlight;
use crate::accel::pop_cache::PopCache;
use crate::accel::push_fusion::PushFusion;
use crate::accel::wake::WakeGates;
use crate::config::Config;
use crate::engine::encryption::Encryption;
use crate::spool::Spool;
use crate::store::ack::AckVerdict;
use crate::store::resources::MetricsSample;
use crate::store::Store;
use crate::telemetry::Telemetry;

/// Cheap to clone: one `Arc` around everything the broker shares between requests.
#[derive(Clone)]
pub struct Engine(Arc<Inner>);

pub struct Inner {
    pub cfg: Config,
    pub store: Store,
    pub wake: Arc<WakeGates>,
    /// Pop-path state: learned minimum pop waits, counters.
    pub pop: PopCache,
    /// The maintenance flags as last read (docs/engine.md §2.9).
    pub maintenance: MaintenanceFlags,
    /// Where pushes wait while PostgreSQL cannot take them (docs/engine.md §4.6); `None` when
    /// `FILE_BUFFER_ENABLED` is off.
    pub spool: Option<Arc<Spool>>,
    /// Per (queue, group), the partitions known to have work (docs/engine.md §7); used by
    /// wildcard pops when `cfg.hotlist` is on, fed by every commit and ack regardless.
    pub hotlist: HotList,
    /// The one limiter every push, pop claim and ack passes before its connection (§9).
    pub admission: Admission,
    /// Coalesces pushed frames into segments and bundles (docs/engine.md §4.3).
    pub push_fusion: PushFusion,
    /// Lets pushes vouch for their hashes so SQL probes only the window's tail (§4.2).
    pub dedup_cache: Arc<DedupCache>,
    /// The at-rest encryption key and which queues to seal (docs/engine.md §3.1).
    pub encryption: Arc<Encryption>,
    /// What this broker's leasing pops delivered, for the ack fast path (§6.4).
    pub ack_registry: Arc<AckRegistry>,
    /// Folds the fast path's cursor advances into shared commits (§6.5); `None` when off.
    pub ack_fusion: Option<AckFusion<AckVerdict>>,
    pub counters: Arc<Counters>,
    /// This broker's intake and drain rates, for the push door (engine/push/door.rs).
    pub flow: Flow,
    /// The live Prometheus series (requests per route, acknowledgements).
    pub telemetry: Telemetry,
    /// The queue samples of `/metrics/prometheus`, one flight per tenant, each serving
    /// `QUEEN_METRICS_CACHE_MS` (engine/resources.rs); a failed read keeps its cause.
    pub metrics_samples:
        OneFlight<queen_proto::tenant::Tenant, Result<Arc<MetricsSample>, Arc<str>>>,
    /// What this broker's retention loop did (engine/retention/).
    pub retention: RetentionCounters,
    /// Wakes this broker's timer wheel when a timer due sooner than its longest sleep is
    /// scheduled here (engine/timer_wheel/).
    pub timer_wheel: Arc<tokio::sync::Notify>,
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

impl Engine {
    /// The engine over its parts (assembled by `engine/mod.rs`).
    pub(super) fn from_inner(inner: Inner) -> Self {
        Engine(Arc::new(inner))
    }

    /// Whether the database answers the health probe within a few seconds.
    pub async fn database_up(&self) -> bool {
        self.store.ping().await
    }

    /// Which PostgreSQL server the broker's connections reach and when that last changed, for
    /// `/health` (docs/engine.md §12.5).
    pub fn database_server(&self) -> crate::store::server::ServerView {
        self.store.servers().view()
    }

    /// The connection pool's size and use, for `/metrics`.
    pub fn pool_status(&self) -> deadpool_postgres::Status {
        self.store.pool().status()
    }

    /// Wakes every parked long-poll so the HTTP drain does not wait for their deadlines.
    pub fn begin_shutdown(&self) {
        self.closing.send_replace(true);
    }
}

impl Deref for Engine {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}
