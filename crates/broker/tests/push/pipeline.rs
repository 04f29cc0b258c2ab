//! Push pipelining (accel/push_fusion.rs): a hot partition's next segment is built while the
//! previous one is written. Many producers race large requests into one partition, with the
//! pipeline on and off; what is stored must be the same kind of log either way: offsets
//! contiguous, every item once, each request's items adjacent and in order, and a producer's
//! requests (each sent after the previous one was answered) in the order it sent them.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use crate::common;
use crate::json::{partition_id, segments};

const PRODUCERS: usize = 8;
const REQUESTS: usize = 6;
const ITEMS: usize = 40;
/// ~120 KiB a request: past the 64 KiB from which requests behind a flush are staged.
const PAD: usize = 3000;

async fn race(pipeline: bool) {
    let b = common::broker_with(|c| c.push_pipeline = pipeline).await;
    let counters = b.server.as_ref().expect("running").state.counters.clone();
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (http, url) = (b.http.clone(), b.at("/api/v1/push"));
        producers.push(tokio::spawn(async move {
            for r in 0..REQUESTS {
                let items: Vec<Value> = (0..ITEMS)
                    .map(|i| {
                        json!({ "queue": "pipe", "partition": "hot",
                                "transactionId": format!("{p}-{r}-{i}"),
                                "payload": { "pad": "x".repeat(PAD) } })
                    })
                    .collect();
                let answer = http
                    .post(&url)
                    .json(&json!({ "items": items }))
                    .send()
                    .await
                    .expect("push");
                assert_eq!(answer.status(), 201, "{:?}", answer.text().await);
            }
        }));
    }
    for producer in producers {
        producer.await.expect("producer");
    }

    let prepared = counters.segments_prepared.load(Ordering::Relaxed);
    if pipeline {
        assert!(prepared > 0, "some segment was built ahead");
    } else {
        assert_eq!(prepared, 0, "nothing is built ahead with the pipeline off");
    }

    let db = b.sql().await;
    let pid = partition_id(&db, "pipe", "hot").await;
    let mut next = 0;
    let mut txns = Vec::new();
    for (base, end, frames) in segments(&db, pid).await {
        assert_eq!(base, next, "offsets are contiguous (pipeline {pipeline})");
        assert_eq!(end - base + 1, frames.len() as i64);
        next = end + 1;
        txns.extend(frames.into_iter().map(|f| f.txn));
    }
    assert_eq!(txns.len(), PRODUCERS * REQUESTS * ITEMS, "every item once");
    let position: HashMap<&str, usize> = txns
        .iter()
        .enumerate()
        .map(|(k, t)| (t.as_str(), k))
        .collect();
    assert_eq!(position.len(), txns.len(), "no item twice");
    for p in 0..PRODUCERS {
        let mut after = None;
        for r in 0..REQUESTS {
            let first = position[format!("{p}-{r}-0").as_str()];
            for i in 0..ITEMS {
                assert_eq!(
                    position[format!("{p}-{r}-{i}").as_str()],
                    first + i,
                    "request {p}-{r} is stored adjacent and in order (pipeline {pipeline})"
                );
            }
            assert!(
                after.is_none_or(|a| first > a),
                "producer {p}'s request {r} is stored after its previous one"
            );
            after = Some(first);
        }
    }
}

#[tokio::test]
async fn racing_large_pushes_into_one_partition_store_an_ordered_log_with_the_pipeline() {
    race(true).await;
}

#[tokio::test]
async fn racing_large_pushes_into_one_partition_store_an_ordered_log_without_it() {
    race(false).await;
}
