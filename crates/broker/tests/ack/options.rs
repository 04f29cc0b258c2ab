//! Queue options that take effect (docs/wire.md §3.2): `maxSize` refuses pushes past the
//! queue's unconsumed count per item, `ttl` stops delivering old messages, `retryDelay` holds
//! a nacked batch back (and wakes parked pops when the hold ends), and an option this broker
//! does not know is refused rather than ignored.

use std::time::Duration;

use queen_proto::push_bin::encode_push_precompressed;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::common::statuses;
use crate::support::*;
use crate::wire::{batch, item, post_bin};

fn push_body(items: &[(&str, &str, u32)]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|(q, p, n)| json!({"queue": q, "partition": p, "payload": {"n": n}}))
        .collect();
    json!({ "items": items })
}

#[tokio::test]
async fn max_size_refuses_the_items_past_the_limit_and_only_those() {
    let b = common::broker().await;
    configure(&b, "cap", json!({ "maxSize": 3 })).await;
    let (status, out) = b
        .post(
            "/api/v1/push",
            &push_body(&[("cap", "a", 0), ("cap", "a", 1), ("free", "a", 2)]),
        )
        .await;
    assert_eq!(
        (status, statuses(&out)),
        (StatusCode::CREATED, vec!["queued"; 3])
    );
    // Within a partition, request order decides which items fit.
    let (status, out) = b
        .post(
            "/api/v1/push",
            &push_body(&[("cap", "a", 3), ("cap", "a", 4), ("free", "a", 5)]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
    assert_eq!(statuses(&out), ["queued", "failed", "queued"]);
    let error = out[1]["error"].as_str().unwrap();
    assert!(
        error.contains("max capacity") && error.contains("maxSize of 3"),
        "{error}"
    );

    // Full across partitions: a push alone is still a per-item answer (201), not a 5xx.
    let (status, out) = b.post("/api/v1/push", &push_body(&[("cap", "c", 5)])).await;
    assert_eq!(
        (status, statuses(&out)),
        (StatusCode::CREATED, vec!["failed"])
    );
    // A pre-compressed binary group and a transaction are refused the same way.
    let body = encode_push_precompressed(&[batch("cap", "d", vec![item(Some("z"), b"6")])], false)
        .expect("encodes");
    let (status, out) = post_bin(&b, "/api/v1/push", body).await;
    assert_eq!(
        (status, statuses(&out)),
        (StatusCode::CREATED, vec!["failed"])
    );
    let (_, txn) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations":[{"type":"push","items":[{"queue":"cap","payload":7}]}]}),
        )
        .await;
    assert_eq!(
        (&txn["success"], &txn["reason"]),
        (&json!(false), &json!("full")),
        "{txn}"
    );
    assert!(txn["error"].as_str().unwrap().contains("maxSize"), "{txn}");

    // Consuming makes room: three acked, three more fit, and not a fourth.
    let popped = pop(&b, "cap", Some("a"), None, 10, "")
        .await
        .expect("messages");
    ack_batch(
        &b,
        None,
        popped
            .messages
            .iter()
            .map(|m| ack_item(m, "completed"))
            .collect(),
    )
    .await;
    let (_, out) = b
        .post(
            "/api/v1/push",
            &push_body(&[
                ("cap", "c", 8),
                ("cap", "c", 9),
                ("cap", "c", 10),
                ("cap", "c", 11),
            ]),
        )
        .await;
    assert_eq!(statuses(&out), ["queued", "queued", "queued", "failed"]);
}

#[tokio::test]
async fn max_size_holds_under_concurrent_pushes() {
    let b = common::broker().await;
    configure(&b, "race", json!({ "maxSize": 5 })).await;
    let pushes = (0..24).map(|i| {
        let (http, url) = (b.http.clone(), b.at("/api/v1/push"));
        async move {
            let body = push_body(&[("race", &format!("p{}", i % 6), i)]);
            let r = http.post(url).json(&body).send().await.expect("push");
            assert_eq!(r.status(), StatusCode::CREATED);
            r.json::<Value>().await.expect("answer")[0]["status"].clone()
        }
    });
    let outcomes = futures::future::join_all(pushes).await;
    let queued = outcomes.iter().filter(|s| *s == "queued").count();
    assert_eq!(queued, 5, "{outcomes:?}");
    let db = b.sql().await;
    let stored: i64 = db
        .query_one(
            "SELECT COALESCE(sum(last_offset + 1), 0)::bigint FROM queen.log_partitions",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(stored, 5);
}

#[tokio::test]
async fn ttl_stops_delivering_messages_older_than_it() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "ttl", json!({ "ttl": 1 })).await;
    let old = txns("old", 3);
    push_txns(&b, "ttl", "p", &old).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let fresh = txns("fresh", 2);
    push_txns(&b, "ttl", "p", &fresh).await;
    let popped = pop(&b, "ttl", Some("p"), Some("g"), 10, "")
        .await
        .expect("fresh ones");
    assert_eq!(popped.txns(), fresh);
    // The expired ones are skipped, not leased: the cursor moved past them.
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.batch_end), (2, Some(4)));

    // ttl 0 (the default) never expires anything.
    configure(&b, "keep", json!({})).await;
    push_txns(&b, "keep", "p", &txns("k", 1)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(pop(&b, "keep", Some("p"), None, 10, "").await.is_some());
}

