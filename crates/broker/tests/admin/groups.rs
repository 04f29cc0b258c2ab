//! Consumer-group administration (docs/wire.md §12) through the real push, pop and ack routes:
//! seek to the end and back in time, group deletes that make a name start fresh, the
//! subscription update, listings and lag, the 400s and 404s, and seeks racing consumers.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;

/// Pops from `queue` without waiting; `Value::Null` on 204.
async fn pop(b: &common::TestBroker, queue: &str, params: &str) -> (StatusCode, Value) {
    b.get(&format!("/api/v1/pop/queue/{queue}?wait=false&{params}"))
        .await
}

/// Payload `n` of every message popped by one non-waiting auto-acking pop of `group`.
async fn drain_once(b: &common::TestBroker, queue: &str, group: &str, extra: &str) -> Vec<i64> {
    let (status, body) = pop(
        b,
        queue,
        &format!("consumerGroup={group}&autoAck=true&batch=100&{extra}"),
    )
    .await;
    match status {
        StatusCode::NO_CONTENT => vec![],
        StatusCode::OK => body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["data"]["n"].as_i64().expect("payload n"))
            .collect(),
        other => panic!("pop answered {other}: {body}"),
    }
}

fn numbered(range: std::ops::Range<i64>) -> Vec<Value> {
    range.map(|n| json!({ "n": n })).collect()
}

