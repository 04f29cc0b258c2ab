//! `POST /api/v1/configure` (create or reconfigure a queue, every option echoed) and
//! `DELETE /api/v1/resources/queues/:queue` (remove the queue and everything it owns).

use crate::engine::tenant::local;
use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::{delete, post};
use axum::{Json, Router};
use queen_proto::Name;
use serde_json::{json, Map, Value};

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
    let q = queues::configure(&st, &st.pop, &req, &tenant).await?;
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
    match queues::delete(&st, &st.pop, &queue, &tenant).await? {
        Some(partitions) => Ok(Json(json!({
            "deleted": true,
            "queue": queue.as_str(),
            "partitionsDeleted": partitions,
        }))),
        None => Err(Error::NotFound("Queue not found".into())),
    }
}

/// The wire echo of every option but the labels (docs/wire.md §3.3), under its wire name.
pub(crate) fn options_json(q: &QueueRow) -> Value {
    let echo: Map<String, Value> = q
        .options
        .iter()
        .map(|(option, value)| (option.wire.to_string(), value.to_json()))
        .collect();
    Value::Object(echo)
}
