//! The per-queue bounds and their two policies, and the ttl.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::common;
use crate::{ack, acks_of, configure, depth, pop, push, pushed};

#[tokio::test]
async fn policy_reject_answers_429_queue_full() {
    let b = common::broker().await;
    configure(&b, "full", json!({"maxLength": 3})).await;
    pushed(&b, "full", &[json!(1), json!(2), json!(3)]).await;

    let r = b
        .http
        .post(b.at("/api/v1/ephemeral/push"))
        .json(&json!({"queue": "full", "messages": [{"payload": 4}]}))
        .send()
        .await
        .expect("push");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(
        (body["error"].as_str(), body["code"].as_str()),
        (Some("queue_full"), Some("queue_full")),
        "{body}"
    );
    assert_eq!(body["maxLength"], 3, "{body}");

    let (status, body) = push(&b, "full", None, &[json!(1), json!(2), json!(3), json!(4)]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["code"], "ephemeral_batch_too_large");

    // Consuming makes room again.
    let got = pop(&b, "full", "batch=2").await;
    ack(&b, "full", None, acks_of(&got, None)).await;
    pushed(&b, "full", &[json!(4), json!(5)]).await;
    let d = depth(&b, "full").await;
    assert_eq!(
        (d["length"].as_i64(), d["dropped"]["bounds"].as_i64()),
        (Some(3), Some(0)),
        "{d}"
    );

    configure(&b, "bytes", json!({"maxBytes": 10})).await;
    pushed(&b, "bytes", &[json!("12345678")]).await;
    let (status, body) = push(&b, "bytes", None, &[json!(1)]).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "10 payload bytes held: {body}"
    );
}

#[tokio::test]
async fn policy_drop_oldest_keeps_the_newest() {
    let b = common::broker().await;
    configure(
        &b,
        "ticker",
        json!({"maxLength": 3, "policy": "dropOldest"}),
    )
    .await;
    pushed(&b, "ticker", &[json!(1)]).await;
    let leased = pop(&b, "ticker", "").await;
    for n in 2..=5 {
        pushed(&b, "ticker", &[json!(n)]).await;
    }
    let (status, body) = push(&b, "ticker", Some("other"), &[json!(6), json!(7)]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["dropped"], 2, "{body}");

    let d = depth(&b, "ticker").await;
    assert_eq!(
        (d["length"].as_i64(), d["dropped"]["bounds"].as_i64()),
        (Some(3), Some(4)),
        "{d}"
    );
    let rest = pop(&b, "ticker", "partition=Default&batch=10").await;
    assert_eq!(crate::payloads(&rest), [json!(5)]);
    let other = pop(&b, "ticker", "partition=other&batch=10").await;
    assert_eq!(crate::payloads(&other), [json!(6), json!(7)]);
    assert_eq!(
        ack(&b, "ticker", None, acks_of(&leased, None)).await,
        ["unknown"],
        "dropped under its lease"
    );
}

#[tokio::test]
async fn the_retention_loop_drops_an_idle_queues_expired_messages() {
    let b = common::broker_with(|c| c.retention_interval_ms = 200).await;
    configure(&b, "idle", json!({"ttlSeconds": 1})).await;
    configure(&b, "forever", json!({})).await;
    pushed(&b, "idle", &[json!(1), json!(2)]).await;
    pushed(&b, "forever", &[json!(1)]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let d = depth(&b, "idle").await;
        if d["length"] == 0 {
            assert_eq!(d["dropped"]["ttl"], 2, "{d}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not swept: {d}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(depth(&b, "forever").await["length"], 1, "no ttl, kept");
}

#[tokio::test]
async fn messages_older_than_the_ttl_are_dropped() {
    let b = common::broker().await;
    configure(&b, "fresh", json!({"ttlSeconds": 1})).await;
    pushed(&b, "fresh", &[json!("old")]).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    pushed(&b, "fresh", &[json!("new")]).await;
    assert_eq!(
        crate::payloads(&pop(&b, "fresh", "batch=10").await),
        [json!("new")]
    );
    assert_eq!(depth(&b, "fresh").await["dropped"]["ttl"], 1);
}
