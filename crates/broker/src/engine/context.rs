//! The part of the engine every concept shares ([`Shared`]): configuration, the store, the
//! limiter, the wake gates, encryption, maintenance flags, counters, metrics, lifecycle; and the
//! process-wide counters. A concept's state (`pop/state.rs`, `push/state.rs`, `ack/state.rs`)
//! holds it behind an `Arc` and derefs to it; the broker's `Engine` (`engine/mod.rs`) holds it
//! beside those states. This module depends on no concept of the engine but one: the encryption
//! state (`engine/encryption.rs`), which itself uses no engine type.

use std::sync::atomic::AtomicU64;
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
    /// Wakes this broker's timer wheel when a timer due sooner than its longest sleep is
    /// scheduled here (engine/timer_wheel/).
    pub timer_wheel: tokio::sync::Notify,
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
