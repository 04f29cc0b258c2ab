//! Consume-loop traces (`POST /api/v1/traces`, docs/wire.md §15): defaults applied, stored in
//! `queen.message_traces`.

use queen_proto::PartitionId;
use serde_json::Value;
use uuid::Uuid;

use crate::engine::tenant::Tenant;
use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::store::traces::{self as store, TraceRow};

/// One consume-loop trace event, as `POST /api/v1/traces` carries it.
pub struct TraceEvent {
    pub transaction_id: String,
    pub partition_id: PartitionId,
    pub consumer_group: Option<String>,
    pub trace_names: Option<Vec<String>>,
    pub event_type: Option<String>,
    pub data: Value,
}

/// Stores a trace event in `queen.message_traces`; answers the trace's id. 404 when the
/// partition is another tenant's (`admin_trace_v1`).
pub async fn record_trace(st: &Shared, ev: TraceEvent, tenant: &Tenant) -> Result<Uuid> {
    let group = ev
        .consumer_group
        .as_deref()
        .filter(|g| !g.is_empty())
        .unwrap_or(queen_proto::wire::QUEUE_MODE);
    let names = ev
        .trace_names
        .map(|n| n.into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>());
    let row = TraceRow {
        id: queen_proto::new_v7(),
        partition_id: ev.partition_id.get(),
        transaction_id: &ev.transaction_id,
        consumer_group: group,
        event_type: ev
            .event_type
            .as_deref()
            .filter(|e| !e.is_empty())
            .unwrap_or("info"),
        trace_names: names.filter(|n| !n.is_empty()),
        data: ev.data,
    };
    store::insert_trace(&st.store, &row, tenant.id())
        .await?
        .ok_or_else(|| Error::NotFound(format!("partition {} not found", ev.partition_id)))
}
