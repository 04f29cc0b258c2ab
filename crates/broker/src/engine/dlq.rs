//! Dead letters: the hand-off after an ack verdict asked for one (read the covering segment,
//! extract the poison frame, file it with `queen.log_dlq_head_v1`), and the listing behind
//! `GET /api/v1/dlq`. Only the broker can decompress a segment, which is why SQL keeps the
//! lease and leaves the filing to this module.

use deadpool_postgres::GenericClient;
use queen_proto::frame::Frames;
use queen_proto::segment;
use serde_json::value::RawValue;

use crate::engine::ack::{failure_text, Ack, AckOutcome};
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::store::ack::{self as store, DeadLetter, DlqFilter, DlqPage, HashAckVerdict};
use crate::store::push::segment_at;

/// The reason filed when no nack of the group carried one.
pub const DEFAULT_REASON: &str = "Retries exhausted";

/// Upper bound on a segment's decompressed size (a `bytea` holds at most 1 GB anyway).
const MAX_SEGMENT_BYTES: usize = 1 << 30;

/// Files the dead letter `verdict` (`dlq: true`) asks for and, when it was filed, marks the
/// group's outcomes: every item saw its lease released, and the items carrying the poison
/// message's transactionId were dead-lettered.
///
/// Failures are not returned: the ack itself has already committed, and a hand-off that did
/// not happen leaves the lease to expire, so the message redelivers with its retry budget
/// still spent and the next failed ack files it again. Redelivery over loss. They are logged,
/// and the group's signal items (whose verdict was this dead letter) are answered as refused
/// with the cause: `success:true` would claim a verdict that did not take effect.
pub async fn hand_off(
    state: &AppState,
    db: &impl GenericClient,
    partition_id: i64,
    group: &str,
    verdict: &HashAckVerdict,
    acks: &[&Ack],
    outcomes: &mut [AckOutcome],
) {
    match file(db, partition_id, group, verdict, acks).await {
        Ok(Some(filed)) => {
            for (ack, outcome) in acks.iter().zip(outcomes.iter_mut()) {
                outcome.lease_released = true;
                outcome.dlq = ack.transaction_id == filed.transaction_id;
            }
            if let Some(queue) = &filed.wake_queue {
                state.wake.wake_queue(queue);
            }
        }
        Ok(None) => {}
        Err(e) => {
            let cause = failure_text(&e);
            tracing::warn!(
                partition_id, group, off = verdict.off, error = %cause,
                "DLQ hand-off failed; the lease will expire and the message redeliver"
            );
            let refusal = format!(
                "dead-letter hand-off failed ({cause}); the message redelivers when its lease expires"
            );
            for (ack, outcome) in acks.iter().zip(outcomes.iter_mut()) {
                if ack.status.is_signal() {
                    *outcome = AckOutcome::refused(refusal.clone());
                }
            }
        }
    }
}

/// What a successful hand-off filed.
struct Filed {
    transaction_id: String,
    wake_queue: Option<String>,
}

async fn file(
    db: &impl GenericClient,
    partition_id: i64,
    group: &str,
    verdict: &HashAckVerdict,
    acks: &[&Ack],
) -> Result<Option<Filed>> {
    let (Some(off), Some(worker)) = (verdict.off, verdict.worker.as_deref()) else {
        return Err(Error::internal("dlq verdict without offset or worker"));
    };
    let Some(seg) = segment_at(db, partition_id, off).await? else {
        tracing::warn!(
            partition_id,
            off,
            "DLQ hand-off: the segment was retained away"
        );
        return Ok(None);
    };
    let frames = segment::decompress(&seg.blob, MAX_SEGMENT_BYTES)
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
        worker,
        off,
        message_id: frame.message_uuid(),
        transaction_id: frame.transaction_id,
        payload: payload.as_deref(),
        error: reason(frame.transaction_id, acks),
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
fn reason<'a>(poison_txn: &str, acks: &[&'a Ack]) -> &'a str {
    let nack_error = |a: &&'a Ack| {
        a.status
            .is_signal()
            .then_some(a.error.as_deref())
            .flatten()
            .filter(|e| !e.is_empty())
    };
    acks.iter()
        .filter(|a| a.transaction_id == poison_txn)
        .find_map(nack_error)
        .or_else(|| acks.iter().find_map(nack_error))
        .unwrap_or(DEFAULT_REASON)
}

/// One page of dead letters (newest first) and the number of matching rows.
pub async fn list(state: &AppState, filter: &DlqFilter<'_>) -> Result<DlqPage> {
    let db = state.store.conn().await?;
    store::dlq_list(&db, filter).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ack::AckStatus;

    fn ack(txn: &str, status: AckStatus, error: Option<&str>) -> Ack {
        Ack {
            transaction_id: txn.into(),
            partition_id: 1,
            status,
            error: error.map(str::to_string),
            group: "g".into(),
            lease_id: "w".into(),
        }
    }

    #[test]
    fn reason_prefers_the_poison_nack_then_the_first_nack() {
        let acks = [
            ack("a", AckStatus::Completed, Some("not a nack")),
            ack("b", AckStatus::Failed, Some("first")),
            ack("c", AckStatus::Failed, Some("poison")),
            ack("d", AckStatus::Failed, None),
        ];
        let refs: Vec<&Ack> = acks.iter().collect();
        assert_eq!(reason("c", &refs), "poison");
        assert_eq!(reason("d", &refs), "first");
        assert_eq!(reason("a", &refs), "first");
        assert_eq!(reason("x", &refs[..1]), DEFAULT_REASON);
    }

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
