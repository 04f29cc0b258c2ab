//! Partition cleanup (docs/engine.md §10.1): a partition idle and empty for
//! `PARTITION_CLEANUP_DAYS` (here a fraction of a day: one second) is deleted with its cursors,
//! unless a dead letter of it is kept or a cursor on it holds a live lease; a later push to the
//! name starts a new partition from offset 0.

use serde_json::json;

use super::*;
use crate::common::{configure, partition_id, push_txns, txns};

/// Whether the partition row still exists.
async fn exists(db: &tokio_postgres::Client, pid: i64) -> bool {
    db.query_one(
        "SELECT EXISTS (SELECT 1 FROM queen.log_partitions WHERE id = $1)",
        &[&pid],
    )
    .await
    .expect("exists")
    .get(0)
}

#[tokio::test]
async fn idle_empty_partitions_go_unless_a_dead_letter_or_a_live_lease_vetoes() {
    let b = broker(|cfg| {
        cfg.partition_cleanup_enabled = true;
        cfg.partition_cleanup_days = 1.0 / 86_400.0;
        cfg.sidecar_purge_floor_s = 0;
    })
    .await;
    let db = b.sql().await;
    configure(&b, "c", json!({ "retryLimit": 0 })).await;
    for p in ["idle", "dead", "leased"] {
        push_txns(&b, "c", p, &txns(p, 1)).await;
    }
    let (idle, dead, leased) = (
        partition_id(&db, "c", "idle").await,
        partition_id(&db, "c", "dead").await,
        partition_id(&db, "c", "leased").await,
    );
    assert_eq!(consume(&b, "c", "idle", Some("g")).await, txns("idle", 1));
    let got = pop(&b, "c", Some("dead"), Some("g"), 10, "").await;
    let answer =
        crate::common::ack_batch(&b, Some("g"), vec![crate::common::ack_item(&got[0], "dlq")])
            .await;
    assert_eq!(answer[0]["dlq"], true, "{answer:?}");
    assert_eq!(
        pop(&b, "c", Some("leased"), Some("g"), 10, "&leaseSeconds=600")
            .await
            .len(),
        1
    );
    // Now let everything go: messages after a second, hashes at once.
    configure(
        &b,
        "c",
        json!({ "maxWaitTimeSeconds": 1, "dedupWindowSeconds": 0 }),
    )
    .await;

    eventually("the idle partition to go", || async {
        !exists(&db, idle).await
    })
    .await;
    assert_eq!(
        committed(&db, idle, "g").await,
        None,
        "its cursors went with it"
    );
    wait_runs(&b, 3).await;
    assert!(exists(&db, dead).await, "a dead letter vetoes the cleanup");
    assert!(exists(&db, leased).await, "a live lease vetoes the cleanup");
    assert!(
        bases(&db, leased).await.is_empty(),
        "it is empty all the same"
    );
    assert!(stats(&b).await["partitionsCleaned"].as_u64() >= Some(1));
    let (status, listing) = b.get("/api/v1/dlq?queue=c").await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(listing["messages"][0]["data"], json!({ "txn": "dead-0" }));
    let reset: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.log_dedup_resets WHERE queue_name = 'c'",
            &[],
        )
        .await
        .expect("resets")
        .get(0);
    assert_eq!(
        reset, 1,
        "the dedup caches are told the queue's partitions changed"
    );

    // The name comes back as a new partition from offset 0.
    push_txns(&b, "c", "idle", &txns("again", 1)).await;
    let again = partition_id(&db, "c", "idle").await;
    assert_ne!(again, idle);
    assert_eq!(marks(&db, again).await.2, 0);
    assert_eq!(consume(&b, "c", "idle", Some("g")).await, txns("again", 1));
}

#[tokio::test]
async fn a_partition_younger_than_the_cleanup_age_stays() {
    let b = broker(|cfg| {
        cfg.partition_cleanup_enabled = true;
        cfg.sidecar_purge_floor_s = 0;
    })
    .await;
    let db = b.sql().await;
    configure(
        &b,
        "young",
        json!({ "maxWaitTimeSeconds": 1, "dedupWindowSeconds": 0 }),
    )
    .await;
    push_txns(&b, "young", "p", &txns("m", 1)).await;
    let pid = partition_id(&db, "young", "p").await;
    eventually("the partition to empty", || async {
        bases(&db, pid).await.is_empty() && marks(&db, pid).await.1 == 1
    })
    .await;
    wait_runs(&b, 3).await;
    assert!(exists(&db, pid).await, "30 days of idleness are not over");
    assert_eq!(stats(&b).await["partitionsCleaned"], 0);
}
