//! The request logic between HTTP and PostgreSQL, one module per concept (the same names as in
//! `http/` and `store/`): push, pop, ack, lease, DLQ, transaction, queues, groups, resources,
//! messages and traces; and the retention loop, the one background task of the engine that
//! deletes (`retention/`). Every function takes the broker's [`Engine`] context, which this
//! module assembles from the store, the accelerators and the push path's writer: the concepts
//! depend on the context, the context on none of them.

pub mod ack;
mod context;
pub mod dlq;
pub mod encryption;
pub mod ephemeral;
pub mod groups;
pub mod kv;
pub mod lease;
pub mod locks;
pub mod maintenance;
pub mod messages;
pub mod pop;
pub mod push;
pub mod queues;
pub mod reads;
pub mod resources;
pub mod retention;
pub mod streams;
pub mod tenant;
mod timer_wheel;
pub mod timers;
pub mod traces;
pub mod transaction;
mod wake;

pub use crate::accel::ack_fusion::AckFusionSnapshot;
pub use crate::accel::ack_registry::AckRegistrySnapshot;
/// The accelerators' snapshots `/metrics` renders.
pub use crate::accel::admission::AdmissionSnapshot;
pub use crate::accel::dedup_cache::DedupSnapshot;
pub use crate::accel::hotlist::HotListSnapshot;
pub use crate::accel::pop_cache::PopSnapshot;
pub use crate::store::server::ServerView;
pub use context::{Counters, Engine, Inner, RetentionCounters, RetentionSnapshot};

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::accel::ack_registry::AckRegistry;
use crate::accel::admission::{self, Admission};
use crate::accel::dedup_cache::{DedupCache, Limits};
use crate::accel::hotlist::{HotList, HotListConfig};
use crate::accel::one_flight::OneFlight;
use crate::accel::push_fusion::{FusionConfig, PushFusion};
use crate::accel::wake::{PeerLink, PeerObserver, WakeGates};
use crate::config::Config;
use crate::spool::{self, Spool};
use crate::store::migrations::{self, SchemaError};
use crate::store::Store;
use crate::telemetry::Telemetry;
use push::commit::CommitEffects;
use push::flush::SegmentWriter;
use wake::StorePeerLink;

impl Engine {
    /// Builds the pool on `pg` (no connection yet), applies the schema when configured, opens
    /// the disk spool (keeping what an earlier run left in it), and the engine over them.
    pub async fn boot(cfg: Config, pg: tokio_postgres::Config) -> Result<Self, BootError> {
        let store = Store::new(
            pg,
            cfg.db_pool_size,
            cfg.stmt_timeout_ms,
            cfg.db_buffers_mb.saturating_mul(1 << 20),
        );
        if cfg.apply_schema {
            migrations::apply(&store).await?;
        }
        let spool = open_spool(&cfg)?;
        Ok(Engine::assemble(cfg, store, spool))
    }

    fn assemble(cfg: Config, store: Store, spool: Option<Spool>) -> Self {
        let dedup_cache = Arc::new(DedupCache::new(
            cfg.dedup_cache,
            Limits::with_budget_mb(cfg.dedup_cache_mb),
        ));
        let broker_id = uuid::Uuid::now_v7();
        let peer = cfg
            .peer_wake_on()
            .then(|| Arc::new(StorePeerLink(store.pg_config().clone())) as Arc<dyn PeerLink>);
        let wake = Arc::new(WakeGates::new(broker_id, peer));
        let hotlist = HotList::new(
            HotListConfig {
                reseed_floor: Duration::from_millis(cfg.hotlist_reseed_ms),
                unserved_trim: Duration::from_millis(cfg.hotlist_unserved_trim_ms),
            },
            &wake,
        );
        wake.observe(Arc::new(hotlist.clone()) as Arc<dyn PeerObserver>);
        let admission = Admission::new(admission::Limits::for_pool(
            cfg.db_pool_size,
            cfg.admission_push_cap,
        ));
        let counters = Arc::new(Counters::default());
        let encryption = Arc::new(encryption::Encryption::new(cfg.encryption_key.as_ref()));
        let effects = CommitEffects {
            dedup: dedup_cache.clone(),
            wake: wake.clone(),
            hotlist: hotlist.clone(),
            counters: counters.clone(),
        };
        let spool = spool.map(Arc::new);
        let segment_writer = SegmentWriter::new(
            store.clone(),
            cfg.zstd_level,
            effects,
            encryption.clone(),
            spool.clone(),
        );
        let push_fusion = PushFusion::start(
            FusionConfig {
                shards: cfg.fusion_shards,
                bundle_max: cfg.bundle_max,
                bundle_max_bytes: cfg.bundle_max_bytes,
                pipeline: cfg.push_pipeline,
                ..FusionConfig::default()
            },
            Arc::new(segment_writer),
            admission.clone(),
        );
        let ack_registry = Arc::new(AckRegistry::new(
            cfg.ack_registry,
            cfg.ack_registry_mb.saturating_mul(1 << 20),
        ));
        let ack_fusion = cfg.ack_fusion.then(|| {
            ack::fusion::start(
                store.clone(),
                admission.clone(),
                cfg.ack_fusion_shards as usize,
            )
        });
        let metrics_samples = OneFlight::new(Duration::from_millis(cfg.metrics_cache_ms));
        Engine::from_inner(Inner {
            cfg,
            store,
            wake,
            pop: Default::default(),
            maintenance: Default::default(),
            spool,
            hotlist,
            admission,
            push_fusion,
            dedup_cache,
            encryption,
            ack_registry,
            ack_fusion,
            counters,
            flow: Default::default(),
            telemetry: Telemetry::start(),
            metrics_samples,
            retention: RetentionCounters::default(),
            timer_wheel: Arc::new(tokio::sync::Notify::new()),
            started: Instant::now(),
            broker_id,
            closing: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Starts the background work that needs the whole engine: the spool's drain
    /// (`push/replay.rs`) and the timer wheel (`timer_wheel/`). Await the handles after
    /// [`Engine::begin_shutdown`].
    pub fn start_background(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks: Vec<_> = push::replay::spawn(self).into_iter().collect();
        tasks.push(timer_wheel::start(self));
        tasks
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
            hotlist: self.hotlist.clone(),
            counters: self.counters.clone(),
        }
    }
}

/// Why a broker could not boot.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error("disk spool {dir}: {source}")]
    Spool { dir: String, source: std::io::Error },
}

/// The disk spool of `cfg` (none when `FILE_BUFFER_ENABLED` is off), with what an earlier run
/// left in it.
fn open_spool(cfg: &Config) -> Result<Option<Spool>, BootError> {
    if !cfg.file_buffer_enabled {
        return Ok(None);
    }
    let dir = cfg.spool_dir();
    let limits = spool::Limits {
        max_bytes: cfg.file_buffer_max_bytes,
        messages_per_file: cfg.file_buffer_events_per_file,
    };
    let master = cfg.encryption_key.as_ref().map(|k| k.bytes());
    let (spool, recovered) =
        Spool::open(&dir, limits, master).map_err(|source| BootError::Spool {
            dir: dir.display().to_string(),
            source,
        })?;
    if recovered.dropped_bytes > 0 {
        tracing::warn!(
            dir = %dir.display(),
            dropped_bytes = recovered.dropped_bytes,
            "the disk spool ended in a torn record (a write never answered); it was cut off"
        );
    }
    Ok(Some(spool))
}
