//! Dead letters: the filing after an ack verdict asked for one (read the covering segment,
//! extract the poison frame, file it with `queen.log_dlq_head_v1`), the listing behind
//! `GET /api/v1/dlq`, and the operations on filed rows (docs/engine.md §2.8): purge, delete by
//! address, and replay, which builds a one-frame segment from the payload copy and appends it
//! while deleting the rows, in one transaction. Only the broker can (de)compress a segment,
//! which is why SQL keeps the lease and leaves the filing and the building to this module; what
//! the filing means for the acks' answers is `engine::ack`'s.

use crate::engine::tenant::{self, Tenant};
use deadpool_postgres::GenericClient;
use queen_proto::frame::{Frame, Frames, ENCRYPTED};
use queen_proto::{segment, PartitionId};
use serde_json::value::RawValue;

use crate::engine::push::commit::after_commit_trouble;
use crate::engine::push::segment::build_segment;
use crate::engine::push::PushState;
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::ack::AckVerdict;
use crate::store::dlq::{self as store, DeadLetter, ReplayVerdict, ReplayWrite};
use crate::store::push::{segment_at, SegmentResult, SegmentWrite};

pub use crate::store::dlq::{DlqFilter, DlqPage, DlqRow};

/// The reason filed when no nack of the group carried one.
pub const DEFAULT_REASON: &str = "Retries exhausted";

/// A nack (failed, retry or dlq) of the group asking for the dead letter: its transactionId
/// and the error it carried, which becomes the filed reason.
pub struct Nack<'a> {
    pub transaction_id: &'a str,
    pub error: Option<&'a str>,
}

/// What a successful hand-off filed.
pub struct Filed {
    pub transaction_id: String,
    pub wake_queue: Option<String>,
}

/// The outcome of a hand-off that PostgreSQL answered.
pub enum HandOff {
    Filed(Filed),
    /// The segment holding the poison frame was retained away: nothing left to file.
    RetainedAway,
    /// The lease that asked for the dead letter no longer holds the row (it expired and a
    /// pop claimed the span, or a concurrent ack under the same lease filed it first):
    /// this ack filed nothing, and its signal took no effect.
    LeaseMovedOn(String),
}

/// Files the dead letter `verdict` (`dlq: true`) asks for.
pub async fn file(
    db: &impl GenericClient,
    partition_id: i64,
    group: &str,
    verdict: &AckVerdict,
    nacks: &[Nack<'_>],
) -> Result<HandOff> {
    let (Some(off), Some(lease_id)) = (verdict.off, verdict.lease_id.as_deref()) else {
        return Err(Error::internal("dlq verdict without offset or lease"));
    };
    let Some(seg) = segment_at(db, partition_id, off).await? else {
        tracing::warn!(
            partition_id,
            off,
            "DLQ hand-off: the segment was retained away"
        );
        return Ok(HandOff::RetainedAway);
    };
    let frames = segment::decompress(&seg.blob, segment::MAX_SEGMENT_BYTES)
        .map_err(|e| Error::internal(format!("segment {partition_id}@{}: {e}", seg.base)))?;
    let index = usize::try_from(off - seg.base)
        .map_err(|_| Error::internal(format!("offset {off} below segment base {}", seg.base)))?;
    let frame = Frames::new(&frames)
        .nth(index)
        .ok_or_else(|| {
            Error::internal(format!(
                "segment {partition_id}@{} has no frame {index}",
                seg.base
            ))
        })?
        .map_err(|e| Error::internal(format!("segment {partition_id}@{}: {e}", seg.base)))?;
    let payload = payload_json(frame.payload);
    let letter = DeadLetter {
        partition_id,
        group,
        lease_id,
        off,
        message_id: frame.message_uuid(),
        transaction_id: frame.transaction_id,
        payload: payload.as_deref(),
        error: reason(frame.transaction_id, nacks),
        encrypted: frame.is_encrypted(),
        producer_sub: frame.producer_sub,
    };
    let verdict = store::dlq_head(db, &letter).await?;
    if !verdict.ok {
        let error = verdict.error.unwrap_or_else(|| "lease moved on".into());
        tracing::debug!(partition_id, off, %error, "DLQ hand-off: the lease moved on");
        return Ok(HandOff::LeaseMovedOn(error));
    }
    Ok(HandOff::Filed(Filed {
        transaction_id: frame.transaction_id.to_string(),
        wake_queue: verdict.wake_queue,
    }))
}

/// The stored payload (or the envelope of an encrypted one) as JSON for the snapshot: `None`
/// (JSON null) when empty; a payload that is not JSON (never written by this broker) is kept
/// as a JSON string rather than lost.
fn payload_json(bytes: &[u8]) -> Option<Box<RawValue>> {
    if bytes.is_empty() {
        return None;
    }
    serde_json::from_slice::<Box<RawValue>>(bytes)
        .ok()
        .or_else(|| {
            let text = serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned());
            serde_json::value::to_raw_value(&text).ok()
        })
}

