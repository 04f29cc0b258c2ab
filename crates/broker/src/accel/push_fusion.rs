//! Push fusion (docs/engine.md §4.3): coalesces the frames that many concurrent requests send to
//! one (queue, partition) into one segment, and the segments of many partitions into one
//! write (one transaction, one commit, one fsync). Throughput is WAL-flush rate × messages per
//! flush, and the batch size is emergent: whatever arrived while the previous flush of the
//! partition was in flight.
//!
//! - Sharding: a partition always maps to the same shard task (FNV-1a of its key, shared
//!   with ack fusion in `accel/fusion.rs`), which owns that partition's state alone, so no
//!   locks are needed.
//! - Fire-on-idle: an arrival is dispatched at once when the shard has a free in-flight slot,
//!   a push permit of the broker's admission (`accel/admission.rs`) is free right now, and the
//!   partition is not already being flushed; otherwise it waits and joins everything that
//!   arrives meanwhile. The push lane's cap bounds the concurrent push transactions of the
//!   whole broker: with PostgreSQL's commits as the bottleneck, waiting for a permit is what
//!   turns many small flushes into few large ones.
//! - At most one flush in flight per partition: a partition's next segment is dispatched only
//!   after the previous one settled, so flushes never contend on the allocator row and offset
//!   order equals commit order.
//! - Cross-partition bundling: one dispatch takes up to `bundle_max` ready partitions, oldest
//!   first, and at most `bundle_max_bytes` of payload: of the last partition it takes the
//!   requests that fit, whole and in order, and the rest waits for that partition's next
//!   flush (a bundle's first request goes whatever its size). Every pooled connection keeps
//!   the buffer capacity of the largest statement it carried, so this bounds memory too.
//! - Layer-2 dedup: within one partition's flush, frames with the same transactionId hash
//!   (from different requests) are written once; later ones copy the first one's outcome as
//!   `Duplicate`.
//!
//! Writing is delegated to a [`BundleWriter`] (the engine builds segments and calls SQL), so
//! this module is only the scheduler. A shard blocked on admission waits in the push lane
//! itself (FIFO among shards), so a permit freed by anyone wakes it without a timer.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::accel::admission::{Admission, Lane as AdmissionLane, Permit};
pub use crate::accel::fusion::Failure;
use crate::accel::fusion::{shard_of, DoneGuard};

/// One message waiting to be written.
#[derive(Debug, Clone)]
pub struct FusionFrame {
    pub message_id: Uuid,
    pub trace_id: Option<Uuid>,
    pub transaction_id: String,
    /// The pusher's validated identity (docs/wire.md §1); `None` with auth off.
    pub producer_sub: Option<Arc<str>>,
    pub payload: Bytes,
    /// `xxh3_128(transaction_id)`, big-endian: the layer-2 dedup key.
    pub hash: [u8; 16],
}

/// What became of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameOutcome {
    /// Stored at `offset` under its own id.
    Queued { message_id: Uuid, offset: i64 },
    /// Already stored: `message_id` is the original's (nil if it was retained away) and
    /// `offset` its position when known.
    Duplicate {
        message_id: Uuid,
        offset: Option<i64>,
    },
    /// Not stored.
    Failed(Failure),
    /// Written to the broker's disk spool, to be stored under `message_id` when the spool is
    /// replayed (the engine's spool answers this; the fusion never does).
    Buffered { message_id: Uuid },
}

impl Failure {
    /// A failure of the broker itself (not an outage).
    pub fn internal(error: impl Into<String>) -> FrameOutcome {
        FrameOutcome::Failed(Failure {
            error: error.into(),
            unavailable: false,
            refused: false,
        })
    }

    /// An item its queue's rules refuse (see [`Failure::refused`]).
    pub fn refusal(error: impl Into<String>) -> FrameOutcome {
        FrameOutcome::Failed(Failure {
            error: error.into(),
            unavailable: false,
            refused: true,
        })
    }
}

/// One partition's share of a bundle: frames with distinct hashes, in arrival order.
pub struct LaneFlush {
    pub queue: Arc<str>,
    pub partition: Arc<str>,
    pub frames: Vec<FusionFrame>,
}

/// Writes bundles. Must return, for every lane, exactly one outcome per frame, in order.
pub trait BundleWriter: Send + Sync + 'static {
    fn write(&self, lanes: Vec<LaneFlush>) -> BoxFuture<'static, Vec<Vec<FrameOutcome>>>;
}

/// Sizing of the fusion (docs/engine.md §11: `QUEEN_V2_FUSION_SHARDS`, `_MAX_INFLIGHT`,
/// `QUEEN_V2_BUNDLE_MAX`); the bundles in flight across all shards are bounded by the push
/// lane of admission.
#[derive(Debug, Clone, Copy)]
pub struct FusionConfig {
    pub shards: usize,
    /// Bundles in flight per shard.
    pub max_inflight: usize,
    /// Partitions per bundle.
    pub bundle_max: usize,
    /// Payload bytes per bundle beyond its first partition.
    pub bundle_max_bytes: usize,
}

