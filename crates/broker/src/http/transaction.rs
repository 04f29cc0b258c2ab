//! `POST /api/v1/transaction` with the JSON body (docs/wire.md §10): parse the operations into a
//! `TxnRequest`, run it, and render HTTP 200 for both outcomes (a rollback is a business
//! outcome, never a 5xx the clients would replay). A malformed bundle is 400 with the same
//! failure shape. The binary `QTB1` body parses in [`transaction_binary`].

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use queen_proto::name::check_id;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::engine::transaction::{self, OpResult, TxnOp, TxnOutcome, TxnRequest};
use crate::error::{Error, Result};
use crate::http::ack::{group_name, parse_ack};
use crate::http::extract::RawBody;
use crate::http::push::parse_item;
use crate::http::{push_binary, transaction_binary};
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/api/v1/transaction", post(transaction_json))
}

async fn transaction_json(
    State(st): State<AppState>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Response {
    let bundle_id = queen_proto::new_v7().to_string();
    let parsed = if push_binary::is_binary(&headers) {
        transaction_binary::parse(&st, body).await
    } else {
        parse_bundle(&body).map(|req| (req, false))
    };
    let (outcome, counts_only) = match parsed {
        Ok((req, counts_only)) => (transaction::run(&st, req).await, counts_only),
        Err(e) => (Err(e), false),
    };
    match outcome {
        Ok(TxnOutcome::Committed(results)) if counts_only => {
            Json(transaction_binary::counted(&bundle_id, &results)).into_response()
        }
        Ok(TxnOutcome::Committed(results)) => {
            let results: Vec<Value> = results
                .iter()
                .enumerate()
                .map(|(i, r)| render_result(i, r))
                .collect();
            Json(json!({ "transactionId": bundle_id, "success": true, "results": results }))
                .into_response()
        }
        Ok(TxnOutcome::RolledBack { reason, error }) => {
            failure(StatusCode::OK, &bundle_id, &error, reason.as_str())
        }
        Err(Error::BadRequest(error)) => {
            failure(StatusCode::BAD_REQUEST, &bundle_id, &error, "bad_request")
        }
        Err(e) => e.into_response(),
    }
}

/// `{"transactionId","success":false,"error","reason","results":[]}`.
fn failure(status: StatusCode, bundle_id: &str, error: &str, reason: &str) -> Response {
    let body = json!({
        "transactionId": bundle_id, "success": false, "error": error, "reason": reason, "results": [],
    });
    (status, Json(body)).into_response()
}

fn render_result(index: usize, r: &OpResult) -> Value {
    match r {
        OpResult::Push {
            queue,
            transaction_id,
            message_id,
            duplicate,
        } => {
            let mut v = json!({
                "index": index, "type": "push", "success": true, "transactionId": transaction_id,
                "messageId": message_id.to_string(), "queueName": queue,
            });
            if *duplicate {
                v["duplicate"] = Value::Bool(true);
            }
            v
        }
        OpResult::Ack {
            transaction_id,
            outcome,
        } => json!({
            "index": index, "type": "ack", "success": outcome.success, "transactionId": transaction_id,
            "error": outcome.error, "dlq": outcome.dlq, "leaseReleased": outcome.lease_released,
            "noop": outcome.noop,
        }),
    }
}

#[derive(Deserialize)]
struct Bundle<'a> {
    #[serde(borrow)]
    operations: Option<&'a RawValue>,
    #[serde(rename = "requiredLeases", default)]
    required_leases: Option<Value>,
    #[serde(default)]
    kv: Option<Value>,
    #[serde(default)]
    timers: Option<Value>,
}

#[derive(Deserialize)]
struct OpHead<'a> {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(borrow)]
    items: Option<&'a RawValue>,
}

