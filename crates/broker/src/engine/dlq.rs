//! Dead letters: the filing after an ack verdict asked for one (read the covering segment,
//! extract the poison frame, file it with `queen.log_dlq_head_v1`), and the listing behind
//! `GET /api/v1/dlq`. Only the broker can decompress a segment, which is why SQL keeps the
//! lease and leaves the filing to this module; what the filing means for the acks' answers is
//! `engine::ack`'s.

use deadpool_postgres::GenericClient;
use queen_proto::frame::Frames;
use queen_proto::segment;
use serde_json::value::RawValue;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::store::ack::HashAckVerdict;
use crate::store::dlq::{self as store, DeadLetter};
use crate::store::push::segment_at;

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

/// Files the dead letter `verdict` (`dlq: true`) asks for; `None` when there was nothing to
/// file any more (the segment was retained away, or someone else settled it first).
pub async fn file(
    db: &impl GenericClient,
    partition_id: i64,
    group: &str,
    verdict: &HashAckVerdict,
    nacks: &[Nack<'_>],
) -> Result<Option<Filed>> {
    let (Some(off), Some(lease_id)) = (verdict.off, verdict.lease_id.as_deref()) else {
        return Err(Error::internal("dlq verdict without offset or lease"));
    };
    let Some(seg) = segment_at(db, partition_id, off).await? else {
        tracing::warn!(
            partition_id,
            off,
            "DLQ hand-off: the segment was retained away"
        );
        return Ok(None);
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
    };
    let verdict = store::dlq_head(db, &letter).await?;
    if !verdict.ok {
        // Someone else settled it first (a second call, or the lease moved on).
        tracing::debug!(partition_id, off, error = ?verdict.error, "DLQ hand-off not needed");
        return Ok(None);
    }
    Ok(Some(Filed {
        transaction_id: frame.transaction_id.to_string(),
        wake_queue: verdict.wake_queue,
    }))
}

/// The stored payload as JSON for the snapshot: `None` (JSON null) when empty; a payload that
/// is not JSON (never written by this broker) is kept as a JSON string rather than lost.
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

/// One page of dead letters (newest first) and the number of matching rows.
pub async fn list(state: &Engine, filter: &DlqFilter<'_>) -> Result<DlqPage> {
    let db = state.store.conn().await?;
    store::dlq_list(&db, filter).await
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
