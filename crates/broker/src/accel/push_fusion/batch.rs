//! One partition's requests inside a push bundle: the layer-2 dedup of their frames (one
//! unique frame per transactionId hash) and, once the bundle is written, each request's
//! outcomes realigned from the unique frames'.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use tokio::sync::oneshot;

use super::{Arrival, Failure, FrameOutcome, FusionFrame, LaneFlush, LaneKey};

/// One lane's arrivals inside a bundle, with the layer-2 dedup map from each arriving frame
/// to the unique frame that represents it.
pub(super) struct LaneBatch {
    key: LaneKey,
    arrivals: Vec<(oneshot::Sender<Vec<FrameOutcome>>, Vec<Slot>)>,
    unique: Arc<[FusionFrame]>,
}

/// Where an arriving frame's outcome comes from: the unique frame at `index`, as its writer
/// (`leader`) or as a later copy of the same hash.
#[derive(Clone, Copy)]
struct Slot {
    index: usize,
    leader: bool,
}

impl LaneBatch {
    pub(super) fn new(key: LaneKey, arrivals: Vec<Arrival>) -> Self {
        let mut first: HashMap<[u8; 16], usize> = HashMap::new();
        let mut unique = Vec::new();
        let mut slotted = Vec::with_capacity(arrivals.len());
        for arrival in arrivals {
            let slots = arrival
                .frames
                .into_iter()
                .map(|frame| match first.get(&frame.hash) {
                    Some(&index) => Slot {
                        index,
                        leader: false,
                    },
                    None => {
                        first.insert(frame.hash, unique.len());
                        unique.push(frame);
                        Slot {
                            index: unique.len() - 1,
                            leader: true,
                        }
                    }
                })
                .collect();
            slotted.push((arrival.reply, slots));
        }
        LaneBatch {
            key,
            arrivals: slotted,
            unique: unique.into(),
        }
    }

    /// The unique frames, in arrival order.
    pub(super) fn frames(&self) -> Arc<[FusionFrame]> {
        self.unique.clone()
    }

    pub(super) fn flush<P>(&self, prepared: Option<P>) -> LaneFlush<P> {
        LaneFlush {
            queue: self.key.0.clone(),
            partition: self.key.1.clone(),
            frames: self.unique.clone(),
            prepared,
        }
    }

    pub(super) fn reply(self, outcomes: Vec<FrameOutcome>) {
        let missing = Failure::internal("push flush returned no outcome");
        for (reply, slots) in self.arrivals {
            let result = slots
                .iter()
                .map(|slot| {
                    let written = outcomes.get(slot.index).unwrap_or(&missing);
                    if slot.leader {
                        written.clone()
                    } else {
                        copy_of(written)
                    }
                })
                .collect();
            let _ = reply.send(result); // the request may have gone away; nothing to undo
        }
    }
}

/// The outcome of a frame whose transactionId an earlier frame already carried.
pub fn copy_of(original: &FrameOutcome) -> FrameOutcome {
    match original {
        FrameOutcome::Queued { message_id, offset } => FrameOutcome::Duplicate {
            message_id: *message_id,
            offset: Some(*offset),
        },
        other => other.clone(),
    }
}
