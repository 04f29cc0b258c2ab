//! The deletion rules (docs/engine.md §10.1) and what they leave behind: rule 1 deletes old
//! segments consumed or not, rule 2 only below the slowest cursor, max-wait eviction without
//! the enable flag; `log_start` follows, pops and seeks start there, message detail answers
//! 404, dead letters keep their payload, and a cursor left below an emptied partition is
//! sealed by the next pop.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::*;
use crate::common::{configure, partition_id, push_txns, txns};

/// Sleeps past a queue option of `seconds`.
async fn outlive(seconds: u64) {
    tokio::time::sleep(Duration::from_millis(seconds * 1000 + 300)).await;
}

#[tokio::test]
async fn rule_1_deletes_segments_older_than_retention_consumed_or_not() {
    let b = broker(|_| {}).await;
    let db = b.sql().await;
    configure(
        &b,
        "r1",
        json!({ "retentionEnabled": true, "retentionSeconds": 4 }),
    )
    .await;
    push_txns(&b, "r1", "p", &txns("old", 3)).await;
    let pid = partition_id(&db, "r1", "p").await;

    wait_runs(&b, 3).await;
    assert_eq!(bases(&db, pid).await, vec![0], "young segments stay");

    outlive(4).await;
    push_txns(&b, "r1", "p", &txns("new", 2)).await;
    eventually("the old segment to go", || async {
        bases(&db, pid).await == vec![3]
    })
    .await;
    assert_eq!(
        marks(&db, pid).await.0,
        3,
        "log_start is the first live offset"
    );
    let s = stats(&b).await;
    assert!(s["segmentsDeleted"].as_u64() >= Some(1), "{s}");
    assert!(s["messagesDeleted"].as_u64() >= Some(3), "{s}");
    assert_eq!(s["errors"], 0, "{s}");

    // Nobody consumed the old messages: the first pop starts at log_start.
    let got = pop(&b, "r1", Some("p"), None, 10, "&autoAck=true").await;
    assert_eq!(txn_ids(&got), txns("new", 2));
}

#[tokio::test]
async fn rule_2_deletes_only_below_the_slowest_cursor() {
    let b = broker(|_| {}).await;
    let db = b.sql().await;
    for t in txns("m", 4) {
        push_txns(&b, "r2", "p", &[t]).await;
    }
    let pid = partition_id(&db, "r2", "p").await;
    assert_eq!(consume(&b, "r2", "p", Some("fast")).await, txns("m", 4));
    // The slow group consumes one message; queue mode consumes two.
    let one = pop(&b, "r2", Some("p"), Some("slow"), 1, "").await;
    let item = crate::common::ack_item(&one[0], "completed");
    crate::common::ack_batch(&b, Some("slow"), vec![item]).await;
    let two = pop(&b, "r2", Some("p"), None, 2, "").await;
    let items = two
        .iter()
        .map(|m| crate::common::ack_item(m, "completed"))
        .collect();
    crate::common::ack_batch(&b, None, items).await;

    configure(
        &b,
        "r2",
        json!({ "retentionEnabled": true, "completedRetentionSeconds": 1 }),
    )
    .await;
    outlive(1).await;
    eventually("the segment every group consumed to go", || async {
        bases(&db, pid).await == vec![1, 2, 3]
    })
    .await;
    wait_runs(&b, 4).await;
    assert_eq!(
        bases(&db, pid).await,
        vec![1, 2, 3],
        "the slow group holds the rest"
    );
    assert_eq!(marks(&db, pid).await.0, 1);

    assert_eq!(
        consume(&b, "r2", "p", Some("slow")).await,
        txns("m", 4)[1..].to_vec()
    );
    eventually("queue mode to hold the rest", || async {
        bases(&db, pid).await == vec![2, 3]
    })
    .await;
    wait_runs(&b, 4).await;
    assert_eq!(
        bases(&db, pid).await,
        vec![2, 3],
        "queue mode counts like a group"
    );
    assert_eq!(
        consume(&b, "r2", "p", None).await,
        txns("m", 4)[2..].to_vec()
    );
    eventually("everything consumed to go", || async {
        bases(&db, pid).await.is_empty()
    })
    .await;
    assert_eq!(
        marks(&db, pid).await.0,
        4,
        "an empty partition starts at last_offset + 1"
    );
}

#[tokio::test]
async fn rule_2_keeps_what_nobody_or_a_registered_group_has_not_consumed() {
    let b = broker(|_| {}).await;
    let db = b.sql().await;
    configure(&b, "late", json!({})).await;
    // "late" registers on the queue while it has no partition: no cursor row anywhere yet.
    assert!(pop(&b, "late", None, Some("late"), 10, "").await.is_empty());
    push_txns(&b, "nobody", "p", &txns("n", 2)).await;
    push_txns(&b, "late", "p", &txns("l", 2)).await;
    assert_eq!(consume(&b, "late", "p", Some("early")).await, txns("l", 2));
    let (nobody, late) = (
        partition_id(&db, "nobody", "p").await,
        partition_id(&db, "late", "p").await,
    );
    assert_eq!(committed(&db, late, "late").await, None);

    let opts = json!({ "retentionEnabled": true, "completedRetentionSeconds": 1 });
    configure(&b, "nobody", opts.clone()).await;
    configure(&b, "late", opts).await;
    outlive(1).await;
    wait_runs(&b, 4).await;
    assert_eq!(
        bases(&db, nobody).await,
        vec![0],
        "no cursor: rule 2 deletes nothing"
    );
    assert_eq!(
        bases(&db, late).await,
        vec![0],
        "the registered group still wants it"
    );

    let got = pop(&b, "late", None, Some("late"), 10, "&autoAck=true").await;
    assert_eq!(txn_ids(&got), txns("l", 2));
    eventually(
        "the segment to go once the late group consumed it",
        || async { bases(&db, late).await.is_empty() },
    )
    .await;
}

