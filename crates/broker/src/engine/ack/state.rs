//! What the ack concept owns beside the shared part: the ack registry its fast path resolves
//! leased batches from (docs/engine.md §6.4), ack fusion, which folds the fast path's cursor
//! advances into shared commits (§6.5), and the hot-list handle its releases report to (a
//! released lease readies or retires its partition in the rings, §7).

use std::ops::Deref;
use std::sync::Arc;

use crate::accel::ack_fusion::{AckFusion, AckFusionSnapshot};
use crate::accel::ack_registry::AckRegistry;
use crate::accel::hotlist::HotList;
use crate::engine::Shared;
use crate::store::ack::AckVerdict;

pub struct AckState {
    shared: Arc<Shared>,
    pub registry: Arc<AckRegistry>,
    /// `None` when `QUEEN_ACK_FUSION` is off.
    pub fusion: Option<AckFusion<AckVerdict>>,
    pub hotlist: HotList,
}

impl AckState {
    /// The ack state over `shared`, starting ack fusion when configured.
    pub fn start(shared: Arc<Shared>, registry: Arc<AckRegistry>, hotlist: HotList) -> Self {
        let fusion = shared.cfg.ack_fusion.then(|| {
            super::fusion::start(
                shared.store.clone(),
                shared.admission.clone(),
                shared.cfg.ack_fusion_shards as usize,
            )
        });
        AckState {
            shared,
            registry,
            fusion,
            hotlist,
        }
    }

    /// Ack fusion's counters; `None` when it is off.
    pub fn fusion_metrics(&self) -> Option<AckFusionSnapshot> {
        self.fusion.as_ref().map(|f| f.metrics())
    }
}

impl Deref for AckState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}
