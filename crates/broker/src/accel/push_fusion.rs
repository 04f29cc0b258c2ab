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
//! - Pipelining (`QUEEN_V2_PUSH_PIPELINE`): while a partition's flush is written, the
//!   requests queued behind it (once they reach [`STAGE_MIN_BYTES`], up to the byte cap) are
//!   staged as its next flush and handed out as [`Work::Prepare`]: the engine builds and
//!   compresses their segment meanwhile. The staged flush is written after the previous one
//!   settled, like any other, so the order rules above are unchanged; only the CPU work leaves
//!   the one-at-a-time path of a hot partition.
//! - Cross-partition bundling: one dispatch takes up to `bundle_max` ready partitions, oldest
//!   first, and at most `bundle_max_bytes` of payload: of the last partition it takes the
//!   requests that fit, whole and in order, and the rest waits for that partition's next
//!   flush (a bundle's first request goes whatever its size). Every pooled connection keeps
//!   the buffer capacity of the largest statement it carried, so this bounds memory too.
//! - Layer-2 dedup: within one partition's flush, frames with the same transactionId hash
//!   (from different requests) are written once; later ones copy the first one's outcome as
//!   `Duplicate`.
//!
//! This module is only the scheduler, and it calls nobody: [`PushFusion::start`] returns,
//! beside the handle, the [`FusionWork`] queue on which the shard tasks hand out what is due
//! (`push_fusion/work.rs`: a staged flush to prepare, a bundle to write). The engine's flush
//! loop (`engine/push/flush.rs`) pulls it, builds segments, calls SQL and settles each item
//! through the item; an item dropped unsettled reports itself, so nothing strands a request.
//! A shard blocked on admission waits in the push lane itself (FIFO among shards), so a
//! permit freed by anyone wakes it without a timer.

use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::accel::admission::{Admission, Lane as AdmissionLane, Permit};
use crate::accel::fusion::{shard_of, DoneGuard};
pub use crate::accel::fusion::{Failure, FusionWork};
pub use backlog::Backlog;
pub use batch::copy_of;
use batch::LaneBatch;
pub use work::{Bundle, Stage, Work};

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
    /// Read back from the broker's disk spool by its drain: written to PostgreSQL even while
    /// the spool holds records, and never spooled again (it is still there).
    pub replayed: bool,
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

/// Waiting bytes behind a partition's flush from which they are staged as its next flush:
/// below this, building a segment costs microseconds and staging early would only split what
/// would otherwise coalesce into one segment.
pub const STAGE_MIN_BYTES: usize = 64 * 1024;

/// One partition's share of a bundle: frames with distinct hashes, in arrival order, and what
/// the engine prepared for them ([`Stage::prepared`]) while the partition's previous flush
/// was written.
pub struct LaneFlush<P> {
    pub queue: Arc<str>,
    pub partition: Arc<str>,
    pub frames: Arc<[FusionFrame]>,
    pub prepared: Option<P>,
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
    /// Stage and prepare a partition's next flush while one is written.
    pub pipeline: bool,
}

impl Default for FusionConfig {
    /// Upstream's defaults.
    fn default() -> Self {
        FusionConfig {
            shards: 8,
            max_inflight: 8,
            bundle_max: 16,
            bundle_max_bytes: usize::MAX,
            pipeline: true,
        }
    }
}

/// Handle on the shard tasks; cheap to clone. The tasks end when every handle is dropped and
/// their in-flight flushes have settled; the work queue then ends too.
#[derive(Clone)]
pub struct PushFusion {
    shards: Arc<[mpsc::UnboundedSender<Arrival>]>,
    backlog: Arc<Backlog>,
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
    /// Spawns the shard tasks on the current tokio runtime. They hand their work out on the
    /// returned queue, preparations of type `P` included; each bundle holds a push permit of
    /// `admission` until it is settled or dropped.
    pub fn start<P: Send + 'static>(
        cfg: FusionConfig,
        admission: Admission,
    ) -> (Self, FusionWork<Work<P>>) {
        let (work_tx, work) = FusionWork::channel();
        let shards = (0..cfg.shards.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                let shard = Shard::new(cfg, work_tx.clone(), admission.clone());
                tokio::spawn(shard.run(rx));
                tx
            })
            .collect();
        let fusion = PushFusion {
            shards,
            backlog: Arc::default(),
        };
        (fusion, work)
    }

    /// What is pending and how fast it settles, for the push door.
    pub fn backlog(&self) -> &Backlog {
        &self.backlog
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
        self.backlog.arrived(bytes);
        let settle = SettleGuard {
            backlog: &self.backlog,
            bytes,
        };
        if shard.send(arrival).is_err() {
            return vec![Failure::internal("push fusion is shut down"); n];
        }
        let outcomes = settled
            .await
            .unwrap_or_else(|_| vec![Failure::internal("push flush aborted"); n]);
        drop(settle);
        outcomes
    }
}

