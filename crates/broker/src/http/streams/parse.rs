//! The bodies of `/streams/v1/*` (docs/wire.md §24), checked: every field the official
//! client's streams runtime sends, with its type, limits and defaults. A malformed body is a
//! 400 naming the field.

use axum::body::Bytes;
use queen_proto::name::{check_id, check_text};
use queen_proto::wire::QUEUE_MODE;
use queen_proto::{LeaseId, Name, PartitionId};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::engine::ack::{Ack, AckStatus};
use crate::engine::streams::{
    Cycle, StateOp, MAX_PUSH_ITEMS, MAX_STATE_KEYS, MAX_STATE_KEY_BYTES, MAX_STATE_OPS,
};
use crate::error::{Error, Result};
use crate::http::push::parse::parse_item;

/// The body as a JSON object.
pub(super) fn object(body: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::bad("bad body: expected a JSON object")),
        Err(e) => Err(Error::bad(format!("bad body: {e}"))),
    }
}

/// A required non-empty string field (an id by the edge rule: bounded, no NUL).
pub(super) fn text<'a>(o: &'a Map<String, Value>, field: &'static str) -> Result<&'a str> {
    match o.get(field) {
        Some(Value::String(s)) if !s.is_empty() => {
            check_id(field, s)?;
            Ok(s)
        }
        Some(Value::String(_)) | None | Some(Value::Null) => {
            Err(Error::bad(format!("{field} is required")))
        }
        Some(_) => Err(Error::bad(format!("{field} must be a string"))),
    }
}

/// An optional string field: absent, `null` or empty → `None`.
pub(super) fn optional_text<'a>(
    o: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'a str>> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(_) => text(o, field).map(Some),
    }
}

/// An optional boolean field.
pub(super) fn flag(o: &Map<String, Value>, field: &'static str, default: bool) -> Result<bool> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(Error::bad(format!("{field} must be a boolean"))),
    }
}

/// `query_id`: the id registration answered.
pub(super) fn query_id(o: &Map<String, Value>) -> Result<Uuid> {
    Uuid::parse_str(text(o, "query_id")?)
        .map_err(|_| Error::bad("query_id is not a stream query id (a UUID)"))
}

/// `partition_id`: a source partition id (string or number), as its decimal text.
pub(super) fn partition_id(o: &Map<String, Value>) -> Result<PartitionId> {
    let id = match o.get("partition_id") {
        Some(Value::String(s)) => PartitionId::parse(s).ok(),
        Some(Value::Number(n)) => n.as_i64().and_then(PartitionId::new),
        None | Some(Value::Null) => return Err(Error::bad("partition_id is required")),
        Some(_) => None,
    };
    id.ok_or_else(|| Error::bad("partition_id is not a partition id"))
}

fn state_key(value: Option<&Value>, at: &str) -> Result<String> {
    let key = match value {
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(Error::bad(format!("{at}: key is required")))
        }
        Some(_) => return Err(Error::bad(format!("{at}: key must be a string"))),
    };
    if key.len() > MAX_STATE_KEY_BYTES {
        return Err(Error::bad(format!(
            "{at}: key is longer than {MAX_STATE_KEY_BYTES} bytes"
        )));
    }
    check_text("key", key)?;
    Ok(key.clone())
}

/// `keys` of a state read: absent, `null` or `[]` → every key.
pub(super) fn keys(o: &Map<String, Value>) -> Result<Vec<String>> {
    let items = match o.get("keys") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Error::bad("keys must be an array of strings")),
    };
    if items.len() > MAX_STATE_KEYS {
        return Err(Error::bad(format!(
            "keys names more than {MAX_STATE_KEYS} keys"
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, k)| state_key(Some(k), &format!("keys[{i}]")))
        .collect()
}

/// `ripe_at_or_before`: epoch milliseconds, or absent.
pub(super) fn ripe(o: &Map<String, Value>) -> Result<Option<i64>> {
    match o.get("ripe_at_or_before") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| f.floor() as i64)
            })
            .map(Some)
            .ok_or_else(|| Error::bad("ripe_at_or_before is not a number of milliseconds")),
        Some(_) => Err(Error::bad("ripe_at_or_before must be a number")),
    }
}

fn state_ops(o: &Map<String, Value>) -> Result<Vec<StateOp>> {
    let items = match o.get("state_ops") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Error::bad("state_ops must be an array")),
    };
    if items.len() > MAX_STATE_OPS {
        return Err(Error::bad(format!(
            "state_ops has more than {MAX_STATE_OPS} operations"
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let at = format!("state_ops[{i}]");
            let Value::Object(op) = op else {
                return Err(Error::bad(format!("{at}: not an object")));
            };
            let key = state_key(op.get("key"), &at)?;
            match op.get("type").and_then(Value::as_str) {
                Some("upsert") => match op.get("value") {
                    Some(value) => Ok(StateOp::Upsert {
                        key,
                        value: value.clone(),
                    }),
                    None => Err(Error::bad(format!("{at}: value is required"))),
                },
                Some("delete") => Ok(StateOp::Delete { key }),
                Some(other) => Err(Error::bad(format!(
                    "{at}: unknown type {other:?} (upsert or delete)"
                ))),
                None => Err(Error::bad(format!("{at}: type is required"))),
            }
        })
        .collect()
}

#[derive(Deserialize)]
struct Pushes<'a> {
    #[serde(borrow, default)]
    push_items: Option<&'a RawValue>,
}

