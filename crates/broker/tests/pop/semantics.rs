//! What a claim means, over real HTTP and PostgreSQL: one lease per (partition, group) that a
//! second consumer skips without blocking, lease expiry and redelivery, autoAck, lease
//! length, the empty-partition seal, pop maintenance mode and `log_pop_list_v1`.

use std::time::Duration;

use reqwest::StatusCode;

use crate::common;
use crate::support::{ack_all, configure, cursor, get, pop, push_txns, txns};

#[tokio::test]
async fn a_leased_partition_is_skipped_without_blocking_while_another_group_reads_it() {
    let b = common::broker().await;
    push_txns(&b, "skip", "only", &txns("m", 4)).await;

    let first = pop(&b, "skip", "batch=2&consumerGroup=billing").await;
    first.assert_delivered();
    assert_eq!(first.txns(), vec!["m-0", "m-1"]);
    // Same group, same partition: skipped at once, wildcard and targeted alike.
    let second = pop(&b, "skip", "batch=2&consumerGroup=billing").await;
    second.assert_empty();
    get(
        &b,
        "/api/v1/pop/queue/skip/partition/only?batch=2&consumerGroup=billing",
    )
    .await
    .assert_empty();
    println!("skipped pop answered in {:?}", second.elapsed);
    // Another group is another row: it reads the same span at the same time.
    let other = pop(&b, "skip", "batch=2&consumerGroup=analytics").await;
    other.assert_delivered();
    assert_eq!(other.txns(), vec!["m-0", "m-1"]);
    assert_ne!(other.lease_id(), first.lease_id());

    // A pop mid-flight on the row (held here by an open transaction) is skipped too, never
    // waited for.
    ack_all(&b, "analytics", &other).await;
    let mut locker = b.sql().await;
    let tx = locker.transaction().await.expect("begin");
    let locked = tx
        .query(
            "SELECT 1 FROM queen.log_consumers WHERE consumer_group = 'analytics' FOR UPDATE",
            &[],
        )
        .await
        .expect("lock the cursor row");
    assert_eq!(locked.len(), 1);
    let blocked = tokio::time::timeout(
        Duration::from_secs(10),
        pop(&b, "skip", "batch=2&consumerGroup=analytics"),
    )
    .await
    .expect("a pop never waits on a locked cursor row");
    blocked.assert_empty();
    tx.rollback().await.expect("rollback");
    let after = pop(&b, "skip", "batch=2&consumerGroup=analytics").await;
    assert_eq!(after.txns(), vec!["m-2", "m-3"]);
}

#[tokio::test]
async fn lease_expiry_redelivers_the_same_span_with_attempt_count_incremented() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "expiry", "Default", &txns("e", 3)).await;

    let r1 = pop(&b, "expiry", "batch=3&leaseSeconds=1").await;
    r1.assert_delivered();
    assert_eq!(r1.messages()[0]["deliveryAttempt"], 1);
    let c = cursor(&db, "expiry", "Default", "__QUEUE_MODE__")
        .await
        .expect("row");
    assert_eq!(
        (c.0, c.1, c.3, c.4),
        (-1, Some(2), 1, 0),
        "a claim, not a commit"
    );
    assert_eq!(
        c.2.as_deref(),
        Some(r1.lease_id().as_str()),
        "worker_id is the leaseId"
    );
    pop(&b, "expiry", "batch=3").await.assert_empty();

    tokio::time::sleep(Duration::from_millis(1300)).await;
    let r2 = pop(&b, "expiry", "batch=3&leaseSeconds=1").await;
    r2.assert_delivered();
    assert_eq!(r2.txns(), r1.txns(), "the same span, from the cursor");
    assert_ne!(r2.lease_id(), r1.lease_id(), "a new leaseId");
    assert!(r2.messages().iter().all(|m| m["deliveryAttempt"] == 2));
    let c = cursor(&db, "expiry", "Default", "__QUEUE_MODE__")
        .await
        .expect("row");
    assert_eq!(
        (c.0, c.3, c.4),
        (-1, 2, 0),
        "attempt_count + 1, no retry budget spent"
    );

    tokio::time::sleep(Duration::from_millis(1300)).await;
    let r3 = pop(&b, "expiry", "batch=3").await;
    assert_eq!(r3.messages()[0]["deliveryAttempt"], 3);
    ack_all(&b, "__QUEUE_MODE__", &r3).await;
    assert_eq!(
        cursor(&db, "expiry", "Default", "__QUEUE_MODE__")
            .await
            .expect("row")
            .0,
        2
    );

    // Fresh work starts again at attempt 1.
    push_txns(&b, "expiry", "Default", &txns("f", 1)).await;
    let fresh = pop(&b, "expiry", "batch=3").await;
    assert_eq!(fresh.txns(), vec!["f-0"]);
    assert_eq!(fresh.messages()[0]["deliveryAttempt"], 1);
}

