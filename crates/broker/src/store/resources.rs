//! Typed calls of the resource SQL (sql/006_admin.sql): queue listings, one queue, its depth,
//! and the overview, all computed live from watermarks.

use serde_json::Value;

use crate::error::Result;
use crate::store::{json_row, json_value, Store};

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