impl Default for FusionConfig {
    /// Upstream's defaults.
    fn default() -> Self {
        FusionConfig {
            shards: 8,
            max_inflight: 8,
            bundle_max: 16,
            bundle_max_bytes: usize::MAX,
        }
    }
}

/// Handle on the shard tasks; cheap to clone. The tasks end when every handle is dropped and
/// their in-flight flushes have settled.
#[derive(Clone)]
pub struct PushFusion {
    shards: Arc<[mpsc::UnboundedSender<Arrival>]>,
}

struct Arrival {
    queue: Arc<str>,
    partition: Arc<str>,
    frames: Vec<FusionFrame>,
    /// Payload and transactionId bytes of `frames`.
    bytes: usize,
    reply: oneshot::Sender<Vec<FrameOutcome>>,
}

impl PushFusion {
    /// Spawns the shard tasks on the current tokio runtime; each bundle holds a push permit
    /// of `admission` while it is written.
    pub fn start(cfg: FusionConfig, writer: Arc<dyn BundleWriter>, admission: Admission) -> Self {
        let shards = (0..cfg.shards.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                let shard = Shard::new(cfg, writer.clone(), admission.clone());
                tokio::spawn(shard.run(rx));
                tx
            })
            .collect();
        PushFusion { shards }
    }

    /// Queues `frames` for (queue, partition) and waits until they settled. Returns one
    /// outcome per frame, in order.
    pub async fn submit(
        &self,
        queue: &str,
        partition: &str,
        frames: Vec<FusionFrame>,
    ) -> Vec<FrameOutcome> {
        let n = frames.len();
        if n == 0 {
            return Vec::new();
        }
        let key = queue.bytes().chain([0x1f]).chain(partition.bytes());
        let shard = &self.shards[shard_of(key, self.shards.len())];
        let (reply, settled) = oneshot::channel();
        let bytes = frames
            .iter()
            .map(|f| f.payload.len() + f.transaction_id.len())
            .sum();
        let arrival = Arrival {
            queue: queue.into(),
            partition: partition.into(),
            frames,
            bytes,
            reply,
        };
        if shard.send(arrival).is_err() {
            return vec![Failure::internal("push fusion is shut down"); n];
        }
        settled
            .await
            .unwrap_or_else(|_| vec![Failure::internal("push flush aborted"); n])
    }
}

type LaneKey = (Arc<str>, Arc<str>);

#[derive(Default)]
struct Lane {
    waiting: Vec<Arrival>,
    in_flight: bool,
}

type PermitWait = BoxFuture<'static, Permit>;

struct Shard {
    cfg: FusionConfig,
    writer: Arc<dyn BundleWriter>,
    admission: Admission,
    /// Set while ready lanes wait for an admission permit.
    permit_wait: Option<PermitWait>,
    lanes: HashMap<LaneKey, Lane>,
    /// Lanes with waiting arrivals and no flush in flight, oldest first.
    ready: VecDeque<LaneKey>,
    bundles_in_flight: usize,
    done_tx: mpsc::UnboundedSender<Vec<LaneKey>>,
    done_rx: mpsc::UnboundedReceiver<Vec<LaneKey>>,
}