/// created_at of every segment of `queue`, in offset order.
async fn segment_times(b: &common::TestBroker, queue: &str) -> Vec<DateTime<Utc>> {
    let db = b.sql().await;
    db.query(
        "SELECT s.created_at FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
          JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY s.base_offset",
        &[&queue],
    )
    .await
    .expect("segments")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[tokio::test]
async fn seek_to_end_empties_and_seek_to_a_timestamp_redelivers() {
    let b = common::broker().await;
    b.push("seek-q", "Default", &numbered(0..3)).await;
    b.push("seek-q", "Default", &numbered(3..5)).await;
    let times = segment_times(&b, "seek-q").await;
    assert_eq!(times.len(), 2, "one segment per push");
    assert_eq!(
        drain_once(&b, "seek-q", "g1", "").await,
        vec![0, 1, 2, 3, 4]
    );

    // Back to the second segment: exactly its messages come again.
    let (status, body) = b
        .post(
            "/api/v1/consumer-groups/g1/queues/seek-q/seek",
            &json!({ "timestamp": iso(times[1]) }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["partitionsUpdated"], 1);
    assert_eq!(body["seekToEnd"], false);
    assert_eq!(drain_once(&b, "seek-q", "g1", "").await, vec![3, 4]);

    // To before everything: the whole log again.
    let before = times[0] - chrono::Duration::seconds(1);
    let (status, _) = b
        .post(
            "/api/v1/consumer-groups/g1/queues/seek-q/seek",
            &json!({ "timestamp": iso(before) }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // To the end: nothing left, and only later pushes are delivered.
    let (status, body) = b
        .post(
            "/api/v1/consumer-groups/g1/queues/seek-q/seek",
            &json!({ "toEnd": true }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["seekToEnd"], true);
    assert_eq!(drain_once(&b, "seek-q", "g1", "").await, Vec::<i64>::new());
    b.push("seek-q", "Default", &numbered(5..6)).await;
    assert_eq!(drain_once(&b, "seek-q", "g1", "").await, vec![5]);

    // A timestamp after every segment means future-only.
    let (status, _) = b
        .post(
            "/api/v1/consumer-groups/g1/queues/seek-q/seek",
            &json!({ "timestamp": "2999-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(drain_once(&b, "seek-q", "g1", "").await, Vec::<i64>::new());

    // Other groups are untouched by g1's seeks.
    assert_eq!(
        drain_once(&b, "seek-q", "g2", "").await,
        vec![0, 1, 2, 3, 4, 5]
    );
}

#[tokio::test]
async fn seek_releases_the_lease_and_clears_the_empty_scan_floor() {
    let b = common::broker().await;
    b.push("lease-q", "Default", &numbered(0..4)).await;
    let (status, popped) = pop(&b, "lease-q", "consumerGroup=g&batch=2").await;
    assert_eq!(status, StatusCode::OK, "{popped}");
    let lease = popped["leaseId"].as_str().expect("leaseId").to_string();
    let first = popped["messages"][0].clone();
    let db = b.sql().await;
    let qid: i64 = db
        .query_one("SELECT id FROM queen.queues WHERE name = 'lease-q'", &[])
        .await
        .expect("qid")
        .get(0);
    // A quiet partition under a fresh empty-scan floor: the wildcard candidate scan would
    // skip it unless the rewind drops the floor.
    db.execute(
        "UPDATE queen.log_partitions SET last_write_at = now() - interval '1 hour' WHERE queue_id = $1",
        &[&qid],
    )
    .await
    .expect("age the partition");
    db.execute(
        "INSERT INTO queen.consumer_watermarks (queue_id, consumer_group, last_empty_scan_at)
         VALUES ($1, 'g', now()) ON CONFLICT (queue_id, consumer_group) DO UPDATE SET last_empty_scan_at = now()",
        &[&qid],
    )
    .await
    .expect("watermark");

    let (status, _) = b
        .post(
            "/api/v1/consumer-groups/g/queues/lease-q/seek",
            &json!({ "timestamp": "1970-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let row = db
        .query_one(
            "SELECT committed, worker_id, batch_end, batch_retry_count, attempt_count FROM queen.log_consumers WHERE consumer_group = 'g'",
            &[],
        )
        .await
        .expect("cursor");
    assert_eq!(row.get::<_, i64>(0), -1);
    assert_eq!(row.get::<_, Option<String>>(1), None, "lease released");
    assert_eq!(row.get::<_, Option<i64>>(2), None);
    assert_eq!(row.get::<_, i32>(3), 0);
    assert_eq!(row.get::<_, i32>(4), 0);
    assert_eq!(
        common::count(&db, "queen.consumer_watermarks").await,
        0,
        "a rewind clears the floor"
    );

    // The old lease no longer commits anything, and the batch is immediately poppable again.
    let ack = json!({ "transactionId": first["transactionId"], "partitionId": first["partitionId"],
                      "leaseId": lease, "status": "completed", "consumerGroup": "g" });
    let (status, verdict) = b.post("/api/v1/ack", &ack).await;
    assert_eq!(status, StatusCode::OK, "{verdict}");
    let verdict = if verdict.is_array() {
        verdict[0].clone()
    } else {
        verdict
    };
    assert_eq!(verdict["success"], false, "{verdict}");
    assert_eq!(drain_once(&b, "lease-q", "g", "").await, vec![0, 1, 2, 3]);
}

#[tokio::test]
async fn partition_seek_moves_only_that_partition() {
    let b = common::broker().await;
    b.push("pseek-q", "a", &numbered(0..2)).await;
    b.push("pseek-q", "b", &numbered(10..12)).await;
    let mut all = drain_once(&b, "pseek-q", "g", "partitions=10").await;
    all.sort();
    assert_eq!(all, vec![0, 1, 10, 11]);
    let (status, body) = b
        .post(
            "/api/v1/consumer-groups/g/queues/pseek-q/partitions/b/seek",
            &json!({ "timestamp": "1970-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["partitionsUpdated"], 1);
    assert_eq!(body["partition"], "b");
    assert_eq!(
        drain_once(&b, "pseek-q", "g", "partitions=10").await,
        vec![10, 11]
    );
}

#[tokio::test]
async fn seek_rejects_bad_requests() {
    let b = common::broker().await;
    b.push("bad-q", "Default", &numbered(0..1)).await;
    let seek = "/api/v1/consumer-groups/g/queues/bad-q/seek";
    for body in [
        json!({}),
        json!({ "toEnd": false }),
        json!({ "timestamp": null }),
    ] {
        let (status, answer) = b.post(seek, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(
            answer,
            json!({ "error": "Must specify toEnd=true or a timestamp" })
        );
    }
    // No body at all (what the Python client sends for `{}`).
    let r = b.http.post(b.at(seek)).send().await.expect("seek");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (status, answer) = b.post(seek, &json!({ "timestamp": "last tuesday" })).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.contains("timestamp")),
        "{answer}"
    );
    let (status, _) = b
        .post_raw(seek, "application/json", b"{\"toEnd\":".to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    for path in [
        "/api/v1/consumer-groups/g/queues/no-such-q/seek",
        "/api/v1/consumer-groups/g/queues/bad-q/partitions/no-such-p/seek",
    ] {
        let (status, answer) = b.post(path, &json!({ "toEnd": true })).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            answer,
            json!({ "error": "Queue not found or has no partitions" })
        );
    }
    let db = b.sql().await;
    assert_eq!(
        common::count(&db, "queen.log_consumers").await,
        0,
        "rejected seeks wrote nothing"
    );
}

#[tokio::test]
async fn deleted_group_starts_fresh_with_its_next_subscription_mode() {
    let b = common::broker().await;
    b.push("del-q", "Default", &numbered(0..3)).await;
    assert_eq!(
        drain_once(&b, "del-q", "g", "subscriptionMode=all").await,
        vec![0, 1, 2]
    );
    b.push("del-q", "Default", &numbered(3..5)).await;

    let (status, body) = b.delete("/api/v1/consumer-groups/g").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({ "success": true, "consumerGroup": "g", "deletedPartitions": 1, "metadataDeleted": true })
    );
    let db = b.sql().await;
    for table in [
        "queen.log_consumers",
        "queen.consumer_groups_metadata",
        "queen.consumer_watermarks",
    ] {
        assert_eq!(common::count(&db, table).await, 0, "{table} emptied");
    }
    // The same name with `new` now skips the backlog: it is a brand-new subscription.
    assert_eq!(
        drain_once(&b, "del-q", "g", "subscriptionMode=new").await,
        Vec::<i64>::new()
    );
    b.push("del-q", "Default", &numbered(5..6)).await;
    assert_eq!(
        drain_once(&b, "del-q", "g", "subscriptionMode=new").await,
        vec![5]
    );

    // Keeping the metadata keeps the stored subscription (`new` as of the re-registration): a
    // recreated cursor is seeded from that instant, so only message 5 comes again, and the
    // request's `all` is ignored.
    let (status, body) = b
        .delete("/api/v1/consumer-groups/g?deleteMetadata=false")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadataDeleted"], false);
    assert_eq!(
        common::count(&db, "queen.consumer_groups_metadata").await,
        1
    );
    assert_eq!(
        drain_once(&b, "del-q", "g", "subscriptionMode=all").await,
        vec![5]
    );

    // Deleting a group that never existed is not an error.
    let (status, body) = b.delete("/api/v1/consumer-groups/nobody").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["deletedPartitions"], 0);
    let (status, body) = b
        .delete("/api/v1/consumer-groups/g?deleteMetadata=maybe")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn queue_scoped_delete_leaves_other_queues_alone() {
    let b = common::broker().await;
    for q in ["scope-a", "scope-b"] {
        b.push(q, "Default", &numbered(0..2)).await;
        assert_eq!(drain_once(&b, q, "g", "").await, vec![0, 1]);
    }
    let (status, body) = b.delete("/api/v1/consumer-groups/g/queues/scope-a").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({ "success": true, "consumerGroup": "g", "queueName": "scope-a", "deletedPartitions": 1, "metadataDeleted": true })
    );
    // scope-a is consumed again from the start; scope-b keeps its cursor.
    assert_eq!(drain_once(&b, "scope-a", "g", "").await, vec![0, 1]);
    assert_eq!(drain_once(&b, "scope-b", "g", "").await, Vec::<i64>::new());
    let (status, body) = b.delete("/api/v1/consumer-groups/g/queues/no-such-q").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({ "error": "Queue not found" }));
}

#[tokio::test]
async fn subscription_update_seeds_partitions_created_later() {
    let b = common::broker().await;
    b.push("sub-q", "p1", &numbered(0..1)).await;
    assert_eq!(drain_once(&b, "sub-q", "g", "").await, vec![0]);
    let (status, body) = b
        .post(
            "/api/v1/consumer-groups/g/subscription",
            &json!({ "subscriptionTimestamp": "2999-01-01T00:00:00.000Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["success"], true);
    let db = b.sql().await;
    let stored: DateTime<Utc> = db
        .query_one("SELECT subscription_timestamp FROM queen.consumer_groups_metadata WHERE consumer_group = 'g'", &[])
        .await
        .expect("registration")
        .get(0);
    assert_eq!(iso(stored), "2999-01-01T00:00:00.000000Z");

    // A partition born after the update is seeded from the stored (future) instant: its
    // backlog is skipped, while a group subscribed from the beginning gets it.
    b.push("sub-q", "p2", &numbered(10..12)).await;
    assert_eq!(
        drain_once(&b, "sub-q", "g", "partitions=10").await,
        Vec::<i64>::new()
    );
    assert_eq!(
        drain_once(&b, "sub-q", "other", "partitions=10")
            .await
            .len(),
        3
    );

    for (body, status) in [
        (json!({}), StatusCode::BAD_REQUEST),
        (
            json!({ "subscriptionTimestamp": "soon" }),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (got, answer) = b
            .post("/api/v1/consumer-groups/g/subscription", &body)
            .await;
        assert_eq!(got, status, "{body} -> {answer}");
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.contains("subscriptionTimestamp")),
            "{answer}"
        );
    }
    let (status, _) = b
        .post(
            "/api/v1/consumer-groups/nobody/subscription",
            &json!({ "subscriptionTimestamp": "2020-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn listings_report_lag_from_watermarks() {
    let b = common::broker().await;
    b.push("lag-q", "p1", &numbered(0..4)).await;
    b.push("lag-q", "p2", &numbered(4..6)).await;
    // g consumes everything, then p2 is rewound: 2 messages of lag on p2, none on p1.
    assert_eq!(drain_once(&b, "lag-q", "g", "partitions=10").await.len(), 6);
    let (status, _) = b
        .post(
            "/api/v1/consumer-groups/g/queues/lag-q/partitions/p2/seek",
            &json!({ "timestamp": "1970-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    let (status, list) = b.get("/api/v1/consumer-groups").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let g = list
        .as_array()
        .and_then(|l| l.iter().find(|e| e["name"] == "g"))
        .expect("group g listed");
    assert_eq!(g["totalLag"], 2);
    assert_eq!(g["queues"][0]["queue"], "lag-q");
    assert_eq!(g["queues"][0]["partitions"], 2);

    let (status, detail) = b.get("/api/v1/consumer-groups/g").await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let parts: BTreeMap<String, i64> = detail["lag-q"]["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            (
                p["partition"].as_str().unwrap_or_default().to_string(),
                p["offsetLag"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        parts,
        BTreeMap::from([("p1".to_string(), 0), ("p2".to_string(), 2)])
    );
    assert_eq!(detail["lag-q"]["conflation"], false);

    let (status, lagging) = b
        .get("/api/v1/consumer-groups/lagging?minLagSeconds=0")
        .await;
    assert_eq!(status, StatusCode::OK, "{lagging}");
    let rows: Vec<&Value> = lagging
        .as_array()
        .expect("array")
        .iter()
        .filter(|r| r["consumer_group"] == "g")
        .collect();
    assert_eq!(rows.len(), 1, "{lagging}");
    assert_eq!(rows[0]["partition_name"], "p2");
    assert_eq!(rows[0]["offset_lag"], 2);
    let (_, lagging) = b
        .get("/api/v1/consumer-groups/lagging?minLagSeconds=86400")
        .await;
    assert_eq!(lagging, json!([]));
    let (status, _) = b
        .get("/api/v1/consumer-groups/lagging?minLagSeconds=soon")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, body) = b.get("/api/v1/consumer-groups/nobody").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({ "error": "Consumer group not found" }));
}

/// Seeks and group deletes race 8 consumers popping and acking the same group. Every request
/// must succeed (neither deadlocks with a pop or an ack), and a final rewind must deliver
/// every message exactly once, in order per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seeks_racing_consumers_never_fail_and_leave_a_consistent_cursor() {
    let b = std::sync::Arc::new(common::broker().await);
    const PARTITIONS: i64 = 4;
    const PER_PARTITION: i64 = 50;
    for p in 0..PARTITIONS {
        let payloads: Vec<Value> = (0..PER_PARTITION)
            .map(|i| json!({ "n": p * 1000 + i }))
            .collect();
        b.push("race-q", &format!("p{p}"), &payloads).await;
    }
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let mut popped = 0usize;
            for _ in 0..30 {
                let (status, body) = pop(&b, "race-q", "consumerGroup=g&batch=7").await;
                match status {
                    StatusCode::NO_CONTENT => continue,
                    StatusCode::OK => {}
                    other => panic!("pop answered {other}: {body}"),
                }
                let msgs = body["messages"].as_array().cloned().unwrap_or_default();
                popped += msgs.len();
                let acks: Vec<Value> = msgs
                    .iter()
                    .map(|m| json!({ "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                     "leaseId": m["leaseId"], "status": "completed" }))
                    .collect();
                let (status, verdict) =
                    b.post("/api/v1/ack/batch", &json!({ "acknowledgments": acks, "consumerGroup": "g" })).await;
                assert_eq!(status, StatusCode::OK, "{verdict}");
            }
            popped
        }));
    }
    let seeker = {
        let b = b.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                let body = if i % 2 == 0 {
                    json!({ "toEnd": true })
                } else {
                    json!({ "timestamp": "1970-01-01T00:00:00Z" })
                };
                let (status, answer) = b
                    .post("/api/v1/consumer-groups/g/queues/race-q/seek", &body)
                    .await;
                assert_eq!(status, StatusCode::OK, "{answer}");
                if i % 5 == 4 {
                    // Cursor rows vanish under the consumers and are recreated by their pops.
                    let (status, answer) = b
                        .delete("/api/v1/consumer-groups/g/queues/race-q?deleteMetadata=false")
                        .await;
                    assert_eq!(status, StatusCode::OK, "{answer}");
                }
            }
        })
    };
    seeker.await.expect("seeker");
    let mut delivered = 0;
    for t in tasks {
        delivered += t.await.expect("consumer");
    }
    println!(
        "race: 8 consumers delivered {delivered} messages around 20 seeks and 4 deletes in {:?}",
        started.elapsed()
    );

    // Final rewind, then one consumer drains: every message exactly once, ordered per partition.
    let (status, _) = b
        .post(
            "/api/v1/consumer-groups/g/queues/race-q/seek",
            &json!({ "timestamp": "1970-01-01T00:00:00Z" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut seen = Vec::new();
    loop {
        let batch = drain_once(&b, "race-q", "g", "partitions=4").await;
        if batch.is_empty() {
            break;
        }
        seen.extend(batch);
    }
    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(
        seen.len(),
        (PARTITIONS * PER_PARTITION) as usize,
        "each message once"
    );
    assert_eq!(unique.len(), seen.len());
    for p in 0..PARTITIONS {
        let lane: Vec<i64> = seen.iter().copied().filter(|n| n / 1000 == p).collect();
        assert!(
            lane.windows(2).all(|w| w[0] < w[1]),
            "partition {p} out of order: {lane:?}"
        );
    }
}
