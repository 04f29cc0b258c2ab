//! Checking of key-value operations (docs/wire.md §20.1), shared by `POST /api/v1/kv` and the
//! transaction's `kv` rider: every operation is turned into the normalised form
//! `queen.kv_apply_v1` takes, or refused with a stable reason and a sentence naming the field.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use crate::engine::kv::{
    MAX_KEYS, MAX_KEY_BYTES, MAX_OPS, MAX_TTL_SECONDS, MAX_VALUE_BYTES, PREFIX_LIMIT_DEFAULT,
    PREFIX_LIMIT_MAX,
};

/// Why a call was refused: a stable id (`reason`) and the sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub detail: String,
}

fn bad(detail: impl Into<String>) -> Refusal {
    Refusal {
        reason: "kv_bad_request",
        detail: detail.into(),
    }
}

/// Where the operations come from: a transaction refuses `getPrefix` (unbounded reads under
/// the bundle's locks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Route,
    Transaction,
}

/// Checks a call's operations; `ops` is the JSON array as sent.
pub fn parse_ops(ops: &Value, caller: Caller) -> Result<Vec<Value>, Refusal> {
    let list = ops
        .as_array()
        .ok_or_else(|| bad("operations must be an array"))?;
    if list.len() > MAX_OPS {
        return Err(Refusal {
            reason: "kv_too_many_operations",
            detail: format!("{} operations; at most {MAX_OPS} per call", list.len()),
        });
    }
    let mut keys = 0;
    let mut written = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, op) in list.iter().enumerate() {
        let at = |r: Refusal| Refusal {
            reason: r.reason,
            detail: format!("operation {i}: {}", r.detail),
        };
        let op = parse_op(op, caller).map_err(at)?;
        keys += op["keys"].as_array().map_or(1, Vec::len);
        if is_write(&op) && !written.insert((op["ns"].clone(), op["key"].clone())) {
            return Err(at(bad(format!(
                "key {} of namespace {} is written twice in one call",
                op["key"], op["ns"]
            ))));
        }
        out.push(op);
    }
    if keys > MAX_KEYS {
        return Err(Refusal {
            reason: "kv_too_many_keys",
            detail: format!("{keys} keys; at most {MAX_KEYS} per call"),
        });
    }
    Ok(out)
}

fn is_write(op: &Value) -> bool {
    matches!(
        op["op"].as_str(),
        Some("put" | "putIfAbsent" | "delete" | "incr")
    )
}

/// The fields each operation takes (besides `op` and `ns`).
fn allowed(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "get" => &["key"],
        "getMany" => &["keys"],
        "getPrefix" => &["prefix", "after", "limit", "keysOnly"],
        "put" => &[
            "key",
            "value",
            "ttlSeconds",
            "forever",
            "expect",
            "required",
        ],
        "putIfAbsent" => &["key", "value", "ttlSeconds", "forever", "required"],
        "delete" => &["key", "expect", "required"],
        "check" => &["key", "expect", "required"],
        "incr" => &[
            "key",
            "delta",
            "min",
            "max",
            "ttlSeconds",
            "forever",
            "required",
        ],
        _ => return None,
    })
}

