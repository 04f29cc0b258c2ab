//! The request logic between HTTP and PostgreSQL, one module per concept (the same names as in
//! `http/` and `store/`): push, pop, ack, lease, DLQ, transaction, queues, groups, resources,
//! messages and traces; and the retention loop, the one background task of the engine that
//! deletes (`retention/`). This module assembles the broker's [`Engine`]: the part every
//! concept shares ([`Shared`], `context.rs`) and the state of each concept that owns
//! accelerators, built by that concept (`pop/state.rs`, `push/state.rs`, `ack/state.rs`).
//! A concept's functions take its own state, which derefs to the shared part.

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
pub use context::{Counters, Shared};
pub use retention::{RetentionCounters, RetentionSnapshot, RetentionState};

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::accel::ack_registry::AckRegistry;
use crate::accel::admission::{self, Admission};
use crate::accel::hotlist::{HotList, HotListConfig};
use crate::accel::one_flight::OneFlight;
use crate::accel::segment_cache::SegmentCache;
use crate::accel::wake::WakeGates;
use crate::config::Config;
use crate::spool::{self, Spool};
use crate::store::migrations::{self, SchemaError};
use crate::store::Store;
use crate::telemetry::Telemetry;
use ack::AckState;
use pop::PopState;
use push::PushState;

/// Cheap to clone: one `Arc` around the shared part and each concept's state. The HTTP floor
/// holds it and hands each concept its own state; field access through it reaches the shared
/// part (`engine.store`), a concept's state is named (`engine.push`).
#[derive(Clone)]
pub struct Engine(Arc<Inner>);

pub struct Inner {
    pub shared: Arc<Shared>,
    pub pop: Arc<PopState>,
    pub push: Arc<PushState>,
    pub ack: Arc<AckState>,
    /// The queue samples of `/metrics/prometheus`, one flight per tenant, each serving
    /// `QUEEN_METRICS_CACHE_MS` (engine/resources.rs); a failed read keeps its cause.
    pub metrics_samples: resources::MetricsSamples,
    /// What this broker's retention loop did (engine/retention/).
    pub retention: Arc<RetentionState>,
}

impl Deref for Engine {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Deref for Inner {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

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
        let broker_id = uuid::Uuid::now_v7();
        let wake = Arc::new(WakeGates::new(broker_id, cfg.peer_wake_on()));
        let hotlist = HotList::new(
            HotListConfig {
                reseed_floor: Duration::from_millis(cfg.hotlist_reseed_ms),
                unserved_trim: Duration::from_millis(cfg.hotlist_unserved_trim_ms),
            },
            &wake,
        );
        let admission = Admission::new(admission::Limits::for_pool(
            cfg.db_pool_size,
            cfg.admission_push_cap,
        ));
        let ack_registry = Arc::new(AckRegistry::new(
            cfg.ack_registry,
            cfg.ack_registry_mb.saturating_mul(1 << 20),
        ));
        let segments = Arc::new(SegmentCache::new(
            cfg.segment_cache_mb.saturating_mul(1 << 20),
        ));
        let metrics_samples = OneFlight::new(Duration::from_millis(cfg.metrics_cache_ms));
        let shared = Arc::new(Shared {
            encryption: Arc::new(encryption::Encryption::new(cfg.encryption_key.as_ref())),
            cfg,
            store,
            wake,
            admission,
            maintenance: Default::default(),
            counters: Arc::new(Counters::default()),
            telemetry: Telemetry::start(),
            started: Instant::now(),
            broker_id,
            closing: tokio::sync::watch::Sender::new(false),
            timer_wheel: tokio::sync::Notify::new(),
        });
        Engine(Arc::new(Inner {
            pop: Arc::new(PopState::new(
                shared.clone(),
                hotlist.clone(),
                ack_registry.clone(),
                segments.clone(),
            )),
            push: Arc::new(PushState::start(
                shared.clone(),
                hotlist.clone(),
                segments,
                spool,
            )),
            ack: Arc::new(AckState::start(shared.clone(), ack_registry, hotlist)),
            retention: Arc::new(RetentionState::new(shared.clone())),
            shared,
            metrics_samples,
        }))
    }

    /// Starts the background work that needs the whole engine: the spool's drain
    /// (`push/replay.rs`) and the timer wheel (`timer_wheel/`), whose handles to await after
    /// [`Engine::begin_shutdown`], and the peer-wake session (`wake.rs`), which ends with the
    /// engine.
    pub fn start_background(&self) -> Vec<tokio::task::JoinHandle<()>> {
        if let Some(port) = self.wake.peer_port() {
            let pg = self.store.pg_config().clone();
            wake::start(port, self.pop.hotlist.clone(), pg);
        }
        let mut tasks: Vec<_> = push::replay::spawn(&self.push).into_iter().collect();
        tasks.push(timer_wheel::start(self.push.clone(), self.ack.clone()));
        tasks
    }

    /// The states a transaction writes through (`transaction.rs`).
    pub fn writers(&self) -> transaction::Writers<'_> {
        transaction::Writers {
            push: &self.push,
            ack: &self.ack,
        }
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
