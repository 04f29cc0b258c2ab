//! Typed calls of the dead-letter SQL (sql/functions/dlq.sql): `queen.log_dlq_head_v1` files one dead
//! letter (the hand-off after a `dlq` ack verdict) and `queen.log_dlq_list_v1` lists them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::store::json_verdict;

/// What `queen.log_dlq_head_v1` needs to file one dead letter.
pub struct DeadLetter<'a> {
    pub partition_id: i64,
    pub group: &'a str,
    pub lease_id: &'a str,
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
    json_verdict(
        db,
        "SELECT queen.log_dlq_head_v1($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &letter.partition_id,
            &letter.group,
            &letter.lease_id,
            &letter.off,
            &letter.message_id,
            &letter.transaction_id,
            &letter.payload.map(Json),
            &letter.error,
        ],
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
