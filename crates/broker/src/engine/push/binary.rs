//! Binary push (`QPB1`, docs/wire.md §6) after parsing: the envelope's groups become pushes.
//!
//! Plain groups (no flag 8) are ordinary push items from here on: the JSON path's dedup,
//! fusion and answers. Pre-compressed groups (flag 8) are **stored as sent** — the client's
//! zstd frame becomes the segment blob byte for byte, with no decompress/recompress — when
//! docs/wire.md §6.3 allows it:
//!
//! - no payload transformation is needed: the queue is not known to encrypt (an encrypted
//!   queue's payloads must be sealed, which means re-framing), and the push is not
//!   authenticated (with auth on every frame is stamped with a `producerSub`, so every group
//!   is re-framed; client frames carry none, the parser refuses the flag);
//! - no frame of the group repeats a transactionId of the request (the group is the only one
//!   for its (queue, partition) in the request, and its transactionIds are distinct);
//! - the group becomes its own segment: it is written straight through
//!   `queen.log_push_multi_v1` (all such groups of a request in one transaction; a lone one by
//!   partition id through `log_push_one_v1`) instead of joining push fusion, which would merge
//!   it with other frames;
//! - no frame duplicates stored data: the SQL probe says so under the partition lock, and a
//!   segment it reports as `duplicate` wrote nothing.
//!
//! Every other group, and a group the SQL refused (a stored duplicate, a queue that turned out
//! to encrypt, a queue whose `maxSize` has no room for all of it), takes the ordinary path
//! with the frames' own message ids: duplicates are dropped, the survivors are re-framed
//! (sealed for an encrypted queue) and recompressed by push fusion, and what a full queue has
//! no room for is refused per item there. The SQL refuses a plaintext segment for an encrypted
//! queue, so a client's pre-compressed plaintext never reaches such a queue's rows.
//! While pushes go to the disk spool (`push/spool.rs`) every group takes the ordinary path,
//! which spools it; a group stored as sent whose write PostgreSQL could not take is spooled
//! after the fact, like any push.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::Arc;

use bytes::Bytes;
use queen_proto::frame::decode_exact;
use queen_proto::hash::txn_hash;
use queen_proto::push_bin::{GroupBody, PushEnvelope, PushGroup};

use crate::accel::admission::Lane;
use crate::accel::push_fusion::FrameOutcome;
use crate::engine::push::commit::write_failed;
use crate::engine::push::PushState;
use crate::engine::push::{self, check_item, spool, PushItem, PushResult};
use crate::engine::tenant::{self, Tenant};
use crate::error::{Error, Result};
use crate::store::push::{SegmentResult, SegmentWrite};

/// One group of a binary body, decoded into push items.
pub struct DecodedGroup {
    pub queue: String,
    /// The partition name, `Default` when the body left it empty.
    pub partition: String,
    /// One per message, in wire order; pre-compressed frames keep their message ids.
    pub items: Vec<PushItem>,
    /// For a pre-compressed group: what storing it as sent needs.
    pub sent: Option<SentSegment>,
}

/// A pre-compressed group as a ready segment: the client's bytes and the hash sidecar.
pub struct SentSegment {
    /// The client's zstd frame, unchanged.
    pub blob: Bytes,
    /// `16 × n` bytes: `xxh3_128(transactionId)` in frame order.
    pub hashes: Vec<u8>,
    /// No transactionId occurs twice in the group.
    pub distinct: bool,
}

