//! `POST /api/v1/push` against real PostgreSQL: what lands in `log_segments` / `log_txns`
//! (frames, offsets, hashes), implicit queue creation, and the three dedup layers — inside a
//! request, across requests, under concurrent pushers on two brokers, per partition, and with
//! the window off or expired.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use queen_proto::frame::{decode_all, TRACE};
use queen_proto::hash::txn_hash;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common;

/// One stored frame, owned.
#[derive(Debug)]
pub struct Stored {
    pub flags: u8,
    pub id: Uuid,
    pub trace: Option<Uuid>,
    pub txn: String,
    pub payload: Vec<u8>,
}

pub async fn partition_id(db: &tokio_postgres::Client, queue: &str, partition: &str) -> i64 {
    db.query_one(
        "SELECT lp.id FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
         WHERE q.name = $1 AND lp.name = $2",
        &[&queue, &partition],
    )
    .await
    .unwrap_or_else(|e| panic!("partition {queue}/{partition}: {e}"))
    .get(0)
}

/// Every segment of a partition as (base, end, frames), ascending.
pub async fn segments(db: &tokio_postgres::Client, pid: i64) -> Vec<(i64, i64, Vec<Stored>)> {
    let rows = db
        .query(
            "SELECT base_offset, end_offset, blob FROM queen.log_segments WHERE partition_id = $1 ORDER BY base_offset",
            &[&pid],
        )
        .await
        .expect("segments");
    rows.iter()
        .map(|r| {
            let blob: Vec<u8> = r.get(2);
            let raw = queen_proto::segment::decompress(&blob, 1 << 30).expect("one zstd frame");
            let frames = decode_all(&raw)
                .expect("frames")
                .iter()
                .map(|f| Stored {
                    flags: f.flags,
                    id: f.message_uuid(),
                    trace: f.trace_uuid(),
                    txn: f.transaction_id.to_string(),
                    payload: f.payload.to_vec(),
                })
                .collect();
            (r.get(0), r.get(1), frames)
        })
        .collect()
}

