//! The request logic between HTTP and PostgreSQL, one module per concept (the same names as in
//! `http/` and `store/`): push, pop, ack, lease, DLQ, transaction, queues, groups, resources,
//! messages and traces. Every function takes the broker's [`Engine`] context, which this
//! module assembles from the store, the accelerators and the push path's writer: the concepts
//! depend on the context, the context on none of them.

pub mod ack;
mod context;
pub mod dlq;
pub mod groups;
pub mod lease;
pub mod messages;
pub mod pop;
pub mod push;
pub mod queues;
pub mod resources;
pub mod traces;
pub mod transaction;
mod wake;

/// The accelerators' snapshots `/metrics` renders.
pub use crate::accel::ack_fusion::AckFusionSnapshot;
pub use crate::accel::ack_registry::AckRegistrySnapshot;
pub use crate::accel::dedup_cache::DedupSnapshot;
pub use crate::accel::pop_cache::PopSnapshot;
pub use context::{Counters, Engine, Inner};

use std::sync::Arc;
use std::time::Instant;

use crate::accel::ack_registry::AckRegistry;
use crate::accel::dedup_cache::{DedupCache, Limits};
use crate::accel::push_fusion::{FusionConfig, PushFusion};
use crate::accel::wake::{PeerLink, WakeGates};
use crate::config::Config;
use crate::store::migrations::{self, SchemaError};
use crate::store::Store;
use push::commit::CommitEffects;
use push::flush::SegmentWriter;
use wake::StorePeerLink;

impl Engine {
    /// Builds the pool on `pg` (no connection yet), applies the schema when configured, and
    /// the engine over them.
    pub async fn boot(cfg: Config, pg: tokio_postgres::Config) -> Result<Self, SchemaError> {
        let store = Store::new(pg, cfg.db_pool_size, cfg.stmt_timeout_ms);
        if cfg.apply_schema {
            migrations::apply(&store).await?;
        }
        Ok(Engine::assemble(cfg, store))
    }

    fn assemble(cfg: Config, store: Store) -> Self {
        let dedup_cache = Arc::new(DedupCache::new(
            cfg.dedup_cache,
            Limits::with_budget_mb(cfg.dedup_cache_mb),
        ));
        let broker_id = uuid::Uuid::now_v7();
        let peer = cfg
            .peer_wake
            .then(|| Arc::new(StorePeerLink(store.pg_config().clone())) as Arc<dyn PeerLink>);
        let wake = Arc::new(WakeGates::new(broker_id, peer));
        let counters = Arc::new(Counters::default());
        let effects = CommitEffects {
            dedup: dedup_cache.clone(),
            wake: wake.clone(),
            counters: counters.clone(),
        };
        let segment_writer = SegmentWriter::new(store.clone(), cfg.zstd_level, effects);
        let push_fusion = PushFusion::start(
            FusionConfig::for_pool(cfg.db_pool_size),
            Arc::new(segment_writer),
        );
        let ack_registry = Arc::new(AckRegistry::new(
            cfg.ack_registry,
            cfg.ack_registry_mb.saturating_mul(1 << 20),
        ));
        let ack_fusion = cfg
            .ack_fusion
            .then(|| ack::fusion::start(store.clone(), cfg.ack_fusion_shards as usize));
        Engine::from_inner(Inner {
            cfg,
            store,
            wake,
            pop: Default::default(),
            push_fusion,
            dedup_cache,
            ack_registry,
            ack_fusion,
            counters,
            started: Instant::now(),
            broker_id,
            closing: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Ack fusion's counters; `None` when it is off.
    pub fn ack_fusion_metrics(&self) -> Option<AckFusionSnapshot> {
        self.ack_fusion.as_ref().map(|f| f.metrics())
    }

    /// What a push path touches after a commit (engine/push/commit.rs).
    pub fn commit_effects(&self) -> CommitEffects {
        CommitEffects {
            dedup: self.dedup_cache.clone(),
            wake: self.wake.clone(),
            counters: self.counters.clone(),
        }
    }
}
