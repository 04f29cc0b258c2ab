//! Ack fusion (docs/engine.md §6.5, docs/spec/ack-internals.md "Accelerator two: ack fusion"):
//! the positional acks the ack registry proved (full batch, all `completed`) of many
//! concurrent requests commit together in one transaction, one commit, one fsync. A cursor
//! advance is monotone and idempotent, so fusing them changes no meaning.
//!
//! The mechanism mirrors push fusion (`push_fusion.rs`; both use `fusion.rs`):
//!
//! - Sharding by the partition id: all acks of a partition land on one shard task, which owns
//!   its state alone, so folding and per-partition commit order need no locks.
//! - Fire-on-idle: at most one flush per shard in flight. An arrival with nothing in flight
//!   flushes at once (one row, one round trip at low load); arrivals during a flush wait and
//!   the next flush takes them all, so the batch size is emergent.
//! - Folding: acks with the same (partition, group, worker) become one row at the largest
//!   `batch_end`, and each of them gets that row's verdict (sound by monotonicity). Different
//!   workers on one (partition, group) stay separate rows, each checked by its own lease.
//! - Synchronous answers: [`AckFusion::submit`] resolves only once the flush committed (or
//!   failed), so a success still means a durable cursor.
//!
//! The commit itself is the engine's, and this module calls nobody: [`AckFusion::start`]
//! returns, beside the handle, the [`FusionWork`] queue on which the shard tasks hand out
//! each flush ([`AckFlush`]). The engine's loop (`engine/ack/fusion.rs`) pulls them, commits
//! each flush's rows in one `log_ack_multi_v1` call (rows locked in (partition, group) order)
//! and settles the flush with one verdict per row, which it realigns to the acks. A flush
//! dropped unsettled (its task panicked) fails its acks and reports back to its shard all the
//! same, so nothing can strand an arrival: there is no backstop tick to run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

pub use crate::accel::fusion::FusionWork;
use crate::accel::fusion::{shard_of, DoneGuard, Failure};
use crate::log_limit::Tally;

/// How often the coalescing summary is logged (when there was traffic).
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// One full-batch completed ack, as the registry proved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusedAck {
    pub partition_id: i64,
    pub group: String,
    /// The leaseId the ack was made under.
    pub worker: String,
    pub batch_end: i64,
    /// Frames of the batch (the cover's `p_acked_count`).
    pub frames: i32,
}

/// One flush of a shard, to commit in one transaction: its rows, and the acks they answer.
/// Holds its shard's one flush in flight until it is settled or dropped.
pub struct AckFlush<V> {
    rows: Vec<FusedAck>,
    arrivals: Vec<Arrival<V>>,
    /// Each arrival's row.
    slots: Vec<usize>,
    stats: Arc<Stats>,
    /// Reports the flush settled to its shard, after the acks were answered (their replies
    /// close unanswered when the flush is dropped: `ack flush aborted`).
    _done: DoneGuard<()>,
}

impl<V: Clone> AckFlush<V> {
    /// The folded rows, in first-arrival order.
    pub fn rows(&self) -> &[FusedAck] {
        &self.rows
    }

    /// Answers every ack: `verdicts` holds one verdict per row, in row order; `Err` when
    /// nothing committed or the outcome is unknown (see [`Failure`]).
    pub fn settle(mut self, verdicts: Result<Vec<V>, Failure>) {
        let arrivals = std::mem::take(&mut self.arrivals);
        self.stats
            .record(self.rows.len(), arrivals.len(), verdicts.is_ok());
        for (arrival, &slot) in arrivals.into_iter().zip(&self.slots) {
            let answer = match &verdicts {
                Ok(v) => v
                    .get(slot)
                    .cloned()
                    .ok_or_else(|| internal("ack flush returned no verdict")),
                Err(failure) => Err(failure.clone()),
            };
            let _ = arrival.reply.send(answer); // the request may have gone away
        }
    }
}

/// Handle on the shard tasks; cheap to clone. The tasks end when every handle is dropped and
/// their flushes have settled; the work queue then ends too.
pub struct AckFusion<V> {
    shards: Arc<[mpsc::UnboundedSender<Arrival<V>>]>,
    stats: Arc<Stats>,
}

impl<V> Clone for AckFusion<V> {
    fn clone(&self) -> Self {
        AckFusion {
            shards: self.shards.clone(),
            stats: self.stats.clone(),
        }
    }
}

struct Arrival<V> {
    ack: FusedAck,
    reply: oneshot::Sender<Result<V, Failure>>,
}

struct Stats {
    commits: AtomicU64,
    rows: AtomicU64,
    acks: AtomicU64,
    failures: AtomicU64,
    summary: Tally<3>,
}

/// What [`AckFusion::metrics`] reports, counters since start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckFusionSnapshot {
    pub shards: u64,
    /// Flushes that committed.
    pub commits: u64,
    /// Rows those flushes committed (after folding).
    pub rows: u64,
    /// Acks answered by those flushes.
    pub acks: u64,
    /// Flushes that did not commit (or whose outcome is unknown).
    pub failures: u64,
}

