//! Routes of the ack path: `POST /api/v1/ack`, `POST /api/v1/ack/batch` (docs/wire.md §8),
//! `POST /api/v1/lease/:leaseId/extend` (§9) and `GET /api/v1/dlq` (§11). Parsing and
//! rendering only; the decisions live in `engine::{ack, lease, dlq}` and SQL.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use queen_proto::name::{check_id, check_text};
use queen_proto::time::{iso_millis, parse_iso};
use queen_proto::wire::QUEUE_MODE;
use queen_proto::Name;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::engine::ack::{self, Ack, AckOutcome, AckStatus};
use crate::engine::{dlq, lease};
use crate::error::{Error, Result};
use crate::http::extract::Path;
use crate::http::extract::{json_body, Query, RawBody};
use crate::state::AppState;
use crate::store::ack::{DlqFilter, DlqRow};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/ack", post(ack_one))
        .route("/api/v1/ack/batch", post(ack_batch))
        .route("/api/v1/lease/{lease_id}/extend", post(extend_lease))
        .route("/api/v1/dlq", get(list_dlq))
}

/// `{"transactionId","partitionId","status","error","consumerGroup","leaseId"}` → a
/// one-element answer array.
async fn ack_one(State(st): State<AppState>, RawBody(body): RawBody) -> Result<Json<Value>> {
    let item: Value = json_body(&body)?;
    let Some(obj) = item.as_object() else {
        return Err(Error::bad("bad body: expected a JSON object"));
    };
    let group = group_name(obj.get("consumerGroup"))?;
    answer(&st, std::slice::from_ref(&item), &group).await
}

/// `{"acknowledgments":[…],"consumerGroup"}` → one answer element per acknowledgment.
async fn ack_batch(State(st): State<AppState>, RawBody(body): RawBody) -> Result<Json<Value>> {
    let request: Value = json_body(&body)?;
    let Some(items) = request.get("acknowledgments").and_then(Value::as_array) else {
        return Err(Error::bad("bad body: acknowledgments must be an array"));
    };
    let group = group_name(request.get("consumerGroup"))?;
    answer(&st, items, &group).await
}

/// Applies the well-formed items and renders every item, malformed ones included, in
/// request order. HTTP 200 even when items are refused.
async fn answer(st: &AppState, items: &[Value], group: &str) -> Result<Json<Value>> {
    let parsed: Vec<std::result::Result<Ack, String>> =
        items.iter().map(|item| parse_ack(item, group)).collect();
    let valid: Vec<Ack> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut applied = ack::acknowledge(st, &valid).await?.into_iter();
    let rendered = items
        .iter()
        .zip(&parsed)
        .enumerate()
        .map(|(index, (item, parsed))| {
            let outcome = match parsed {
                Ok(_) => applied.next().unwrap_or_default(),
                Err(e) => AckOutcome::refused(e.clone()),
            };
            let txn = item.get("transactionId").cloned().unwrap_or(Value::Null);
            render_outcome(index, txn, &outcome)
        })
        .collect();
    Ok(Json(Value::Array(rendered)))
}

fn render_outcome(index: usize, transaction_id: Value, o: &AckOutcome) -> Value {
    json!({
        "index": index,
        "transactionId": transaction_id,
        "success": o.success,
        "error": o.error,
        "leaseReleased": o.lease_released,
        "dlq": o.dlq,
        "noop": o.noop,
    })
}

/// The consumer group of a request: null, absent or empty means queue mode; anything else
/// must be a name by the same rule as the pop's `consumerGroup` (never trimmed).
pub(crate) fn group_name(value: Option<&Value>) -> Result<String> {
    Ok(Name::from_json("consumerGroup", value)?
        .map_or_else(|| QUEUE_MODE.to_string(), Name::into_string))
}

