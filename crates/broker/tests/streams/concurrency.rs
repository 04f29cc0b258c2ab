//! Cycles of one (query, partition) commit one at a time: a cycle waits while another one of
//! the same partition is open, a cycle of another partition does not; many concurrent cycles
//! all commit, each once.

use std::time::Duration;

use serde_json::json;

use crate::{common, cycle, depth, register};

fn flush(q: &str, partition: &str, n: usize) -> serde_json::Value {
    json!({"query_id": q, "partition_id": partition,
           "state_ops": [{"type": "upsert", "key": format!("k{n}"), "value": n}],
           "push_items": [{"queue": "sink", "partition": "p", "payload": {"n": n}}], "ack": null})
}

#[tokio::test]
async fn a_cycle_waits_for_the_open_cycle_of_its_partition() {
    let b = common::broker().await;
    let q = register(&b, "q", "h").await;
    // A cycle of partition 1 left open in its transaction, as a slow broker would.
    let mut held = b.sql().await;
    let tx = held.transaction().await.expect("begin");
    let tenant: String = String::new();
    let spec = json!({"tenant": tenant, "query": q, "partition": "1", "cycle": "00".repeat(16),
                      "answer": {}, "memorySecs": 60, "stateOps": []});
    tx.execute("SELECT queen.stream_cycle_begin_v1($1)", &[&spec])
        .await
        .expect("open cycle");

    let other = cycle(&b, &flush(&q, "2", 0)).await;
    assert_eq!(other["success"], true, "another partition does not wait");

    let waiting = {
        let b2 = reqwest::Client::new();
        let url = b.at("/streams/v1/cycle");
        let body = flush(&q, "1", 1);
        tokio::spawn(async move { b2.post(url).json(&body).send().await })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !waiting.is_finished(),
        "the same partition waits for the open cycle"
    );
    tx.commit().await.expect("commit");
    let answer: serde_json::Value = waiting
        .await
        .expect("join")
        .expect("POST")
        .json()
        .await
        .expect("json");
    assert_eq!(answer["success"], true, "{answer}");
}

#[tokio::test]
async fn concurrent_cycles_of_one_partition_all_commit_once() {
    let b = common::broker().await;
    let db = b.sql().await;
    let q = register(&b, "q", "h").await;
    let n = 24;
    // Each cycle twice, both copies in flight together: one commits, one is a replay.
    let calls = (0..2 * n).map(|i| {
        let (b, q) = (&b, q.clone());
        async move { cycle(b, &flush(&q, "1", i % n)).await }
    });
    let answers: Vec<_> = futures::future::join_all(calls).await;
    assert!(answers.iter().all(|a| a["success"] == true), "{answers:?}");
    let replays = answers.iter().filter(|a| a["replayed"] == true).count();
    assert_eq!(replays, n, "each cycle applied once, answered twice");
    assert_eq!(depth(&db, "sink").await, n as i64);
    let rows = crate::state(&b, &q, "1").await;
    assert_eq!(rows.as_object().expect("rows").len(), n);
}
