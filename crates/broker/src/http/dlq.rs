//! `GET /api/v1/dlq` and `DELETE /api/v1/dlq` (docs/wire.md §11): the listing's filters and its
//! rendering, and the purge of a queue's dead letters; the rows come from `engine::dlq`. The
//! operations on one address live with the message routes (`http::messages`).

use crate::http::auth::CallerTenant;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use queen_proto::time::{iso_millis, parse_iso};
use queen_proto::Name;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::dlq::{self, DlqFilter, DlqRow};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::extract::{count_param, limit_param, Query};

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/dlq", get(list_dlq).delete(purge_dlq))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PurgeQuery {
    queue: Option<String>,
    consumer_group: Option<String>,
}

/// `DELETE /api/v1/dlq?queue=&consumerGroup=`: the queue's dead letters, of one group if given.
async fn purge_dlq(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Query(q): Query<PurgeQuery>,
) -> Result<Json<Value>> {
    let queue = filter_name("queue", &q.queue)?
        .ok_or_else(|| Error::bad("queue is required to purge dead letters"))?;
    let group = filter_name("consumerGroup", &q.consumer_group)?;
    let deleted = dlq::purge(&st, queue, group, &tenant).await?;
    Ok(Json(json!({ "success": true, "deleted": deleted })))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DlqQuery {
    queue: Option<String>,
    consumer_group: Option<String>,
    partition: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
}

/// `GET /api/v1/dlq?queue=&consumerGroup=&partition=&from=&to=&limit=&offset=`.
async fn list_dlq(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    Query(q): Query<DlqQuery>,
) -> Result<Json<Value>> {
    let limit = limit_param("limit", q.limit.as_deref())?.unwrap_or(100);
    let offset = count_param("offset", q.offset.as_deref(), 0)?.unwrap_or(0);
    let filter = DlqFilter {
        queue: filter_name("queue", &q.queue)?,
        group: filter_name("consumerGroup", &q.consumer_group)?,
        partition: filter_name("partition", &q.partition)?,
        from: time_param("from", q.from.as_deref())?,
        to: time_param("to", q.to.as_deref())?,
        limit,
        offset,
    };
    let page = dlq::list(&st, &filter, &tenant).await?;
    let messages: Vec<Value> = page.rows.iter().map(render_dead_letter).collect();
    Ok(Json(json!({
        "messages": messages,
        "pagination": { "limit": limit, "offset": offset },
        "total": page.total,
    })))
}

fn render_dead_letter(row: &DlqRow) -> Value {
    // The message's own creation time is its UUIDv7 timestamp.
    let created_at = row
        .message_id
        .as_deref()
        .and_then(|id| uuid::Uuid::parse_str(id).ok())
        .and_then(|id| id.get_timestamp())
        .map(|ts| {
            let (secs, nanos) = ts.to_unix();
            iso_millis(secs as i64 * 1_000_000 + i64::from(nanos / 1000))
        })
        .unwrap_or_else(|| row.failed_at.clone());
    let data: Value = row
        .data
        .as_ref()
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
        .unwrap_or(Value::Null);
    let mut out = json!({
        "id": row.id,
        "messageId": row.message_id,
        "transactionId": row.transaction_id,
        "partitionId": row.partition_id,
        "queue": row.queue,
        "partition": row.partition,
        "consumerGroup": row.consumer_group,
        "offset": row.offset,
        "errorMessage": row.error_message,
        "retryCount": row.retry_count,
        "data": data,
        "producerSub": row.producer_sub,
        "createdAt": created_at,
        "failedAt": row.failed_at,
    });
    // An encrypted copy that could not be opened: `data` is null and this says why.
    if let Some(error) = &row.payload_error {
        out["payloadError"] = Value::from(error.as_str());
    }
    out
}

/// An optional name filter: absent or empty filters nothing.
fn filter_name<'a>(field: &'static str, v: &'a Option<String>) -> Result<Option<&'a str>> {
    Name::optional(field, v.as_deref())?;
    Ok(v.as_deref().filter(|s| !s.is_empty()))
}

fn time_param(name: &str, text: Option<&str>) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
    match text.filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) => parse_iso(t)
            .map(Some)
            .ok_or_else(|| Error::bad(format!("{name} is not an ISO-8601 timestamp"))),
    }
}