/// Decodes one parsed group. The parser has validated every frame already; decoding again
/// here only borrows the payloads out of the decompressed frames.
pub fn decode_group(group: PushGroup) -> Result<DecodedGroup> {
    let partition = push::partition_or_default(Some(group.partition));
    let item = |transaction_id, payload, message_id| PushItem {
        queue: group.queue.clone(),
        partition: Some(partition.clone()),
        transaction_id,
        trace_id: None,
        payload,
        message_id,
        producer_sub: None,
    };
    let (items, sent) = match group.body {
        GroupBody::Items(plain) => {
            let items = plain
                .into_iter()
                .map(|p| item(p.transaction_id, p.payload, None))
                .collect();
            (items, None)
        }
        GroupBody::Precompressed { n, z, frames_raw } => {
            let raw = Bytes::from(frames_raw);
            let frames = decode_exact(&raw, n as usize)
                .map_err(|e| Error::bad(format!("bad binary body: {e}")))?;
            let mut hashes = Vec::with_capacity(frames.len() * 16);
            let mut seen = HashSet::with_capacity(frames.len());
            let mut distinct = true;
            let mut items = Vec::with_capacity(frames.len());
            for f in &frames {
                let hash = txn_hash(f.transaction_id);
                distinct &= seen.insert(hash);
                hashes.extend_from_slice(&hash);
                items.push(item(
                    Some(f.transaction_id.to_string()),
                    raw.slice_ref(f.payload),
                    Some(f.message_uuid()),
                ));
            }
            let sent = SentSegment {
                blob: z,
                hashes,
                distinct,
            };
            (items, Some(sent))
        }
    };
    Ok(DecodedGroup {
        queue: group.queue,
        partition,
        items,
        sent,
    })
}

/// Pushes a parsed `QPB1` envelope into `tenant`'s queues, every message stamped with
/// `producer_sub` (`None` with auth off); results come back in wire order. A bad item refuses the whole request (400)
/// before anything is written.
pub async fn push_envelope(
    state: &PushState,
    env: PushEnvelope,
    producer_sub: Option<Arc<str>>,
    tenant: &Tenant,
) -> Result<Vec<PushResult>> {
    let mut groups = env
        .groups
        .into_iter()
        .filter(|g| !g.is_empty())
        .map(decode_group)
        .collect::<Result<Vec<_>>>()?;
    let mut index = 0;
    for g in &mut groups {
        for item in &mut g.items {
            check_item(index, item)?;
            tenant::qualify_in_place(tenant, "queue", &mut item.queue)?;
            index += 1;
        }
        tenant::qualify_in_place(tenant, "queue", &mut g.queue)?;
    }
    let total = index;

    let mut groups_of_key: HashMap<(&str, &str), usize> = HashMap::new();
    for g in &groups {
        *groups_of_key.entry((&g.queue, &g.partition)).or_default() += 1;
    }
    // While pushes are spooled, every group takes the ordinary path, which spools it.
    let spooling = spool::engaged(state).await?;
    let as_sent: Vec<bool> = groups
        .iter()
        .map(|g| {
            !spooling
                && producer_sub.is_none()
                && g.sent.as_ref().is_some_and(|s| s.distinct)
                && groups_of_key[&(g.queue.as_str(), g.partition.as_str())] == 1
                && !state.encryption.wants(&g.queue)
        })
        .collect();

    // First the groups stored as sent, in one transaction; then everything else (and any
    // group whose segment the SQL probe refused) through the ordinary path.
    let mut results: Vec<Option<PushResult>> = vec![None; total];
    let mut starts = Vec::with_capacity(groups.len());
    let mut at = 0;
    for g in &groups {
        starts.push(at);
        at += g.items.len();
    }
    let direct: Vec<usize> = (0..groups.len()).filter(|&g| as_sent[g]).collect();
    let refused = store_as_sent(state, &groups, &direct, &starts, &mut results).await?;
    rescue_as_sent(state, &groups, &direct, &starts, &mut results).await;

    let mut rest_index = Vec::new();
    let mut rest_items = Vec::new();
    for (g, group) in groups.into_iter().enumerate() {
        if as_sent[g] && !refused.contains(&g) {
            continue;
        }
        rest_index.extend(starts[g]..starts[g] + group.items.len());
        rest_items.extend(group.items);
    }
    if !rest_items.is_empty() {
        let pushed = push::push_qualified(state, rest_items, producer_sub).await?;
        for (i, r) in rest_index.into_iter().zip(pushed) {
            results[i] = Some(r);
        }
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or_else(|| Error::internal(format!("binary push item {i} has no result")))
        })
        .collect()
}

