//! `POST /api/v1/kv` (docs/wire.md §20): a batch of key-value operations, checked here
//! ([`parse`]), applied in order in one transaction (`engine::kv`), answered index-aligned.
//! Verdicts (a miss, a lost race, a refused increment) are 200; so is a lost `required`
//! precondition, which rolls the whole call back. A malformed call is 400 in the envelope the
//! official client reads its code from: `{"error": code, "code": code, "reason", "detail"}`.

pub mod parse;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::engine::kv::{self, KvLost};
use crate::engine::Engine;
use crate::http::auth::CallerTenant;
use crate::http::extract::RawBody;
use parse::{Caller, Refusal};

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/kv", post(kv_batch))
}

async fn kv_batch(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    let ops = match operations(&body).and_then(|ops| parse::parse_ops(&ops, Caller::Route)) {
        Ok(ops) => ops,
        Err(r) => return refused("kv_bad_request", &r),
    };
    match kv::apply(&st, &tenant, &ops).await {
        Ok(Ok(results)) => {
            let results: Vec<Value> = results
                .into_iter()
                .zip(&ops)
                .enumerate()
                .map(|(i, (r, op))| with_index(r, i, &op["op"]))
                .collect();
            Json(json!({ "results": results })).into_response()
        }
        Ok(Err(lost)) => Json(precondition_lost(&lost, lost.op_index)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `{"operations":[…]}`, or the bare array.
fn operations(body: &[u8]) -> Result<Value, Refusal> {
    let value: Value = serde_json::from_slice(body).map_err(|e| Refusal {
        reason: "kv_bad_request",
        detail: format!("bad body: {e}"),
    })?;
    match value {
        Value::Array(_) => Ok(value),
        Value::Object(mut obj) => obj.remove("operations").ok_or_else(|| Refusal {
            reason: "kv_bad_request",
            detail: "operations is required".into(),
        }),
        _ => Err(Refusal {
            reason: "kv_bad_request",
            detail: "bad body: expected {\"operations\":[…]}".into(),
        }),
    }
}

/// A verdict with its place: `index` and `op` first.
pub(crate) fn with_index(verdict: Value, index: usize, op: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("index".into(), json!(index));
    out.insert("op".into(), op.clone());
    if let Value::Object(fields) = verdict {
        out.extend(fields);
    }
    Value::Object(out)
}

/// The answer of a call (or transaction) rolled back by a lost `required` precondition;
/// `failed_index` is the operation's index in the caller's result space.
pub(crate) fn precondition_lost(lost: &KvLost, failed_index: usize) -> Value {
    json!({
        "success": false, "ok": false, "reason": "kv_precondition",
        "error": "kv_precondition_failed", "results": [], "failedIndex": failed_index,
        "kvReason": lost.kv_reason, "version": lost.version, "value": lost.value,
    })
}

/// A 400 in the envelope of the key-value and lock routes: the code in `error` and `code`.
pub(crate) fn refused(code: &str, r: &Refusal) -> Response {
    let body = json!({ "error": code, "code": code, "reason": r.reason, "detail": r.detail });
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}
