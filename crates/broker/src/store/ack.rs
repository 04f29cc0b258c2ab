//! The typed calls of the ack path (sql/functions/ack.sql): `queen.log_ack_by_hash_v1`, one
//! (partition, group, lease) group of acknowledgements resolved by transactionId hash in one
//! transaction, and the cover form of the positional procedures the ack registry's fast path
//! uses, `log_ack_at_v1` for one batch and `log_ack_multi_v1` for a fused flush of many.

use deadpool_postgres::GenericClient;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// One (partition, group, lease) group of acknowledgements resolved by hash.
    AckByHash<'a> = log_ack_by_hash_v1(
        p_partition_id: i64,
        p_group: &'a str,
        p_worker: &'a str,
        p_hashes: &'a [&'a [u8]],
        p_statuses: &'a [&'a str],
        p_fence: &'a [&'a [u8]],
        p_tenant: &'a str,
        p_span_offs: Option<&'a [i64]>,
        p_span_hashes: Option<&'a [&'a [u8]]>,
    );
    /// The stored segments overlapping a purged span.
    SpanSegments = log_ack_span_segments_v1(p_pid: i64, p_from: i64, p_to: i64)
        select "r_base, r_end, r_blob";
    /// One positional cover.
    AckCover<'a> = log_ack_at_v1(
        p_partition_id: i64,
        p_group: &'a str,
        p_worker: &'a str,
        p_upto: i64,
        p_ok: bool = true,
        p_acked_count: i32,
        p_cover: bool = true,
    );
    /// Many positional covers, one transaction.
    AckMultiCover<'a> = log_ack_multi_v1(
        p_pids: &'a [i64],
        p_groups: &'a [&'a str],
        p_ends: &'a [i64],
        p_workers: &'a [&'a str],
        p_counts: &'a [i32],
        p_cover: bool = true,
    );
}

/// The verdict of `queen.log_ack_by_hash_v1` for one (partition, group, lease) group. A
/// positional cover's verdict has the same keys (its lists are always empty).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AckVerdict {
    pub ok: bool,
    /// Why the whole group was refused (`ok: false`).
    pub error: Option<String>,
    /// The new cursor, or the poison offset of a `dlq` verdict.
    pub off: Option<i64>,
    pub lease_released: bool,
    /// The broker must file the DLQ row for `off` under `lease_id` (the lease is still held).
    pub dlq: bool,
    /// The lease holder the DLQ hand-off must present.
    #[serde(rename = "worker")]
    pub lease_id: Option<String>,
    /// Hex hashes of acknowledgements that landed at or below the cursor.
    pub noop_hashes: Vec<String>,
    /// Hex hashes of failed/retry/dlq signals at or below the cursor.
    pub stale_hashes: Vec<String>,
    /// Hex hashes found nowhere in the ackable span.
    pub unresolved_hashes: Vec<String>,
    /// Set when the lease was released with data pending: parked pops of it should look.
    pub wake_queue: Option<String>,
    /// Milliseconds until the batch may be redelivered (the queue's retryDelay after a
    /// failed/retry signal): the wake is due then, not now. 0: now.
    pub wake_after_ms: u64,
    /// With `ok: false`: the leased batch's offsets whose hash rows were purged; resolve
    /// them by position (`engine/ack/span.rs`) and call again with the span.
    pub purged_span: Option<PurgedSpan>,
}

/// Inclusive offsets of a leased batch that no hash-sidecar row covers any more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct PurgedSpan {
    pub from: i64,
    pub to: i64,
}

/// A leased batch's (offset, transactionId hash) pairs, read from its stored segments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Span {
    pub offsets: Vec<i64>,
    pub hashes: Vec<[u8; 16]>,
}

/// One (partition, group, lease) group of acknowledgements, as `log_ack_by_hash_v1` takes it.
pub struct HashAck<'a> {
    pub partition_id: i64,
    pub group: &'a str,
    pub lease_id: &'a str,
    pub hashes: &'a [&'a [u8]],
    pub statuses: &'a [&'a str],
    /// Hashes of the request's signals for this (partition, group) in other groups.
    pub fence: &'a [&'a [u8]],
    /// The caller's tenant: a partition of another tenant answers "consumer not found".
    pub tenant: &'a str,
    /// The leased batch's purged part resolved by position; `None` until the verdict asked.
    pub span: Option<&'a Span>,
}

