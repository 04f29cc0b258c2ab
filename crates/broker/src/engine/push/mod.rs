//! The push request logic shared by every push body (JSON here; the binary `QPB1` parser
//! produces the same [`PushItem`]s): validate the whole request before anything is written,
//! mint ids, dedup inside the request (layer 1), group by (queue, partition), hand each group
//! to push fusion (which dedups inside a flush, lets SQL give the authoritative verdict and
//! makes the stored messages discoverable to pops), and decide whether the request stored
//! anything at all ([`require_stored`]).
//!
//! The rest of the push path sits beside it: [`binary`] (the `QPB1` envelope), [`flush`] (push
//! fusion's writer), [`segment`] (the one segment builder), [`dedup`] (the dedup cache's side),
//! [`commit`] (the one post-commit step every write goes through), [`spool`] (which pushes go
//! to the disk spool instead), [`replay`] (the spool's drain) and [`doubt`] (what of a write in
//! doubt is stored already).

pub mod binary;
pub mod commit;
pub mod dedup;
pub mod door;
pub mod doubt;
pub mod flush;
pub mod replay;
pub mod segment;
pub mod spool;
mod state;

pub use crate::accel::push_fusion::{Failure, FrameOutcome};
pub use state::PushState;

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use bytes::Bytes;
use queen_proto::hash::txn_hash;
use queen_proto::name::{check_id, Name};
use uuid::Uuid;

use crate::accel::push_fusion::{copy_of, FusionFrame};
use crate::engine::tenant::{self, Tenant};
use crate::error::{Error, Result};

/// The partition of an item that names none.
pub const DEFAULT_PARTITION: &str = "Default";

/// The partition an item lands in: its own, or [`DEFAULT_PARTITION`] when it names none.
pub fn partition_or_default(partition: Option<String>) -> String {
    partition
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_PARTITION.to_string())
}

/// The transactionId an item is stored under: its own, or its message id's text.
pub fn transaction_id_or_id(transaction_id: Option<String>, message_id: Uuid) -> String {
    transaction_id
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| message_id.to_string())
}

/// One message to push, as parsed from a request body.
#[derive(Debug, Clone)]
pub struct PushItem {
    pub queue: String,
    /// `None` or empty: [`DEFAULT_PARTITION`].
    pub partition: Option<String>,
    /// `None` or empty: the message id's text.
    pub transaction_id: Option<String>,
    pub trace_id: Option<Uuid>,
    /// The payload's JSON bytes, stored verbatim (a slice of the request body).
    pub payload: Bytes,
    /// A client-minted id (pre-compressed binary push); `None`: minted here (UUIDv7).
    pub message_id: Option<Uuid>,
    /// The producerSub stamped when the item was first pushed, carried by the disk spool's
    /// drain only; requests never set it (their caller's identity is [`push`]'s argument).
    pub producer_sub: Option<Arc<str>>,
}

/// What became of one item, in request order.
#[derive(Debug, Clone)]
pub struct PushResult {
    pub queue: String,
    pub partition: String,
    pub transaction_id: String,
    /// The id minted for (or given with) this item.
    pub minted_id: Uuid,
    pub outcome: FrameOutcome,
}

impl PushResult {
    /// The id to report: the stored message's (the original's for a duplicate).
    pub fn message_id(&self) -> Uuid {
        match &self.outcome {
            FrameOutcome::Queued { message_id, .. }
            | FrameOutcome::Duplicate { message_id, .. }
            | FrameOutcome::Buffered { message_id } => *message_id,
            FrameOutcome::Failed(_) => self.minted_id,
        }
    }

    /// `queued`, `duplicate`, `buffered` or `failed` (docs/wire.md §5.2).
    pub fn status(&self) -> &'static str {
        match self.outcome {
            FrameOutcome::Queued { .. } => "queued",
            FrameOutcome::Duplicate { .. } => "duplicate",
            FrameOutcome::Buffered { .. } => "buffered",
            FrameOutcome::Failed(_) => "failed",
        }
    }

    pub fn offset(&self) -> Option<i64> {
        match self.outcome {
            FrameOutcome::Queued { offset, .. } => Some(offset),
            FrameOutcome::Duplicate { offset, .. } => offset,
            FrameOutcome::Buffered { .. } | FrameOutcome::Failed(_) => None,
        }
    }

    pub fn error(&self) -> Option<&str> {
        match &self.outcome {
            FrameOutcome::Failed(failure) => Some(&failure.error),
            _ => None,
        }
    }
}

