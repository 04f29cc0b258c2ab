//! The push request logic shared by every push body (JSON here; the binary `QPB1` parser
//! produces the same [`PushItem`]s): validate the whole request before anything is written,
//! mint ids, dedup inside the request (layer 1), group by (queue, partition), hand each group
//! to push fusion (which dedups inside a flush, lets SQL give the authoritative verdict and
//! makes the stored messages discoverable to pops), and decide whether the request stored
//! anything at all ([`require_stored`]).
//!
//! The rest of the push path sits beside it: [`binary`] (the `QPB1` envelope), [`flush`] (push
//! fusion's writer), [`segment`] (the one segment builder), [`dedup`] (the dedup cache's side)
//! and [`commit`] (the one post-commit step every write goes through).

pub mod binary;
pub mod commit;
pub mod dedup;
pub mod flush;
pub mod segment;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use queen_proto::hash::txn_hash;
use queen_proto::name::{check_id, Name};
use uuid::Uuid;

use crate::accel::push_fusion::{copy_of, Failure, FrameOutcome, FusionFrame};
use crate::engine::Engine;
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
            | FrameOutcome::Duplicate { message_id, .. } => *message_id,
            FrameOutcome::Failed(_) => self.minted_id,
        }
    }

    /// `queued`, `duplicate` or `failed` (docs/wire.md §5.2).
    pub fn status(&self) -> &'static str {
        match self.outcome {
            FrameOutcome::Queued { .. } => "queued",
            FrameOutcome::Duplicate { .. } => "duplicate",
            FrameOutcome::Failed(_) => "failed",
        }
    }

    pub fn offset(&self) -> Option<i64> {
        match self.outcome {
            FrameOutcome::Queued { offset, .. } => Some(offset),
            FrameOutcome::Duplicate { offset, .. } => offset,
            FrameOutcome::Failed(_) => None,
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
    let at = |e: queen_proto::NameError| Error::bad(format!("item {index}: {e}"));
    Name::parse("queue", &item.queue).map_err(at)?;
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

/// Pushes `items`, each stamped with `producer_sub` (the caller's validated identity, `None`
/// with auth off); results come back in input order. A bad item refuses the whole request
/// (400) before anything is written; per-item storage failures come back as `Failed` (the
/// caller answers with [`require_stored`]). Stored messages are discoverable by pops before
/// this returns (the flush's post-commit step wakes their partitions).
pub async fn push(
    state: &Engine,
    items: Vec<PushItem>,
    producer_sub: Option<Arc<str>>,
) -> Result<Vec<PushResult>> {
    for (index, item) in items.iter().enumerate() {
        check_item(index, item)?;
    }

    let mut results = Vec::with_capacity(items.len());
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: HashMap<(String, String), usize> = HashMap::new();
    // Layer 1: (group, transactionId) -> the item that leads it.
    let mut leader_of: HashMap<(usize, String), usize> = HashMap::new();
    let mut followers: Vec<(usize, usize)> = Vec::new();

    for (index, item) in items.into_iter().enumerate() {
        let minted_id = item.message_id.unwrap_or_else(queen_proto::new_v7);
        let partition = partition_or_default(item.partition);
        let transaction_id = transaction_id_or_id(item.transaction_id, minted_id);
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
            Some(&leader) => followers.push((index, leader)),
            None => {
                leader_of.insert((group, transaction_id.clone()), index);
                let g = &mut groups[group];
                g.frames.push(FusionFrame {
                    message_id: minted_id,
                    trace_id: item.trace_id,
                    hash: txn_hash(&transaction_id),
                    transaction_id: transaction_id.clone(),
                    producer_sub: producer_sub.clone(),
                    payload: item.payload,
                });
                g.items.push(index);
            }
        }
        results.push(PushResult {
            queue: item.queue,
            partition,
            transaction_id,
            minted_id,
            outcome: Failure::internal("not pushed"),
        });
    }

    let submissions = groups.iter_mut().map(|g| {
        let frames = std::mem::take(&mut g.frames);
        state.push_fusion.submit(&g.queue, &g.partition, frames)
    });
    let outcomes = futures::future::join_all(submissions).await;
    for (group, outcomes) in groups.iter().zip(outcomes) {
        for (&index, outcome) in group.items.iter().zip(outcomes) {
            results[index].outcome = outcome;
        }
    }
    for (index, leader) in followers {
        results[index].outcome = copy_of(&results[leader].outcome);
    }
    Ok(results)
}

/// The answer of a push request is per item only when something of it is stored (queued, or
/// found stored already). When nothing is, a `201` full of `failed` items would be counted as
/// success by a client that checks the status: it becomes a 503 with `Retry-After` when the
/// database could not be reached, else a 500, naming the first failure.
pub fn require_stored(results: &[PushResult]) -> Result<()> {
    fn failure(r: &PushResult) -> Option<&Failure> {
        match &r.outcome {
            FrameOutcome::Failed(f) => Some(f),
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
