//! `POST /api/v1/traces` (docs/wire.md §15): consume-loop trace events, stored in
//! `queen.message_traces`. The official client swallows failures here, so a bad body gets a
//! plain 400 and never affects consumption.

use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use queen_proto::name::check_id;
use queen_proto::scalar::Scalar;
use queen_proto::{Name, PartitionId};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::traces::{self, TraceEvent};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::extract::{json_body, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/traces", post(record))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TraceBody<'a> {
    transaction_id: Option<String>,
    /// A decimal string on our wire; a number is accepted too.
    #[serde(borrow, default)]
    partition_id: Scalar<'a>,
    consumer_group: Option<String>,
    trace_names: Option<Vec<String>>,
    event_type: Option<String>,
    data: Option<Value>,
}

async fn record(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let b: TraceBody<'_> = json_body(&body)?;
    let transaction_id = b
        .transaction_id
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::bad("transactionId is required"))?;
    let partition_id = PartitionId::from_json(&b.partition_id)
        .ok()
        .flatten()
        .ok_or_else(|| Error::bad("partitionId is required and must be a partition id"))?;
    check_id("transactionId", &transaction_id)?;
    Name::optional("consumerGroup", b.consumer_group.as_deref())?;
    for name in b.trace_names.iter().flatten() {
        check_id("traceNames", name)?;
    }
    if let Some(kind) = &b.event_type {
        check_id("eventType", kind)?;
    }
    if b.data.as_ref().is_some_and(has_nul) {
        // PostgreSQL's jsonb cannot hold U+0000 in a key or a string.
        return Err(Error::bad("data contains a NUL character"));
    }
    let event = TraceEvent {
        transaction_id,
        partition_id,
        consumer_group: b.consumer_group,
        trace_names: b.trace_names,
        event_type: b.event_type,
        data: b.data.unwrap_or(Value::Null),
    };
    let id = traces::record_trace(&st, event, &tenant).await?;
    Ok(Json(json!({ "success": true, "traceId": id.to_string() })))
}

/// Whether any key or string inside `v` holds a NUL character.
fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_nul_anywhere_in_the_data() {
        assert!(!has_nul(&json!({"a": ["b", 1, {"c": null}]})));
        assert!(has_nul(&json!("x\u{0}")));
        assert!(has_nul(&json!([1, ["\u{0}"]])));
        assert!(has_nul(&json!({"k\u{0}": 1})));
        assert!(has_nul(&json!({"k": {"j": "\u{0}"}})));
    }
}
