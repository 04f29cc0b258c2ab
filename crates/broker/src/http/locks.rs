//! `POST /api/v1/locks` (docs/wire.md §21): lock and semaphore operations, checked here, run by
//! `engine::locks` on the key-value store, answered one result per operation. Verdicts (held,
//! lost) are 200; a malformed call is 400 `locks_bad_request` in the key-value envelope.

use std::collections::HashSet;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use crate::engine::kv::MAX_TTL_SECONDS;
use crate::engine::locks::{
    self, permit_key, Holder, LockOp, LockVerdict, MAX_LIMIT, MAX_NAME_BYTES, MAX_OPS, NAMESPACE,
};
use crate::engine::Engine;
use crate::http::auth::CallerTenant;
use crate::http::extract::RawBody;
use crate::http::kv::parse::Refusal;
use crate::http::kv::refused;

pub fn routes() -> Router<Engine> {
    Router::new().route("/api/v1/locks", post(locks_batch))
}

async fn locks_batch(
    State(st): State<Engine>,
    CallerTenant(tenant): CallerTenant,
    RawBody(body): RawBody,
) -> Response {
    let ops = match parse_body(&body) {
        Ok(ops) => ops,
        Err(detail) => {
            let r = Refusal {
                reason: "locks_bad_request",
                detail,
            };
            return refused("locks_bad_request", &r);
        }
    };
    match locks::run(&st, &tenant, &ops).await {
        Ok(verdicts) => {
            let results: Vec<Value> = verdicts
                .iter()
                .zip(&ops)
                .enumerate()
                .map(|(i, (v, op))| render(i, op, v))
                .collect();
            Json(json!({ "results": results })).into_response()
        }
        Err(e) => e.into_response(),
    }
}

fn parse_body(body: &[u8]) -> Result<Vec<LockOp>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("bad body: {e}"))?;
    let list = value
        .get("operations")
        .and_then(Value::as_array)
        .ok_or("operations must be an array")?;
    if list.len() > MAX_OPS {
        return Err(format!("{} operations; at most {MAX_OPS}", list.len()));
    }
    let mut names = HashSet::new();
    let mut ops = Vec::with_capacity(list.len());
    for (i, op) in list.iter().enumerate() {
        let op = parse_op(op).map_err(|e| format!("operation {i}: {e}"))?;
        if !names.insert(op.name().to_string()) {
            return Err(format!(
                "operation {i}: one operation per lock name per call"
            ));
        }
        ops.push(op);
    }
    Ok(ops)
}

fn parse_op(op: &Value) -> Result<LockOp, String> {
    let obj = op.as_object().ok_or("an operation is a JSON object")?;
    let kind = obj
        .get("op")
        .and_then(Value::as_str)
        .ok_or("op is required")?;
    let fields: &[&str] = match kind {
        "acquire" => &["name", "ttlSeconds", "owner", "limit"],
        "renew" => &["name", "token", "ttlSeconds", "slot", "owner"],
        "release" => &["name", "token", "slot"],
        "get" => &["name"],
        other => return Err(format!("unknown op {other:?}")),
    };
    if let Some(extra) = obj
        .keys()
        .find(|k| *k != "op" && !fields.contains(&k.as_str()))
    {
        return Err(format!("{kind} takes no field {extra:?}"));
    }
    let name = text(obj, "name", true)?.ok_or("name is required")?;
    Ok(match kind {
        "acquire" => LockOp::Acquire {
            name,
            ttl_seconds: ttl(obj)?,
            owner: text(obj, "owner", false)?.unwrap_or_else(|| queen_proto::new_v7().to_string()),
            limit: whole(obj, "limit", 1, MAX_LIMIT)?.unwrap_or(1),
        },
        "renew" => LockOp::Renew {
            name,
            token: token(obj)?,
            ttl_seconds: ttl(obj)?,
            slot: whole(obj, "slot", 0, MAX_LIMIT - 1)?.unwrap_or(0),
            owner: text(obj, "owner", false)?,
        },
        "release" => LockOp::Release {
            name,
            token: token(obj)?,
            slot: whole(obj, "slot", 0, MAX_LIMIT - 1)?.unwrap_or(0),
        },
        _ => LockOp::Get { name },
    })
}