/// Checks one item of a request (`index` is its position, named in the 400) by the edge rules
/// of [`queen_proto::name`]: its queue and partition are names, its transactionId an id.
/// Every push body runs this on all items before anything is written.
pub(crate) fn check_item(index: usize, item: &PushItem) -> Result<()> {
    check_named(index, &item.queue, item)
}

/// [`check_item`] with the queue name given apart: a spooled item's stored queue name is
/// checked by its tenant-local part (the tenant was checked when its token was).
fn check_named(index: usize, queue: &str, item: &PushItem) -> Result<()> {
    let at = |e: queen_proto::NameError| Error::bad(format!("item {index}: {e}"));
    Name::parse("queue", queue).map_err(at)?;
    Name::optional("partition", item.partition.as_deref()).map_err(at)?;
    if let Some(txn) = &item.transaction_id {
        check_id("transactionId", txn).map_err(at)?;
    }
    Ok(())
}

/// One (queue, partition) group of a request: the leaders' frames and their item indices.
struct Group {
    queue: String,
    partition: String,
    frames: Vec<FusionFrame>,
    items: Vec<usize>,
}

/// A checked request on its way: the results in input order (still `failed` until settled),
/// the leaders grouped by (queue, partition), and the layer-1 followers with their leaders.
struct Prepared {
    results: Vec<PushResult>,
    groups: Vec<Group>,
    followers: Vec<(usize, usize)>,
}

/// Pushes `items`; results come back in input order. A bad item refuses the whole request
/// (400) before anything is written; per-item storage failures come back as `Failed` (the
/// caller answers with [`require_stored`]). Stored messages are discoverable by pops before
/// this returns (the flush's post-commit step wakes their partitions). While the disk spool
/// takes pushes (`push/spool.rs`), they are spooled and answered `buffered` instead. Each item
/// is stamped with `producer_sub` (the caller's validated identity, `None` with auth off) and
/// lands in `tenant`'s queues (names qualified once checked, `engine/tenant.rs`).
pub async fn push(
    state: &PushState,
    mut items: Vec<PushItem>,
    producer_sub: Option<Arc<str>>,
    tenant: &Tenant,
) -> Result<Vec<PushResult>> {
    check_all(&items)?;
    for item in &mut items {
        tenant::qualify_in_place(tenant, "queue", &mut item.queue)?;
    }
    push_qualified(state, items, producer_sub).await
}

/// [`push`] of items already checked and qualified by their tenant (the binary push's
/// groups that are not stored as sent).
pub(crate) async fn push_qualified(
    state: &PushState,
    items: Vec<PushItem>,
    producer_sub: Option<Arc<str>>,
) -> Result<Vec<PushResult>> {
    let mut p = Prepared::new(items, false, producer_sub);
    let outgoing = || {
        p.groups
            .iter()
            .map(|g| spool::Outgoing {
                queue: &g.queue,
                partition: &g.partition,
                frames: g.frames.iter().map(spool::frame_of).collect(),
            })
            .collect()
    };
    if spool::divert(state, outgoing).await? {
        p.buffered();
    } else {
        // A write PostgreSQL cannot take is spooled by the flush itself (`push/flush.rs`).
        p.submit(state).await;
    }
    Ok(p.finish())
}

/// Stores `items` in PostgreSQL with no spool decision: the spool's own drain
/// (`push/replay.rs`), whose items were checked when they were pushed.
pub(crate) async fn store(state: &PushState, items: Vec<PushItem>) -> Result<Vec<PushResult>> {
    for (index, item) in items.iter().enumerate() {
        check_named(index, tenant::local(&item.queue), item)?;
    }
    let mut p = Prepared::new(items, true, None);
    p.submit(state).await;
    Ok(p.finish())
}

fn check_all(items: &[PushItem]) -> Result<()> {
    for (index, item) in items.iter().enumerate() {
        check_item(index, item)?;
    }
    Ok(())
}

