//! The push door (`QUEEN_PUSH_WAIT_BUDGET_MS`, docs/engine.md §9): while push fusion holds work
//! it cannot settle within the budget (here a push held behind a lock on the segment table
//! for longer than the budget), a new push is refused at once, before its body is parsed, with
//! 429, `Retry-After` and a JSON error, and nothing of it is stored; the held push is never
//! lost, and once fusion makes progress again pushes are taken.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::body_budget::{hold_segment_writes, until_blocked};
use crate::common;

const BUDGET_MS: u64 = 300;
/// Far above anything the broker needs to refuse: reaching it means it waited instead.
const PROMPT: Duration = Duration::from_secs(10);

fn body(txn: &str) -> Value {
    json!({ "items": [{ "queue": "door", "partition": "p", "transactionId": txn, "payload": { "t": txn } }] })
}

#[tokio::test]
async fn a_push_that_would_wait_past_its_budget_is_refused_with_429_before_any_work() {
    let b = common::broker_with(|cfg| cfg.push_wait_budget_ms = BUDGET_MS).await;
    let (status, out) = b.post("/api/v1/push", &body("warm")).await;
    assert_eq!(status, StatusCode::CREATED, "{out}");

    let mut locker = common::connect(&b.pg).await;
    let lock = hold_segment_writes(&mut locker).await;
    let held = {
        let (url, http) = (b.at("/api/v1/push"), b.http.clone());
        tokio::spawn(async move {
            let r = http
                .post(url)
                .json(&body("held"))
                .send()
                .await
                .expect("POST");
            (r.status(), r.json::<Value>().await.unwrap_or(Value::Null))
        })
    };
    let db = b.sql().await;
    until_blocked(&db).await;
    // Stalled past twice the budget: every push is refused, none by chance.
    tokio::time::sleep(Duration::from_millis(3 * BUDGET_MS)).await;

    let refused = tokio::time::timeout(
        PROMPT,
        b.http
            .post(b.at("/api/v1/push"))
            .json(&body("refused"))
            .send(),
    )
    .await
    .expect("the push waited instead of being refused")
    .expect("POST");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry = refused.headers().get("retry-after").cloned();
    let retry: u64 = retry
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=30).contains(&retry), "Retry-After {retry}");
    let out: Value = refused.json().await.expect("JSON error");
    let error = out["error"].as_str().unwrap_or_default();
    assert!(error.contains("QUEEN_PUSH_WAIT_BUDGET_MS"), "{out}");

    lock.rollback().await.expect("unlock");
    let (status, out) = held.await.expect("held push");
    assert_eq!(status, StatusCode::CREATED, "{out}");
    assert_eq!(out[0]["status"], "queued", "{out}");
    let (status, out) = b.post("/api/v1/push", &body("after")).await;
    assert_eq!(status, StatusCode::CREATED, "the door opens again: {out}");
    let pop = b
        .http
        .get(b.at("/api/v1/pop/queue/door?batch=10&autoAck=true"))
        .send()
        .await
        .expect("pop");
    let popped: Value = pop.json().await.expect("pop answer");
    let txns: Vec<&str> = popped["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["transactionId"].as_str())
        .collect();
    assert_eq!(
        txns,
        ["warm", "held", "after"],
        "the refused push stored nothing"
    );
}
