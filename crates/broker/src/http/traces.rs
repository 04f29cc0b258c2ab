//! `POST /api/v1/traces` (docs/wire.md §15): consume-loop trace events, stored in
//! `queen.message_traces`. The official client swallows failures here, so a bad body gets a
//! plain 400 and never affects consumption.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;

use crate::engine::messages::{self, TraceEvent};
use crate::error::{Error, Result};
use crate::http::extract::{json_body, RawBody};
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/api/v1/traces", post(record))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TraceBody {
    transaction_id: Option<String>,
    /// A decimal string on our wire; a number is accepted too.
    partition_id: Option<Value>,
    consumer_group: Option<String>,
    trace_names: Option<Vec<String>>,
    event_type: Option<String>,
    data: Option<Value>,
}

async fn record(State(st): State<AppState>, RawBody(body): RawBody) -> Result<Json<Value>> {
    let b: TraceBody = json_body(&body)?;
    let transaction_id = b
        .transaction_id
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::bad("transactionId is required"))?;
    let partition_id = b
        .partition_id
        .as_ref()
        .and_then(|v| match v {
            Value::String(s) => s.parse::<i64>().ok(),
            Value::Number(n) => n.as_i64(),
            _ => None,
        })
        .ok_or_else(|| Error::bad("partitionId is required and must be a partition id"))?;
    let event = TraceEvent {
        transaction_id,
        partition_id,
        consumer_group: b.consumer_group,
        trace_names: b.trace_names,
        event_type: b.event_type,
        data: b.data.unwrap_or(Value::Null),
    };
    messages::record_trace(&st, event).await.map(Json)
}