impl Prepared {
    /// Mints ids, resolves partitions and transactionIds, drops repeats inside the request
    /// (layer 1) and groups the leaders; `replayed`: the items are the spool drain's.
    fn new(items: Vec<PushItem>, replayed: bool, producer_sub: Option<Arc<str>>) -> Self {
        let mut p = Prepared {
            results: Vec::with_capacity(items.len()),
            groups: Vec::new(),
            followers: Vec::new(),
        };
        let mut group_of: HashMap<(String, String), usize> = HashMap::new();
        // Layer 1: (group, transactionId) -> the item that leads it.
        let mut leader_of: HashMap<(usize, String), usize> = HashMap::new();
        for (index, item) in items.into_iter().enumerate() {
            let minted_id = item.message_id.unwrap_or_else(queen_proto::new_v7);
            let partition = partition_or_default(item.partition);
            let transaction_id = transaction_id_or_id(item.transaction_id, minted_id);
            let groups = &mut p.groups;
            let group = *group_of
                .entry((item.queue.clone(), partition.clone()))
                .or_insert_with(|| {
                    groups.push(Group {
                        queue: item.queue.clone(),
                        partition: partition.clone(),
                        frames: Vec::new(),
                        items: Vec::new(),
                    });
                    groups.len() - 1
                });
            match leader_of.get(&(group, transaction_id.clone())) {
                Some(&leader) => p.followers.push((index, leader)),
                None => {
                    leader_of.insert((group, transaction_id.clone()), index);
                    let g = &mut p.groups[group];
                    g.frames.push(FusionFrame {
                        message_id: minted_id,
                        trace_id: item.trace_id,
                        hash: txn_hash(&transaction_id),
                        transaction_id: transaction_id.clone(),
                        producer_sub: producer_sub.clone().or(item.producer_sub),
                        payload: item.payload,
                        replayed,
                    });
                    g.items.push(index);
                }
            }
            p.results.push(PushResult {
                queue: item.queue,
                partition,
                transaction_id,
                minted_id,
                outcome: Failure::internal("not pushed"),
            });
        }
        p
    }

    /// Hands each group to push fusion and settles the leaders with its outcomes.
    async fn submit(&mut self, state: &PushState) {
        let submissions = self.groups.iter_mut().map(|g| {
            let frames = std::mem::take(&mut g.frames);
            state.fusion.submit(&g.queue, &g.partition, frames)
        });
        let outcomes = futures::future::join_all(submissions).await;
        for (group, outcomes) in self.groups.iter().zip(outcomes) {
            for (&index, outcome) in group.items.iter().zip(outcomes) {
                self.results[index].outcome = outcome;
            }
        }
    }

    /// Every leader was spooled.
    fn buffered(&mut self) {
        for g in &self.groups {
            for &index in &g.items {
                let message_id = self.results[index].minted_id;
                self.results[index].outcome = FrameOutcome::Buffered { message_id };
            }
        }
    }

    /// The results, followers copying their leaders' outcomes.
    fn finish(mut self) -> Vec<PushResult> {
        for (index, leader) in self.followers {
            self.results[index].outcome = copy_of(&self.results[leader].outcome);
        }
        self.results
    }
}

/// The answer of a push request is per item only when something of it is stored (queued, or
/// found stored already) or refused by its queue's rules (a definite per-item answer). When
/// nothing is, a `201` full of `failed` items would be counted as success by a client that
/// checks the status: it becomes a 503 with `Retry-After` when the database could not be
/// reached, else a 500, naming the first failure.
pub fn require_stored(results: &[PushResult]) -> Result<()> {
    fn failure(r: &PushResult) -> Option<&Failure> {
        match &r.outcome {
            FrameOutcome::Failed(f) if !f.refused => Some(f),
            _ => None,
        }
    }
    if results.iter().any(|r| failure(r).is_none()) {
        return Ok(());
    }
    let mut failures = results.iter().filter_map(failure);
    let Some(first) = failures.next() else {
        return Ok(()); // an empty request
    };
    Err(
        match std::iter::once(first)
            .chain(failures)
            .find(|f| f.unavailable)
        {
            Some(f) => Error::Unavailable(f.error.clone()),
            None => Error::internal(format!("nothing was stored: {}", first.error)),
        },
    )
}
