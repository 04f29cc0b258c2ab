//! Routes of the ack: `POST /api/v1/ack` and `POST /api/v1/ack/batch` (docs/wire.md §8).
//! Parsing and rendering only; the decisions live in `engine::ack` and SQL.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use queen_proto::name::{check_id, check_text};
use queen_proto::wire::QUEUE_MODE;
use queen_proto::{LeaseId, Name, PartitionId};
use serde_json::{json, Value};

use crate::engine::ack::{self, Ack, AckOutcome, AckStatus};
use crate::engine::tenant::Tenant;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::http::auth::CallerTenant;
use crate::http::extract::{json_body, RawBody};

pub fn routes() -> Router<Engine> {
    Router::new()
        .route("/api/v1/ack", post(ack_one))
        .route("/api/v1/ack/batch", post(ack_batch))
}

/// `{"transactionId","partitionId","status","error","consumerGroup","leaseId"}` → a
/// one-element answer array.
async fn ack_one(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let item: Value = json_body(&body)?;
    let Some(obj) = item.as_object() else {
        return Err(Error::bad("bad body: expected a JSON object"));
    };
    let group = group_name(obj.get("consumerGroup"))?;
    answer(&st, std::slice::from_ref(&item), &group, &tenant).await
}

/// `{"acknowledgments":[…],"consumerGroup"}` → one answer element per acknowledgment.
async fn ack_batch(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Result<Json<Value>> {
    let request: Value = json_body(&body)?;
    let Some(items) = request.get("acknowledgments").and_then(Value::as_array) else {
        return Err(Error::bad("bad body: acknowledgments must be an array"));
    };
    let group = group_name(request.get("consumerGroup"))?;
    answer(&st, items, &group, &tenant).await
}

/// Applies the well-formed items and renders every item, malformed ones included, in
/// request order. HTTP 200 even when items are refused.
async fn answer(st: &Engine, items: &[Value], group: &str, tenant: &Tenant) -> Result<Json<Value>> {
    let parsed: Vec<std::result::Result<Ack, String>> =
        items.iter().map(|item| parse_ack(item, group)).collect();
    let valid: Vec<Ack> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut applied = ack::acknowledge(st, &valid, tenant).await?.into_iter();
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
        .unwrap_or_default();
    let lease_id = LeaseId::parse("leaseId", lease_id).map_err(|e| e.to_string())?;
    let partition_id = match PartitionId::from_json(obj.get("partitionId")) {
        Ok(Some(id)) => id,
        Ok(None) => return Err("partitionId is missing".into()),
        Err(_) => return Err("partitionId is not a partition id".into()),
    };
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
            (ok.partition_id.get(), ok.status, ok.lease_id.as_str()),
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
}