#[tokio::test]
async fn lease_length_is_lease_seconds_else_the_queue_lease_time_else_60() {
    let b = common::broker().await;
    let db = b.sql().await;
    configure(&b, "leased45", serde_json::json!({ "leaseTime": 45 })).await;
    push_txns(&b, "leased45", "Default", &txns("a", 2)).await;
    push_txns(&b, "implicit", "Default", &txns("b", 2)).await;
    let lease_of = |queue: &'static str, group: &'static str| {
        let db = &db;
        async move {
            let row = db
                .query_one(
                    "SELECT EXTRACT(EPOCH FROM c.lease_expires_at - c.lease_acquired_at)::float8
                     FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
                     JOIN queen.queues q ON q.id = p.queue_id
                     WHERE q.name = $1 AND c.consumer_group = $2",
                    &[&queue, &group],
                )
                .await
                .expect("lease row");
            row.get::<_, f64>(0).round() as i64
        }
    };
    pop(&b, "leased45", "batch=1&consumerGroup=g1&leaseSeconds=7")
        .await
        .assert_delivered();
    assert_eq!(lease_of("leased45", "g1").await, 7);
    pop(&b, "leased45", "batch=1&consumerGroup=g2")
        .await
        .assert_delivered();
    assert_eq!(lease_of("leased45", "g2").await, 45);
    pop(&b, "implicit", "batch=1&consumerGroup=g3&leaseSeconds=-4")
        .await
        .assert_delivered();
    assert_eq!(lease_of("implicit", "g3").await, 60);
}

#[tokio::test]
async fn auto_ack_commits_at_delivery_with_an_empty_lease_id() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "auto", "Default", &txns("a", 5)).await;
    let r = pop(&b, "auto", "batch=3&autoAck=true").await;
    r.assert_delivered();
    assert_eq!(r.txns(), vec!["a-0", "a-1", "a-2"]);
    assert_eq!(r.body["leaseId"], "");
    assert!(r
        .messages()
        .iter()
        .all(|m| m["leaseId"] == "" && m["deliveryAttempt"] == 1));
    let c = cursor(&db, "auto", "Default", "__QUEUE_MODE__")
        .await
        .expect("row");
    assert_eq!(
        (c.0, c.1, c.2),
        (2, None, None),
        "cursor advanced, no lease"
    );
    let rest = pop(&b, "auto", "batch=10").await;
    assert_eq!(rest.txns(), vec!["a-3", "a-4"]);
}

#[tokio::test]
async fn a_partition_emptied_by_retention_is_sealed_without_a_claim() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "sealed", "Default", &txns("s", 3)).await;
    // What retention leaves behind: no segments, log_start past the end.
    db.batch_execute(
        "DELETE FROM queen.log_segments;
         UPDATE queen.log_partitions SET log_start = last_offset + 1",
    )
    .await
    .expect("simulate retention");
    pop(&b, "sealed", "batch=10").await.assert_empty();
    let c = cursor(&db, "sealed", "Default", "__QUEUE_MODE__")
        .await
        .expect("row");
    assert_eq!(
        (c.0, c.1, c.2, c.3),
        (2, None, None, 0),
        "sealed to last_offset; no lease or attempt"
    );
    let pending: bool = db
        .query_one(
            "SELECT queen.log_has_pending_v1('sealed', '__QUEUE_MODE__')",
            &[],
        )
        .await
        .expect("probe")
        .get(0);
    assert!(!pending, "no phantom pending partition");
    // Later pushes land above the seal and are delivered.
    push_txns(&b, "sealed", "Default", &txns("t", 1)).await;
    assert_eq!(pop(&b, "sealed", "batch=10").await.txns(), vec!["t-0"]);
}

#[tokio::test]
async fn pop_maintenance_mode_answers_204_at_once() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_txns(&b, "maint", "Default", &txns("m", 1)).await;
    db.batch_execute(
        "INSERT INTO queen.system_state (key, value) VALUES ('pop_maintenance_mode', 'true')",
    )
    .await
    .expect("maintenance on");
    tokio::time::sleep(Duration::from_millis(1100)).await; // the flag is cached for a second
    let r = pop(&b, "maint", "batch=1&wait=true&timeout=20000").await;
    r.assert_empty();
    println!("pop in maintenance mode answered in {:?}", r.elapsed);
    assert!(
        r.elapsed < Duration::from_secs(10),
        "answered at once, not at the deadline"
    );
    let r = get(&b, "/api/v1/pop?namespace=maint&wait=true&timeout=20000").await;
    r.assert_empty();
    assert!(r.elapsed < Duration::from_secs(10));
    assert_eq!(
        common::count(&db, "queen.log_consumers").await,
        0,
        "no work done"
    );

    db.batch_execute("DELETE FROM queen.system_state WHERE key = 'pop_maintenance_mode'")
        .await
        .expect("maintenance off");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(pop(&b, "maint", "batch=1").await.txns(), vec!["m-0"]);
}

