//! Typed calls of the message-detail SQL (sql/006_admin.sql): the covering segment and state of
//! one message, and the segments whose hash-sidecar rows were purged.

use serde_json::Value;

use crate::error::Result;
use crate::store::Store;

/// A message's covering segment and its state (partition, queue, groups, status).
pub struct MessageRow {
    pub offset: i64,
    pub base: i64,
    pub blob: Vec<u8>,
    pub state: Value,
}

/// The message at `offset`, or (with `offset` None) at the newest occurrence of `hash` in the
/// partition's hash sidecar. `None`: unknown, or its segment was retained away.
pub async fn message(
    store: &Store,
    pid: i64,
    hash: &[u8; 16],
    offset: Option<i64>,
) -> Result<Option<MessageRow>> {
    let conn = store.conn().await?;
    let stmt = conn
        .prepare_cached(
            "SELECT r_offset, r_base, r_blob, r_state FROM queen.admin_message_v1($1, $2, $3)",
        )
        .await?;
    let row = conn
        .query_opt(&stmt, &[&pid, &hash.as_slice(), &offset])
        .await?;
    Ok(row.map(|r| MessageRow {
        offset: r.get(0),
        base: r.get(1),
        blob: r.get(2),
        state: r.get(3),
    }))
}

/// A segment whose hash-sidecar row was purged.
pub struct UnindexedSegment {
    pub base: i64,
    pub blob: Vec<u8>,
}

/// Up to `limit` segments of the partition below its sidecar purge watermark, newest first.
pub async fn unindexed_segments(
    store: &Store,
    pid: i64,
    limit: i32,
) -> Result<Vec<UnindexedSegment>> {
    let conn = store.conn().await?;
    let stmt = conn
        .prepare_cached("SELECT r_base, r_blob FROM queen.admin_message_unindexed_v1($1, $2)")
        .await?;
    let rows = conn.query(&stmt, &[&pid, &limit]).await?;
    Ok(rows
        .into_iter()
        .map(|r| UnindexedSegment {
            base: r.get(0),
            blob: r.get(1),
        })
        .collect())
}