/// One acknowledgement object, or the per-item error that refuses it.
pub(crate) fn parse_ack(item: &Value, group: &str) -> std::result::Result<Ack, String> {
    let Some(obj) = item.as_object() else {
        return Err("acknowledgment is not a JSON object".into());
    };
    let transaction_id = match obj.get("transactionId") {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => return Err("transactionId is missing".into()),
    };
    check_id("transactionId", &transaction_id).map_err(|e| e.to_string())?;
    let error = obj.get("error").and_then(Value::as_str).map(str::to_string);
    if let Some(text) = &error {
        check_text("error", text).map_err(|e| e.to_string())?;
    }
    let lease_id = obj
        .get("leaseId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    check_id("leaseId", &lease_id).map_err(|e| e.to_string())?;
    let partition_id = partition_id(obj)?;
    let status = match obj.get("status") {
        // The clients map True/False to completed/failed; accept the booleans too.
        Some(Value::Bool(ok)) => {
            if *ok {
                AckStatus::Completed
            } else {
                AckStatus::Failed
            }
        }
        Some(Value::String(text)) => AckStatus::normalise(Some(text)),
        None | Some(Value::Null) => AckStatus::Completed,
        // Any other status is not a completion the client stated: never skip it.
        Some(_) => AckStatus::Failed,
    };
    Ok(Ack {
        transaction_id,
        partition_id,
        status,
        error,
        group: group.to_string(),
        lease_id,
    })
}

/// `partitionId`: a decimal string (as pops render it) or a non-negative JSON integer.
fn partition_id(obj: &Map<String, Value>) -> std::result::Result<i64, String> {
    const NOT_AN_ID: &str = "partitionId is not a partition id";
    match obj.get("partitionId") {
        None | Some(Value::Null) => Err("partitionId is missing".into()),
        Some(Value::String(s)) if s.is_empty() => Err("partitionId is missing".into()),
        Some(Value::String(s)) if s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<i64>().map_err(|_| NOT_AN_ID.into())
        }
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|&id| id >= 0)
            .ok_or_else(|| NOT_AN_ID.into()),
        Some(_) => Err(NOT_AN_ID.into()),
    }
}

/// Body `{"seconds": n}`, optional (the Python client sends none for `{}`).
async fn extend_lease(
    State(st): State<AppState>,
    Path(lease_id): Path<String>,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    check_id("leaseId", &lease_id)?;
    let seconds = requested_seconds(&body)?;
    let renewal = lease::extend(&st, &lease_id, seconds).await?;
    let expiry = renewal.expires_at.clone();
    Ok(Json(json!({
        "leaseId": lease_id,
        "success": renewal.renewed > 0,
        "renewed": renewal.renewed,
        "newExpiresAt": expiry,
        "expiresAt": expiry,
        "lease_expires_at": expiry,
    })))
}

fn requested_seconds(body: &[u8]) -> Result<Option<i64>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let value: Value = json_body(body)?;
    let seconds = match &value {
        Value::Null => return Ok(None),
        Value::Object(obj) => obj.get("seconds"),
        _ => return Err(Error::bad("bad body: expected a JSON object")),
    };
    match seconds {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(s) => Ok(Some(s)),
            // Fractions round down; a huge float saturates (the engine clamps anyway).
            None => Ok(n.as_f64().map(|f| f.floor() as i64)),
        },
        Some(Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| Error::bad("seconds must be a number")),
        Some(_) => Err(Error::bad("seconds must be a number")),
    }
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
async fn list_dlq(State(st): State<AppState>, Query(q): Query<DlqQuery>) -> Result<Json<Value>> {
    let limit = count_param("limit", q.limit.as_deref(), 100, 1)?;
    let offset = count_param("offset", q.offset.as_deref(), 0, 0)?;
    let filter = DlqFilter {
        queue: filter_name("queue", &q.queue)?,
        group: filter_name("consumerGroup", &q.consumer_group)?,
        partition: filter_name("partition", &q.partition)?,
        from: time_param("from", q.from.as_deref())?,
        to: time_param("to", q.to.as_deref())?,
        limit,
        offset,
    };
    let page = dlq::list(&st, &filter).await?;
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
    json!({
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
        "producerSub": Value::Null,
        "createdAt": created_at,
        "failedAt": row.failed_at,
    })
}

