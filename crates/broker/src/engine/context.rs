//! The engine's context: everything one broker process shares between requests (configuration,
//! the store, the accelerators, counters). Every engine function takes it; the HTTP floor holds
//! it as its router state. It is assembled in `engine/mod.rs`, so this module depends on no
//! concept of the engine.

use std::ops::Deref;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use crate::accel::ack_fusion::AckFusion;
use crate::accel::ack_registry::AckRegistry;
use crate::accel::dedup_cache::DedupCache;
use crate::accel::pop_cache::PopCache;
use crate::accel::push_fusion::PushFusion;
use crate::accel::wake::WakeGates;
use crate::config::Config;
use crate::store::ack::AckVerdict;
use crate::store::Store;

/// Cheap to clone: one `Arc` around everything the broker shares between requests.
#[derive(Clone)]
pub struct Engine(Arc<Inner>);

pub struct Inner {
    pub cfg: Config,
    pub store: Store,
    pub wake: Arc<WakeGates>,
    /// Pop-path state: maintenance flag cache, learned minimum pop waits, counters.
    pub pop: PopCache,
    /// Coalesces pushed frames into segments and bundles (docs/engine.md §4.3).
    pub push_fusion: PushFusion,
    /// Lets pushes vouch for their hashes so SQL probes only the window's tail (§4.2).
    pub dedup_cache: Arc<DedupCache>,
    /// What this broker's leasing pops delivered, for the ack fast path (§6.4).
    pub ack_registry: Arc<AckRegistry>,
    /// Folds the fast path's cursor advances into shared commits (§6.5); `None` when off.
    pub ack_fusion: Option<AckFusion<AckVerdict>>,
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

impl Engine {
    /// The engine over its parts (assembled by `engine/mod.rs`).
    pub(super) fn from_inner(inner: Inner) -> Self {
        Engine(Arc::new(inner))
    }

    /// Whether the database answers a `SELECT 1` within a few seconds (the health probe).
    pub async fn database_up(&self) -> bool {
        self.store.ping().await
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
