//! Typed calls of the push path: `queen.log_push_multi_v1` (one transaction for a bundle of
//! segments), the vouched bundle by partition ids (`sql/statements/push_vouched.sql`),
//! `queen.log_push_one_v1` by partition id (a lone segment) and `queen.log_segment_at_v1`
//! (the blob covering an offset); the dedup cache's sidecar read in [`dedup`].

pub mod dedup;

use bytes::Bytes;
use deadpool_postgres::GenericClient;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::store::buffers::Load;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Appends a bundle of segments in one transaction.
    PushMulti<'a> = log_push_multi_v1(
        p_queues: &'a [&'a str],
        p_partitions: &'a [&'a str],
        p_msg_counts: &'a [i32],
        p_hashes: &'a [&'a [u8]],
        p_verified: &'a [i64],
        p_blobs: &'a [&'a [u8]],
        p_encrypted: &'a [bool],
    );
    /// Appends one segment to a partition known by id.
    PushOne<'a> = log_push_one_v1(
        p_queue: &'a str,
        p_partition: &'a str,
        p_msg_count: i32,
        p_hashes: &'a [u8],
        p_verified: i64,
        p_blob: &'a [u8],
        p_pid: i64,
        p_window: Option<i32> = NULL,
        p_encrypted: bool,
    );
    /// The stored segment covering an offset.
    SegmentAt = log_segment_at_v1(p_pid: i64, p_off: i64) select "r_base, r_end, r_blob";
    /// Where the messages of a write in doubt may be stored.
    TxnOffsets<'a> = log_txn_offsets_v1(p_queue: &'a str, p_partition: &'a str, p_hashes: &'a [u8])
        select "r_idx, r_partition_id, r_off";
}

/// One segment of a bundle, borrowed from its builder.
pub struct SegmentWrite<'a> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub msg_count: i32,
    pub hashes: &'a [u8],
    /// Offsets up to which the caller vouches the hashes are absent; -1 = full-window probe.
    pub verified: i64,
    pub blob: &'a Bytes,
    /// What `blob` decompresses to, when the writer built it: the segment cache keeps it
    /// after the commit (accel/segment_cache.rs). The SQL never sees it.
    pub frames: Option<&'a Bytes>,
    /// Every payload of the segment is an encryption envelope (the SQL refuses a segment
    /// without this for a queue with `encryption_enabled`).
    pub encrypted: bool,
}

impl SegmentWrite<'_> {
    /// The payload bytes `writes` bind: what a connection's buffers keep after carrying them
    /// (store/buffers.rs).
    pub fn load(writes: &[SegmentWrite<'_>]) -> Load {
        Load::sent(writes.iter().map(|w| w.blob.len() + w.hashes.len()).sum())
    }
}

/// Per-segment result of `log_push_one_v1`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum SegmentResult {
    #[serde(rename_all = "camelCase")]
    Queued {
        partition_id: i64,
        base_offset: i64,
        /// ISO-8601 commit time (database clock, µs): the dedup cache's expiry clock.
        created_at: String,
    },
    #[serde(rename_all = "camelCase")]
    Duplicate {
        partition_id: i64,
        dups: Vec<DupFrame>,
    },
    /// The queue encrypts and the segment is plaintext: nothing written; seal and resend.
    #[serde(rename_all = "camelCase")]
    Encrypt { partition_id: i64 },
    /// The queue's `maxSize` leaves room for only the first `room` frames: nothing written.
    #[serde(rename_all = "camelCase")]
    Full {
        partition_id: i64,
        room: usize,
        max_size: i64,
    },
}

/// An incoming frame (`i`, its index in the segment) already stored at offset `off`.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct DupFrame {
    pub i: usize,
    pub off: i64,
}

