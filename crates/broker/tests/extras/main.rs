//! Tests of the surfaces beyond the core queue: timers (docs/wire.md §22; their routes, their
//! firing by the wheel, the transaction rider, several brokers and restarts) and the reads by
//! offset (§23). One PostgreSQL
//! cluster serves the whole binary; each test gets its own database (see `queen_test_harness`).

use queen_test_harness as common;

mod reads;
mod timer_brokers;
mod timer_rider;
mod timers;

use base64::Engine as _;
use serde_json::{json, Value};

/// A schedule operation of `payload` under `key`, due in `delay_ms`.
pub fn schedule(queue: &str, key: &str, payload: &Value, delay_ms: i64) -> Value {
    let payload = base64::engine::general_purpose::STANDARD.encode(payload.to_string());
    json!({"op": "schedule", "queue": queue, "timerKey": key, "payload": payload,
           "delayMs": delay_ms, "txn": format!("txn-{queue}-{key}")})
}

/// Every message left in `queue` (popped in queue mode until it answers 204).
pub async fn drain(b: &common::TestBroker, queue: &str) -> Vec<Value> {
    let mut all = Vec::new();
    while let Some(p) = common::pop(b, queue, None, None, 1000, "&autoAck=true").await {
        all.extend(p.messages);
    }
    all
}

/// Polls `queue` until a message arrives or `secs` pass.
pub async fn first_message(b: &common::TestBroker, queue: &str, secs: u64) -> Option<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if let Some(p) = common::pop(b, queue, None, None, 10, "&autoAck=true").await {
            return p.messages.into_iter().next();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    None
}
