//! The JSON transaction body (docs/wire.md §10.1): operations flattened into a `TxnRequest`,
//! push items parsed like the push body's and acks like the ack body's; payloads stay slices
//! of the request body.

use axum::body::Bytes;
use queen_proto::LeaseId;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::engine::transaction::{TxnOp, TxnRequest};
use crate::error::{Error, Result};
use crate::http::ack::{group_name, parse_ack, AckItem};
use crate::http::extract::json_body;
use crate::http::kv::parse::{parse_ops, Caller};
use crate::http::push::parse::parse_item;
use crate::http::timers::parse::parse_ops as timer_ops;

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
pub(super) fn parse_bundle(body: &Bytes) -> Result<TxnRequest> {
    let bundle: Bundle<'_> = json_body(body)?;
    let kv = match bundle.kv {
        None | Some(Value::Null) => Vec::new(),
        Some(ops) => parse_ops(&ops, Caller::Transaction)
            .map_err(|r| Error::bad(format!("kv: {} ({})", r.detail, r.reason)))?,
    };
    let ops = bundle
        .operations
        .ok_or_else(|| Error::bad("bad body: operations is required"))?;
    let ops: Vec<&RawValue> = serde_json::from_str(ops.get())
        .map_err(|_| Error::bad("bad body: operations must be an array"))?;
    let mut req = TxnRequest {
        ops: Vec::with_capacity(ops.len()),
        required_leases: leases(bundle.required_leases)?,
        kv,
        timers: match bundle.timers {
            None | Some(Value::Null) => Vec::new(),
            Some(t) => timer_ops(&t, "timers")?,
        },
        stream: None,
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
                let op: AckItem<'_> =
                    serde_json::from_str(raw.get()).map_err(|e| at(Error::bad(e.to_string())))?;
                let group = group_name(&op.consumer_group).map_err(at)?;
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
fn leases(value: Option<Value>) -> Result<Vec<LeaseId>> {
    let Some(Value::Array(items)) = value else {
        return Ok(Vec::new());
    };
    items
        .iter()
        .filter_map(Value::as_str)
        .map(|id| Ok(LeaseId::parse("requiredLeases", id)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert!(
            matches!(&req.ops[2], TxnOp::Ack(a) if a.partition_id.get() == 5 && a.group == "g")
        );
        assert!(
            matches!(&req.ops[3], TxnOp::Push(p) if p.queue == "b" && &p.payload[..] == b"null")
        );
        let leases: Vec<&str> = req.required_leases.iter().map(LeaseId::as_str).collect();
        assert_eq!(leases, ["L"]);
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
            json!({"operations": [], "kv": [{"op": "getPrefix", "ns": "a", "prefix": "p"}]}),
            json!({"operations": [], "timers": [{"op": "schedule"}]}),
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
