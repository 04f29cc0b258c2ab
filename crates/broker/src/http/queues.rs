//! `POST /api/v1/configure` (create or reconfigure a queue, every option echoed) and
//! `DELETE /api/v1/resources/queues/:queue` (remove the queue and everything it owns).

use crate::engine::tenant::local;
use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::{delete, post};
use axum::{Json, Router};
use queen_proto::Name;
use serde_json::{json, Value};

use crate::engine::queues::{self, QueueRow};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::extract::Path;
use crate::http::extract::{json_body, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/configure", post(configure))
        .route("/api/v1/resources/queues/{queue}", delete(delete_queue))
}

/// 200 with the effective row (docs/wire.md §3.3).
async fn configure(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let body: Value = json_body(&body)?;
    let req = queues::parse_configure(&body)?;
    let q = queues::configure(&st, &req, &tenant).await?;
    Ok(Json(json!({
        "configured": true,
        "queueId": q.id.to_string(),
        "partitionId": null,
        "queue": local(&q.name),
        "namespace": local(&q.namespace),
        "task": local(&q.task),
        "storage": "segments",
        "options": options_json(&q),
    })))
}

/// 200 `{"deleted":true,…}` (never 204: the JS client reads the body); 404 when unknown.
async fn delete_queue(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path(queue): Path<String>,
) -> Result<Json<Value>> {
    let queue = Name::parse("queue", &queue)?;
    match queues::delete(&st, &queue, &tenant).await? {
        Some(partitions) => Ok(Json(json!({
            "deleted": true,
            "queue": queue.as_str(),
            "partitionsDeleted": partitions,
        }))),
        None => Err(Error::NotFound("Queue not found".into())),
    }
}

/// The wire echo of every option (docs/wire.md §3.3), in the documented order.
pub(crate) fn options_json(q: &QueueRow) -> Value {
    json!({
        "priority": q.priority,
        "leaseTime": q.lease_time,
        "retryLimit": q.retry_limit,
        "retryDelay": q.retry_delay,
        "maxSize": q.max_queue_size,
        "ttl": q.ttl,
        "deadLetterQueue": q.dead_letter_queue,
        "dlqAfterMaxRetries": q.dlq_after_max_retries,
        "delayedProcessing": q.delayed_processing,
        "windowBuffer": q.window_buffer,
        "retentionSeconds": q.retention_seconds,
        "completedRetentionSeconds": q.completed_retention_seconds,
        "retentionEnabled": q.retention_enabled,
        "encryptionEnabled": q.encryption_enabled,
        "maxWaitTimeSeconds": q.max_wait_time_seconds,
        "minPopWaitTime": q.min_pop_wait_time,
        "dedupWindowSeconds": q.dedup_window_seconds,
    })
}
