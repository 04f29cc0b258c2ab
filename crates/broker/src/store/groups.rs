//! Typed calls of the consumer-group admin SQL (sql/functions/admin.sql): listings, lag, seeks,
//! deletes and the subscription update. Every answer is rows; the HTTP floor renders them.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use crate::error::Result;
use crate::store::{rows, Store};

/// One (group, queue) of the group listing.
#[derive(Debug, Clone)]
pub struct GroupQueueRow {
    pub group: String,
    pub queue: String,
    pub partitions: i64,
    pub pending: i64,
    pub active_leases: i64,
    pub time_lag_seconds: i64,
    pub subscription_mode: Option<String>,
    /// ISO-8601, milliseconds, Z.
    pub subscription_timestamp: Option<String>,
}

/// Every (group, queue) pair of `tenant`'s queues, by group then queue.
pub async fn groups(store: &Store, tenant: &str) -> Result<Vec<GroupQueueRow>> {
    let found = rows(store, "SELECT * FROM queen.admin_groups_v1($1)", &[&tenant]).await?;
    found
        .iter()
        .map(|r| {
            Ok(GroupQueueRow {
                group: r.try_get("consumer_group")?,
                queue: r.try_get("queue_name")?,
                partitions: r.try_get("partitions")?,
                pending: r.try_get("pending")?,
                active_leases: r.try_get("active_leases")?,
                time_lag_seconds: r.try_get("time_lag_seconds")?,
                subscription_mode: r.try_get("subscription_mode")?,
                subscription_timestamp: r.try_get("subscription_timestamp")?,
            })
        })
        .collect()
}

/// One partition of a group's detail.
#[derive(Debug, Clone)]
pub struct GroupPartitionRow {
    pub queue: String,
    pub conflation: bool,
    pub subscription_mode: Option<String>,
    pub subscription_timestamp: Option<String>,
    pub partition: String,
    pub partition_id: String,
    /// The lease held on the partition (`worker_id` in SQL).
    pub lease_id: Option<String>,
    pub last_consumed_at: Option<String>,
    pub total_consumed: i64,
    pub offset_lag: i64,
    pub time_lag_seconds: i64,
    pub lease_active: bool,
}

/// Every partition of every queue of `tenant` that `group` is on, by queue then partition
/// (empty: on none).
pub async fn group(store: &Store, group: &str, tenant: &str) -> Result<Vec<GroupPartitionRow>> {
    let found = rows(
        store,
        "SELECT * FROM queen.admin_group_v1($1, $2)",
        &[&group, &tenant],
    )
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(GroupPartitionRow {
                queue: r.try_get("queue_name")?,
                conflation: r.try_get("conflation")?,
                subscription_mode: r.try_get("subscription_mode")?,
                subscription_timestamp: r.try_get("subscription_timestamp")?,
                partition: r.try_get("partition_name")?,
                partition_id: r.try_get("partition_id")?,
                lease_id: r.try_get("worker_id")?,
                last_consumed_at: r.try_get("last_consumed_at")?,
                total_consumed: r.try_get("total_consumed")?,
                offset_lag: r.try_get("offset_lag")?,
                time_lag_seconds: r.try_get("time_lag_seconds")?,
                lease_active: r.try_get("lease_active")?,
            })
        })
        .collect()
}

/// One lagging partition of one group.
#[derive(Debug, Clone)]
pub struct LaggingRow {
    pub group: String,
    pub queue: String,
    pub partition: String,
    pub partition_id: String,
    /// The lease held on the partition (`worker_id` in SQL).
    pub lease_id: Option<String>,
    pub offset_lag: i64,
    pub time_lag_seconds: i64,
    pub oldest_unconsumed_at: Option<String>,
    pub last_consumed_at: Option<String>,
}

/// Partitions of `tenant`'s queues whose oldest unconsumed message is at least
/// `min_lag_seconds` old, most lagging first.
pub async fn lagging(store: &Store, min_lag_seconds: i64, tenant: &str) -> Result<Vec<LaggingRow>> {
    let found = rows(
        store,
        "SELECT * FROM queen.admin_lagging_v1($1, $2)",
        &[&min_lag_seconds, &tenant],
    )
    .await?;
    found
        .iter()
        .map(|r| {
            Ok(LaggingRow {
                group: r.try_get("consumer_group")?,
                queue: r.try_get("queue_name")?,
                partition: r.try_get("partition_name")?,
                partition_id: r.try_get("partition_id")?,
                lease_id: r.try_get("worker_id")?,
                offset_lag: r.try_get("offset_lag")?,
                time_lag_seconds: r.try_get("time_lag_seconds")?,
                oldest_unconsumed_at: r.try_get("oldest_unconsumed_at")?,
                last_consumed_at: r.try_get("last_consumed_at")?,
            })
        })
        .collect()
}

/// What a seek did: nothing matched (`found: false`), or how many cursors moved and whether
/// anything became pending again.
#[derive(Debug, Clone, Copy)]
pub struct SeekVerdict {
    pub found: bool,
    pub partitions_updated: i32,
    pub rewound: bool,
}

pub async fn seek(
    store: &Store,
    group: &str,
    queue: &str,
    partition: Option<&str>,
    to_end: bool,
    timestamp: Option<DateTime<Utc>>,
) -> Result<SeekVerdict> {
    let r = one(
        store,
        "SELECT * FROM queen.admin_seek_v1($1, $2, $3, $4, $5)",
        &[&group, &queue, &partition, &to_end, &timestamp],
    )
    .await?;
    Ok(SeekVerdict {
        found: r.try_get("r_found")?,
        partitions_updated: r.try_get("r_partitions_updated")?,
        rewound: r.try_get("r_rewound")?,
    })
}

/// What a group delete did: an unknown queue (`found: false`), or the cursors deleted and the
/// queues the group was on.
#[derive(Debug, Clone)]
pub struct DeleteVerdict {
    pub found: bool,
    pub deleted_partitions: i32,
    pub queues: Vec<String>,
}

pub async fn delete_group(
    store: &Store,
    group: &str,
    queue: Option<&str>,
    delete_metadata: bool,
    tenant: &str,
) -> Result<DeleteVerdict> {
    let r = one(
        store,
        "SELECT * FROM queen.admin_delete_group_v1($1, $2, $3, $4)",
        &[&group, &queue, &delete_metadata, &tenant],
    )
    .await?;
    Ok(DeleteVerdict {
        found: r.try_get("r_found")?,
        deleted_partitions: r.try_get("r_deleted_partitions")?,
        queues: r.try_get("r_queues")?,
    })
}

/// The one row a function with OUT parameters answers.
async fn one(
    store: &Store,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Row> {
    let conn = store.conn().await?;
    let stmt = crate::store::prepare(&conn, sql).await?;
    Ok(conn.query_one(&stmt, params).await?)
}

/// Registrations updated.
pub async fn set_subscription(
    store: &Store,
    group: &str,
    timestamp: DateTime<Utc>,
    tenant: &str,
) -> Result<i32> {
    let conn = store.conn().await?;
    let stmt =
        crate::store::prepare(&conn, "SELECT queen.admin_set_subscription_v1($1, $2, $3)").await?;
    Ok(conn
        .query_one(&stmt, &[&group, &timestamp, &tenant])
        .await?
        .get(0))
}