/// Writes the `direct` groups' client blobs as their own segments in one statement
/// (`CommitEffects::write`) and fills their results. Returns the groups whose segment the
/// SQL refused (duplicate, encrypt or full: nothing of them was written). A database failure fails
/// the groups' items, as it does on the fusion path.
async fn store_as_sent(
    state: &PushState,
    groups: &[DecodedGroup],
    direct: &[usize],
    starts: &[usize],
    results: &mut [Option<PushResult>],
) -> Result<Vec<usize>> {
    if direct.is_empty() {
        return Ok(Vec::new());
    }
    let mut writes = Vec::with_capacity(direct.len());
    for &g in direct {
        let group = &groups[g];
        let Some(sent) = &group.sent else {
            return Err(Error::internal(
                "a plain group was chosen to be stored as sent",
            ));
        };
        writes.push(SegmentWrite {
            queue: &group.queue,
            partition: &group.partition,
            msg_count: i32::try_from(group.items.len())
                .map_err(|_| Error::bad("a group holds more than 2^31 messages"))?,
            hashes: &sent.hashes,
            verified: -1,
            blob: &sent.blob,
            frames: None,
            encrypted: false,
        });
    }
    let written = async {
        let _permit = state.admission.acquire(Lane::Push).await;
        let conn = state.store.conn().await?;
        let written = state.effects.write(&conn, &writes).await;
        state.store.charge(&conn, SegmentWrite::load(&writes));
        written
    }
    .await;
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            let failed = write_failed(&e, "binary push write", direct.len());
            for &g in direct {
                settle(groups, g, starts[g], results, |_| failed.clone());
            }
            return Ok(Vec::new());
        }
    };
    state.effects.committed(&writes, &written);

    let mut refused = Vec::new();
    for (&g, result) in direct.iter().zip(written) {
        match result {
            SegmentResult::Queued { base_offset, .. } => {
                settle(groups, g, starts[g], results, |k| FrameOutcome::Queued {
                    message_id: groups[g].items[k].message_id.unwrap_or_default(),
                    offset: base_offset + k as i64,
                });
            }
            SegmentResult::Encrypt { .. } => {
                state.encryption.learn(&groups[g].queue, true);
                refused.push(g);
            }
            SegmentResult::Duplicate { .. } | SegmentResult::Full { .. } => refused.push(g),
        }
    }
    Ok(refused)
}

/// The `direct` groups' items whose write failed because PostgreSQL could not be reached go to
/// the disk spool instead (`push/spool.rs`).
async fn rescue_as_sent(
    state: &PushState,
    groups: &[DecodedGroup],
    direct: &[usize],
    starts: &[usize],
    results: &mut [Option<PushResult>],
) {
    let mut slots: Vec<(usize, usize)> = Vec::new();
    let mut settled: Vec<PushResult> = Vec::new();
    for &g in direct {
        for k in 0..groups[g].items.len() {
            if let Some(r) = results[starts[g] + k].take() {
                slots.push((g, k));
                settled.push(r);
            }
        }
    }
    // Only unauthenticated pushes are stored as sent: no producerSub to spool.
    spool::rescue(state, &mut settled, None, |i| {
        let (g, k) = slots[i];
        (groups[g].items[k].payload.clone(), None)
    })
    .await;
    for ((g, k), r) in slots.into_iter().zip(settled) {
        results[starts[g] + k] = Some(r);
    }
}

/// Fills the results of group `g`'s items (which start at `start`) with `outcome(k)`.
fn settle(
    groups: &[DecodedGroup],
    g: usize,
    start: usize,
    results: &mut [Option<PushResult>],
    outcome: impl Fn(usize) -> FrameOutcome,
) {
    let group = &groups[g];
    for (k, item) in group.items.iter().enumerate() {
        let message_id = item.message_id.unwrap_or_default();
        results[start + k] = Some(PushResult {
            queue: group.queue.clone(),
            partition: group.partition.clone(),
            transaction_id: item.transaction_id.clone().unwrap_or_default(),
            minted_id: message_id,
            outcome: outcome(k),
        });
    }
}