/// Counts a submission settled however its wait ends (a caller that goes away included).
struct SettleGuard<'a> {
    backlog: &'a Backlog,
    bytes: usize,
}

impl Drop for SettleGuard<'_> {
    fn drop(&mut self) {
        self.backlog.settled(self.bytes);
    }
}

type LaneKey = (Arc<str>, Arc<str>);

struct Lane<P> {
    waiting: Vec<Arrival>,
    /// A flush of this partition is being written.
    in_flight: bool,
    /// Its next flush, taken from `waiting` while `in_flight` (pipelining).
    staged: Option<Staged<P>>,
}

impl<P> Default for Lane<P> {
    fn default() -> Self {
        Lane {
            waiting: Vec::new(),
            in_flight: false,
            staged: None,
        }
    }
}

impl<P> Lane<P> {
    /// Whether a flush of this lane may go out now.
    fn launchable(&self) -> bool {
        !self.in_flight
            && match &self.staged {
                Some(staged) => staged.done,
                None => !self.waiting.is_empty(),
            }
    }

    fn waiting_bytes(&self) -> usize {
        self.waiting.iter().map(|a| a.bytes).sum()
    }
}

/// A staged flush: its requests, and the engine's preparation once `done`.
struct Staged<P> {
    batch: LaneBatch,
    bytes: usize,
    done: bool,
    prepared: Option<P>,
}

type PermitWait = BoxFuture<'static, Permit>;

struct Shard<P> {
    cfg: FusionConfig,
    work: mpsc::UnboundedSender<Work<P>>,
    admission: Admission,
    /// Set while ready lanes wait for an admission permit.
    permit_wait: Option<PermitWait>,
    lanes: HashMap<LaneKey, Lane<P>>,
    /// Lanes that can launch, oldest first (a key may be stale: checked when taken).
    ready: VecDeque<LaneKey>,
    /// Lanes whose waiting requests may be staged once the current burst is taken.
    to_stage: Vec<LaneKey>,
    bundles_in_flight: usize,
    preparing: usize,
    done_tx: mpsc::UnboundedSender<Vec<LaneKey>>,
    done_rx: mpsc::UnboundedReceiver<Vec<LaneKey>>,
    prepared_tx: mpsc::UnboundedSender<(LaneKey, Option<P>)>,
    prepared_rx: mpsc::UnboundedReceiver<(LaneKey, Option<P>)>,
}