/// The sidecar rows of a partition as (base, end, hashes), ascending.
async fn txn_rows(db: &tokio_postgres::Client, pid: i64) -> Vec<(i64, i64, Vec<u8>)> {
    db.query(
        "SELECT base_offset, end_offset, hashes FROM queen.log_txns WHERE partition_id = $1 ORDER BY base_offset",
        &[&pid],
    )
    .await
    .expect("txns")
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

async fn push_items(b: &common::TestBroker, items: Value) -> Vec<Value> {
    let (status, body) = b.post("/api/v1/push", &json!({ "items": items })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body.as_array()
        .cloned()
        .unwrap_or_else(|| panic!("not an array: {body}"))
}

fn item(queue: &str, partition: &str, txn: &str, payload: Value) -> Value {
    json!({ "queue": queue, "partition": partition, "transactionId": txn, "payload": payload })
}

#[tokio::test]
async fn multi_partition_push_writes_one_segment_per_partition_with_dense_offsets() {
    let b = common::broker().await;
    let db = b.sql().await;
    // Interleaved on purpose: grouping must not depend on adjacency.
    let items = json!([
        item("mp.orders", "p1", "a1", json!({"n": 1})),
        item("mp.orders", "p2", "b1", json!({"n": 2})),
        item("mp.orders", "p1", "a2", json!({"n": 3})),
        item("mp.audit", "p1", "c1", json!({"n": 4})),
        item("mp.orders", "p1", "a3", json!({"n": 5})),
        item("mp.orders", "p2", "b2", json!({"n": 6})),
    ]);
    let out = push_items(&b, items).await;
    let offsets: Vec<i64> = out
        .iter()
        .map(|r| r["offset"].as_i64().expect("offset"))
        .collect();
    assert_eq!(offsets, [0, 0, 1, 0, 2, 1]);
    for (i, r) in out.iter().enumerate() {
        assert_eq!(r["index"], i);
        assert_eq!(r["status"], "queued", "{r}");
        assert!(
            Uuid::parse_str(r["message_id"].as_str().unwrap_or_default())
                .is_ok_and(|u| u.get_version_num() == 7)
        );
    }
    assert_eq!(out[3]["queueName"], "mp.audit");
    assert_eq!(out[4]["transaction_id"], "a3");

    let p1 = partition_id(&db, "mp.orders", "p1").await;
    let segs = segments(&db, p1).await;
    assert_eq!(segs.len(), 1, "one segment for the request's p1 group");
    let (base, end, frames) = &segs[0];
    assert_eq!((*base, *end), (0, 2));
    let txns: Vec<&str> = frames.iter().map(|f| f.txn.as_str()).collect();
    assert_eq!(txns, ["a1", "a2", "a3"]);
    assert_eq!(frames[1].payload, br#"{"n":3}"#);
    assert_eq!(
        frames[2].id.to_string(),
        out[4]["message_id"].as_str().unwrap_or_default()
    );
    let sidecar = txn_rows(&db, p1).await;
    let expected: Vec<u8> = ["a1", "a2", "a3"]
        .iter()
        .flat_map(|t| txn_hash(t))
        .collect();
    assert_eq!(
        sidecar,
        vec![(0, 2, expected)],
        "hash sidecar parallels the segment"
    );

    // The next push continues the allocator; a new segment, no gap.
    let out = push_items(
        &b,
        json!([
            item("mp.orders", "p1", "a4", json!(4)),
            item("mp.orders", "p2", "b3", json!(5))
        ]),
    )
    .await;
    assert_eq!(out[0]["offset"], 3);
    assert_eq!(out[1]["offset"], 2);
    let ranges: Vec<(i64, i64)> = segments(&db, p1).await.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(ranges, [(0, 2), (3, 3)]);
    let p2 = partition_id(&db, "mp.orders", "p2").await;
    let ranges: Vec<(i64, i64)> = txn_rows(&db, p2).await.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(ranges, [(0, 1), (2, 2)]);
    let last: Vec<(String, String, i64)> = db
        .query(
            "SELECT q.name, lp.name, lp.last_offset FROM queen.log_partitions lp
             JOIN queen.queues q ON q.id = lp.queue_id ORDER BY 1, 2",
            &[],
        )
        .await
        .expect("partitions")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let expected = [
        ("mp.audit", "p1", 0),
        ("mp.orders", "p1", 3),
        ("mp.orders", "p2", 2),
    ];
    assert_eq!(
        last,
        expected.map(|(q, p, o)| (q.to_string(), p.to_string(), o)),
        "allocators"
    );
}

#[tokio::test]
async fn frames_keep_payload_bytes_trace_ids_and_defaults() {
    let b = common::broker().await;
    let db = b.sql().await;
    let trace = Uuid::new_v4();
    // Raw text, so the payload's spacing and key order are what the client sent.
    let body = format!(
        r#"{{"items":[
            {{"queue":"billing.invoices.v2","payload":{{ "z" : [1, 2],  "a":"x" }},"traceId":"{trace}","producerSub":"mallory"}},
            {{"queue":"billing.invoices.v2","data":null,"traceId":"not-a-uuid"}},
            {{"queue":"billing.invoices.v2","partition":null,"payload":{{}},"transactionId":null}}
        ]}}"#
    );
    let (status, out) = b
        .post_raw("/api/v1/push", "application/json", body.into_bytes())
        .await;
    assert_eq!(status, StatusCode::CREATED, "{out}");
    let pid = partition_id(&db, "billing.invoices.v2", "Default").await;
    let segs = segments(&db, pid).await;
    let frames = &segs[0].2;
    assert_eq!(
        frames[0].payload, br#"{ "z" : [1, 2],  "a":"x" }"#,
        "payload stored verbatim"
    );
    assert_eq!(frames[0].trace, Some(trace));
    assert_eq!(
        frames[0].flags, TRACE,
        "trace flag only: a body producerSub is ignored"
    );
    assert_eq!(
        frames[1].payload, b"null",
        "`data` is an alias and null is a payload"
    );
    assert_eq!(
        (frames[1].flags, frames[1].trace),
        (0, None),
        "an invalid traceId is dropped"
    );
    for (frame, answer) in frames.iter().zip(out.as_array().expect("array")) {
        assert_eq!(
            frame.txn,
            frame.id.to_string(),
            "transactionId defaults to the message id"
        );
        assert_eq!(answer["transaction_id"], frame.txn);
        assert_eq!(answer["message_id"], frame.id.to_string());
    }
    let labels = db
        .query_one("SELECT namespace, task, lease_time FROM queen.queues WHERE name = 'billing.invoices.v2'", &[])
        .await
        .expect("implicit queue");
    assert_eq!(
        (
            labels.get::<_, String>(0),
            labels.get::<_, String>(1),
            labels.get::<_, i32>(2)
        ),
        ("billing".into(), "invoices".into(), 60)
    );
    b.push("plain", "Default", &[json!(1)]).await;
    let labels = db
        .query_one(
            "SELECT namespace, task FROM queen.queues WHERE name = 'plain'",
            &[],
        )
        .await
        .expect("plain");
    assert_eq!(
        (labels.get::<_, String>(0), labels.get::<_, String>(1)),
        ("plain".into(), String::new())
    );

    // The longest allowed transactionId is accepted and stored whole.
    let long = "t".repeat(65_535);
    let out = push_items(&b, json!([item("plain", "long", &long, json!(1))])).await;
    assert_eq!(out[0]["status"], "queued");
    let pid = partition_id(&db, "plain", "long").await;
    assert_eq!(segments(&db, pid).await[0].2[0].txn, long);
}