/// The failure reason: the error of the nack of the poison message itself, else the first
/// nack error of the group, else [`DEFAULT_REASON`].
pub fn reason<'a>(poison_txn: &str, nacks: &[Nack<'a>]) -> &'a str {
    let error = |n: &Nack<'a>| n.error.filter(|e| !e.is_empty());
    nacks
        .iter()
        .filter(|n| n.transaction_id == poison_txn)
        .find_map(error)
        .or_else(|| nacks.iter().find_map(error))
        .unwrap_or(DEFAULT_REASON)
}

/// One page of dead letters (newest first) and the number of matching rows. Payload copies
/// that are encryption envelopes are opened; one that cannot be opened (another key, a
/// corrupt envelope) is answered as JSON null with its `payload_error`, the rest untouched.
/// Only `tenant`'s dead letters are listed, with the queue names its client knows.
pub async fn list(state: &Shared, filter: &DlqFilter<'_>, tenant: &Tenant) -> Result<DlqPage> {
    let queue = filter
        .queue
        .map(|q| tenant::qualify(tenant, "queue", q))
        .transpose()?;
    let filter = DlqFilter {
        queue: queue.as_deref(),
        ..*filter
    };
    let db = state.store.conn().await?;
    let mut page = store::dlq_list(&db, &filter, tenant.id()).await?;
    for queue in page.rows.iter_mut().filter_map(|r| r.queue.as_mut()) {
        *queue = tenant::local(queue).to_string();
    }
    for row in page.rows.iter_mut().filter(|r| r.encrypted) {
        let Some(envelope) = row.data.take() else {
            continue;
        };
        match state.encryption.open(envelope.get().as_bytes()) {
            Ok(plain) => row.data = payload_json(&plain),
            Err(e) => row.payload_error = Some(e),
        }
    }
    Ok(page)
}

/// Deletes the dead letters of `queue` (of `group` only, if given); answers how many went.
pub async fn purge(
    state: &Shared,
    queue: &str,
    group: Option<&str>,
    tenant: &Tenant,
) -> Result<i64> {
    let queue = tenant::qualify(tenant, "queue", queue)?;
    let db = state.store.conn().await?;
    store::dlq_purge(&db, &queue, group).await
}

/// Deletes the dead letters of one address, every group; 404 when it has none (a live
/// message that was never dead-lettered has none).
/// An address on another tenant's partition has none.
pub async fn delete(
    state: &Shared,
    partition_id: &str,
    transaction_id: &str,
    tenant: &Tenant,
) -> Result<i64> {
    let pid = address(partition_id, transaction_id)?;
    let db = state.store.conn().await?;
    match store::dlq_delete(&db, pid, transaction_id, tenant.id()).await? {
        0 => Err(no_dead_letter(partition_id, transaction_id)),
        n => Ok(n),
    }
}

/// What a replay appended.
pub struct Replayed {
    pub partition_id: i64,
    pub offset: i64,
    /// How many dead letters (one per group that filed it) the replay removed.
    pub replayed: i64,
}

