//! Shared state of one broker process, handed to every HTTP handler.

use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use crate::accel::dedup_cache::{DedupCache, Limits};
use crate::accel::push_fusion::{FusionConfig, PushFusion};
use crate::accel::wake::WakeGates;
use crate::config::Config;
use crate::engine::push_commit::CommitEffects;
use crate::store::Store;

/// Cheap to clone: one `Arc` around everything the broker shares between requests.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub cfg: Config,
    pub store: Store,
    pub wake: Arc<WakeGates>,
    /// Pop-path state: maintenance flag cache and learned minimum pop waits.
    pub pop: crate::engine::pop::PopService,
    /// Coalesces pushed frames into segments and bundles (docs/engine.md §4.3).
    pub push_fusion: PushFusion,
    /// Lets pushes vouch for their hashes so SQL probes only the window's tail (§4.2).
    pub dedup_cache: Arc<DedupCache>,
    pub counters: Arc<Counters>,
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
}

impl AppState {
    pub fn new(cfg: Config, store: Store) -> Self {
        let dedup_cache = Arc::new(DedupCache::new(
            cfg.dedup_cache,
            Limits::with_budget_mb(cfg.dedup_cache_mb),
        ));
        let broker_id = uuid::Uuid::now_v7();
        let wake = Arc::new(WakeGates::new(
            broker_id,
            cfg.peer_wake.then(|| store.pg_config().clone()),
        ));
        let counters = Arc::new(Counters::default());
        let effects = CommitEffects {
            dedup: dedup_cache.clone(),
            wake: wake.clone(),
            counters: counters.clone(),
        };
        let segment_writer =
            crate::engine::push_flush::SegmentWriter::new(store.clone(), cfg.zstd_level, effects);
        let push_fusion = PushFusion::start(
            FusionConfig::for_pool(cfg.db_pool_size),
            Arc::new(segment_writer),
        );
        AppState(Arc::new(Inner {
            cfg,
            store,
            wake,
            pop: Default::default(),
            push_fusion,
            dedup_cache,
            counters,
            started: Instant::now(),
            broker_id,
            closing: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// What a push path touches after a commit (engine/push_commit.rs).
    pub fn commit_effects(&self) -> CommitEffects {
        CommitEffects {
            dedup: self.dedup_cache.clone(),
            wake: self.wake.clone(),
            counters: self.counters.clone(),
        }
    }

    /// Wakes every parked long-poll so the HTTP drain does not wait for their deadlines.
    pub fn begin_shutdown(&self) {
        self.closing.send_replace(true);
    }
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}