fn parse_op(op: &Value, caller: Caller) -> Result<Value, Refusal> {
    let obj = op
        .as_object()
        .ok_or_else(|| bad("an operation is a JSON object"))?;
    let name = obj
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("op is required"))?;
    let fields = allowed(name).ok_or_else(|| bad(format!("unknown op {name:?}")))?;
    if name == "getPrefix" && caller == Caller::Transaction {
        return Err(Refusal {
            reason: "kv_get_prefix_not_allowed_in_transaction",
            detail: "getPrefix is not allowed in a transaction".into(),
        });
    }
    if let Some(extra) = obj
        .keys()
        .find(|k| *k != "op" && *k != "ns" && !fields.contains(&k.as_str()))
    {
        return Err(bad(format!("{name} takes no field {extra:?}")));
    }
    let mut out = Map::new();
    out.insert("op".into(), json!(name));
    out.insert("ns".into(), json!(namespace(obj.get("ns"))?));
    if fields.contains(&"key") {
        out.insert("key".into(), json!(key("key", obj.get("key"))?));
    }
    match name {
        "getMany" => {
            let keys = obj
                .get("keys")
                .and_then(Value::as_array)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| bad("keys must be a non-empty array"))?;
            let keys = keys
                .iter()
                .map(|k| key("keys[]", Some(k)))
                .collect::<Result<Vec<_>, _>>()?;
            out.insert("keys".into(), json!(keys));
        }
        "getPrefix" => prefix_fields(obj, &mut out)?,
        "put" | "putIfAbsent" => {
            let value = obj.get("value").ok_or_else(|| bad("value is required"))?;
            let size = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
            if size > MAX_VALUE_BYTES {
                return Err(bad(format!(
                    "value is {size} bytes as JSON; at most {MAX_VALUE_BYTES}"
                )));
            }
            out.insert("value".into(), value.clone());
            expiry(obj, &mut out)?;
        }
        "incr" => {
            out.insert("delta".into(), number("delta", obj.get("delta"))?);
            for bound in ["min", "max"] {
                if let Some(v) = obj.get(bound).filter(|v| !v.is_null()) {
                    out.insert(bound.into(), number(bound, Some(v))?);
                }
            }
            expiry(obj, &mut out)?;
        }
        _ => {}
    }
    if let Some(v) = obj.get("expect") {
        let expect = v
            .as_u64()
            .filter(|n| i64::try_from(*n).is_ok())
            .ok_or_else(|| bad("expect must be a whole number >= 0 (0: must not exist)"))?;
        out.insert("expect".into(), json!(expect));
    } else if name == "check" {
        return Err(bad(
            "check needs expect: the version, or 0 for must not exist",
        ));
    }
    match obj.get("required") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            out.insert("required".into(), json!(true));
        }
        Some(_) => return Err(bad("required must be a boolean")),
    }
    Ok(Value::Object(out))
}

fn prefix_fields(obj: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), Refusal> {
    let prefix = key("prefix", obj.get("prefix")).map_err(|r| Refusal {
        reason: "kv_prefix_required",
        detail: r.detail,
    })?;
    out.insert("prefix".into(), json!(prefix));
    if let Some(after) = obj.get("after").filter(|v| !v.is_null()) {
        out.insert("after".into(), json!(key("after", Some(after))?));
    }
    let limit = match obj.get("limit") {
        None | Some(Value::Null) => PREFIX_LIMIT_DEFAULT,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| bad("limit must be a whole number"))?
            .clamp(1, PREFIX_LIMIT_MAX as i64) as u64,
    };
    out.insert("limit".into(), json!(limit));
    match obj.get("keysOnly") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            out.insert("keysOnly".into(), json!(true));
        }
        Some(_) => return Err(bad("keysOnly must be a boolean")),
    }
    Ok(())
}

/// Exactly one of `ttlSeconds` (a whole number of seconds above zero) and `forever: true`.
fn expiry(obj: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), Refusal> {
    let not_specified = |detail: &str| Refusal {
        reason: "kv_expiry_not_specified",
        detail: detail.into(),
    };
    match (obj.get("ttlSeconds"), obj.get("forever")) {
        (Some(ttl), None) => {
            let ttl = ttl
                .as_u64()
                .filter(|t| (1..=MAX_TTL_SECONDS).contains(t))
                .ok_or_else(|| {
                    bad(format!(
                        "ttlSeconds must be a whole number from 1 to {MAX_TTL_SECONDS}"
                    ))
                })?;
            out.insert("ttlSeconds".into(), json!(ttl));
        }
        (None, Some(Value::Bool(true))) => {
            out.insert("forever".into(), json!(true));
        }
        (None, Some(_)) => return Err(bad("forever must be true when given")),
        (None, None) => {
            return Err(not_specified(
                "a write needs exactly one expiry: ttlSeconds or forever:true",
            ))
        }
        (Some(_), Some(_)) => {
            return Err(not_specified(
                "a write takes one expiry, not both ttlSeconds and forever",
            ))
        }
    }
    Ok(())
}

/// `^[a-z0-9][a-z0-9._-]{0,63}$`.
fn namespace(v: Option<&Value>) -> Result<&str, Refusal> {
    let ns = v
        .and_then(Value::as_str)
        .ok_or_else(|| bad("ns is required"))?;
    let ok = ns.len() <= 64
        && ns.bytes().enumerate().all(|(i, b)| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || (i > 0 && matches!(b, b'.' | b'_' | b'-'))
        })
        && !ns.is_empty();
    if !ok {
        return Err(bad(format!(
            "ns {ns:?} is not a namespace: 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit"
        )));
    }
    Ok(ns)
}