impl Shard {
    fn new(cfg: FusionConfig, writer: Arc<dyn BundleWriter>, admission: Admission) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Shard {
            cfg,
            writer,
            admission,
            permit_wait: None,
            lanes: HashMap::new(),
            ready: VecDeque::new(),
            bundles_in_flight: 0,
            done_tx,
            done_rx,
        }
    }

    async fn run(mut self, mut arrivals: mpsc::UnboundedReceiver<Arrival>) {
        let mut open = true;
        while open || self.bundles_in_flight > 0 {
            tokio::select! {
                arrival = arrivals.recv(), if open => match arrival {
                    Some(a) => {
                        self.accept(a);
                        // Take the whole burst before dispatching: it coalesces for free.
                        while let Ok(a) = arrivals.try_recv() {
                            self.accept(a);
                        }
                    }
                    None => open = false,
                },
                Some(keys) = self.done_rx.recv() => self.settled(keys),
                permit = wait_for(&mut self.permit_wait), if self.permit_wait.is_some() => {
                    self.permit_wait = None;
                    if self.can_launch() {
                        self.launch(permit);
                    } // else not needed any more: dropping it frees it for others
                }
            }
            self.dispatch();
        }
    }

    /// Whether a bundle could go out now, permit aside.
    fn can_launch(&self) -> bool {
        self.bundles_in_flight < self.cfg.max_inflight && !self.ready.is_empty()
    }

    fn accept(&mut self, arrival: Arrival) {
        let key = (arrival.queue.clone(), arrival.partition.clone());
        let lane = self.lanes.entry(key.clone()).or_default();
        if lane.waiting.is_empty() && !lane.in_flight {
            self.ready.push_back(key);
        }
        lane.waiting.push(arrival);
    }

    fn settled(&mut self, keys: Vec<LaneKey>) {
        self.bundles_in_flight -= 1;
        for key in keys {
            let Some(lane) = self.lanes.get_mut(&key) else {
                continue;
            };
            lane.in_flight = false;
            if lane.waiting.is_empty() {
                self.lanes.remove(&key); // idle partitions cost no memory
            } else {
                self.ready.push_back(key);
            }
        }
    }

    /// Launches bundles while permits are free right now; otherwise waits for one.
    fn dispatch(&mut self) {
        while self.can_launch() {
            match self.admission.try_acquire(AdmissionLane::Push) {
                Some(permit) => self.launch(permit),
                None => {
                    if self.permit_wait.is_none() {
                        let limiter = self.admission.clone();
                        self.permit_wait = Some(Box::pin(async move {
                            limiter.acquire(AdmissionLane::Push).await
                        }));
                    }
                    return;
                }
            }
        }
        self.permit_wait = None;
    }

    /// Sends the oldest ready lanes (up to `bundle_max` of them and `bundle_max_bytes`) out as
    /// one bundle holding `permit`.
    fn launch(&mut self, permit: Permit) {
        let mut keys = Vec::new();
        let mut batches = Vec::new();
        let mut room = self.cfg.bundle_max_bytes;
        while keys.len() < self.cfg.bundle_max.max(1) {
            let Some(key) = self.ready.front().cloned() else {
                break;
            };
            let Some(lane) = self.lanes.get_mut(&key) else {
                self.ready.pop_front();
                continue;
            };
            let (take, bytes) = fitting(&lane.waiting, room, keys.is_empty());
            if take == 0 {
                break;
            }
            self.ready.pop_front();
            room = room.saturating_sub(bytes);
            lane.in_flight = true;
            let rest = lane.waiting.split_off(take);
            let taken = std::mem::replace(&mut lane.waiting, rest);
            let partial = !lane.waiting.is_empty();
            batches.push(LaneBatch::new(key.clone(), taken));
            keys.push(key);
            if partial {
                break; // the bundle is full
            }
        }
        self.bundles_in_flight += 1;
        let writer = self.writer.clone();
        let done = DoneGuard::new(keys, self.done_tx.clone());
        tokio::spawn(async move {
            let lanes = batches.iter_mut().map(LaneBatch::take_flush).collect();
            let outcomes = writer.write(lanes).await;
            let mut outcomes = outcomes.into_iter();
            for batch in batches {
                batch.reply(outcomes.next().unwrap_or_default());
            }
            drop(done);
            drop(permit);
        });
    }
}

/// How many of `waiting` (whole requests, in order) fit in `room` bytes, and their bytes; the
/// first always fits when `first_of_bundle`.
fn fitting(waiting: &[Arrival], room: usize, first_of_bundle: bool) -> (usize, usize) {
    let mut bytes = 0usize;
    let mut take = 0;
    for arrival in waiting {
        let next = bytes.saturating_add(arrival.bytes);
        if next > room && !(first_of_bundle && take == 0) {
            break;
        }
        bytes = next;
        take += 1;
    }
    (take, bytes)
}

/// Awaits the pending permit wait (only polled while one is set).
async fn wait_for(wait: &mut Option<PermitWait>) -> Permit {
    match wait {
        Some(w) => w.await,
        None => std::future::pending().await,
    }
}

/// One lane's arrivals inside a bundle, with the layer-2 dedup map from each arriving frame
/// to the unique frame that represents it.
struct LaneBatch {
    key: LaneKey,
    arrivals: Vec<(oneshot::Sender<Vec<FrameOutcome>>, Vec<Slot>)>,
    unique: Vec<FusionFrame>,
}

/// Where an arriving frame's outcome comes from: the unique frame at `index`, as its writer
/// (`leader`) or as a later copy of the same hash.
#[derive(Clone, Copy)]
struct Slot {
    index: usize,
    leader: bool,
}

impl LaneBatch {
    fn new(key: LaneKey, arrivals: Vec<Arrival>) -> Self {
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
            unique,
        }
    }

    fn take_flush(&mut self) -> LaneFlush {
        LaneFlush {
            queue: self.key.0.clone(),
            partition: self.key.1.clone(),
            frames: std::mem::take(&mut self.unique),
        }
    }

    fn reply(self, outcomes: Vec<FrameOutcome>) {
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

#[cfg(test)]
mod tests;
