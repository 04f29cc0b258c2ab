//! Racing consumers: one leased batch per (partition, group) under twenty concurrent workers,
//! exactly-once delivery when every batch is acked, and the group-first-contact bulk seed
//! under fifty concurrent first pops.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::{push_txns, txns, Handle};

/// A batch as one worker received it.
#[derive(Debug, Clone)]
struct Batch {
    partition_id: i64,
    lease_id: String,
    offsets: Vec<i64>,
    txns: Vec<String>,
}

fn batch_of(body: &Value) -> Batch {
    let messages = body["messages"].as_array().expect("messages");
    let pids: HashSet<&str> = messages
        .iter()
        .map(|m| m["partitionId"].as_str().expect("partitionId"))
        .collect();
    assert_eq!(pids.len(), 1, "partitions=1 claims one partition");
    Batch {
        partition_id: pids
            .into_iter()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("decimal id"),
        lease_id: body["leaseId"].as_str().expect("leaseId").to_string(),
        offsets: messages
            .iter()
            .map(|m| m["offset"].as_i64().expect("offset"))
            .collect(),
        txns: messages
            .iter()
            .map(|m| m["transactionId"].as_str().expect("txn").to_string())
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_consumers_on_ten_partitions_hold_one_lease_each_and_deliver_exactly_once() {
    const PARTITIONS: usize = 10;
    const PER_PARTITION: usize = 120;
    const WORKERS: usize = 20;
    let b = common::broker().await;
    for p in 0..PARTITIONS {
        let all = txns(&format!("p{p}"), PER_PARTITION);
        for chunk in all.chunks(17) {
            push_txns(&b, "race", &format!("p{p}"), chunk).await;
        }
    }

    // partition id -> the leaseId currently holding it, as the workers observe it.
    let holders: Arc<Mutex<HashMap<i64, String>>> = Arc::default();
    let batches: Arc<Mutex<Vec<Batch>>> = Arc::default();
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (h, holders, batches) = (Handle::of(&b), holders.clone(), batches.clone());
        workers.push(tokio::spawn(async move {
            let mut idle = 0;
            while idle < 3 {
                let r = h
                    .get("/api/v1/pop/queue/race?batch=7&consumerGroup=workers&wait=false")
                    .await;
                if r.status == StatusCode::NO_CONTENT {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    continue;
                }
                r.assert_delivered();
                idle = 0;
                let batch = batch_of(&r.body);
                if let Some(other) = holders
                    .lock()
                    .expect("holders")
                    .insert(batch.partition_id, batch.lease_id.clone())
                {
                    panic!(
                        "worker {w}: partition {} leased to {} while {other} still holds it",
                        batch.partition_id, batch.lease_id
                    );
                }
                // Work a little, so leases overlap in time with other workers' pops.
                tokio::time::sleep(Duration::from_millis((w as u64 % 4) * 3)).await;
                // Release the observation before acking: after the ack commits, another
                // worker may legitimately claim the partition.
                holders.lock().expect("holders").remove(&batch.partition_id);
                h.ack_all("workers", &r.body).await;
                batches.lock().expect("batches").push(batch);
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let elapsed = started.elapsed();

    let batches = batches.lock().expect("batches").clone();
    let delivered: Vec<&String> = batches.iter().flat_map(|b| &b.txns).collect();
    let distinct: HashSet<&String> = delivered.iter().copied().collect();
    println!(
        "{} messages in {} batches by {WORKERS} workers in {elapsed:?} ({:.0} msg/s)",
        delivered.len(),
        batches.len(),
        delivered.len() as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(
        delivered.len(),
        PARTITIONS * PER_PARTITION,
        "every message delivered once"
    );
    assert_eq!(
        distinct.len(),
        PARTITIONS * PER_PARTITION,
        "no message delivered twice"
    );

    // Per partition, the leased spans tile the log: contiguous, in order, never overlapping,
    // which two simultaneous leases on one partition could not produce.
    let mut spans: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for b in &batches {
        let (first, last) = (b.offsets[0], *b.offsets.last().expect("non-empty"));
        assert_eq!(
            b.offsets,
            (first..=last).collect::<Vec<_>>(),
            "a batch is a contiguous span"
        );
        spans.entry(b.partition_id).or_default().push((first, last));
    }
    assert_eq!(spans.len(), PARTITIONS);
    for (pid, mut s) in spans {
        s.sort();
        let mut next = 0;
        for (first, last) in s {
            assert_eq!(first, next, "partition {pid}: span starts at the cursor");
            next = last + 1;
        }
        assert_eq!(next, PER_PARTITION as i64, "partition {pid} fully consumed");
    }

    let db = b.sql().await;
    let row = db
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE committed = $1), count(worker_id)
             FROM queen.log_consumers WHERE consumer_group = 'workers'",
            &[&(PER_PARTITION as i64 - 1)],
        )
        .await
        .expect("cursors");
    let (rows, done, leased): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (rows, done, leased),
        (PARTITIONS as i64, PARTITIONS as i64, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_first_pops_of_a_fresh_group_seed_once_without_deadlock() {
    const PARTITIONS: usize = 200;
    let b = common::broker().await;
    let items: Vec<Value> = (0..PARTITIONS)
        .map(|p| json!({ "queue": "fresh", "partition": format!("p{p}"), "transactionId": format!("t{p}"), "payload": p }))
        .collect();
    let (status, body) = b.post("/api/v1/push", &json!({ "items": items })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let db = b.sql().await;

    for group in ["newcomers", "__QUEUE_MODE__", "latecomers"] {
        let started = Instant::now();
        let pops: Vec<_> = (0..50)
            .map(|_| {
                let h = Handle::of(&b);
                let query =
                    format!("/api/v1/pop/queue/fresh?batch=1&wait=false&consumerGroup={group}");
                tokio::spawn(async move { h.get(&query).await })
            })
            .collect();
        let mut delivered = HashSet::new();
        for p in pops {
            let r = tokio::time::timeout(Duration::from_secs(60), p)
                .await
                .expect("no pop stalls")
                .expect("pop task");
            match r.status {
                StatusCode::OK => {
                    assert!(
                        delivered.insert(r.txns()[0].clone()),
                        "a message delivered twice"
                    );
                }
                StatusCode::NO_CONTENT => {}
                other => panic!("pop failed with {other}: {}", r.body),
            }
        }
        println!(
            "group {group}: 50 first pops in {:?}, {} delivered a message",
            started.elapsed(),
            delivered.len()
        );
        assert!(!delivered.is_empty());

        let marker: i64 = db
            .query_one(
                "SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group = $1",
                &[&group],
            )
            .await
            .expect("marker")
            .get(0);
        assert_eq!(marker, 1, "one registration elected one seeder");
        let row = db
            .query_one(
                "SELECT count(*), count(DISTINCT created_at) FROM queen.log_consumers WHERE consumer_group = $1",
                &[&group],
            )
            .await
            .expect("cursors");
        let (rows, statements): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!(rows, PARTITIONS as i64, "every partition's cursor seeded");
        assert_eq!(
            statements, 1,
            "all cursors come from the seeder's one statement"
        );
    }
}