/// A non-empty string without NUL of at most [`MAX_KEY_BYTES`].
fn key<'a>(field: &str, v: Option<&'a Value>) -> Result<&'a str, Refusal> {
    let k = v
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| bad(format!("{field} must be a non-empty string")))?;
    if k.len() > MAX_KEY_BYTES || k.contains('\0') {
        return Err(bad(format!(
            "{field} must be at most {MAX_KEY_BYTES} bytes, without NUL"
        )));
    }
    Ok(k)
}

/// A JSON number (not a boolean, not a string).
fn number(field: &str, v: Option<&Value>) -> Result<Value, Refusal> {
    match v {
        Some(n @ Value::Number(_)) => Ok(n.clone()),
        _ => Err(bad(format!("{field} must be a number"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(op: Value) -> Result<Value, Refusal> {
        parse_ops(&json!([op]), Caller::Route).map(|mut v| v.remove(0))
    }

    #[test]
    fn normalises_and_clamps() {
        let op = one(json!({"op":"getPrefix","ns":"a","prefix":"p","limit":5000})).unwrap();
        assert_eq!(op["limit"], 1000);
        let op = one(json!({"op":"getPrefix","ns":"a","prefix":"p"})).unwrap();
        assert_eq!(op["limit"], 100);
        let op =
            one(json!({"op":"put","ns":"a.b-c_d","key":"k","value":null,"forever":true})).unwrap();
        assert_eq!(op["value"], Value::Null);
    }

    #[test]
    fn refusals_name_their_reason() {
        for (op, reason) in [
            (
                json!({"op":"put","ns":"NOT A NAMESPACE","key":"k","value":1,"ttlSeconds":1}),
                "kv_bad_request",
            ),
            (
                json!({"op":"put","ns":"a","key":"k","value":1}),
                "kv_expiry_not_specified",
            ),
            (
                json!({"op":"put","ns":"a","key":"k","value":1,"ttlSeconds":1,"forever":true}),
                "kv_expiry_not_specified",
            ),
            (
                json!({"op":"put","ns":"a","key":"k","value":1,"ttlSeconds":0}),
                "kv_bad_request",
            ),
            (
                json!({"op":"put","ns":"a","key":"","value":1,"ttlSeconds":1}),
                "kv_bad_request",
            ),
            (
                json!({"op":"put","ns":"a","key":"k\u{0}","value":1,"ttlSeconds":1}),
                "kv_bad_request",
            ),
            (
                json!({"op":"put","ns":"a","key":"k","value":1,"ttlSeconds":1,"expect":-1}),
                "kv_bad_request",
            ),
            (
                json!({"op":"incr","ns":"a","key":"k","delta":true,"ttlSeconds":1}),
                "kv_bad_request",
            ),
            (json!({"op":"check","ns":"a","key":"k"}), "kv_bad_request"),
            (
                json!({"op":"getPrefix","ns":"a","prefix":""}),
                "kv_prefix_required",
            ),
            (
                json!({"op":"get","ns":"a","key":"k","bogus":1}),
                "kv_bad_request",
            ),
            (json!({"op":"set","ns":"a","key":"k"}), "kv_bad_request"),
        ] {
            assert_eq!(one(op.clone()).map_err(|r| r.reason), Err(reason), "{op}");
        }
        let twice = json!([
            {"op":"put","ns":"a","key":"k","value":1,"ttlSeconds":1},
            {"op":"delete","ns":"a","key":"k"},
        ]);
        assert!(parse_ops(&twice, Caller::Route).is_err());
        let prefix = json!([{"op":"getPrefix","ns":"a","prefix":"p"}]);
        assert_eq!(
            parse_ops(&prefix, Caller::Transaction).map_err(|r| r.reason),
            Err("kv_get_prefix_not_allowed_in_transaction")
        );
        let big = json!([{"op":"put","ns":"a","key":"k","ttlSeconds":1,
                          "value":"x".repeat(MAX_VALUE_BYTES)}]);
        assert!(parse_ops(&big, Caller::Route).is_err());
    }
}
