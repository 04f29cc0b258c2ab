//! The streams runtime's routes (docs/wire.md §24) against real brokers:
//! registration and its config-hash rule, state reads, and the cycle commit — state, sink
//! pushes and source ack in one PostgreSQL transaction, answered again (not applied twice)
//! when retried after a lost answer, and serialized per (query, partition). One PostgreSQL
//! cluster serves the whole binary; each test gets its own database (see `queen_test_harness`).

use queen_test_harness as common;

mod concurrency;
mod cycle;
mod kill;
mod registration;

use reqwest::StatusCode;
use serde_json::{json, Value};

/// Registers query `name` (hash `hash`); its id.
pub async fn register(b: &common::TestBroker, name: &str, hash: &str) -> String {
    let (status, body) = b
        .post(
            "/streams/v1/queries",
            &json!({"name": name, "source_queue": "src", "sink_queue": "sink",
                    "config_hash": hash, "reset": false}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["query_id"].as_str().expect("query_id").to_string()
}

/// `POST /streams/v1/cycle`; the answer (asserting HTTP 200).
pub async fn cycle(b: &common::TestBroker, body: &Value) -> Value {
    let (status, answer) = b.post("/streams/v1/cycle", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

/// The state rows of (query, partition) as `{key: value}`.
pub async fn state(b: &common::TestBroker, query: &str, partition: &str) -> Value {
    let (status, body) = b
        .post(
            "/streams/v1/state/get",
            &json!({"query_id": query, "partition_id": partition, "keys": []}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut out = serde_json::Map::new();
    for row in body["rows"].as_array().expect("rows") {
        out.insert(
            row["key"].as_str().expect("key").to_string(),
            row["value"].clone(),
        );
    }
    Value::Object(out)
}

/// Messages stored in `queue` (every partition).
pub async fn depth(db: &tokio_postgres::Client, queue: &str) -> i64 {
    db.query_one(
        "SELECT COALESCE(sum(lp.last_offset + 1), 0)::bigint FROM queen.log_partitions lp
         JOIN queen.queues q ON q.id = lp.queue_id WHERE q.name = $1",
        &[&queue],
    )
    .await
    .expect("depth")
    .get(0)
}

/// A cycle acking the whole popped batch: one state upsert, one sink push per message.
pub fn full_cycle(query: &str, group: &str, popped: &common::Popped) -> Value {
    let last = popped.messages.last().expect("a message");
    let pushes: Vec<Value> = popped
        .messages
        .iter()
        .map(|m| json!({"queue": "sink", "partition": "p", "payload": {"from": m["data"]}}))
        .collect();
    json!({
        "query_id": query, "partition_id": last["partitionId"], "consumer_group": group,
        "state_ops": [{"type": "upsert", "key": "seen", "value": {"n": popped.messages.len()}}],
        "push_items": pushes,
        "ack": {"transactionId": last["transactionId"], "leaseId": popped.lease_id,
                "status": "completed", "count": popped.messages.len()},
        "release_lease": true,
    })
}