/// Appends every segment in one transaction; results in input order.
pub async fn push_multi(
    db: &impl GenericClient,
    segs: &[SegmentWrite<'_>],
) -> Result<Vec<SegmentResult>> {
    let queues: Vec<&str> = segs.iter().map(|s| s.queue).collect();
    let partitions: Vec<&str> = segs.iter().map(|s| s.partition).collect();
    let counts: Vec<i32> = segs.iter().map(|s| s.msg_count).collect();
    let hashes: Vec<&[u8]> = segs.iter().map(|s| s.hashes).collect();
    let verified: Vec<i64> = segs.iter().map(|s| s.verified).collect();
    let blobs: Vec<&[u8]> = segs.iter().map(|s| &s.blob[..]).collect();
    let encrypted: Vec<bool> = segs.iter().map(|s| s.encrypted).collect();
    let call = PushMulti {
        p_queues: &queues,
        p_partitions: &partitions,
        p_msg_counts: &counts,
        p_hashes: &hashes,
        p_verified: &verified,
        p_blobs: &blobs,
        p_encrypted: &encrypted,
    };
    let stmt = crate::store::prepare(db, PushMulti::SQL).await?;
    let params = call.params();
    let row = crate::store::retry_conflicts(|| db.query_one(&stmt, &params)).await?;
    let results: serde_json::Value = row.try_get(0)?;
    let results: Vec<SegmentResult> = serde_json::from_value(results).map_err(|e| {
        Error::internal(format!(
            "log_push_multi_v1 answered an unexpected shape: {e}"
        ))
    })?;
    if results.len() != segs.len() {
        return Err(Error::internal(format!(
            "log_push_multi_v1 answered {} results for {} segments",
            results.len(),
            segs.len()
        )));
    }
    Ok(results)
}

/// The vouched bundle: one plain statement, no function (docs/engine.md §4.4).
const PUSH_VOUCHED: &str = include_str!("../../../sql/statements/push_vouched.sql");

/// Appends every segment, `segs[i]` to the partition known by id `pids[i]`, in one statement
/// that writes only if no segment needs what only [`push_multi`] does (a dedup probe, a cap,
/// sealing, provisioning; see the statement's header). `None`: one did, nothing was written.
pub async fn push_vouched(
    db: &impl GenericClient,
    segs: &[SegmentWrite<'_>],
    pids: &[i64],
) -> Result<Option<Vec<SegmentResult>>> {
    let counts: Vec<i32> = segs.iter().map(|s| s.msg_count).collect();
    let verified: Vec<i64> = segs.iter().map(|s| s.verified).collect();
    let sealed: Vec<bool> = segs.iter().map(|s| s.encrypted).collect();
    let hashes: Vec<&[u8]> = segs.iter().map(|s| s.hashes).collect();
    let blobs: Vec<&[u8]> = segs.iter().map(|s| &s.blob[..]).collect();
    let stmt = crate::store::prepare(db, PUSH_VOUCHED).await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
        [&pids, &counts, &verified, &sealed, &hashes, &blobs];
    let rows = db.query(&stmt, &params).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut results: Vec<Option<SegmentResult>> = vec![None; segs.len()];
    for row in rows {
        let ord: i64 = row.try_get(0)?;
        let slot = usize::try_from(ord - 1)
            .ok()
            .and_then(|i| results.get_mut(i))
            .ok_or_else(|| Error::internal(format!("push_vouched answered segment {ord}")))?;
        *slot = Some(SegmentResult::Queued {
            partition_id: row.try_get(1)?,
            base_offset: row.try_get(2)?,
            created_at: row.try_get(3)?,
        });
    }
    results
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .map(Some)
        .ok_or_else(|| Error::internal("push_vouched left a segment without a result"))
}

/// Appends `seg` to the partition known by id `pid` through `log_push_one_v1`, skipping the
/// provisioning and the bundle bookkeeping of [`push_multi`] (about half its PostgreSQL time
/// for a lone segment). `None`: `pid` no longer names the segment's (queue, partition);
/// nothing was written.
pub async fn push_one(
    db: &impl GenericClient,
    seg: &SegmentWrite<'_>,
    pid: i64,
) -> Result<Option<SegmentResult>> {
    let call = PushOne {
        p_queue: seg.queue,
        p_partition: seg.partition,
        p_msg_count: seg.msg_count,
        p_hashes: seg.hashes,
        p_verified: seg.verified,
        p_blob: &seg.blob[..],
        p_pid: pid,
        p_encrypted: seg.encrypted,
    };
    let stmt = crate::store::prepare(db, PushOne::SQL).await?;
    let params = call.params();
    let row = crate::store::retry_conflicts(|| db.query_one(&stmt, &params)).await?;
    let answer: serde_json::Value = row.try_get(0)?;
    if answer["status"] == "gone" {
        return Ok(None);
    }
    serde_json::from_value(answer)
        .map(Some)
        .map_err(|e| Error::internal(format!("log_push_one_v1 answered an unexpected shape: {e}")))
}

/// A stored segment: offsets `[base, end]` and its blob.
pub struct StoredSegment {
    pub base: i64,
    pub end: i64,
    pub blob: Vec<u8>,
}

/// The segment of partition `pid` covering offset `off`, if it is still stored.
pub async fn segment_at(
    db: &impl GenericClient,
    pid: i64,
    off: i64,
) -> Result<Option<StoredSegment>> {
    let row = SegmentAt {
        p_pid: pid,
        p_off: off,
    }
    .query_opt(db)
    .await?;
    row.map(|r| {
        Ok(StoredSegment {
            base: r.try_get(0)?,
            end: r.try_get(1)?,
            blob: r.try_get(2)?,
        })
    })
    .transpose()
}

/// Where the messages of a write whose commit was in doubt may be stored
/// (`queen.log_txn_offsets_v1`, sql/functions/spool.sql): for `hashes` (16 bytes per message),
/// every (message index, partition id, offset) of (`queue`, `partition`) holding an equal hash.
pub async fn txn_offsets(
    db: &impl GenericClient,
    queue: &str,
    partition: &str,
    hashes: &[u8],
) -> Result<Vec<(usize, i64, i64)>> {
    let rows = TxnOffsets {
        p_queue: queue,
        p_partition: partition,
        p_hashes: hashes,
    }
    .query(db)
    .await?;
    rows.iter()
        .map(|r| {
            let idx: i32 = r.try_get(0)?;
            let idx = usize::try_from(idx)
                .map_err(|_| Error::internal(format!("log_txn_offsets_v1 answered index {idx}")))?;
            Ok((idx, r.try_get(1)?, r.try_get(2)?))
        })
        .collect()
}
