//! `GET /api/v1/messages/:partitionId/:transactionId` (docs/wire.md §13): one message with its
//! per-group state. The lookup lives in `engine::messages`; this module renders it. The same
//! address's dead-letter operations (docs/wire.md §11): `DELETE` removes its dead letters and
//! `POST …/retry` replays it, both through `engine::dlq`.

use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use queen_proto::name::check_id;
use serde_json::{json, Value};

use crate::engine::dlq;
use crate::engine::messages::{self, MessageDetail};
use crate::engine::Engine;
use crate::error::Result;
use crate::http::extract::Path;

pub fn routes() -> Router<Engine> {
    Router::new()
        .route(
            "/api/v1/messages/{partition_id}/{transaction_id}",
            get(detail).delete(delete_dead_letters),
        )
        .route(
            "/api/v1/messages/{partition_id}/{transaction_id}/retry",
            post(replay),
        )
}

/// `DELETE /api/v1/messages/:partitionId/:transactionId`: the address's dead letters.
async fn delete_dead_letters(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((partition_id, transaction_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    check_id("transactionId", &transaction_id)?;
    let deleted = dlq::delete(&st, &partition_id, &transaction_id, &tenant).await?;
    Ok(Json(json!({ "success": true, "deleted": deleted })))
}

/// `POST /api/v1/messages/:partitionId/:transactionId/retry`: replays a dead letter.
async fn replay(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((partition_id, transaction_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    check_id("transactionId", &transaction_id)?;
    let done = dlq::replay(&st.push, &partition_id, &transaction_id, &tenant).await?;
    Ok(Json(json!({
        "success": true,
        "partitionId": done.partition_id.to_string(),
        "offset": done.offset,
        "replayed": done.replayed,
    })))
}

async fn detail(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((partition_id, transaction_id)): Path<(String, String)>,
) -> Result<Json<Value>> {
    check_id("transactionId", &transaction_id)?;
    let found = messages::detail(&st, &partition_id, &transaction_id, &tenant).await?;
    Ok(Json(render(&found)))
}

/// The frame's fields and the message's state in one object.
fn render(m: &MessageDetail) -> Value {
    let s = &m.state;
    let groups: Vec<Value> = s
        .groups
        .iter()
        .map(|g| {
            json!({
                "name": g.name,
                "group": g.name,
                "consumed": g.consumed,
                "leaseExpiresAt": g.lease_expires_at,
            })
        })
        .collect();
    let mut out = json!({
        "id": m.id.to_string(),
        "transactionId": m.transaction_id,
        "data": m.payload,
        "payload": m.payload,
        "traceId": m.trace_id.map(|t| t.to_string()),
        "producerSub": m.producer_sub,
        "isEncrypted": m.is_encrypted,
        "createdAt": s.created_at,
        "partitionId": s.partition_id,
        "partition": s.partition,
        "queue": s.queue,
        "queuePath": format!("{}/{}", s.queue, s.partition),
        "namespace": s.namespace,
        "task": s.task,
        "offset": m.offset,
        "status": s.status,
        "errorMessage": s.error,
        "retryCount": s.retry_count,
        "leaseExpiresAt": s.lease_expires_at,
        "queueConfig": {
            "leaseTime": s.lease_time,
            "retryLimit": s.retry_limit,
            "retryDelay": s.retry_delay,
            "ttl": s.ttl,
            "priority": s.priority,
        },
        "mode": {
            "hasQueueMode": s.has_queue_mode,
            "busGroupsCount": s.bus_groups,
            "type": s.mode,
        },
        "consumerGroups": groups,
    });
    // An encrypted payload that could not be opened: `data` is null and this says why.
    if let Some(error) = &m.payload_error {
        out["payloadError"] = Value::from(error.as_str());
    }
    out
}