#[tokio::test]
async fn empty_items_answer_201_with_an_empty_array() {
    let b = common::broker().await;
    let (status, body) = b.post("/api/v1/push", &json!({ "items": [] })).await;
    assert_eq!((status, body), (StatusCode::CREATED, json!([])));
}

#[tokio::test]
async fn duplicates_inside_one_request_copy_the_leader_and_other_partitions_are_distinct() {
    let b = common::broker().await;
    let db = b.sql().await;
    let out = push_items(
        &b,
        json!([
            item("dd", "p1", "same", json!(1)),
            item("dd", "p1", "same", json!(2)),
            item("dd", "p2", "same", json!(3)),
            item("dd2", "p1", "same", json!(4)),
        ]),
    )
    .await;
    let status: Vec<&str> = out
        .iter()
        .map(|r| r["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(status, ["queued", "duplicate", "queued", "queued"]);
    assert_eq!(
        out[1]["message_id"], out[0]["message_id"],
        "the follower reports the leader's id"
    );
    assert_eq!(out[1]["offset"], 0);
    assert_ne!(out[2]["message_id"], out[0]["message_id"]);
    assert_eq!(common::count(&db, "queen.log_segments").await, 3);
    let p1 = partition_id(&db, "dd", "p1").await;
    let frames = &segments(&db, p1).await[0].2;
    assert_eq!(frames.len(), 1);
    assert_eq!(
        frames[0].payload, b"1",
        "the first occurrence is the one stored"
    );
}

#[tokio::test]
async fn a_duplicate_across_requests_returns_the_original_id_and_writes_nothing() {
    let b = common::broker().await;
    let db = b.sql().await;
    let first = push_items(
        &b,
        json!([
            item("xr", "p", "a", json!(1)),
            item("xr", "p", "b", json!(2)),
            item("xr", "p", "c", json!(3))
        ]),
    )
    .await;
    let pid = partition_id(&db, "xr", "p").await;
    let before = (
        common::count(&db, "queen.log_segments").await,
        common::count(&db, "queen.log_txns").await,
    );

    // Only duplicates: nothing at all is written, not even an allocator bump.
    let again = push_items(&b, json!([item("xr", "p", "b", json!("retry"))])).await;
    assert_eq!(again[0]["status"], "duplicate");
    assert_eq!(
        again[0]["message_id"], first[1]["message_id"],
        "original id, read from the middle of its segment"
    );
    assert_eq!(again[0]["offset"], 1);
    assert_eq!(
        (
            common::count(&db, "queen.log_segments").await,
            common::count(&db, "queen.log_txns").await
        ),
        before
    );
    let last: i64 = db
        .query_one(
            "SELECT last_offset FROM queen.log_partitions WHERE id = $1",
            &[&pid],
        )
        .await
        .expect("row")
        .get(0);
    assert_eq!(last, 2);

    // Mixed: the survivors are repacked and stored right after, with no offset hole.
    let mixed = push_items(
        &b,
        json!([
            item("xr", "p", "x", json!(9)),
            item("xr", "p", "c", json!(9)),
            item("xr", "p", "y", json!(9))
        ]),
    )
    .await;
    let got: Vec<(&str, Option<i64>)> = mixed
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap_or_default(),
                r["offset"].as_i64(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("queued", Some(3)),
            ("duplicate", Some(2)),
            ("queued", Some(4))
        ]
    );
    assert_eq!(mixed[1]["message_id"], first[2]["message_id"]);
    let segs = segments(&db, pid).await;
    let stored: Vec<Vec<&str>> = segs
        .iter()
        .map(|s| s.2.iter().map(|f| f.txn.as_str()).collect())
        .collect();
    assert_eq!(stored, [vec!["a", "b", "c"], vec!["x", "y"]]);
}

#[tokio::test]
async fn a_duplicate_whose_original_was_retained_away_reports_the_zero_uuid() {
    let b = common::broker().await;
    let db = b.sql().await;
    push_items(&b, json!([item("gone", "p", "t", json!(1))])).await;
    // Retention deletes segments but the sidecar lives on its own clock.
    db.execute("DELETE FROM queen.log_segments", &[])
        .await
        .expect("retain away");
    let out = push_items(&b, json!([item("gone", "p", "t", json!(2))])).await;
    assert_eq!(out[0]["status"], "duplicate");
    assert_eq!(out[0]["message_id"], Uuid::nil().to_string());
    assert_eq!(common::count(&db, "queen.log_segments").await, 0);
}

#[tokio::test]
async fn window_zero_stores_both_copies_and_still_writes_hashes() {
    let b = common::broker().await;
    let db = b.sql().await;
    let (status, body) = b
        .post(
            "/api/v1/configure",
            &json!({ "queue": "nodedup", "options": { "dedupWindowSeconds": 0 } }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first = push_items(&b, json!([item("nodedup", "p", "t", json!(1))])).await;
    let second = push_items(&b, json!([item("nodedup", "p", "t", json!(2))])).await;
    assert_eq!(
        (first[0]["status"].clone(), second[0]["status"].clone()),
        (json!("queued"), json!("queued"))
    );
    assert_eq!(second[0]["offset"], 1);
    let pid = partition_id(&db, "nodedup", "p").await;
    assert_eq!(
        txn_rows(&db, pid).await.len(),
        2,
        "acks resolve through the sidecar even with dedup off"
    );
}

#[tokio::test]
async fn a_duplicate_outside_the_window_is_stored_again() {
    let b = common::broker().await;
    let (status, _) = b
        .post(
            "/api/v1/configure",
            &json!({ "queue": "short", "options": { "dedupWindowSeconds": 1 } }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let first = push_items(&b, json!([item("short", "p", "t", json!(1))])).await;
    let inside = push_items(&b, json!([item("short", "p", "t", json!(2))])).await;
    assert_eq!(inside[0]["status"], "duplicate");
    assert_eq!(inside[0]["message_id"], first[0]["message_id"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = push_items(&b, json!([item("short", "p", "t", json!(3))])).await;
    assert_eq!(
        (later[0]["status"].clone(), later[0]["offset"].clone()),
        (json!("queued"), json!(1))
    );
}

#[tokio::test]
async fn eight_concurrent_pushers_of_the_same_ids_on_two_brokers_store_each_once() {
    let a = common::broker().await;
    let b = a.sibling(|_| {}).await;
    let db = a.sql().await;
    const ROUNDS: usize = 5;
    const SHARED: usize = 40;
    const OWN: usize = 3;
    let started = std::time::Instant::now();
    let mut ids: HashMap<String, HashSet<String>> = HashMap::new();
    let mut queued: HashMap<String, usize> = HashMap::new();
    for round in 0..ROUNDS {
        let partition = |i: usize| ["even", "odd"][i % 2];
        let shared: Vec<Value> = (0..SHARED)
            .map(|i| item("race", partition(i), &format!("r{round}-t{i}"), json!(i)))
            .collect();
        let mut tasks = Vec::new();
        for pusher in 0..8 {
            let target = if pusher % 2 == 0 { &a } else { &b };
            let (url, http) = (target.url.clone(), target.http.clone());
            // The same ids in a per-pusher rotation, mixed with ids of its own, so segments
            // hold duplicates and fresh frames together and flushes overlap differently.
            let mut items = shared.clone();
            items.rotate_left(pusher * 5);
            for k in 0..OWN {
                items.insert(
                    k * 7,
                    item(
                        "race",
                        partition(k + pusher),
                        &format!("r{round}-own{pusher}-{k}"),
                        json!(k),
                    ),
                );
            }
            tasks.push(tokio::spawn(async move {
                let r = http
                    .post(format!("{url}/api/v1/push"))
                    .json(&json!({ "items": items }))
                    .send()
                    .await
                    .expect("push");
                assert_eq!(r.status(), StatusCode::CREATED);
                r.json::<Vec<Value>>().await.expect("json")
            }));
        }
        for t in tasks {
            for r in t.await.expect("pusher") {
                let txn = r["transaction_id"].as_str().expect("txn").to_string();
                match r["status"].as_str() {
                    Some("queued") => *queued.entry(txn.clone()).or_default() += 1,
                    Some("duplicate") => {}
                    other => panic!("unexpected status {other:?}: {r}"),
                }
                ids.entry(txn)
                    .or_default()
                    .insert(r["message_id"].as_str().expect("id").to_string());
            }
        }
    }
    let unique = ROUNDS * (SHARED + 8 * OWN);
    println!(
        "{ROUNDS} rounds of 8 pushers x {} items on 2 brokers settled in {:?}",
        SHARED + OWN,
        started.elapsed()
    );
    assert_eq!(ids.len(), unique);
    for (txn, seen) in &ids {
        assert_eq!(
            seen.len(),
            1,
            "{txn} was answered with several ids: {seen:?}"
        );
        assert_eq!(
            queued.get(txn),
            Some(&1),
            "{txn} must be queued exactly once"
        );
    }
    // Stored exactly once each, in dense offsets: segments tile [0, last_offset] per partition.
    let rows = db
        .query(
            "SELECT lp.last_offset, array_agg(s.base_offset ORDER BY s.base_offset),
                    array_agg(s.end_offset ORDER BY s.base_offset)
             FROM queen.log_partitions lp JOIN queen.log_segments s ON s.partition_id = lp.id
             GROUP BY lp.id, lp.last_offset",
            &[],
        )
        .await
        .expect("tiling");
    let mut stored = 0;
    let mut segments = 0;
    for r in &rows {
        let (last, bases, ends): (i64, Vec<i64>, Vec<i64>) = (r.get(0), r.get(1), r.get(2));
        let mut next = 0;
        for (base, end) in bases.iter().zip(&ends) {
            assert_eq!(
                *base, next,
                "offset hole or overlap before segment {base}..{end}"
            );
            next = end + 1;
        }
        assert_eq!(next, last + 1, "segments end at last_offset");
        stored += last + 1;
        segments += bases.len();
    }
    assert_eq!(stored, unique as i64, "no allocator bump for a duplicate");
    println!("{unique} messages stored in {segments} segments");
}

#[tokio::test]
async fn a_rolled_back_append_leaves_no_offset_hole() {
    let b = common::broker().await;
    let mut db = b.sql().await;
    push_items(&b, json!([item("rb", "p", "a", json!(1))])).await;
    let tx = db.transaction().await.expect("begin");
    let hashes = txn_hash("doomed").to_vec();
    let queued: Value = tx
        .query_one(
            "SELECT queen.log_push_one_v1('rb', 'p', 1, $1, -1, '\\x00'::bytea)",
            &[&hashes],
        )
        .await
        .expect("append")
        .get(0);
    assert_eq!(queued["baseOffset"], 1);
    tx.rollback().await.expect("rollback");
    let out = push_items(&b, json!([item("rb", "p", "b", json!(2))])).await;
    assert_eq!(out[0]["offset"], 1, "the rolled-back bump is not a hole");
}

#[tokio::test]
async fn a_push_wakes_the_queue_gate_before_answering_and_counts_messages() {
    let b = common::broker().await;
    let state = b.server.as_ref().expect("running").state.clone();
    let gate = state.wake.gate("woken");
    let notified = gate.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    let before = state
        .counters
        .messages_pushed
        .load(std::sync::atomic::Ordering::Relaxed);
    push_items(
        &b,
        json!([
            item("woken", "p", "a", json!(1)),
            item("woken", "p", "a", json!(1)),
            item("woken", "q", "b", json!(2))
        ]),
    )
    .await;
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .expect("the push opened the queue's gate");
    let after = state
        .counters
        .messages_pushed
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(after - before, 2, "duplicates are not counted as pushed");
}
