//! What push fusion's shard tasks hand out on their [`FusionWork`](super::FusionWork) queue,
//! for the engine's flush loop (`engine/push/flush.rs`) to do: a staged flush to prepare
//! ([`Stage`]) or a bundle to write ([`Bundle`]). Each item carries its own settlement back to
//! its shard: [`Stage::prepared`] hands over the preparation, [`Bundle::settle`] answers every
//! request of the bundle. An item dropped without it (the task doing it panicked, or the loop
//! is gone) reports itself all the same: a stage as unprepared (its write builds the segment),
//! a bundle by failing its requests (their replies close: `push flush aborted`) and freeing
//! its partitions and push permit. So nothing strands a request, and the shard never waits
//! forever.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::{FrameOutcome, FusionFrame, LaneBatch, LaneFlush, LaneKey};
use crate::accel::admission::Permit;
use crate::accel::fusion::DoneGuard;

/// One item of push fusion's work.
pub enum Work<P> {
    /// Prepare (build and compress) a staged flush while its partition's previous flush is
    /// written: no connection, no order.
    Prepare(Stage<P>),
    /// Write a bundle, one transaction for all its partitions.
    Write(Bundle<P>),
}

/// A partition's next flush, staged while its previous one is written.
pub struct Stage<P> {
    pub queue: Arc<str>,
    /// Its frames, as its write will carry them.
    pub frames: Arc<[FusionFrame]>,
    report: DoneGuard<(LaneKey, Option<P>)>,
}

impl<P> Stage<P> {
    pub(super) fn new(
        key: LaneKey,
        frames: Arc<[FusionFrame]>,
        report: mpsc::UnboundedSender<(LaneKey, Option<P>)>,
    ) -> Self {
        Stage {
            queue: key.0.clone(),
            frames,
            report: DoneGuard::new((key, None), report),
        }
    }

    /// Hands `prepared` to the staged flush's write ([`LaneFlush::prepared`]). Dropping the
    /// stage instead leaves the work to the write.
    pub fn prepared(mut self, prepared: P) {
        self.report.update(|(_, slot)| *slot = Some(prepared));
    }
}

/// Several partitions' flushes to write in one transaction, holding a push permit until it is
/// settled or dropped.
pub struct Bundle<P> {
    lanes: Vec<LaneFlush<P>>,
    /// Each lane's requests, answered by `settle` (closed unanswered when dropped).
    batches: Vec<LaneBatch>,
    /// Reports the partitions settled to the shard, after the requests were answered.
    _done: DoneGuard<Vec<LaneKey>>,
    _permit: Permit,
}

impl<P> Bundle<P> {
    pub(super) fn new(
        lanes: Vec<LaneFlush<P>>,
        batches: Vec<LaneBatch>,
        done: DoneGuard<Vec<LaneKey>>,
        permit: Permit,
    ) -> Self {
        Bundle {
            lanes,
            batches,
            _done: done,
            _permit: permit,
        }
    }

    /// The partitions' flushes, oldest first; their preparations may be taken.
    pub fn lanes(&mut self) -> &mut [LaneFlush<P>] {
        &mut self.lanes
    }

    /// Answers every request: `outcomes` holds, for every lane, one outcome per frame, in
    /// order (a missing one answers its frames as failed).
    pub fn settle(mut self, outcomes: Vec<Vec<FrameOutcome>>) {
        let mut outcomes = outcomes.into_iter();
        for batch in self.batches.drain(..) {
            batch.reply(outcomes.next().unwrap_or_default());
        }
    }
}