/// `queen.log_ack_by_hash_v1`: one transaction, one consumer-row lock.
pub async fn ack_by_hash(db: &impl GenericClient, a: &HashAck<'_>) -> Result<AckVerdict> {
    let offsets = a.span.map(|s| s.offsets.as_slice());
    let hashes: Option<Vec<&[u8]>> = a
        .span
        .map(|s| s.hashes.iter().map(|h| h.as_slice()).collect());
    AckByHash {
        p_partition_id: a.partition_id,
        p_group: a.group,
        p_worker: a.lease_id,
        p_hashes: a.hashes,
        p_statuses: a.statuses,
        p_fence: a.fence,
        p_tenant: a.tenant,
        p_span_offs: offsets,
        p_span_hashes: hashes.as_deref(),
    }
    .json(db)
    .await
}

/// One stored segment of a purged span: its offsets `[base, end]` and its blob.
pub struct SpanSegment {
    pub base: i64,
    pub end: i64,
    pub blob: Vec<u8>,
}

/// `queen.log_ack_span_segments_v1`: the stored segments overlapping `span`, ascending.
pub async fn span_segments(
    db: &impl GenericClient,
    partition_id: i64,
    span: PurgedSpan,
) -> Result<Vec<SpanSegment>> {
    let call = SpanSegments {
        p_pid: partition_id,
        p_from: span.from,
        p_to: span.to,
    };
    let rows = db.query(SpanSegments::SQL, &call.params()).await?;
    rows.iter()
        .map(|r| {
            Ok(SpanSegment {
                base: r.try_get(0)?,
                end: r.try_get(1)?,
                blob: r.try_get(2)?,
            })
        })
        .collect()
}

/// One positional cover: the batch ending at `batch_end`, `frames` frames, acked `completed`
/// in full under `lease_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoverRow<'a> {
    pub partition_id: i64,
    pub group: &'a str,
    pub lease_id: &'a str,
    pub batch_end: i64,
    pub frames: i32,
}

/// `queen.log_ack_at_v1` in its cover form: one transaction, one consumer-row lock, no hash
/// resolution. `ok: false` when PostgreSQL refuses the cover (the lease or the batch changed).
pub async fn ack_cover(db: &impl GenericClient, row: &CoverRow<'_>) -> Result<AckVerdict> {
    AckCover {
        p_partition_id: row.partition_id,
        p_group: row.group,
        p_worker: row.lease_id,
        p_upto: row.batch_end,
        p_acked_count: row.frames,
    }
    .json(db)
    .await
}

/// The answer of `queen.log_ack_multi_v1`: one verdict per row, in input order.
#[derive(Debug, Deserialize)]
struct MultiVerdict {
    results: Vec<AckVerdict>,
}

/// `queen.log_ack_multi_v1` in its cover form: every row in one transaction, consumer rows
/// locked in (partition, group) order; one verdict per row, in `rows` order.
pub async fn ack_multi_cover(
    db: &impl GenericClient,
    rows: &[CoverRow<'_>],
) -> Result<Vec<AckVerdict>> {
    let pids: Vec<i64> = rows.iter().map(|r| r.partition_id).collect();
    let groups: Vec<&str> = rows.iter().map(|r| r.group).collect();
    let ends: Vec<i64> = rows.iter().map(|r| r.batch_end).collect();
    let workers: Vec<&str> = rows.iter().map(|r| r.lease_id).collect();
    let counts: Vec<i32> = rows.iter().map(|r| r.frames).collect();
    let verdict: MultiVerdict = AckMultiCover {
        p_pids: &pids,
        p_groups: &groups,
        p_ends: &ends,
        p_workers: &workers,
        p_counts: &counts,
    }
    .json(db)
    .await?;
    if verdict.results.len() != rows.len() {
        return Err(Error::internal(format!(
            "log_ack_multi_v1 answered {} verdicts for {} rows",
            verdict.results.len(),
            rows.len()
        )));
    }
    Ok(verdict.results)
}
