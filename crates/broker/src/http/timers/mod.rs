//! The timer routes (docs/wire.md §22): `POST /api/v1/timers` (schedule, reschedule, cancel;
//! a batch, index-aligned), `GET /api/v1/timers/{queue}` (a keyset page of one queue's
//! pending timers), `GET` and `DELETE /api/v1/timers/{queue}/{*key}` (peek, cancel). Verdicts
//! (`absent`, `too_late`, a miss) are 200; a malformed call is 400 with the client's envelope
//! `{"error":"timers_bad_request","code":…,"reason":…,"detail":…}`. Timers belong to the
//! caller's tenant. The rider of a transaction parses with [`parse::parse_ops`] and renders
//! with [`outcome_json`].

pub mod parse;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use queen_proto::Name;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::timers::PendingTimer;
use crate::engine::timers::{self, TimerOp, TimerOutcome, LIST_DEFAULT, LIST_MAX};
use crate::engine::Engine;
use crate::error::Error;
use crate::http::auth::CallerTenant;
use crate::http::extract::{json_body, Query, RawBody};

/// The code of every malformed timer call, as the client reads it.
const BAD_REQUEST: &str = "timers_bad_request";

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/timers", post(batch))
        .route("/api/v1/timers/{queue}", get(list))
        .route("/api/v1/timers/{queue}/{*key}", get(peek).delete(cancel))
}

/// A 400 in the timer routes' envelope; every other error as usual.
fn refused(e: Error) -> Response {
    match e {
        Error::BadRequest(detail) => (
            StatusCode::BAD_REQUEST,
            Json(json!({
                "error": BAD_REQUEST, "code": BAD_REQUEST, "reason": BAD_REQUEST, "detail": detail,
            })),
        )
            .into_response(),
        other => other.into_response(),
    }
}

#[derive(Deserialize)]
struct BatchBody {
    operations: Option<Value>,
}

async fn batch(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    let answer = async {
        let b: BatchBody = json_body(&body)?;
        let ops = b
            .operations
            .ok_or_else(|| Error::bad("operations is required"))?;
        let ops = parse::parse_ops(&ops, "operations")?;
        timers::apply(&st, ops, &tenant).await
    };
    match answer.await {
        Ok(outcomes) => {
            let results: Vec<Value> = outcomes
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    let mut v = outcome_json(o);
                    v["index"] = json!(i);
                    v
                })
                .collect();
            Json(json!({ "results": results })).into_response()
        }
        Err(e) => refused(e),
    }
}

/// One operation's result: `{ok,status,queue,timerKey,txn,messageId?,deliverAt?}`.
pub fn outcome_json(o: &TimerOutcome) -> Value {
    let mut v = json!({
        "ok": o.ok(), "status": o.status, "queue": o.queue, "timerKey": o.timer_key,
        "txn": o.txn,
    });
    if let Some(id) = &o.message_id {
        v["messageId"] = json!(id);
    }
    if let Some(at) = &o.deliver_at {
        v["deliverAt"] = json!(at);
    }
    v
}

#[derive(Deserialize)]
struct CancelQuery {
    txn: Option<String>,
}

async fn cancel(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((queue, key)): Path<(String, String)>,
    query: std::result::Result<Query<CancelQuery>, Error>,
) -> Response {
    let answer = async {
        let Query(q) = query?;
        let op = TimerOp::Cancel {
            queue: Name::parse("queue", &queue)?.into_string(),
            timer_key: parse::timer_key(&key)?.to_string(),
            txn: q.txn.filter(|t| !t.is_empty()),
        };
        let outcome = timers::apply(&st, vec![op], &tenant).await?;
        outcome
            .first()
            .map(outcome_json)
            .ok_or_else(|| Error::internal("a cancel got no result"))
    };
    match answer.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => refused(e),
    }
}

async fn peek(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path((queue, key)): Path<(String, String)>,
) -> Response {
    let answer = async {
        let queue = Name::parse("queue", &queue)?.into_string();
        let key = parse::timer_key(&key)?;
        Ok::<_, Error>(match timers::peek(&st, &tenant, &queue, key).await? {
            Some(t) => {
                let mut v = pending_json(&queue, &t);
                v["found"] = json!(true);
                v
            }
            None => json!({ "found": false, "queue": queue, "timerKey": key }),
        })
    };
    match answer.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => refused(e),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    after: Option<String>,
    limit: Option<String>,
}

async fn list(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Path(queue): Path<String>,
    query: std::result::Result<Query<ListQuery>, Error>,
) -> Response {
    let answer = async {
        let Query(q) = query?;
        let queue = Name::parse("queue", &queue)?.into_string();
        let limit = match q.limit.as_deref().filter(|l| !l.is_empty()) {
            None => LIST_DEFAULT,
            Some(l) => {
                let n: i64 = l
                    .parse()
                    .map_err(|_| Error::bad("limit must be an integer"))?;
                i32::try_from(n.clamp(1, i64::from(LIST_MAX))).unwrap_or(LIST_MAX)
            }
        };
        let after = q.after.filter(|a| !a.is_empty());
        let (rows, truncated) = timers::list(&st, &tenant, &queue, after.as_deref(), limit).await?;
        let next_after = rows.last().map(|r| r.timer_key.clone());
        let rows: Vec<Value> = rows.iter().map(|t| pending_json(&queue, t)).collect();
        Ok::<_, Error>(json!({
            "rows": rows, "truncated": truncated,
            "nextAfter": if truncated { next_after } else { None },
        }))
    };
    match answer.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => refused(e),
    }
}

/// A pending timer; the payload (peek only) exactly as stored, base64: the envelope when its
/// queue encrypts (`encrypted` says which; peek is an inspection surface and opens nothing).
fn pending_json(queue: &str, t: &PendingTimer) -> Value {
    let mut v = json!({
        "queue": queue, "timerKey": t.timer_key, "partition": t.partition, "txn": t.txn,
        "messageId": t.message_id.to_string(), "deliverAt": t.deliver_at,
        "attempts": t.attempts, "firing": t.firing,
    });
    if let Some(payload) = &t.payload {
        v["payload"] = json!(STANDARD.encode(&payload.bytes));
        v["encrypted"] = json!(payload.encrypted);
    }
    v
}