fn ack(o: &Map<String, Value>, partition: PartitionId) -> Result<Option<Ack>> {
    let a = match o.get("ack") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(a)) => a,
        Some(_) => return Err(Error::bad("ack must be an object or null")),
    };
    let transaction_id = text(a, "transactionId").map_err(|e| Error::bad(format!("ack: {e}")))?;
    let lease = optional_text(a, "leaseId").map_err(|e| Error::bad(format!("ack: {e}")))?;
    let lease_id = LeaseId::parse("leaseId", lease.unwrap_or_default())
        .map_err(|e| Error::bad(format!("ack: {e}")))?;
    let status = match a.get("status") {
        None | Some(Value::Null) => AckStatus::Completed,
        Some(Value::String(s)) => AckStatus::normalise(Some(s)),
        Some(_) => return Err(Error::bad("ack: status must be a string")),
    };
    let group = match o.get("consumer_group") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Name::optional("consumer_group", Some(s))?,
        Some(_) => return Err(Error::bad("consumer_group must be a string")),
    };
    Ok(Some(Ack {
        transaction_id: transaction_id.to_string(),
        partition_id: partition,
        status,
        error: None,
        group: group.map_or_else(|| QUEUE_MODE.to_string(), Name::into_string),
        lease_id,
    }))
}

/// The cycle body. Its identity is xxh3_128 of the body re-serialized with sorted keys, so a
/// retry of the same request is the same cycle whatever its whitespace or key order.
pub(super) fn cycle(body: &Bytes) -> Result<Cycle> {
    let o = object(body)?;
    let partition = partition_id(&o)?;
    let pushes: Pushes<'_> =
        serde_json::from_slice(body).map_err(|e| Error::bad(format!("bad body: {e}")))?;
    let pushes = match pushes.push_items {
        None => Vec::new(),
        Some(raw) if raw.get() == "null" => Vec::new(),
        Some(raw) => {
            let items: Vec<&RawValue> = serde_json::from_str(raw.get())
                .map_err(|_| Error::bad("push_items must be an array"))?;
            if items.len() > MAX_PUSH_ITEMS {
                return Err(Error::bad(format!(
                    "push_items has more than {MAX_PUSH_ITEMS} items"
                )));
            }
            items
                .into_iter()
                .enumerate()
                .map(|(k, item)| {
                    parse_item(body, item).map_err(|e| Error::bad(format!("push_items[{k}]: {e}")))
                })
                .collect::<Result<_>>()?
        }
    };
    let canonical = Value::Object(o.clone()).to_string();
    Ok(Cycle {
        query: query_id(&o)?,
        partition: partition.get().to_string(),
        state_ops: state_ops(&o)?,
        pushes,
        ack: ack(&o, partition)?,
        release_lease: flag(&o, "release_lease", true)?,
        identity: queen_proto::hash::txn_hash(&canonical),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Cycle> {
        cycle(&Bytes::from(v.to_string()))
    }

    fn good() -> Value {
        json!({"query_id": "0190a0c4-1b2c-7d3e-8f40-123456789abc", "partition_id": "7",
               "consumer_group": "streams.q", "release_lease": true,
               "state_ops": [{"type": "upsert", "key": "k", "value": {"n": 1}},
                             {"type": "delete", "key": "j"}],
               "push_items": [{"queue": "out", "partition": "p", "payload": {"v": 1}}],
               "ack": {"transactionId": "t1", "leaseId": "L", "status": "completed", "count": 1}})
    }

    #[test]
    fn a_cycle_parses_and_its_identity_ignores_layout() {
        let c = parse(good()).expect("valid cycle");
        assert_eq!(
            (c.partition.as_str(), c.state_ops.len(), c.pushes.len()),
            ("7", 2, 1)
        );
        let ack = c.ack.expect("ack");
        assert_eq!(
            (ack.group.as_str(), ack.partition_id.get()),
            ("streams.q", 7)
        );
        let spaced = Bytes::from(serde_json::to_string_pretty(&good()).expect("json"));
        assert_eq!(cycle(&spaced).expect("valid").identity, c.identity);
        let mut other = good();
        other["ack"]["leaseId"] = json!("L2");
        assert_ne!(parse(other).expect("valid").identity, c.identity);
    }

    #[test]
    fn malformed_cycles_are_bad_requests() {
        let mutate = |f: &dyn Fn(&mut Value)| {
            let mut v = good();
            f(&mut v);
            v
        };
        for bad in [
            json!([]),
            mutate(&|v| v["query_id"] = json!("nope")),
            mutate(&|v| v["partition_id"] = json!("x")),
            mutate(&|v| v["partition_id"] = Value::Null),
            mutate(&|v| v["state_ops"] = json!([{"type": "merge", "key": "k"}])),
            mutate(&|v| v["state_ops"] = json!([{"type": "upsert", "key": "k"}])),
            mutate(&|v| v["state_ops"] = json!([{"type": "delete", "key": ""}])),
            mutate(&|v| v["push_items"] = json!([{"payload": 1}])),
            mutate(&|v| v["push_items"] = json!({})),
            mutate(&|v| v["ack"] = json!({"leaseId": "L"})),
            mutate(&|v| v["ack"] = json!(true)),
            mutate(&|v| v["release_lease"] = json!("yes")),
        ] {
            assert!(
                matches!(parse(bad.clone()), Err(Error::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