/// A name (no `#`) or owner: 1 to 256 bytes without control characters.
fn text(obj: &Map<String, Value>, field: &str, is_name: bool) -> Result<Option<String>, String> {
    let Some(v) = obj.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let s = v.as_str().unwrap_or_default();
    let bad = s.is_empty()
        || s.len() > MAX_NAME_BYTES
        || s.chars().any(char::is_control)
        || (is_name && s.contains('#'));
    if bad {
        return Err(format!(
            "{field} must be 1 to {MAX_NAME_BYTES} bytes without control characters{}",
            if is_name { " and without '#'" } else { "" }
        ));
    }
    Ok(Some(s.to_string()))
}

fn ttl(obj: &Map<String, Value>) -> Result<u64, String> {
    obj.get("ttlSeconds")
        .and_then(Value::as_u64)
        .filter(|t| (1..=MAX_TTL_SECONDS).contains(t))
        .ok_or_else(|| format!("ttlSeconds must be a whole number from 1 to {MAX_TTL_SECONDS}"))
}

fn token(obj: &Map<String, Value>) -> Result<i64, String> {
    obj.get("token")
        .and_then(Value::as_i64)
        .filter(|t| *t > 0)
        .ok_or_else(|| "token must be the permit's token, a whole number above 0".into())
}

fn whole(obj: &Map<String, Value>, field: &str, min: u32, max: u32) -> Result<Option<u32>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| (min..=max).contains(n))
            .map(Some)
            .ok_or_else(|| format!("{field} must be a whole number from {min} to {max}")),
    }
}

fn render(index: usize, op: &LockOp, verdict: &LockVerdict) -> Value {
    let name = op.name();
    let kind = match op {
        LockOp::Acquire { .. } => "acquire",
        LockOp::Renew { .. } => "renew",
        LockOp::Release { .. } => "release",
        LockOp::Get { .. } => "get",
    };
    let mut out = json!({ "index": index, "op": kind, "name": name });
    let fields = match verdict {
        LockVerdict::Acquired {
            slot,
            token,
            owner,
            already,
        } => {
            let mut v = json!({"acquired": true, "slot": slot, "token": token, "owner": owner,
                               "guard": guard(name, *slot, *token)});
            if *already {
                v["already"] = json!(true);
            }
            v
        }
        LockVerdict::Refused { reason, holders } => {
            json!({"acquired": false, "reason": reason, "holders": render_holders(holders)})
        }
        LockVerdict::Renewed { slot, token } => {
            json!({"renewed": true, "slot": slot, "token": token, "guard": guard(name, *slot, *token)})
        }
        LockVerdict::Released => json!({"released": true}),
        LockVerdict::Lost { holders } => {
            let verdict = if matches!(op, LockOp::Renew { .. }) {
                "renewed"
            } else {
                "released"
            };
            json!({verdict: false, "reason": "lost", "holders": render_holders(holders)})
        }
        LockVerdict::Held { holders } => {
            json!({"held": !holders.is_empty(), "holders": render_holders(holders)})
        }
    };
    if let (Value::Object(out), Value::Object(fields)) = (&mut out, fields) {
        out.extend(fields);
    }
    out
}

/// The key-value `check` that holds while the permit is this token's.
fn guard(name: &str, slot: u32, token: i64) -> Value {
    json!({"op": "check", "ns": NAMESPACE, "key": permit_key(name, slot), "expect": token,
           "required": true})
}

fn render_holders(holders: &[Holder]) -> Value {
    holders
        .iter()
        .map(|h| {
            json!({"slot": h.slot, "owner": h.owner, "token": h.token, "since": h.since,
                   "expiresAt": h.expires_at, "renewedAt": h.renewed_at})
        })
        .collect()
}