/// Pushes the payload copy of an address back to its partition under the same transactionId
/// and producerSub (a new message id, past the dedup window) and deletes its dead letters, in one
/// transaction, so every group sees the message again at a new offset. 404 when the address
/// has no dead letter, including when a concurrent replay took it first.
/// An address on another tenant's partition has none.
pub async fn replay(
    state: &PushState,
    partition_id: &str,
    transaction_id: &str,
    tenant: &Tenant,
) -> Result<Replayed> {
    let pid = address(partition_id, transaction_id)?;
    let db = state.store.conn().await?;
    let Some(copy) = store::dlq_payload(&db, pid, transaction_id, tenant.id()).await? else {
        return Err(no_dead_letter(partition_id, transaction_id));
    };
    let payload = copy.payload.unwrap_or_default().into_bytes();
    // An envelope goes back as stored; a plaintext copy is sealed when the queue encrypts now.
    let (payload, encrypted) = if !copy.encrypted && copy.queue_encrypts {
        let queue = format!("of partition {partition_id}");
        (state.encryption.seal(&queue, &payload)?, true)
    } else {
        (payload, copy.encrypted)
    };
    let frame = Frame {
        flags: if encrypted { ENCRYPTED } else { 0 },
        message_id: *queen_proto::new_v7().as_bytes(),
        trace_id: None,
        transaction_id,
        producer_sub: copy.producer_sub.as_deref(),
        payload: &payload,
    };
    let seg = build_segment(&[frame], state.cfg.zstd_level)
        .map_err(|e| Error::bad(format!("replay: {e}")))?;
    let write = ReplayWrite {
        partition_id: pid,
        transaction_id,
        hashes: &seg.hashes,
        blob: &seg.blob,
        encrypted,
        tenant: tenant.id(),
    };
    let (replayed, queue, partition, push) = match store::dlq_replay(&db, &write).await? {
        ReplayVerdict::Refused {
            push: SegmentResult::Full { max_size, .. },
        } => {
            return Err(Error::Conflict(format!(
                "replay refused: the queue of partition {partition_id} is full (maxSize \
                 {max_size} unconsumed messages); the dead letter stays"
            )))
        }
        ReplayVerdict::Refused { push } => {
            // The queue started encrypting between the read and the replay: nothing changed.
            return Err(Error::Conflict(format!(
                "replay refused ({push:?}); the dead letter stays, try again"
            )));
        }
        ReplayVerdict::None => return Err(no_dead_letter(partition_id, transaction_id)),
        ReplayVerdict::Gone => {
            return Err(Error::NotFound(format!(
                "the partition {partition_id} of the dead letter no longer exists"
            )))
        }
        ReplayVerdict::Replayed {
            replayed,
            queue,
            partition,
            push,
        } => (replayed, queue, partition, push),
    };
    let SegmentResult::Queued { base_offset, .. } = push else {
        // Window 0 never answers duplicate; the rows are gone and a frame may stand.
        after_commit_trouble(&format!("log_dlq_replay_v1 answered {push:?}"));
        return Err(Error::internal("replay committed without a queued push"));
    };
    let written = SegmentWrite {
        queue: &queue,
        partition: &partition,
        msg_count: seg.msg_count,
        hashes: &seg.hashes,
        verified: -1,
        blob: &seg.blob,
        frames: Some(&seg.frames),
        encrypted,
    };
    state.effects.committed(&[written], &[push]);
    Ok(Replayed {
        partition_id: pid,
        offset: base_offset,
        replayed,
    })
}

/// The partition id of an address; one that cannot be an id has no dead letter.
fn address(partition_id: &str, transaction_id: &str) -> Result<i64> {
    PartitionId::parse(partition_id)
        .map(PartitionId::get)
        .map_err(|_| no_dead_letter(partition_id, transaction_id))
}

fn no_dead_letter(partition_id: &str, transaction_id: &str) -> Error {
    Error::NotFound(format!(
        "no dead letter for transactionId {transaction_id} in partition {partition_id}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_snapshot_keeps_json_and_never_drops_bytes() {
        assert!(payload_json(b"").is_none());
        assert_eq!(
            payload_json(br#"{"a":1}"#)
                .map(|r| r.get().to_string())
                .as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(
            payload_json(b"not json")
                .map(|r| r.get().to_string())
                .as_deref(),
            Some(r#""not json""#)
        );
    }
}
