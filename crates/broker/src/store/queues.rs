//! Typed calls for queue rows: `queen.configure_queue_v1` (create / merge / reset / replace)
//! and `queen.delete_queue_v1`.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Creates or reconfigures a queue; answers its row.
    Configure<'a> = configure_queue_v1(
        p_queue: &'a str,
        p_opts: &'a serde_json::Value,
        p_replace: bool,
    ) select "*";
    /// Deletes a queue and everything it owns.
    DeleteQueue<'a> = delete_queue_v1(p_queue: &'a str);
}

/// A `queen.queues` row: identity and every option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    pub id: i64,
    pub name: String,
    pub namespace: String,
    pub task: String,
    pub priority: i32,
    pub lease_time: i32,
    pub retry_limit: i32,
    pub retry_delay: i32,
    pub ttl: i32,
    pub max_queue_size: i32,
    pub dead_letter_queue: bool,
    pub dlq_after_max_retries: bool,
    pub delayed_processing: i32,
    pub window_buffer: i32,
    pub retention_enabled: bool,
    pub retention_seconds: i32,
    pub completed_retention_seconds: i32,
    pub max_wait_time_seconds: i32,
    pub encryption_enabled: bool,
    pub min_pop_wait_time: i32,
    pub dedup_window_seconds: i32,
}

impl QueueRow {
    /// Reads a row that has the `queen.queues` columns (by name, so column order is free).
    pub fn from_row(r: &Row) -> Result<Self> {
        Ok(QueueRow {
            id: r.try_get("id")?,
            name: r.try_get("name")?,
            namespace: r.try_get("namespace")?,
            task: r.try_get("task")?,
            priority: r.try_get("priority")?,
            lease_time: r.try_get("lease_time")?,
            retry_limit: r.try_get("retry_limit")?,
            retry_delay: r.try_get("retry_delay")?,
            ttl: r.try_get("ttl")?,
            max_queue_size: r.try_get("max_queue_size")?,
            dead_letter_queue: r.try_get("dead_letter_queue")?,
            dlq_after_max_retries: r.try_get("dlq_after_max_retries")?,
            delayed_processing: r.try_get("delayed_processing")?,
            window_buffer: r.try_get("window_buffer")?,
            retention_enabled: r.try_get("retention_enabled")?,
            retention_seconds: r.try_get("retention_seconds")?,
            completed_retention_seconds: r.try_get("completed_retention_seconds")?,
            max_wait_time_seconds: r.try_get("max_wait_time_seconds")?,
            encryption_enabled: r.try_get("encryption_enabled")?,
            min_pop_wait_time: r.try_get("min_pop_wait_time")?,
            dedup_window_seconds: r.try_get("dedup_window_seconds")?,
        })
    }
}

/// Creates or reconfigures `queue`. `options` is keyed by column name (see
/// `configure_queue_v1`): a value sets, a JSON null resets to the default, absence keeps.
pub async fn configure(
    db: &impl GenericClient,
    queue: &str,
    options: &serde_json::Value,
    replace: bool,
) -> Result<QueueRow> {
    let row = Configure {
        p_queue: queue,
        p_opts: options,
        p_replace: replace,
    }
    .query_one(db)
    .await?;
    QueueRow::from_row(&row)
}

/// Deletes `queue` and everything it owns. `None` when there is no such queue, else the
/// number of partitions deleted.
pub async fn delete(db: &impl GenericClient, queue: &str) -> Result<Option<i32>> {
    let call = DeleteQueue { p_queue: queue };
    Ok(call.query_one(db).await?.try_get(0)?)
}