#[tokio::test]
async fn pop_list_claims_named_partitions_in_order_until_the_budget() {
    let b = common::broker().await;
    let db = b.sql().await;
    for p in 0..4 {
        push_txns(&b, "listed", &format!("p{p}"), &txns(&format!("p{p}"), 2)).await;
    }
    let row = db
        .query_one(
            "SELECT meta, cardinality(blobs), states FROM queen.log_pop_list_v1(
                 'listed', 'g', ARRAY['p2', 'nope', 'p0', 'p1'], 3, 30, 'worker-1', false, 5)",
            &[],
        )
        .await
        .expect("log_pop_list_v1");
    let meta: serde_json::Value = row.get(0);
    let blobs: i32 = row.get(1);
    let states: serde_json::Value = row.get(2);
    let parts = meta["partitions"].as_array().expect("partitions");
    let names: Vec<&str> = parts
        .iter()
        .map(|p| p["partition"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        vec!["p2", "p0"],
        "claim order = the given order; budget 3 ends at p0"
    );
    assert_eq!(parts[1]["segments"][0]["take"], 1);
    assert_eq!(blobs, 2);
    let verdicts: Vec<(&str, &str)> = states
        .as_array()
        .expect("states")
        .iter()
        .map(|s| {
            (
                s["p"].as_str().unwrap_or_default(),
                s["s"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        vec![("p2", "took"), ("p0", "took")],
        "the unevaluated tail is omitted"
    );
    let c = cursor(&db, "listed", "p0", "g").await.expect("row");
    assert_eq!((c.0, c.1, c.2.as_deref()), (-1, Some(0), Some("worker-1")));

    // A second call sees both as leased.
    let row = db
        .query_one(
            "SELECT states FROM queen.log_pop_list_v1('listed', 'g', ARRAY['p2', 'p0'], 3, 30, 'w2', false, 5)",
            &[],
        )
        .await
        .expect("second call");
    let states: serde_json::Value = row.get(0);
    assert!(states
        .as_array()
        .expect("states")
        .iter()
        .all(|s| s["s"] == "leased" && s["until"].is_string()));
}

#[tokio::test]
async fn a_pop_of_a_missing_queue_or_partition_is_empty() {
    let b = common::broker().await;
    pop(&b, "nowhere", "batch=1&consumerGroup=g")
        .await
        .assert_empty();
    get(&b, "/api/v1/pop/queue/nowhere/partition/x?batch=1")
        .await
        .assert_empty();
    push_txns(&b, "somewhere", "a", &txns("x", 1)).await;
    let r = get(&b, "/api/v1/pop/queue/somewhere/partition/b?batch=1").await;
    r.assert_empty();
    assert_eq!(r.status, StatusCode::NO_CONTENT);
}

/// The floor belongs to the SQL candidate scan, so this runs on that path: with the hot-list,
/// a pop whose ring knows the only partition is leased runs no scan at all (the ring's reseed
/// keeps the same floor, hotlist.sql).
#[tokio::test]
async fn the_empty_scan_floor_keeps_lease_held_backlog_and_advances_only_when_empty() {
    let b = common::broker_with(|cfg| cfg.hotlist = false).await;
    let db = b.sql().await;
    push_txns(&b, "floor", "p0", &txns("a", 1)).await;
    let floor = || async {
        db.query_opt(
            "SELECT w.last_empty_scan_at = '-infinity', w.last_empty_scan_at > now() - interval '1 minute',
                    w.updated_at
             FROM queen.consumer_watermarks w WHERE w.consumer_group = 'g'",
            &[],
        )
        .await
        .expect("watermark")
        .map(|r| (r.get::<_, bool>(0), r.get::<_, bool>(1), r.get::<_, chrono::DateTime<chrono::Utc>>(2)))
    };

    // One consumer holds the only pending partition; another finds nothing claimable. The
    // floor must not advance past the lease-held backlog: it records the check only.
    let held = pop(&b, "floor", "batch=1&consumerGroup=g").await;
    held.assert_delivered();
    pop(&b, "floor", "batch=1&consumerGroup=g")
        .await
        .assert_empty();
    let (at_epoch, _, checked) = floor().await.expect("the empty scan recorded its check");
    assert!(at_epoch, "floor kept while a leased backlog is pending");

    // Throttled: a second empty scan within 30 s does not re-check.
    pop(&b, "floor", "batch=1&consumerGroup=g")
        .await
        .assert_empty();
    assert_eq!(floor().await.expect("row").2, checked);

    // Once the queue is genuinely empty, the next due check advances the floor to now.
    ack_all(&b, "g", &held).await;
    db.batch_execute(
        "UPDATE queen.consumer_watermarks SET updated_at = now() - interval '1 minute'",
    )
    .await
    .expect("make the check due");
    let row = db
        .query_one(
            "SELECT meta FROM queen.log_pop_wildcard_bin_v1('floor', 'g', 1, 30, 'w', false, 1)",
            &[],
        )
        .await
        .expect("wildcard");
    let meta: serde_json::Value = row.get(0);
    assert_eq!(meta["partitions"], serde_json::json!([]));
    let (at_epoch, recent, _) = floor().await.expect("row");
    assert!(!at_epoch && recent, "floor advanced to the check time");

    // Partitions written after the floor are still candidates.
    push_txns(&b, "floor", "p1", &txns("b", 1)).await;
    assert_eq!(
        pop(&b, "floor", "batch=1&consumerGroup=g").await.txns(),
        vec!["b-0"]
    );
}
