//! The answers of a transaction (docs/wire.md §10.2–§10.3): the committed results listed or
//! counted, and the failure shape shared by rollbacks and malformed bundles.

use crate::engine::tenant::local;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::engine::transaction::OpResult;
use crate::http::kv::with_index;

/// The committed answer: one result per operation, in operation order, then one per rider
/// operation (the flat index: `index` counts on past the operations, `opIndex` within the
/// rider).
pub(super) fn committed(bundle_id: &str, results: &[OpResult]) -> Value {
    let results: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(i, r)| render_result(i, r))
        .collect();
    json!({ "transactionId": bundle_id, "success": true, "results": results })
}

/// `{"transactionId","success":false,"error","reason","results":[]}`.
pub(super) fn failure(status: StatusCode, bundle_id: &str, error: &str, reason: &str) -> Response {
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
                "messageId": message_id.to_string(), "queueName": local(queue),
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
        OpResult::Kv {
            op_index,
            op,
            verdict,
        } => {
            let mut v = with_index(verdict.clone(), index, op);
            v["opIndex"] = json!(op_index);
            v["type"] = json!("kv");
            v
        }
        OpResult::Timer { op_index, outcome } => {
            let mut v = crate::http::timers::outcome_json(outcome);
            v["index"] = json!(index);
            v["opIndex"] = json!(op_index);
            v["type"] = json!("timer");
            v["success"] = json!(outcome.ok());
            v
        }
    }
}

/// The committed answer with flag 2: the pushes and acks counted instead of listed
/// (`pushed` = messages written, `duplicate` = repeats inside the bundle, `acked` = acks
/// that took effect). There are no rider results to keep.
pub(super) fn counted(bundle_id: &str, results: &[OpResult]) -> Value {
    let (mut pushed, mut duplicate, mut acked) = (0, 0, 0);
    for r in results {
        match r {
            OpResult::Push {
                duplicate: true, ..
            } => duplicate += 1,
            OpResult::Push { .. } => pushed += 1,
            OpResult::Ack { outcome, .. } if outcome.success => acked += 1,
            OpResult::Ack { .. } | OpResult::Kv { .. } | OpResult::Timer { .. } => {}
        }
    }
    json!({
        "transactionId": bundle_id, "success": true, "results": [],
        "pushed": pushed, "duplicate": duplicate, "acked": acked,
    })
}
