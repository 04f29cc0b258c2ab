//! The ephemeral queue routes (docs/wire.md §25), all for the caller's tenant: `POST
//! /api/v1/ephemeral/{configure,reset,push,ack}`, `GET /api/v1/ephemeral/pop`, `GET
//! /api/v1/ephemeral/queues[/{queue}/depth]` and `DELETE /api/v1/ephemeral/queue/{queue}`.
//! Bodies are checked in [`parse`], decided in `engine::ephemeral`, rendered here. Refusals
//! carry their code in `error` and `code` (the official client reads `code`, else `error`):
//! `400 ephemeral_bad_request`, `429 queue_full` (with `Retry-After`), `413
//! ephemeral_batch_too_large`, `404 ephemeral_queue_not_found` (depth only).

pub mod parse;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::engine::ephemeral::{self as eph, PushAnswer};
use crate::engine::Engine;
use crate::error::Error;
use crate::http::auth::CallerTenant;
use crate::http::extract::{Path, Query, RawBody};
use crate::http::RETRY_AFTER_SECS;

/// The code of every malformed call.
const BAD_REQUEST: &str = "ephemeral_bad_request";
/// The code of `depth` on a queue that is not there.
const NOT_FOUND: &str = "ephemeral_queue_not_found";
/// The code of a push refused by the queue's bounds (policy `reject`).
const QUEUE_FULL: &str = "queue_full";
/// The code of a push that alone breaks the queue's bounds.
const TOO_LARGE: &str = "ephemeral_batch_too_large";

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/ephemeral/configure", post(configure))
        .route("/api/v1/ephemeral/reset", post(reset))
        .route("/api/v1/ephemeral/push", post(push))
        .route(
            "/api/v1/ephemeral/pop",
            get(pop).head(crate::http::pop::head_refused),
        )
        .route("/api/v1/ephemeral/ack", post(ack))
        .route("/api/v1/ephemeral/queues", get(queues))
        .route("/api/v1/ephemeral/queues/{queue}/depth", get(depth))
        .route("/api/v1/ephemeral/queue/{queue}", delete(remove))
}

/// A refusal in this family's envelope: `{error: code, code, reason: code, detail}`.
fn envelope(status: StatusCode, code: &str, detail: &str, extra: Value) -> Response {
    let mut body = json!({ "error": code, "code": code, "reason": code, "detail": detail });
    if let (Some(all), Value::Object(more)) = (body.as_object_mut(), extra) {
        all.extend(more);
    }
    (status, Json(body)).into_response()
}

/// A 400 in the family's envelope; every other error as usual.
fn refused(e: Error) -> Response {
    match e {
        Error::BadRequest(detail) => {
            envelope(StatusCode::BAD_REQUEST, BAD_REQUEST, &detail, Value::Null)
        }
        other => other.into_response(),
    }
}

fn answer(result: Result<Response, Error>) -> Response {
    result.unwrap_or_else(refused)
}

async fn configure(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    answer(
        async {
            let (queue, options) = parse::configure(&body)?;
            let (created, effective) = eph::configure(&st, &tenant, &queue, &options).await?;
            Ok(Json(json!({
                "queue": queue, "declared": true, "created": created, "options": effective,
            }))
            .into_response())
        }
        .await,
    )
}

async fn reset(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    answer(
        async {
            let queue = parse::queue_body(&body)?;
            let dropped = eph::reset(&st, &tenant, &queue).await?;
            Ok(Json(json!({ "queue": queue, "dropped": dropped })).into_response())
        }
        .await,
    )
}

async fn remove(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    path: Result<Path<String>, Error>,
) -> Response {
    answer(
        async {
            let Path(queue) = path?;
            let queue = parse::path_queue(&queue)?;
            let d = eph::delete(&st, &tenant, &queue).await?;
            Ok(
                Json(json!({ "queue": queue, "deleted": d.deleted, "declared": d.declared }))
                    .into_response(),
            )
        }
        .await,
    )
}

async fn push(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    answer(
        async {
            let p = parse::push(&body)?;
            let pushed = eph::push(&st, &tenant, &p.queue, &p.partition, &p.payloads).await?;
            Ok(push_answer(&p.queue, &p.partition, pushed))
        }
        .await,
    )
}

