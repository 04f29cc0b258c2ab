//! Key-value store and locks (docs/engine.md §15, docs/wire.md §20–§21) against real
//! brokers: the operations' verdicts, expiry before the sweep and the sweep itself, the
//! transaction's `kv` rider sharing its bundle's fate, locks and semaphores, and many actors
//! racing on one key and one lock. One PostgreSQL cluster serves the whole binary; each test
//! gets its own database (see `queen_test_harness`).

use queen_test_harness as common;

mod concurrency;
mod locks;
mod rider;
mod store;

use reqwest::StatusCode;
use serde_json::{json, Value};

/// `POST /api/v1/kv` with `ops`; the results (asserting HTTP 200).
pub async fn kv(b: &common::TestBroker, ops: Value) -> Vec<Value> {
    let (status, body) = b.post("/api/v1/kv", &json!({ "operations": ops })).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["results"].as_array().expect("results").clone()
}

/// One operation's verdict.
pub async fn kv1(b: &common::TestBroker, op: Value) -> Value {
    kv(b, json!([op])).await.remove(0)
}

/// `POST /api/v1/locks` with one operation; its result (asserting HTTP 200).
pub async fn lock1(b: &common::TestBroker, op: Value) -> Value {
    let (status, body) = b
        .post("/api/v1/locks", &json!({ "operations": [op] }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["results"][0].clone()
}
