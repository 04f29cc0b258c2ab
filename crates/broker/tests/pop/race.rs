//! Producers and consumers racing through the hot-list ring (the default): producers push
//! while consumers of two groups long-poll with random batch sizes and partition counts and
//! ack every batch under its live lease. Per group: no partition is handed to a second
//! consumer while a first one holds it, every message arrives exactly once, in each
//! partition's order, and nothing is lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common;
use crate::support::Handle;

const PARTITIONS: usize = 8;
const PER_PARTITION: usize = 60;
const PRODUCERS: usize = 4;
const GROUPS: [&str; 2] = ["g", "h"];
const CONSUMERS_PER_GROUP: usize = 6;

/// One batch as a consumer received it: per partition, its offsets (in answer order).
struct Received {
    group: &'static str,
    /// When it was received, in the order of all receipts.
    seq: u64,
    offsets: BTreeMap<String, Vec<i64>>,
}

/// (group, partition) → the consumer holding its lease, as the consumers observe it.
type Holders = Arc<Mutex<HashMap<(&'static str, String), usize>>>;

async fn produce(h: Handle, producer: usize) {
    for p in (producer..PARTITIONS).step_by(PRODUCERS) {
        let mut sent = 0;
        while sent < PER_PARTITION {
            let n = (PER_PARTITION - sent).min(1 + (sent * 7 + p) % 9);
            let items: Vec<Value> = (sent..sent + n)
                .map(|i| json!({ "queue": "race", "partition": format!("p{p}"), "transactionId": format!("p{p}-{i}"), "payload": i }))
                .collect();
            let r = h
                .http
                .post(format!("{}/api/v1/push", h.url))
                .json(&json!({ "items": items }))
                .send()
                .await
                .expect("push");
            assert_eq!(r.status(), StatusCode::CREATED);
            sent += n;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
}

async fn consume(
    h: Handle,
    group: &'static str,
    me: usize,
    holders: Holders,
    received: Arc<Mutex<Vec<Received>>>,
    clock: Arc<AtomicU64>,
    counted: Arc<AtomicUsize>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(me as u64);
    let total = PARTITIONS * PER_PARTITION;
    while counted.load(Ordering::SeqCst) < total {
        let path = format!(
            "/api/v1/pop/queue/race?consumerGroup={group}&batch={}&partitions={}&wait=true&timeout=1000",
            rng.gen_range(1..=10),
            rng.gen_range(1..=3)
        );
        let r = h.get(&path).await;
        if r.status == StatusCode::NO_CONTENT {
            continue;
        }
        r.assert_delivered();
        let seq = clock.fetch_add(1, Ordering::SeqCst);
        let mut offsets: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for m in r.messages() {
            let partition = m["partition"].as_str().expect("partition").to_string();
            let offset = m["offset"].as_i64().expect("offset");
            assert_eq!(
                m["transactionId"],
                format!("{partition}-{offset}"),
                "offsets follow push order"
            );
            offsets.entry(partition).or_default().push(offset);
        }
        for partition in offsets.keys() {
            let key = (group, partition.clone());
            if let Some(other) = holders.lock().expect("holders").insert(key, me) {
                panic!("{group}/{partition}: handed to consumer {me} while {other} holds it");
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..4))).await;
        // Released before the ack: once it commits, another consumer may claim legitimately.
        for partition in offsets.keys() {
            holders
                .lock()
                .expect("holders")
                .remove(&(group, partition.clone()));
        }
        h.ack_all(group, &r.body).await;
        counted.fetch_add(r.messages().len(), Ordering::SeqCst);
        received.lock().expect("received").push(Received {
            group,
            seq,
            offsets,
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_producers_and_consumers_keep_order_and_deliver_exactly_once() {
    let b = common::broker().await;
    let holders: Holders = Arc::default();
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let clock = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (g, group) in GROUPS.into_iter().enumerate() {
        let counted = Arc::new(AtomicUsize::new(0));
        for c in 0..CONSUMERS_PER_GROUP {
            tasks.push(tokio::spawn(consume(
                Handle::of(&b),
                group,
                g * CONSUMERS_PER_GROUP + c,
                holders.clone(),
                received.clone(),
                clock.clone(),
                counted.clone(),
            )));
        }
    }
    for p in 0..PRODUCERS {
        tasks.push(tokio::spawn(produce(Handle::of(&b), p)));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("the race finished")
            .expect("a task failed");
    }
    let mut batches = received
        .lock()
        .expect("received")
        .drain(..)
        .collect::<Vec<_>>();
    batches.sort_by_key(|r| r.seq);
    for group in GROUPS {
        // Per partition, in receipt order: each batch continues exactly where the last ended.
        let mut next: HashMap<String, i64> = HashMap::new();
        for r in batches.iter().filter(|r| r.group == group) {
            for (partition, offsets) in &r.offsets {
                let expected = next.entry(partition.clone()).or_insert(0);
                let want: Vec<i64> = (*expected..*expected + offsets.len() as i64).collect();
                assert_eq!(
                    offsets, &want,
                    "{group}/{partition}: a gap, a repeat or a reordering"
                );
                *expected += offsets.len() as i64;
            }
        }
        for p in 0..PARTITIONS {
            assert_eq!(
                next.get(&format!("p{p}")).copied(),
                Some(PER_PARTITION as i64),
                "{group}/p{p}: every message, none lost"
            );
        }
    }
    println!(
        "{} batches to {} consumers of {} messages in {:?}",
        batches.len(),
        GROUPS.len() * CONSUMERS_PER_GROUP,
        PARTITIONS * PER_PARTITION,
        started.elapsed()
    );
}
