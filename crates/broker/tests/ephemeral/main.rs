//! Ephemeral queues (docs/engine.md §17, docs/wire.md §25) against real brokers: the round
//! trip, groups and partitions, the four ack outcomes, leases and redelivery, the overflow
//! policies and the ttl, the window buffer and the long poll, reset and delete, refusals, many
//! consumers on two brokers, and what a broker restart keeps and a PostgreSQL crash loses. One
//! PostgreSQL cluster serves the binary (each test its own database); the crash test starts a
//! cluster of its own.

use queen_test_harness as common;

mod bounds;
mod concurrency;
mod loss;
mod outcomes;
mod refusals;
mod round_trip;

use reqwest::StatusCode;
use serde_json::{json, Value};

/// `POST /api/v1/ephemeral/push`; the status and body.
pub async fn push(
    b: &common::TestBroker,
    queue: &str,
    partition: Option<&str>,
    payloads: &[Value],
) -> (StatusCode, Value) {
    let messages: Vec<Value> = payloads.iter().map(|p| json!({ "payload": p })).collect();
    let mut body = json!({ "queue": queue, "messages": messages });
    if let Some(p) = partition {
        body["partition"] = json!(p);
    }
    b.post("/api/v1/ephemeral/push", &body).await
}

/// A push that must be stored.
pub async fn pushed(b: &common::TestBroker, queue: &str, payloads: &[Value]) {
    let (status, body) = push(b, queue, None, payloads).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["pushed"], payloads.len(), "{body}");
}

/// `GET /api/v1/ephemeral/pop?queue=…&{query}`; the messages (asserting 200).
pub async fn pop(b: &common::TestBroker, queue: &str, query: &str) -> Vec<Value> {
    let (status, body) = b
        .get(&format!("/api/v1/ephemeral/pop?queue={queue}&{query}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["queue"], queue, "{body}");
    body["messages"].as_array().expect("messages").clone()
}

/// The payloads of popped messages.
pub fn payloads(messages: &[Value]) -> Vec<Value> {
    messages.iter().map(|m| m["payload"].clone()).collect()
}

/// `POST /api/v1/ephemeral/ack`; the outcomes in order (asserting 200 and the ids echoed).
pub async fn ack(
    b: &common::TestBroker,
    queue: &str,
    group: Option<&str>,
    acks: Vec<Value>,
) -> Vec<String> {
    let mut body = json!({ "queue": queue, "acks": acks });
    if let Some(g) = group {
        body["group"] = json!(g);
    }
    let (status, answer) = b.post("/api/v1/ephemeral/ack", &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let results = answer["results"].as_array().expect("results");
    for (r, a) in results.iter().zip(body["acks"].as_array().expect("acks")) {
        assert_eq!(r["id"], a["id"], "{answer}");
    }
    results
        .iter()
        .map(|r| r["outcome"].as_str().expect("outcome").to_string())
        .collect()
}

/// Acks of `messages` with `status` (None: the default, completed).
pub fn acks_of(messages: &[Value], status: Option<&str>) -> Vec<Value> {
    messages
        .iter()
        .map(|m| match status {
            Some(s) => json!({ "id": m["id"], "status": s }),
            None => json!({ "id": m["id"] }),
        })
        .collect()
}

/// `POST /api/v1/ephemeral/configure` (asserting 200).
pub async fn configure(b: &common::TestBroker, queue: &str, options: Value) -> Value {
    let (status, body) = b
        .post(
            "/api/v1/ephemeral/configure",
            &json!({ "queue": queue, "options": options }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// `GET …/queues/{queue}/depth` (asserting 200).
pub async fn depth(b: &common::TestBroker, queue: &str) -> Value {
    let (status, body) = b
        .get(&format!("/api/v1/ephemeral/queues/{queue}/depth"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}
