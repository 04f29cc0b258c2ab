//! Message detail (docs/wire.md §13).
//!
//! Detail resolves a transactionId to an offset through the hash sidecar (the broker hashes,
//! SQL compares bytes), reads the covering segment and decodes that one frame here, because
//! PostgreSQL never looks inside a blob. When the sidecar rows were purged, a bounded
//! newest-first scan of the unindexed segments takes over. The message's state (status,
//! consumerGroups[], DLQ) comes from SQL; this module adds the frame's own fields, and
//! `http/messages.rs` renders the whole.

use crate::engine::tenant::{self, Tenant};
use serde_json::Value;
use uuid::Uuid;

use queen_proto::frame;
use queen_proto::{segment, txn_hash, PartitionId};

use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::messages::{self as store, MessageRow};

pub use crate::store::messages::{GroupState, MessageState};

/// How many unindexed segments the fallback scan reads before answering 404.
const UNINDEXED_SCAN_SEGMENTS: i32 = 32;

/// `GET /api/v1/messages/:partitionId/:transactionId`.
/// 404 unless the partition is `tenant`'s, exactly as for a message that does not exist. SQL
/// checks the partition's tenant before it locates anything, so no segment of another tenant
/// is read, decompressed or opened here.
pub async fn detail(
    st: &Shared,
    partition_id: &str,
    transaction_id: &str,
    tenant: &Tenant,
) -> Result<MessageDetail> {
    let mut found = locate(st, partition_id, transaction_id, tenant).await?;
    let state = &mut found.state;
    for name in [&mut state.queue, &mut state.namespace, &mut state.task] {
        *name = tenant::local(name).to_string();
    }
    Ok(found)
}

/// The message at an address on one of `tenant`'s partitions.
async fn locate(
    st: &Shared,
    partition_id: &str,
    transaction_id: &str,
    tenant: &Tenant,
) -> Result<MessageDetail> {
    let pid = PartitionId::parse(partition_id)
        .map_err(|_| message_not_found())?
        .get();
    let hash = txn_hash(transaction_id);
    let owner = tenant.id();
    if let Some(row) = store::message(&st.store, pid, &hash, None, owner).await? {
        if let Some(detail) = decode(st, row, transaction_id)? {
            return Ok(detail);
        }
    }
    // The sidecar does not know it (purged, or a hash collision): scan older segments.
    let Some(offset) = scan_unindexed(st, pid, transaction_id, owner).await? else {
        return Err(message_not_found());
    };
    let row = store::message(&st.store, pid, &hash, Some(offset), owner)
        .await?
        .ok_or_else(message_not_found)?;
    decode(st, row, transaction_id)?.ok_or_else(message_not_found)
}

/// The newest offset holding `transaction_id` among the partition's unindexed segments.
async fn scan_unindexed(
    st: &Shared,
    pid: i64,
    transaction_id: &str,
    tenant: &str,
) -> Result<Option<i64>> {
    let segments = store::unindexed_segments(&st.store, pid, UNINDEXED_SCAN_SEGMENTS, tenant);
    for seg in segments.await? {
        let raw = decompress(&seg.blob, seg.base)?;
        let frames = frame::decode_all(&raw).map_err(|e| corrupt(seg.base, e))?;
        if let Some(idx) = frames
            .iter()
            .rposition(|f| f.transaction_id == transaction_id)
        {
            return Ok(Some(seg.base + idx as i64));
        }
    }
    Ok(None)
}

/// One message: its frame's own fields and what the database knows of it.
pub struct MessageDetail {
    pub id: Uuid,
    pub transaction_id: String,
    /// The stored payload as JSON (the plaintext of an encrypted one; null when that cannot
    /// be opened).
    pub payload: Value,
    /// Why an encrypted payload could not be opened (another key, a corrupt envelope).
    pub payload_error: Option<String>,
    pub trace_id: Option<Uuid>,
    pub producer_sub: Option<String>,
    pub is_encrypted: bool,
    pub offset: i64,
    pub state: MessageState,
}

/// The frame at the row's offset with the row's state; `None` when that frame carries another
/// transactionId (a hash collision).
fn decode(st: &Shared, row: MessageRow, transaction_id: &str) -> Result<Option<MessageDetail>> {
    let raw = decompress(&row.blob, row.base)?;
    let frames = frame::decode_all(&raw).map_err(|e| corrupt(row.base, e))?;
    let frame = usize::try_from(row.offset - row.base)
        .ok()
        .and_then(|i| frames.get(i))
        .ok_or_else(|| {
            Error::internal(format!(
                "segment at {} has no frame for offset {}",
                row.base, row.offset
            ))
        })?;
    if frame.transaction_id != transaction_id {
        return Ok(None);
    }
    let (payload, payload_error) = if frame.is_encrypted() {
        match st.encryption.open(frame.payload) {
            Ok(plain) => (payload_value(&plain), None),
            Err(e) => (Value::Null, Some(e)),
        }
    } else {
        (payload_value(frame.payload), None)
    };
    Ok(Some(MessageDetail {
        id: frame.message_uuid(),
        transaction_id: frame.transaction_id.to_string(),
        payload,
        payload_error,
        trace_id: frame.trace_uuid(),
        producer_sub: frame.producer_sub.map(str::to_string),
        is_encrypted: frame.is_encrypted(),
        offset: row.offset,
        state: row.state,
    }))
}

/// A payload as JSON (an empty payload is `null`). Stored payloads are the client's JSON
/// verbatim; anything else is shown as text rather than failing the whole detail.
fn payload_value(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(bytes).into_owned()))
}

fn decompress(blob: &[u8], base: i64) -> Result<Vec<u8>> {
    segment::decompress(blob, segment::MAX_SEGMENT_BYTES).map_err(|e| corrupt(base, e))
}

fn corrupt(base: i64, e: impl std::fmt::Display) -> Error {
    Error::internal(format!(
        "stored segment at offset {base} is unreadable: {e}"
    ))
}

fn message_not_found() -> Error {
    Error::NotFound("Message not found".into())
}
