//! Typed calls to the ack-path SQL functions of `sql/functions/{ack,dlq,lease}.sql`:
//! hash-resolved acks, the DLQ hand-off and listing, and lease renewal.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_postgres::types::{Json, ToSql};
use uuid::Uuid;

use crate::error::{Error, Result};

/// Calls a function that answers one `jsonb` value and decodes it as `T`.
async fn verdict<T: DeserializeOwned>(
    db: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<T> {
    let stmt = db.prepare_cached(sql).await?;
    let Json(value): Json<T> = db.query_one(&stmt, params).await?.try_get(0)?;
    Ok(value)
}

/// The verdict of `queen.log_ack_by_hash_v1` for one (partition, group, lease) group.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HashAckVerdict {
    pub ok: bool,
    /// Why the whole group was refused (`ok: false`).
    pub error: Option<String>,
    /// The new cursor, or the poison offset of a `dlq` verdict.
    pub off: Option<i64>,
    pub lease_released: bool,
    /// The broker must file the DLQ row for `off` under `worker` (the lease is still held).
    pub dlq: bool,
    /// The lease holder the DLQ hand-off must present.
    pub worker: Option<String>,
    /// Hex hashes of acknowledgements that landed at or below the cursor.
    pub noop_hashes: Vec<String>,
    /// Hex hashes of failed/retry/dlq signals at or below the cursor.
    pub stale_hashes: Vec<String>,
    /// Hex hashes found nowhere in the ackable span.
    pub unresolved_hashes: Vec<String>,
    /// Set when the lease was released with data pending: parked pops of it should look.
    pub wake_queue: Option<String>,
}

/// `queen.log_ack_by_hash_v1`: one transaction, one consumer-row lock. `fence`: hashes of
/// the request's signals for this (partition, group) in other groups.
pub async fn ack_by_hash(
    db: &impl GenericClient,
    partition_id: i64,
    group: &str,
    worker: &str,
    hashes: &[&[u8]],
    statuses: &[&str],
    fence: &[&[u8]],
) -> Result<HashAckVerdict> {
    verdict(
        db,
        "SELECT queen.log_ack_by_hash_v1($1, $2, $3, $4, $5, $6)",
        &[&partition_id, &group, &worker, &hashes, &statuses, &fence],
    )
    .await
}

/// What `queen.log_dlq_head_v1` needs to file one dead letter.
pub struct DeadLetter<'a> {
    pub partition_id: i64,
    pub group: &'a str,
    pub worker: &'a str,
    pub off: i64,
    pub message_id: Uuid,
    pub transaction_id: &'a str,
    /// The stored payload as JSON text (`None` stores JSON null).
    pub payload: Option<&'a RawValue>,
    pub error: &'a str,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DlqHeadVerdict {
    pub ok: bool,
    pub error: Option<String>,
    pub wake_queue: Option<String>,
}

/// `queen.log_dlq_head_v1`: files the row, moves the cursor past it, releases the lease.
pub async fn dlq_head(db: &impl GenericClient, letter: &DeadLetter<'_>) -> Result<DlqHeadVerdict> {
    verdict(
        db,
        "SELECT queen.log_dlq_head_v1($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &letter.partition_id,
            &letter.group,
            &letter.worker,
            &letter.off,
            &letter.message_id,
            &letter.transaction_id,
            &letter.payload.map(Json),
            &letter.error,
        ],
    )
    .await
}

/// The result of a lease renewal.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Renewal {
    pub renewed: i64,
    /// The earliest expiry among the renewed leases (ISO-8601, microseconds, Z).
    pub expires_at: Option<String>,
}

/// `queen.log_renew_lease_v1`: extends every live lease of `worker` to at least now + seconds.
pub async fn renew_lease(db: &impl GenericClient, worker: &str, seconds: i32) -> Result<Renewal> {
    verdict(
        db,
        "SELECT queen.log_renew_lease_v1($1, $2)",
        &[&worker, &seconds],
    )
    .await
}

/// Filters of a DLQ listing; `None` matches everything.
#[derive(Debug, Default)]
pub struct DlqFilter<'a> {
    pub queue: Option<&'a str>,
    pub group: Option<&'a str>,
    pub partition: Option<&'a str>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub limit: i32,
    pub offset: i32,
}

/// One dead letter as `queen.log_dlq_list_v1` renders it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqRow {
    pub id: String,
    pub partition_id: String,
    pub queue: Option<String>,
    pub partition: Option<String>,
    pub consumer_group: String,
    pub offset: i64,
    pub message_id: Option<String>,
    pub transaction_id: Option<String>,
    pub data: Option<Box<RawValue>>,
    pub error_message: Option<String>,
    pub retry_count: i64,
    pub failed_at: String,
}

#[derive(Debug, Deserialize)]
pub struct DlqPage {
    pub total: i64,
    pub rows: Vec<DlqRow>,
}

/// One page of dead letters, newest first, plus the number of matching rows.
pub async fn dlq_list(db: &impl GenericClient, f: &DlqFilter<'_>) -> Result<DlqPage> {
    let stmt = db
        .prepare_cached("SELECT queen.log_dlq_list_v1($1, $2, $3, $4, $5, $6, $7)::text")
        .await?;
    let row = db
        .query_one(
            &stmt,
            &[
                &f.queue,
                &f.group,
                &f.partition,
                &f.from,
                &f.to,
                &f.limit,
                &f.offset,
            ],
        )
        .await?;
    // Read as text: the payload copies are spliced into the answer without re-parsing.
    let text: String = row.try_get(0)?;
    serde_json::from_str(&text).map_err(|e| Error::internal(format!("log_dlq_list_v1 answer: {e}")))
}