fn push_answer(queue: &str, partition: &str, answer: PushAnswer) -> Response {
    match answer {
        PushAnswer::Pushed { pushed, dropped } => (
            StatusCode::CREATED,
            Json(json!({
                "queue": queue, "partition": partition, "pushed": pushed, "dropped": dropped,
            })),
        )
            .into_response(),
        PushAnswer::Full {
            length,
            bytes,
            max_length,
            max_bytes,
        } => {
            let detail = format!(
                "ephemeral queue {queue:?} is full ({length} messages, {bytes} bytes; bounds \
                 {max_length} messages, {max_bytes} bytes; policy reject)"
            );
            let extra = json!({
                "length": length, "bytes": bytes, "maxLength": max_length, "maxBytes": max_bytes,
            });
            let mut r = envelope(StatusCode::TOO_MANY_REQUESTS, QUEUE_FULL, &detail, extra);
            r.headers_mut()
                .insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
            r
        }
        PushAnswer::TooLarge {
            length,
            bytes,
            max_length,
            max_bytes,
        } => {
            let detail = format!(
                "this push alone ({length} messages, {bytes} bytes) exceeds the bounds of \
                 ephemeral queue {queue:?} ({max_length} messages, {max_bytes} bytes)"
            );
            let extra = json!({
                "length": length, "bytes": bytes, "maxLength": max_length, "maxBytes": max_bytes,
            });
            envelope(StatusCode::PAYLOAD_TOO_LARGE, TOO_LARGE, &detail, extra)
        }
    }
}

async fn pop(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    query: Result<Query<parse::PopQuery>, Error>,
) -> Response {
    answer(
        async {
            let Query(q) = query?;
            let default_wait = std::time::Duration::from_millis(st.cfg.default_timeout_ms);
            let req = parse::pop(&q, default_wait)?;
            let delivered = eph::pop(&st, &tenant, &req).await?;
            Ok(pop_answer(&req.queue, &delivered))
        }
        .await,
    )
}

/// `{queue, messages:[{id, partition, attempts, payload}]}` with every payload spliced in as
/// the bytes it was pushed with (checked JSON when it arrived).
fn pop_answer(queue: &str, delivered: &[eph::Delivered]) -> Response {
    let quoted = |s: &str| Value::String(s.to_string()).to_string();
    let mut out = String::with_capacity(
        64 + delivered
            .iter()
            .map(|d| d.payload.len() + d.id.len() * 2 + 64)
            .sum::<usize>(),
    );
    out.push_str("{\"queue\":");
    out.push_str(&quoted(queue));
    out.push_str(",\"messages\":[");
    for (i, d) in delivered.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"id\":");
        out.push_str(&quoted(&d.id));
        out.push_str(",\"partition\":");
        out.push_str(&quoted(&d.partition));
        out.push_str(",\"attempts\":");
        out.push_str(&d.attempts.to_string());
        out.push_str(",\"payload\":");
        out.push_str(&d.payload);
        out.push('}');
    }
    out.push_str("]}");
    ([(header::CONTENT_TYPE, "application/json")], out).into_response()
}

async fn ack(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    answer(
        async {
            let call = parse::ack(&body)?;
            for (id, reason) in &call.reasons {
                tracing::debug!(queue = %call.queue, %id, %reason, "ephemeral nack reason");
            }
            let outcomes = if call.acks.is_empty() {
                Vec::new()
            } else {
                eph::ack(&st, &tenant, &call.queue, &call.group, &call.acks).await?
            };
            let results: Vec<Value> = call
                .ids
                .iter()
                .zip(outcomes)
                .map(|(id, o)| json!({ "id": id, "outcome": o.as_str() }))
                .collect();
            Ok(Json(json!({ "results": results })).into_response())
        }
        .await,
    )
}

async fn queues(State(st): State<Engine>, CallerTenant(tenant): CallerTenant) -> Response {
    answer(
        async {
            let (queues, truncated) = eph::queues(&st, &tenant).await?;
            Ok(Json(json!({ "queues": queues, "truncated": truncated })).into_response())
        }
        .await,
    )
}

async fn depth(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    path: Result<Path<String>, Error>,
) -> Response {
    answer(
        async {
            let Path(queue) = path?;
            let queue = parse::path_queue(&queue)?;
            Ok(match eph::depth(&st, &tenant, &queue).await? {
                Some(gauges) => Json(gauges).into_response(),
                None => envelope(
                    StatusCode::NOT_FOUND,
                    NOT_FOUND,
                    &format!("ephemeral queue {queue:?} does not exist"),
                    Value::Null,
                ),
            })
        }
        .await,
    )
}