/// An optional name filter: absent or empty filters nothing.
fn filter_name<'a>(field: &'static str, v: &'a Option<String>) -> Result<Option<&'a str>> {
    Name::optional(field, v.as_deref())?;
    Ok(v.as_deref().filter(|s| !s.is_empty()))
}

fn count_param(name: &str, text: Option<&str>, default: i32, min: i32) -> Result<i32> {
    match text.filter(|t| !t.is_empty()) {
        None => Ok(default),
        Some(t) => t
            .parse::<i32>()
            .ok()
            .filter(|&n| n >= min)
            .ok_or_else(|| Error::bad(format!("{name} must be an integer >= {min}"))),
    }
}

fn time_param(name: &str, text: Option<&str>) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
    match text.filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) => parse_iso(t)
            .map(Some)
            .ok_or_else(|| Error::bad(format!("{name} is not an ISO-8601 timestamp"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_item_errors_name_the_problem() {
        let parse = |v: Value| parse_ack(&v, "g");
        assert_eq!(
            parse(json!({"partitionId": "1"})).err().as_deref(),
            Some("transactionId is missing")
        );
        assert_eq!(
            parse(json!({"transactionId": "t"})).err().as_deref(),
            Some("partitionId is missing")
        );
        for bad in [
            json!("abc"),
            json!("-1"),
            json!(-3),
            json!(1.5),
            json!([1]),
            json!("99999999999999999999"),
        ] {
            assert_eq!(
                parse(json!({"transactionId": "t", "partitionId": bad}))
                    .err()
                    .as_deref(),
                Some("partitionId is not a partition id")
            );
        }
        let ok = parse(
            json!({"transactionId": "t", "partitionId": "17", "status": false, "leaseId": null}),
        )
        .expect("valid");
        assert_eq!(
            (ok.partition_id, ok.status, ok.lease_id.as_str()),
            (17, AckStatus::Failed, "")
        );
        let status = |s: Value| {
            parse(json!({"transactionId": "t", "partitionId": "1", "status": s})).map(|a| a.status)
        };
        assert_eq!(status(Value::Null), Ok(AckStatus::Completed));
        assert_eq!(status(json!(true)), Ok(AckStatus::Completed));
        assert_eq!(status(json!("retry")), Ok(AckStatus::Retry));
        for other in [json!(7), json!({"s": "completed"}), json!(["completed"])] {
            assert_eq!(status(other.clone()), Ok(AckStatus::Failed), "{other}");
        }
    }

    #[test]
    fn groups_default_to_queue_mode() {
        let name = |v: Option<&Value>| group_name(v).map_err(|e| e.to_string());
        assert_eq!(name(None).as_deref(), Ok(QUEUE_MODE));
        assert_eq!(name(Some(&Value::Null)).as_deref(), Ok(QUEUE_MODE));
        assert_eq!(name(Some(&json!(""))).as_deref(), Ok(QUEUE_MODE));
        assert_eq!(name(Some(&json!("billing"))).as_deref(), Ok("billing"));
        for refused in [json!(7), json!(["g"]), json!(" g"), json!("g\u{0}")] {
            assert!(name(Some(&refused)).is_err(), "{refused}");
        }
    }

    #[test]
    fn extend_body_is_optional() {
        assert_eq!(requested_seconds(b"").ok(), Some(None));
        assert_eq!(requested_seconds(b"{}").ok(), Some(None));
        assert_eq!(
            requested_seconds(br#"{"seconds":120}"#).ok(),
            Some(Some(120))
        );
        assert_eq!(requested_seconds(br#"{"seconds":1.9}"#).ok(), Some(Some(1)));
        assert!(requested_seconds(br#"{"seconds":"soon"}"#).is_err());
        assert!(requested_seconds(b"{").is_err());
    }
}