impl<P: Send + 'static> Shard<P> {
    fn new(cfg: FusionConfig, work: mpsc::UnboundedSender<Work<P>>, admission: Admission) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (prepared_tx, prepared_rx) = mpsc::unbounded_channel();
        Shard {
            cfg,
            work,
            admission,
            permit_wait: None,
            lanes: HashMap::new(),
            ready: VecDeque::new(),
            to_stage: Vec::new(),
            bundles_in_flight: 0,
            preparing: 0,
            done_tx,
            done_rx,
            prepared_tx,
            prepared_rx,
        }
    }

    async fn run(mut self, mut arrivals: mpsc::UnboundedReceiver<Arrival>) {
        let mut open = true;
        while open || self.bundles_in_flight > 0 || self.preparing > 0 {
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
                Some((key, prepared)) = self.prepared_rx.recv() => self.prepared(key, prepared),
                permit = wait_for(&mut self.permit_wait), if self.permit_wait.is_some() => {
                    self.permit_wait = None;
                    if self.can_launch() {
                        self.launch(permit);
                    } // else not needed any more: dropping it frees it for others
                }
            }
            self.stage_waiting();
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
        let was_launchable = lane.launchable();
        lane.waiting.push(arrival);
        if lane.launchable() && !was_launchable {
            self.ready.push_back(key);
        } else if lane.in_flight && lane.staged.is_none() {
            self.to_stage.push(key);
        }
    }

    fn settled(&mut self, keys: Vec<LaneKey>) {
        self.bundles_in_flight -= 1;
        for key in keys {
            let Some(lane) = self.lanes.get_mut(&key) else {
                continue;
            };
            lane.in_flight = false;
            if lane.launchable() {
                self.ready.push_back(key);
            } else if lane.waiting.is_empty() && lane.staged.is_none() {
                self.lanes.remove(&key); // idle partitions cost no memory
            } // else its staged flush is still being prepared
        }
    }

    fn prepared(&mut self, key: LaneKey, prepared: Option<P>) {
        self.preparing -= 1;
        let Some(lane) = self.lanes.get_mut(&key) else {
            return;
        };
        if let Some(staged) = lane.staged.as_mut() {
            staged.done = true;
            staged.prepared = prepared;
        }
        if lane.launchable() {
            self.ready.push_back(key);
        }
    }

    /// Stages the requests waiting behind each in-flight lane of `to_stage`, once they are
    /// worth building ahead, and hands them out to be prepared.
    fn stage_waiting(&mut self) {
        for key in std::mem::take(&mut self.to_stage) {
            self.stage(key);
        }
    }

    fn stage(&mut self, key: LaneKey) {
        let Some(lane) = self.lanes.get_mut(&key) else {
            return;
        };
        if !self.cfg.pipeline
            || !lane.in_flight
            || lane.staged.is_some()
            || lane.waiting_bytes() < STAGE_MIN_BYTES
        {
            return;
        }
        let (take, bytes) = fitting(&lane.waiting, self.cfg.bundle_max_bytes, true);
        let rest = lane.waiting.split_off(take);
        let taken = std::mem::replace(&mut lane.waiting, rest);
        let batch = LaneBatch::new(key.clone(), taken);
        let stage = Stage::new(key, batch.frames(), self.prepared_tx.clone());
        lane.staged = Some(Staged {
            batch,
            bytes,
            done: false,
            prepared: None,
        });
        self.preparing += 1;
        // Unprepared (the engine's loop is gone, or drops it), the stage reports itself so,
        // and the write builds the segment.
        let _ = self.work.send(Work::Prepare(stage));
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
        let mut lanes = Vec::new();
        let mut batches = Vec::new();
        let mut room = self.cfg.bundle_max_bytes;
        while keys.len() < self.cfg.bundle_max.max(1) {
            let Some(key) = self.ready.front().cloned() else {
                break;
            };
            let Some(lane) = self.lanes.get_mut(&key).filter(|l| l.launchable()) else {
                self.ready.pop_front();
                continue;
            };
            let Some(((batch, prepared), bytes, partial)) =
                take_flush(&key, lane, room, keys.is_empty())
            else {
                break;
            };
            self.ready.pop_front();
            room = room.saturating_sub(bytes);
            lane.in_flight = true;
            lanes.push(batch.flush(prepared));
            batches.push(batch);
            self.to_stage.push(key.clone());
            keys.push(key);
            if partial {
                break; // the bundle is full
            }
        }
        if keys.is_empty() {
            return; // every ready key was stale; the permit goes back
        }
        self.stage_waiting();
        self.bundles_in_flight += 1;
        let done = DoneGuard::new(keys, self.done_tx.clone());
        // Unsettled (the engine's loop is gone, or drops it), the bundle fails its requests
        // and reports its partitions settled.
        let _ = self
            .work
            .send(Work::Write(Bundle::new(lanes, batches, done, permit)));
    }
}

/// A launchable lane's next flush within `room` bytes: its staged one if any, else its
/// waiting requests that fit; and whether the byte cap left requests behind. `None`: nothing
/// fits.
fn take_flush<P>(
    key: &LaneKey,
    lane: &mut Lane<P>,
    room: usize,
    first_of_bundle: bool,
) -> Option<((LaneBatch, Option<P>), usize, bool)> {
    if let Some(staged) = lane.staged.take() {
        if staged.bytes > room && !first_of_bundle {
            lane.staged = Some(staged);
            return None;
        }
        return Some(((staged.batch, staged.prepared), staged.bytes, false));
    }
    let (take, bytes) = fitting(&lane.waiting, room, first_of_bundle);
    if take == 0 {
        return None;
    }
    let rest = lane.waiting.split_off(take);
    let taken = std::mem::replace(&mut lane.waiting, rest);
    let partial = !lane.waiting.is_empty();
    Some(((LaneBatch::new(key.clone(), taken), None), bytes, partial))
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

mod backlog;
mod batch;
#[cfg(test)]
mod tests;
mod work;