/// Parses the JSON bundle; payloads stay slices of `body`.
pub(crate) fn parse_bundle(body: &Bytes) -> Result<TxnRequest> {
    let bundle: Bundle<'_> =
        serde_json::from_slice(body).map_err(|e| Error::bad(format!("bad body: {e}")))?;
    for (name, rider) in [("kv", &bundle.kv), ("timers", &bundle.timers)] {
        if rider
            .as_ref()
            .is_some_and(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
        {
            return Err(Error::bad(format!("{name} operations are not supported")));
        }
    }
    let ops = bundle
        .operations
        .ok_or_else(|| Error::bad("bad body: operations is required"))?;
    let ops: Vec<&RawValue> = serde_json::from_str(ops.get())
        .map_err(|_| Error::bad("bad body: operations must be an array"))?;
    let mut req = TxnRequest {
        ops: Vec::with_capacity(ops.len()),
        required_leases: leases(bundle.required_leases)?,
    };
    for (index, raw) in ops.into_iter().enumerate() {
        let at = |e: Error| Error::bad(format!("operation {index}: {e}"));
        let head: OpHead<'_> = serde_json::from_str(raw.get())
            .map_err(|e| at(Error::bad(format!("not an operation object: {e}"))))?;
        match head.kind.as_deref() {
            Some("push") => match head.items {
                Some(items) => {
                    let items: Vec<&RawValue> = serde_json::from_str(items.get())
                        .map_err(|_| at(Error::bad("items must be an array")))?;
                    for (k, item) in items.into_iter().enumerate() {
                        let item = parse_item(body, item)
                            .map_err(|e| at(Error::bad(format!("item {k}: {e}"))))?;
                        req.ops.push(TxnOp::Push(item));
                    }
                }
                // The flat single-item form: the operation is the item.
                None => req
                    .ops
                    .push(TxnOp::Push(parse_item(body, raw).map_err(at)?)),
            },
            Some("ack") => {
                let op: Value =
                    serde_json::from_str(raw.get()).map_err(|e| at(Error::bad(e.to_string())))?;
                let group = group_name(op.get("consumerGroup")).map_err(at)?;
                req.ops.push(TxnOp::Ack(
                    parse_ack(&op, &group).map_err(|e| at(Error::bad(e)))?,
                ));
            }
            Some(other) => return Err(at(Error::bad(format!("unknown operation type {other:?}")))),
            None => return Err(at(Error::bad("type is required"))),
        }
    }
    Ok(req)
}

/// `requiredLeases`: the lease ids as strings (each an id by the edge rule); anything else
/// is ignored.
fn leases(value: Option<Value>) -> Result<Vec<String>> {
    let Some(Value::Array(items)) = value else {
        return Ok(Vec::new());
    };
    let ids: Vec<String> = items
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    for id in &ids {
        check_id("requiredLeases", id)?;
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<TxnRequest> {
        parse_bundle(&Bytes::from(v.to_string()))
    }

    #[test]
    fn flattens_push_items_and_keeps_acks_in_place() {
        let req = parse(json!({"operations": [
            {"type": "push", "items": [{"queue": "a", "payload": 1}, {"queue": "a", "payload": {"x": 2}}]},
            {"type": "ack", "transactionId": "t", "partitionId": "5", "status": "failed", "consumerGroup": "g"},
            {"type": "push", "queue": "b", "data": null},
        ], "requiredLeases": ["L"]}))
        .expect("valid bundle");
        assert_eq!(req.ops.len(), 4);
        assert!(matches!(&req.ops[1], TxnOp::Push(p) if &p.payload[..] == br#"{"x":2}"#));
        assert!(matches!(&req.ops[2], TxnOp::Ack(a) if a.partition_id == 5 && a.group == "g"));
        assert!(
            matches!(&req.ops[3], TxnOp::Push(p) if p.queue == "b" && &p.payload[..] == b"null")
        );
        assert_eq!(req.required_leases, vec!["L".to_string()]);
    }

    #[test]
    fn malformed_bundles_are_bad_requests() {
        for bad in [
            json!({}),
            json!({"operations": {}}),
            json!({"operations": [{"type": "pop"}]}),
            json!({"operations": [{"queue": "a", "payload": 1}]}),
            json!({"operations": [{"type": "ack", "partitionId": "1"}]}),
            json!({"operations": [{"type": "ack", "transactionId": "t", "partitionId": "x"}]}),
            json!({"operations": [{"type": "push", "items": [{"payload": 1}]}]}),
            json!({"operations": [], "kv": [{"op": "set"}]}),
        ] {
            assert!(
                matches!(parse(bad.clone()), Err(Error::BadRequest(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_bundle(&Bytes::from_static(b"{")),
            Err(Error::BadRequest(_))
        ));
    }
}
