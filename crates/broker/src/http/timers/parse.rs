//! Timer operations as the client sends them (docs/wire.md §22.1), for `POST /api/v1/timers`
//! and the transaction's `timers` rider: each one checked field by field into a
//! [`TimerOp`]. Every refusal is a 400 naming the operation and the field.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use queen_proto::name::check_id;
use queen_proto::Name;
use serde_json::{Map, Value};

use crate::engine::push::DEFAULT_PARTITION;
use crate::engine::timers::{
    Schedule, TimerOp, MAX_DELAY_MS, MAX_KEY_BYTES, MAX_OPS, MAX_PAYLOAD_BYTES,
};
use crate::error::{Error, Result};

/// The fields an operation may carry; anything else is refused, so a field the broker owns
/// (`messageId`, `deliverAt`, `producerSub`, `_…`) or a misspelling is never silently dropped.
const FIELDS: [&str; 8] = [
    "op",
    "queue",
    "timerKey",
    "payload",
    "delayMs",
    "txn",
    "partition",
    "payloadZstd",
];

/// A JSON array of operations (`what` names it in a refusal).
pub fn parse_ops(value: &Value, what: &str) -> Result<Vec<TimerOp>> {
    let ops = value
        .as_array()
        .ok_or_else(|| Error::bad(format!("{what} must be an array of timer operations")))?;
    if ops.len() > MAX_OPS {
        return Err(Error::bad(format!(
            "at most {MAX_OPS} timer operations per call, got {}",
            ops.len()
        )));
    }
    ops.iter()
        .enumerate()
        .map(|(i, op)| parse_op(op).map_err(|e| Error::bad(format!("{what}[{i}]: {e}"))))
        .collect()
}

fn parse_op(value: &Value) -> Result<TimerOp> {
    let op = value
        .as_object()
        .ok_or_else(|| Error::bad("a timer operation must be an object"))?;
    if let Some(field) = op.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Error::bad(format!(
            "`{field}` is not a timer operation field (the broker owns messageId, deliverAt \
             and the producer; the delay is delayMs)"
        )));
    }
    let queue = Name::parse("queue", text(op, "queue")?.unwrap_or_default())?.into_string();
    let timer_key = timer_key(text(op, "timerKey")?.unwrap_or_default())?.to_string();
    let txn = text(op, "txn")?.map(str::to_string);
    if let Some(txn) = &txn {
        check_id("txn", txn)?;
    }
    match text(op, "op")? {
        Some(kind @ ("schedule" | "reschedule")) => Ok(TimerOp::Schedule(Schedule {
            reschedule: kind == "reschedule",
            partition: Name::optional("partition", text(op, "partition")?)?
                .map_or_else(|| DEFAULT_PARTITION.to_string(), Name::into_string),
            payload: payload(op)?,
            delay_ms: delay_ms(op)?,
            message_id: queen_proto::new_v7(),
            txn: txn
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| queen_proto::new_v7().to_string()),
            queue,
            timer_key,
        })),
        Some("cancel") => Ok(TimerOp::Cancel {
            queue,
            timer_key,
            txn,
        }),
        Some(other) => Err(Error::bad(format!(
            "op `{other}` is not one of schedule, reschedule, cancel"
        ))),
        None => Err(Error::bad("op is required")),
    }
}

/// A timer key: non-empty, at most [`MAX_KEY_BYTES`] bytes, no NUL or other control character.
pub fn timer_key(key: &str) -> Result<&str> {
    if key.is_empty() {
        return Err(Error::bad("timerKey is required"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::bad(format!(
            "timerKey is {} bytes; at most {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::bad("timerKey contains a control character"));
    }
    Ok(key)
}

/// A string field, absent or `null` as `None`; any other type is refused.
fn text<'a>(op: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>> {
    match op.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::bad(format!("{field} must be a string"))),
    }
}

fn delay_ms(op: &Map<String, Value>) -> Result<i64> {
    let delay = op
        .get("delayMs")
        .and_then(Value::as_i64)
        .ok_or_else(|| Error::bad("delayMs is required and must be an integer"))?;
    if delay > MAX_DELAY_MS {
        return Err(Error::bad(format!(
            "delayMs {delay} is past the horizon of {MAX_DELAY_MS} ms (90 days)"
        )));
    }
    Ok(delay.max(-MAX_DELAY_MS))
}

/// The first bytes of every zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The payload: base64 of the message's JSON document, zstd-compressed first when
/// `payloadZstd` is true.
fn payload(op: &Map<String, Value>) -> Result<Vec<u8>> {
    let encoded = text(op, "payload")?.ok_or_else(|| Error::bad("payload is required"))?;
    let mut bytes = STANDARD
        .decode(encoded)
        .map_err(|e| Error::bad(format!("payload is not base64: {e}")))?;
    match op.get("payloadZstd") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => {
            if !bytes.starts_with(&ZSTD_MAGIC) {
                return Err(Error::bad(
                    "payloadZstd is true but payload is not a zstd frame",
                ));
            }
            bytes = queen_proto::segment::decompress(&bytes, MAX_PAYLOAD_BYTES)
                .map_err(|e| Error::bad(format!("payload is not a zstd frame: {e}")))?;
        }
        Some(_) => return Err(Error::bad("payloadZstd must be a boolean")),
    }
    if bytes.len() > MAX_PAYLOAD_BYTES {
        return Err(Error::bad(format!(
            "payload is {} bytes; at most {MAX_PAYLOAD_BYTES}",
            bytes.len()
        )));
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
        .map_err(|e| Error::bad(format!("payload is not a JSON document: {e}")))?;
    Ok(bytes)
}
