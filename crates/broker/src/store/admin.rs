//! Typed calls to the admin SQL functions of `sql/functions/admin.sql`: consumer-group listings,
//! seeks and deletes, resource counts, message detail and traces. Listings come back as the
//! JSON PostgreSQL built; `None` means the named thing does not exist.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::error::Result;
use crate::store::Store;

/// Runs a one-row, one-column JSON query; `None` when the value is SQL NULL.
async fn json_row(
    store: &Store,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Value>> {
    let conn = store.conn().await?;
    let stmt = conn.prepare_cached(sql).await?;
    let row = conn.query_one(&stmt, params).await?;
    Ok(row.get::<_, Option<Value>>(0))
}

/// Same, for functions that never return NULL.
async fn json_value(store: &Store, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Value> {
    Ok(json_row(store, sql, params).await?.unwrap_or(Value::Null))
}

pub async fn groups(store: &Store) -> Result<Value> {
    json_value(store, "SELECT queen.admin_groups_v1()", &[]).await
}

pub async fn group(store: &Store, group: &str) -> Result<Option<Value>> {
    json_row(store, "SELECT queen.admin_group_v1($1)", &[&group]).await
}

pub async fn lagging(store: &Store, min_lag_seconds: i64) -> Result<Value> {
    json_value(
        store,
        "SELECT queen.admin_lagging_v1($1)",
        &[&min_lag_seconds],
    )
    .await
}

/// `{"found":false}` or `{"found":true,"partitionsUpdated":n,"rewound":b}`.
pub async fn seek(
    store: &Store,
    group: &str,
    queue: &str,
    partition: Option<&str>,
    to_end: bool,
    timestamp: Option<DateTime<Utc>>,
) -> Result<Value> {
    json_value(
        store,
        "SELECT queen.admin_seek_v1($1, $2, $3, $4, $5)",
        &[&group, &queue, &partition, &to_end, &timestamp],
    )
    .await
}

/// `{"found":false}` (unknown queue) or `{"found":true,"deletedPartitions":n,"queues":[…]}`.
pub async fn delete_group(
    store: &Store,
    group: &str,
    queue: Option<&str>,
    delete_metadata: bool,
) -> Result<Value> {
    json_value(
        store,
        "SELECT queen.admin_delete_group_v1($1, $2, $3)",
        &[&group, &queue, &delete_metadata],
    )
    .await
}

/// Registrations updated.
pub async fn set_subscription(store: &Store, group: &str, timestamp: DateTime<Utc>) -> Result<i32> {
    let conn = store.conn().await?;
    let stmt = conn
        .prepare_cached("SELECT queen.admin_set_subscription_v1($1, $2)")
        .await?;
    Ok(conn.query_one(&stmt, &[&group, &timestamp]).await?.get(0))
}

pub async fn queues(store: &Store) -> Result<Value> {
    json_value(store, "SELECT queen.admin_queues_v1()", &[]).await
}

pub async fn queue(store: &Store, queue: &str) -> Result<Option<Value>> {
    json_row(store, "SELECT queen.admin_queue_v1($1)", &[&queue]).await
}

pub async fn queue_depth(store: &Store, queue: &str, group: &str) -> Result<Option<Value>> {
    json_row(
        store,
        "SELECT queen.admin_queue_depth_v1($1, $2)",
        &[&queue, &group],
    )
    .await
}

pub async fn overview(store: &Store) -> Result<Value> {
    json_value(store, "SELECT queen.admin_overview_v1()", &[]).await
}

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

/// One trace event as the consume loop reports it.
pub struct TraceRow<'a> {
    pub id: Uuid,
    pub partition_id: i64,
    pub transaction_id: &'a str,
    pub consumer_group: &'a str,
    pub event_type: &'a str,
    pub trace_names: Option<Vec<String>>,
    pub data: Value,
}

pub async fn insert_trace(store: &Store, t: &TraceRow<'_>) -> Result<Uuid> {
    let conn = store.conn().await?;
    let stmt = conn
        .prepare_cached("SELECT queen.admin_trace_v1($1, $2, $3, $4, $5, $6, $7)")
        .await?;
    let row = conn
        .query_one(
            &stmt,
            &[
                &t.id,
                &t.partition_id,
                &t.transaction_id,
                &t.consumer_group,
                &t.event_type,
                &t.trace_names,
                &t.data,
            ],
        )
        .await?;
    Ok(row.get(0))
}
