//! Typed calls of the consumer-group admin SQL (sql/006_admin.sql): listings, lag, seeks,
//! deletes and the subscription update.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::error::Result;
use crate::store::{json_row, json_value, Store};

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