impl Stats {
    fn record(&self, rows: usize, acks: usize, committed: bool) {
        if !committed {
            self.failures.fetch_add(1, Relaxed);
            return;
        }
        let (rows, acks) = (rows as u64, acks as u64);
        self.commits.fetch_add(1, Relaxed);
        self.rows.fetch_add(rows, Relaxed);
        self.acks.fetch_add(acks, Relaxed);
        let Some(([commits, rows, acks], elapsed)) = self.summary.add([1, rows, acks]) else {
            return;
        };
        tracing::info!(
            commits,
            rows,
            acks,
            rows_per_commit = format!("{:.2}", rows as f64 / commits.max(1) as f64),
            seconds = elapsed.as_secs(),
            "ack fusion coalescing"
        );
    }
}

impl<V: Clone + Send + 'static> AckFusion<V> {
    /// Spawns `shards` shard tasks on the current tokio runtime; they hand their flushes out
    /// on the returned queue.
    pub fn start(shards: usize) -> (Self, FusionWork<AckFlush<V>>) {
        let (work_tx, work) = FusionWork::channel();
        let stats = Arc::new(Stats {
            commits: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            acks: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            summary: Tally::new(SUMMARY_EVERY),
        });
        let shards = (0..shards.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(Shard::new(work_tx.clone(), stats.clone()).run(rx));
                tx
            })
            .collect();
        (AckFusion { shards, stats }, work)
    }

    /// Queues `ack` and waits for its flush: its row's verdict, or why the flush failed.
    pub async fn submit(&self, ack: FusedAck) -> Result<V, Failure> {
        let shard = &self.shards[shard_of(ack.partition_id.to_be_bytes(), self.shards.len())];
        let (reply, settled) = oneshot::channel();
        if shard.send(Arrival { ack, reply }).is_err() {
            return Err(internal("ack fusion is shut down"));
        }
        settled
            .await
            .unwrap_or_else(|_| Err(internal("ack flush aborted")))
    }

    pub fn metrics(&self) -> AckFusionSnapshot {
        let n = |c: &AtomicU64| c.load(Relaxed);
        AckFusionSnapshot {
            shards: self.shards.len() as u64,
            commits: n(&self.stats.commits),
            rows: n(&self.stats.rows),
            acks: n(&self.stats.acks),
            failures: n(&self.stats.failures),
        }
    }
}

/// A failure of the broker itself: nothing was sent to PostgreSQL.
fn internal(error: &str) -> Failure {
    Failure {
        error: error.into(),
        unavailable: false,
        refused: false,
    }
}

struct Shard<V> {
    work: mpsc::UnboundedSender<AckFlush<V>>,
    stats: Arc<Stats>,
    pending: Vec<Arrival<V>>,
    in_flight: bool,
    done_tx: mpsc::UnboundedSender<()>,
    done_rx: mpsc::UnboundedReceiver<()>,
}

impl<V: Clone + Send + 'static> Shard<V> {
    fn new(work: mpsc::UnboundedSender<AckFlush<V>>, stats: Arc<Stats>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Shard {
            work,
            stats,
            pending: Vec::new(),
            in_flight: false,
            done_tx,
            done_rx,
        }
    }

    async fn run(mut self, mut arrivals: mpsc::UnboundedReceiver<Arrival<V>>) {
        let mut open = true;
        while open || self.in_flight {
            tokio::select! {
                arrival = arrivals.recv(), if open => match arrival {
                    Some(a) => {
                        self.pending.push(a);
                        // Take the whole burst before flushing: it coalesces for free.
                        while let Ok(a) = arrivals.try_recv() {
                            self.pending.push(a);
                        }
                    }
                    None => open = false,
                },
                Some(()) = self.done_rx.recv() => self.in_flight = false,
            }
            if !self.in_flight && !self.pending.is_empty() {
                self.launch();
            }
        }
    }

    /// Hands everything pending out as one flush.
    fn launch(&mut self) {
        let arrivals = std::mem::take(&mut self.pending);
        let (rows, slots) = fold(arrivals.iter().map(|a| &a.ack));
        self.in_flight = true;
        let flush = AckFlush {
            rows,
            arrivals,
            slots,
            stats: self.stats.clone(),
            _done: DoneGuard::new((), self.done_tx.clone()),
        };
        // Unsettled (the engine's loop is gone), the flush fails its acks and reports back.
        let _ = self.work.send(flush);
    }
}

/// Folds acks with the same (partition, group, worker) into one row at their largest
/// `batch_end` (with that batch's frame count); returns the rows, in first-arrival order, and
/// each ack's row.
fn fold<'a>(acks: impl Iterator<Item = &'a FusedAck>) -> (Vec<FusedAck>, Vec<usize>) {
    let mut index: HashMap<(i64, &str, &str), usize> = HashMap::new();
    let mut rows: Vec<FusedAck> = Vec::new();
    let mut slots = Vec::new();
    for ack in acks {
        let key = (ack.partition_id, ack.group.as_str(), ack.worker.as_str());
        let slot = *index.entry(key).or_insert_with(|| {
            rows.push(ack.clone());
            rows.len() - 1
        });
        if ack.batch_end > rows[slot].batch_end {
            rows[slot].batch_end = ack.batch_end;
            rows[slot].frames = ack.frames;
        }
        slots.push(slot);
    }
    (rows, slots)
}

#[cfg(test)]
mod tests;
