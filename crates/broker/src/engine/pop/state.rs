//! What the pop concept owns beside the shared part: the hot-list rings wildcard pops are
//! served from (docs/engine.md §7), the pop caches (learned minimum pop waits, the long-poll's
//! counters, per-queue deliveries) and the ack registry a leasing pop records its deliveries
//! in, for the ack fast path (§6.4).

use std::ops::Deref;
use std::sync::Arc;

use crate::accel::ack_registry::AckRegistry;
use crate::accel::hotlist::HotList;
use crate::accel::pop_cache::PopCache;
use crate::accel::segment_cache::SegmentCache;
use crate::engine::Shared;

pub struct PopState {
    shared: Arc<Shared>,
    /// Per (queue, group), the partitions known to have work; used by wildcard pops when
    /// `cfg.hotlist` is on, fed by every commit and ack regardless.
    pub hotlist: HotList,
    pub cache: PopCache,
    pub ack_registry: Arc<AckRegistry>,
    /// The frames of segments this broker wrote lately, shared with the push concept.
    pub segments: Arc<SegmentCache>,
}

impl PopState {
    pub fn new(
        shared: Arc<Shared>,
        hotlist: HotList,
        ack_registry: Arc<AckRegistry>,
        segments: Arc<SegmentCache>,
    ) -> Self {
        PopState {
            shared,
            hotlist,
            cache: PopCache::default(),
            ack_registry,
            segments,
        }
    }

    /// Drops what the pop path remembers of a deleted queue: its rings, partition names,
    /// learned minimum wait and delivery metrics.
    pub fn forget(&self, queue: &str) {
        self.cache.forget(queue);
        self.hotlist.forget(queue);
    }

    /// `queue` was reconfigured (under its stored, tenant-qualified name): its rings reseed on
    /// their next pop, since a shorter deferral may make parked partitions visible sooner.
    pub fn reconfigured(&self, queue: &str) {
        self.hotlist.dirty(queue);
    }

    /// `group`'s cursors on `queue` may have moved backwards (a seek, a delete), which no mark
    /// describes: its ring starts cold.
    pub fn cursors_moved(&self, queue: &str, group: &str) {
        self.hotlist.drop_rings(queue, Some(group));
    }
}

impl Deref for PopState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}
