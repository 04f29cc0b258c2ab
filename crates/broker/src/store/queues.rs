//! Typed calls for queue rows: `queen.configure_queue_v1` (create / merge / reset / replace)
//! and `queen.delete_queue_v1`.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::error::Result;
use crate::queue_options::{self, Kind, QueueOption, Setting, OPTIONS};
use crate::store::sql_fn::sql_fns;

sql_fns! {
    /// Creates or reconfigures a queue; answers its row.
    Configure<'a> = configure_queue_v1(
        p_queue: &'a str,
        p_opts: &'a serde_json::Value,
        p_replace: bool,
        p_defaults: &'a serde_json::Value,
    ) select "*";
    /// Deletes a queue and everything it owns.
    DeleteQueue<'a> = delete_queue_v1(p_queue: &'a str);
}

/// A `queen.queues` row: identity, labels and every other option of `queue_options::OPTIONS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    pub id: i64,
    pub name: String,
    pub namespace: String,
    pub task: String,
    /// The options echoed under `options`, in table order, with their stored values.
    pub options: Vec<(&'static QueueOption, Setting)>,
}

impl QueueRow {
    /// Reads a row that has the `queen.queues` columns (by name, so column order is free).
    pub fn from_row(r: &Row) -> Result<Self> {
        let mut options = Vec::with_capacity(OPTIONS.len());
        for option in OPTIONS.iter().filter(|o| o.echoed()) {
            let value = match option.kind {
                Kind::Bool => Setting::Bool(r.try_get(option.column)?),
                Kind::Int { .. } => Setting::Int(r.try_get(option.column)?),
                Kind::Label => continue,
            };
            options.push((option, value));
        }
        Ok(QueueRow {
            id: r.try_get("id")?,
            name: r.try_get("name")?,
            namespace: r.try_get("namespace")?,
            task: r.try_get("task")?,
            options,
        })
    }

    /// The stored value of the flag in `column`; false when no such flag is listed.
    pub fn flag(&self, column: &str) -> bool {
        self.options
            .iter()
            .any(|(o, v)| o.column == column && *v == Setting::Bool(true))
    }
}

/// Creates or reconfigures `queue`. `options` is keyed by column name (see
/// `configure_queue_v1`): a value sets, a JSON null resets to the default, absence keeps. The
/// defaults are the table's (`queue_options::configure_defaults`).
pub async fn configure(
    db: &impl GenericClient,
    queue: &str,
    options: &serde_json::Value,
    replace: bool,
) -> Result<QueueRow> {
    let defaults = queue_options::configure_defaults();
    let row = Configure {
        p_queue: queue,
        p_opts: options,
        p_replace: replace,
        p_defaults: &defaults,
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
