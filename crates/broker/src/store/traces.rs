//! The typed call of `queen.admin_trace_v1` (sql/functions/admin.sql): stores one consume-loop trace.

use serde_json::Value;
use uuid::Uuid;

use crate::error::Result;
use crate::store::sql_fn::sql_fns;
use crate::store::Store;

sql_fns! {
    /// Stores one trace event.
    Trace<'a> = admin_trace_v1(
        p_id: Uuid,
        p_pid: i64,
        p_txn: &'a str,
        p_group: &'a str,
        p_event: &'a str,
        p_names: Option<&'a [String]>,
        p_data: &'a Value,
        p_tenant: &'a str,
    );
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

/// Stores the trace when its partition is `tenant`'s (or, for the default tenant, names no
/// partition at all); `None` when nothing was stored.
pub async fn insert_trace(store: &Store, t: &TraceRow<'_>, tenant: &str) -> Result<Option<Uuid>> {
    let row = Trace {
        p_id: t.id,
        p_pid: t.partition_id,
        p_txn: t.transaction_id,
        p_group: t.consumer_group,
        p_event: t.event_type,
        p_names: t.trace_names.as_deref(),
        p_data: &t.data,
        p_tenant: tenant,
    }
    .query_one(&store.conn().await?)
    .await?;
    Ok(row.try_get(0)?)
}