#[tokio::test]
async fn retry_delay_holds_a_nacked_batch_and_wakes_parked_pops_when_it_ends() {
    // Parked pops never re-check on their own here: only a wake brings them back.
    let b = broker_without_backoff_rechecks().await;
    let db = b.sql().await;
    configure(&b, "rd", json!({ "retryDelay": 1500, "retryLimit": 5 })).await;
    push_txns(&b, "rd", "p", &txns("m", 2)).await;
    let popped = pop(&b, "rd", Some("p"), Some("g"), 10, "")
        .await
        .expect("messages");
    let nack = ack_batch(&b, Some("g"), vec![ack_item(&popped.messages[0], "failed")]).await;
    assert_ok(&nack[0]);
    let held_at = std::time::Instant::now();
    let c = cursor(&db, popped.partition_id(), "g").await;
    assert_eq!((c.committed, c.batch_end, c.retries), (-1, None, 1));
    let hold = c.expires_in.expect("a hold");
    assert!((1.0..=1.6).contains(&hold), "held for the delay: {hold}");
    // The old lease is gone: it can neither ack nor renew what is held.
    let late = ack_batch(
        &b,
        Some("g"),
        vec![ack_item(&popped.messages[1], "completed")],
    )
    .await;
    assert_refused(&late[0], "lease");

    // Not redelivered before the delay, even to a fresh pop.
    assert!(pop(&b, "rd", Some("p"), Some("g"), 10, "").await.is_none());
    let parked = parked_pop(&b, "/api/v1/pop/queue/rd?batch=10&consumerGroup=g");
    let (status, body, _) = parked.await.expect("parked pop");
    let waited = held_at.elapsed();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    assert_eq!(body["messages"][0]["deliveryAttempt"], 2);
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(6),
        "redelivered when the hold ended, woken without a re-check: {waited:?}"
    );

    // A retry (no budget charged) is held the same way.
    let again: Vec<Value> = body["messages"].as_array().unwrap().clone();
    ack_batch(&b, Some("g"), vec![ack_item(&again[0], "retry")]).await;
    assert!(pop(&b, "rd", Some("p"), Some("g"), 10, "").await.is_none());
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert!(pop(&b, "rd", Some("p"), Some("g"), 10, "").await.is_some());
}

#[tokio::test]
async fn an_unknown_option_is_refused_not_ignored() {
    let b = common::broker().await;
    let db = b.sql().await;
    for (options, name) in [
        (json!({"leaseTim": 30}), "leaseTim"),
        (json!({"conflation": true, "leaseTime": 30}), "conflation"),
    ] {
        let (status, out) = b
            .post(
                "/api/v1/configure",
                &json!({"queue": "u", "options": options}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{out}");
        assert_eq!(out["invalid"], name);
        assert!(
            out["error"].as_str().unwrap().contains("not supported"),
            "{out}"
        );
    }
    assert_eq!(common::count(&db, "queen.queues").await, 0);
    // What the official client sends by default is all known.
    configure(
        &b,
        "u",
        json!({"leaseTime":300,"retryLimit":3,"priority":0,"delayedProcessing":0,"windowBuffer":0,
               "maxSize":0,"retentionSeconds":0,"completedRetentionSeconds":0,"encryptionEnabled":false}),
    )
    .await;
}
