//! The typed call of `queen.admin_trace_v1` (sql/functions/admin.sql): stores one consume-loop trace.

use serde_json::Value;
use uuid::Uuid;

use crate::error::Result;
use crate::store::Store;

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

/// Stores the trace when its partition is `tenant`'s (or, for the default tenant, names no
/// partition at all); `None` when nothing was stored.
pub async fn insert_trace(store: &Store, t: &TraceRow<'_>, tenant: &str) -> Result<Option<Uuid>> {
    let conn = store.conn().await?;
    let stmt = crate::store::prepare(
        &conn,
        "SELECT queen.admin_trace_v1($1, $2, $3, $4, $5, $6, $7, $8)",
    )
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
                &tenant,
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}