#[tokio::test]
async fn max_wait_evicts_unconsumed_messages_and_pops_and_seeks_start_at_log_start() {
    let b = broker(|_| {}).await;
    let db = b.sql().await;
    configure(&b, "mw", json!({ "maxWaitTimeSeconds": 2 })).await;
    push_txns(&b, "mw", "p", &txns("old", 2)).await;
    let pid = partition_id(&db, "mw", "p").await;
    outlive(2).await;
    push_txns(&b, "mw", "p", &txns("new", 1)).await;
    eventually("eviction", || async { bases(&db, pid).await == vec![2] }).await;
    let s = stats(&b).await;
    assert!(s["segmentsEvicted"].as_u64() >= Some(1), "{s}");
    assert!(s["messagesEvicted"].as_u64() >= Some(2), "{s}");
    assert_eq!(s["segmentsDeleted"], 0, "no retention rule is enabled: {s}");

    let (status, _) = b.get(&format!("/api/v1/messages/{pid}/old-0")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "an evicted message is gone");
    let (status, detail) = b.get(&format!("/api/v1/messages/{pid}/new-0")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");

    assert_eq!(consume(&b, "mw", "p", Some("g")).await, txns("new", 1));
    let (status, body) = b
        .post(
            "/api/v1/consumer-groups/g/queues/mw/seek",
            &json!({ "timestamp": "2000-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        committed(&db, pid, "g").await,
        Some(1),
        "the seek lands on log_start − 1"
    );
    assert_eq!(consume(&b, "mw", "p", Some("g")).await, txns("new", 1));
}

#[tokio::test]
async fn dead_letters_keep_their_payload_after_retention() {
    let b = broker(|_| {}).await;
    let db = b.sql().await;
    configure(&b, "dl", json!({ "retryLimit": 0 })).await;
    push_txns(&b, "dl", "p", &txns("poison", 1)).await;
    let pid = partition_id(&db, "dl", "p").await;
    let got = pop(&b, "dl", Some("p"), Some("g"), 10, "").await;
    let mut nack = crate::common::ack_item(&got[0], "failed");
    nack["error"] = json!("bad input");
    let answer = crate::common::ack_batch(&b, Some("g"), vec![nack]).await;
    assert_eq!(answer[0]["dlq"], true, "{answer:?}");

    configure(
        &b,
        "dl",
        json!({ "retentionEnabled": true, "retentionSeconds": 1 }),
    )
    .await;
    outlive(1).await;
    eventually("the segment to go", || async {
        bases(&db, pid).await.is_empty()
    })
    .await;
    let (status, listing) = b.get("/api/v1/dlq?queue=dl").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listing["total"], 1, "{listing}");
    let row = &listing["messages"][0];
    assert_eq!(row["transactionId"], "poison-0");
    assert_eq!(
        row["data"],
        json!({ "txn": "poison-0" }),
        "the payload copy survives"
    );
    assert_eq!(row["errorMessage"], "bad input");
    let (status, _) = b.get(&format!("/api/v1/messages/{pid}/poison-0")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_cursor_left_below_an_emptied_partition_is_sealed_by_the_next_pop() {
    let b = broker(|_| {}).await;
    let db = b.sql().await;
    push_txns(&b, "seal", "p", &txns("m", 3)).await;
    let pid = partition_id(&db, "seal", "p").await;
    // A group whose cursor sits before everything, before eviction.
    let (status, body) = b
        .post(
            "/api/v1/consumer-groups/g/queues/seal/seek",
            &json!({ "timestamp": "2000-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(committed(&db, pid, "g").await, Some(-1));

    configure(&b, "seal", json!({ "maxWaitTimeSeconds": 1 })).await;
    outlive(1).await;
    eventually("eviction of everything", || async {
        bases(&db, pid).await.is_empty()
    })
    .await;
    assert_eq!(marks(&db, pid).await.0, 3, "log_start = last_offset + 1");
    // A targeted pop's pending probe counts log_start and answers at once; the wildcard pop's
    // probe does not, so its claim runs and seals the cursor.
    assert!(pop(&b, "seal", Some("p"), Some("g"), 10, "")
        .await
        .is_empty());
    assert_eq!(committed(&db, pid, "g").await, Some(-1));
    assert!(pop(&b, "seal", None, Some("g"), 10, "").await.is_empty());
    assert_eq!(
        committed(&db, pid, "g").await,
        Some(2),
        "sealed at last_offset"
    );
    assert!(pop(&b, "seal", None, None, 10, "").await.is_empty());
    assert_eq!(
        committed(&db, pid, "__QUEUE_MODE__").await,
        Some(2),
        "a new cursor too"
    );
}
