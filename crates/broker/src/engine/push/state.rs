//! What the push concept owns beside the shared part: push fusion and the flush loop that
//! writes what it hands out (docs/engine.md §4.3), the dedup cache (§4.2), the disk spool (§4.6), the intake and drain rates its door
//! reads, and the effects of a commit, which it hands to every write path (the flush, the
//! binary groups, transactions and DLQ replays).

use std::ops::Deref;
use std::sync::Arc;

use crate::accel::dedup_cache::{DedupCache, Limits};
use crate::accel::flow::Flow;
use crate::accel::hotlist::HotList;
use crate::accel::push_fusion::{FusionConfig, PushFusion};
use crate::accel::segment_cache::SegmentCache;
use crate::engine::push::commit::CommitEffects;
use crate::engine::push::flush::{self, SegmentWriter};
use crate::engine::Shared;
use crate::spool::Spool;

pub struct PushState {
    shared: Arc<Shared>,
    /// Coalesces pushed frames into segments and bundles.
    pub fusion: PushFusion,
    /// Lets pushes vouch for their hashes so SQL probes only the window's tail.
    pub dedup_cache: Arc<DedupCache>,
    /// Where pushes wait while PostgreSQL cannot take them; `None` when
    /// `FILE_BUFFER_ENABLED` is off.
    pub spool: Option<Arc<Spool>>,
    /// This broker's intake and drain rates, for the push door (`door.rs`).
    pub flow: Flow,
    /// What a committed write touches: the dedup cache, the wake gates, the rings' marks,
    /// the counters.
    pub effects: CommitEffects,
}

impl PushState {
    /// The push state over `shared`, starting push fusion and the flush loop that does its
    /// work (`flush.rs`); `hotlist` is marked by every commit, `segments` keeps its frames.
    pub fn start(
        shared: Arc<Shared>,
        hotlist: HotList,
        segments: Arc<SegmentCache>,
        spool: Option<Spool>,
    ) -> Self {
        let cfg = &shared.cfg;
        let dedup_cache = Arc::new(DedupCache::new(
            cfg.dedup_cache,
            Limits::with_budget_mb(cfg.dedup_cache_mb),
        ));
        let effects = CommitEffects {
            dedup: dedup_cache.clone(),
            wake: shared.wake.clone(),
            hotlist,
            counters: shared.counters.clone(),
            segments,
        };
        let spool = spool.map(Arc::new);
        let writer = SegmentWriter::new(
            shared.store.clone(),
            cfg.zstd_level,
            effects.clone(),
            shared.encryption.clone(),
            spool.clone(),
        );
        let (fusion, work) = PushFusion::start(
            FusionConfig {
                shards: cfg.fusion_shards,
                bundle_max: cfg.bundle_max,
                bundle_max_bytes: cfg.bundle_max_bytes,
                pipeline: cfg.push_pipeline,
                ..FusionConfig::default()
            },
            shared.admission.clone(),
        );
        tokio::spawn(flush::run(Arc::new(writer), work));
        PushState {
            shared,
            fusion,
            dedup_cache,
            spool,
            flow: Flow::default(),
            effects,
        }
    }
}

impl Deref for PushState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}
